"""The trading environment: a Gymnasium adapter over the broker, the prop-firm account and the observation."""

from hybrid_trader.actions import ACTION_NAMES, Action, n_actions
from hybrid_trader.env.account import AccountStatus, PropFirmAccount
from hybrid_trader.env.broker import Broker, Trade
from hybrid_trader.env.config import EnvConfig
from hybrid_trader.env.rules import RULE_PRESETS, PropFirmRules, get_rules
from hybrid_trader.env.trading_env import TradingEnv

__all__ = [
    "ACTION_NAMES", "AccountStatus", "Action", "Broker", "EnvConfig", "PropFirmAccount", "PropFirmRules",
    "RULE_PRESETS", "Trade", "TradingEnv", "get_rules", "n_actions",
]
