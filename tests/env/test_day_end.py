"""A day's end: only what a trader knows at a bar decides there. The calendar's early closes are known in advance;
bars that stop before the window's end are not (the observation and mask at bar t do not depend on them)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hybrid_trader.actions import Action
from hybrid_trader.data.bars import Bars
from hybrid_trader.data.synthetic import generate_bars
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.env.observation import I_CAN_ENTER
from hybrid_trader.env.trading_env import EXIT_SESSION_END
from hybrid_trader.features import compute_features

CFG = EnvConfig(phase=2, episode_sessions=None, reward_scale=100.0)


def walk(bars: Bars, t: int, entry_at: int, cfg: EnvConfig = CFG) -> tuple[TradingEnv, np.ndarray]:
    """An environment stepped from the first window's start to bar ``t`` (HOLD, and BUY at ``entry_at``), and the
    observation it shows at t."""
    env = TradingEnv(bars, compute_features(bars), cfg)
    obs, _ = env.reset(seed=0, options={"start": 0})
    while env.current_index < t:
        a = Action.BUY if env.current_index == entry_at and env.action_masks()[Action.BUY] else Action.HOLD
        obs, _, term, trunc, _ = env.step(a)
        assert not (term or trunc)
    assert env.current_index == t, f"the agent is never shown bar {t}: the env skipped to bar {env.current_index}"
    return env, obs


def cut_after(bars: Bars, t: int) -> Bars:
    """``bars`` with bar t's session ending at t (its later bars lost), the other sessions whole."""
    hi = int(bars.session_bounds[bars.session_id[t], 1])
    keep = np.r_[np.arange(0, t + 1), np.arange(hi + 1, len(bars))]
    return Bars(bars.frame.iloc[keep], bars.market, bars.bar_minutes, bars.source)


@pytest.fixture(scope="module")
def bars() -> Bars:
    return generate_bars(days=3, seed=0, start="2024-03-05")  # no early close in these days


@pytest.mark.parametrize("entry_at", [-1, 115], ids=["flat", "long"])
def test_the_observation_and_mask_at_t_do_not_know_the_sessions_bars_stop_after_t(bars, entry_at):
    probe = TradingEnv(bars, compute_features(bars), CFG)
    w = probe.episode_windows[1]
    t = w.first + 120  # 11:30 ET, well before last_entry
    at = w.first + entry_at if entry_at >= 0 else -1
    (whole, obs), (short, obs_short) = walk(bars, t, at), walk(cut_after(bars, t), t, at)
    assert short.episode_windows[1].last == t and not short.episode_windows[1].end_known
    if entry_at < 0:
        assert obs_short[I_CAN_ENTER] == 1.0 and short.action_masks()[Action.BUY]
    else:
        assert short.broker.side == 1 or short.broker.trades, "the entry must have filled"
    np.testing.assert_array_equal(whole.action_masks(), short.action_masks())
    np.testing.assert_array_equal(obs, obs_short)


def test_a_day_whose_bars_stop_is_closed_at_its_last_close_and_the_entry_decided_on_it_dropped(bars):
    probe = TradingEnv(bars, compute_features(bars), CFG)
    w = probe.episode_windows[1]
    t = w.first + 120
    short = cut_after(bars, t)
    wide = dataclasses.replace(CFG, stop_atr=100.0, target_atr=0.0)  # nothing closes the position before t
    env, _ = walk(short, t, w.first + 30, wide)  # long since 10:01
    assert env.broker.side == 1
    trades_before = len(env.broker.trades)
    equity_before = env.equity()
    _, reward, term, trunc, _ = env.step(Action.HOLD)  # the day ends: no bar came after t
    assert not (term or trunc)
    closed = env.broker.trades[trades_before]
    assert (closed.exit_index, closed.exit_reason) == (t, EXIT_SESSION_END)
    assert closed.exit_price == pytest.approx(short.close[t] - env.broker.slip)
    assert reward == pytest.approx((env.account.balance - equity_before) / CFG.reward_scale)
    assert env.current_index == env.episode_windows[2].first and env.broker.side == 0
    # flat at t: an entry decided there has no bar to fill on and is dropped
    env, _ = walk(short, t, -1)
    assert env.action_masks()[Action.SELL]
    env.step(Action.SELL)
    assert env.broker.side == 0 and len(env.broker.trades) == 0
    assert env.current_index == env.episode_windows[2].first


def test_an_early_close_of_the_calendar_ends_the_window_before_it_as_the_flat_by_time_does():
    bars = generate_bars(days=3, seed=0, start="2024-11-27")  # 11-27, 11-29 (13:00 ET close), 12-02
    env = TradingEnv(bars, compute_features(bars), CFG)
    dates = [str(bars.session_dates[w.session]) for w in env.episode_windows]
    early = env.episode_windows[dates.index("2024-11-29")]
    assert bars.frame.index[early.last].strftime("%H:%M") == "12:58" and early.end_known
    assert bars.frame.index[early.last_entry].strftime("%H:%M") == "12:57"
    plain = TradingEnv(bars, compute_features(bars), EnvConfig(phase=2, episode_sessions=None, calendar=""))
    assert bars.frame.index[plain.episode_windows[dates.index("2024-11-29")].last].strftime("%H:%M") == "15:59"
