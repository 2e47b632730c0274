"""The risk veto is a mask with reason codes, and never blocks reducing risk."""

from __future__ import annotations

import math

import pytest

from hybrid_trader.env import Action, EnvConfig, TradingEnv
from hybrid_trader.env.risk_veto import (
    VETO_CONSECUTIVE_LOSSES,
    VETO_DRAWDOWN_BUFFER,
    VETO_LOW_WIN_RATE,
    RiskConfig,
    RiskVeto,
)

from .helpers import flat_session, make_bars, set_bar, stub_features


def make_env(rows, risk: RiskConfig, **cfg) -> TradingEnv:
    bars = make_bars(rows)
    env = TradingEnv(bars, stub_features(bars), EnvConfig(phase=3, commission_per_side=2.0, **cfg),
                     risk_veto=RiskVeto(risk))
    env.reset(seed=0)
    return env


def lose_trades(env: TradingEnv, n: int) -> None:
    for _ in range(n):
        env.step(Action.BUY)
        while env.broker.side:
            env.step(Action.HOLD)


def test_entries_vetoed_when_consecutive_losses_reach_limit_then_lifted_after_cooldown():
    rows = flat_session(n=120)
    # Every bar from 09:31 dips 10 points below its open: each long is stopped (6 points) on its first bar.
    for i, r in enumerate(rows):
        if r[0] >= "2024-01-03 09:31":
            rows[i] = (r[0], 100.0, 100.0, 90.0, 100.0)
    env = make_env(rows, RiskConfig(max_consecutive_losses=3, min_win_rate=0.0, cooldown_bars=5))
    lose_trades(env, 3)
    assert env.account.consecutive_losses == 3
    mask = env.action_masks()
    assert not mask[Action.BUY] and not mask[Action.SELL] and mask[Action.HOLD]
    assert env.veto_counts[VETO_CONSECUTIVE_LOSSES] >= 1
    for _ in range(5):
        env.step(Action.HOLD)
    assert env.action_masks()[Action.BUY], "the pause ends after cooldown_bars"


def test_entries_and_trail_vetoed_when_drawdown_buffer_is_thin():
    rows = flat_session()
    set_bar(rows, "09:32", 100, 100, 97, 97)
    env = make_env(rows, RiskConfig(dd_buffer_threshold=0.5), stop_atr=10.0,
                   rules_overrides={"trailing_drawdown": 150.0})
    env.step(Action.BUY)  # long at 100.25 with $150 of allowance
    env.step(Action.HOLD)  # 09:32 closes at 97: equity 49,998 - 65 -> buffer (49,933 - 49,850) / 150 = 0.55
    assert env.action_masks()[Action.ENABLE_TRAIL]
    env.step(Action.HOLD)  # 09:33 closes at 100: buffer (49,993 - 49,850)/150 ... still fine
    veto = RiskVeto(RiskConfig(dd_buffer_threshold=1.5))
    env.risk_veto = veto
    env.step(Action.HOLD)
    mask = env.action_masks()
    assert not mask[Action.ENABLE_TRAIL]
    assert env.veto_counts[VETO_DRAWDOWN_BUFFER] >= 1


def test_entries_vetoed_when_recent_win_rate_is_low():
    rows = flat_session(n=120)
    for i, r in enumerate(rows):
        if r[0] >= "2024-01-03 09:31":
            rows[i] = (r[0], 100.0, 100.0, 90.0, 100.0)
    env = make_env(rows, RiskConfig(max_consecutive_losses=99, min_win_rate=0.4, win_rate_window=4,
                                    cooldown_bars=100))
    lose_trades(env, 4)
    assert not env.action_masks()[Action.BUY]
    assert env.veto_counts[VETO_LOW_WIN_RATE] >= 1


@pytest.mark.parametrize("action", [Action.HOLD, Action.MOVE_SL_TO_BE, Action.DISABLE_TRAIL])
def test_risk_reducing_actions_never_vetoed_when_every_veto_fires(action):
    rows = flat_session()
    set_bar(rows, "09:32", 100, 104, 100, 104)
    for hhmm in ("09:33", "09:34"):
        set_bar(rows, hhmm, 104, 104, 104, 104)
    env = make_env(rows, RiskConfig(dd_buffer_threshold=0.0), target_atr=0.0)
    env.step(Action.BUY)
    env.step(Action.HOLD)  # 09:32: in profit
    env.step(Action.ENABLE_TRAIL)
    env.risk_veto = RiskVeto(RiskConfig(dd_buffer_threshold=10.0, max_consecutive_losses=0))
    env.step(Action.HOLD)
    mask = env.action_masks()
    legal_without_veto = {Action.HOLD: True, Action.MOVE_SL_TO_BE: mask[Action.MOVE_SL_TO_BE],
                          Action.DISABLE_TRAIL: True}
    assert mask[action] == legal_without_veto[action]
    assert mask[Action.HOLD] and mask[Action.DISABLE_TRAIL]


