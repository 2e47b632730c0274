"""The trading environment: contracts, prop-firm rules, fills, masks, rewards."""

from hybrid_trader.actions import ACTION_NAMES, Action, n_actions
from hybrid_trader.env.config import EnvConfig
from hybrid_trader.env.rules import RULE_PRESETS, PropFirmRules, get_rules
from hybrid_trader.env.trading_env import TradingEnv

__all__ = ["ACTION_NAMES", "Action", "EnvConfig", "PropFirmRules", "RULE_PRESETS", "TradingEnv", "get_rules", "n_actions"]