def test_veto_steps_counted_in_episode_info_when_veto_blocks():
    rows = flat_session()
    env = make_env(rows, RiskConfig(dd_buffer_threshold=10.0))
    info = {}
    done = False
    while not done:
        _, _, term, trunc, info = env.step(Action.HOLD)
        done = term or trunc
    assert info["veto_steps"] > 0 and info["veto_counts"][VETO_DRAWDOWN_BUFFER] == info["veto_steps"]
    assert info["decision_steps"] >= info["veto_steps"]


def test_win_rate_when_trades_close_counts_the_last_ten_and_the_snapshot_says_none_before_the_first():
    rows = flat_session(n=120)
    for i, r in enumerate(rows):
        if r[0] >= "2024-01-03 09:31":
            rows[i] = (r[0], 100.0, 100.0, 90.0, 100.0)
    env = make_env(rows, RiskConfig(max_consecutive_losses=99, min_win_rate=0.0))
    assert env.account.recent_win_rate != env.account.recent_win_rate  # NaN before any trade
    assert math.isnan(env.account_snapshot().win_rate)
    assert env.observer.risk_features(env.broker, env.account, env.equity())[3] == 0.5
    env.account.recent.extend([1] * 10)  # ten winners long ago ...
    lose_trades(env, 4)  # ... then four losers: the last ten hold six winners
    assert env.account.recent_win_rate == pytest.approx(0.6)
    assert env.account_snapshot().win_rate == pytest.approx(0.6)
    assert env.observer.risk_features(env.broker, env.account, env.equity())[3] == pytest.approx(0.6)


def test_veto_returns_codes_from_snapshot_and_account_when_given_no_env():
    from hybrid_trader.account_state import AccountState
    from hybrid_trader.env.account import PropFirmAccount
    from hybrid_trader.env.rules import get_rules

    account = PropFirmAccount(get_rules("apex-legacy", "50K"))  # threshold 47,500, allowance 2,500
    veto = RiskVeto(RiskConfig(dd_buffer_threshold=0.2, max_consecutive_losses=2, cooldown_bars=30))
    thin = AccountState(balance=48_000.0, unrealized_pnl=-100.0, t=5)  # buffer (47,900 - 47,500) / 2,500 = 0.16
    assert veto.entry_veto(thin, account) == VETO_DRAWDOWN_BUFFER
    assert veto.trail_veto(thin, account) == VETO_DRAWDOWN_BUFFER
    account.begin_day(0)
    for i in (1, 2):
        account._book(i, -10.0, -10.0)
    streak = AccountState(balance=account.balance, consecutive_losses=2, t=10)
    assert veto.entry_veto(streak, account) == VETO_CONSECUTIVE_LOSSES
    later = AccountState(balance=account.balance, consecutive_losses=2, t=40)  # cooldown over
    assert veto.entry_veto(later, account) is None
    assert veto.trail_veto(later, account) is None


def test_veto_codes_from_values_equal_the_snapshot_ones_when_the_env_passes_no_snapshot():
    """The env's hot loop passes equity, bar and losses (``entry_code``, ``trail_code``): the same codes."""
    from hybrid_trader.account_state import AccountState
    from hybrid_trader.env.account import PropFirmAccount
    from hybrid_trader.env.rules import get_rules

    account = PropFirmAccount(get_rules("apex-legacy", "50K"))
    veto = RiskVeto(RiskConfig(dd_buffer_threshold=0.2, max_consecutive_losses=2, cooldown_bars=30))
    account.begin_day(0)
    for i in (1, 2):
        account._book(i, -10.0, -10.0)
    for balance, upnl, t, losses in [(48_000.0, -100.0, 5, 0), (account.balance, 0.0, 10, 2),
                                     (account.balance, 3.0, 40, 2), (49_000.0, 0.1, 3, 0)]:
        state = AccountState(balance=balance, unrealized_pnl=upnl, t=t, consecutive_losses=losses)
        assert veto.entry_code(balance + upnl, t, losses, account) == veto.entry_veto(state, account)
        assert veto.trail_code(balance + upnl, account) == veto.trail_veto(state, account)
