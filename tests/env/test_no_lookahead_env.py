"""No look-ahead through the whole path: bars -> features -> observation and action mask.

For several bars t of real NQ data, every bar after t is replaced by different
values; the observation and the action mask the agent sees at t must not change.
"""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.data import Bars, load_bars
from hybrid_trader.env import Action, EnvConfig, TradingEnv
from hybrid_trader.features import compute_features

from ..conftest import NQ_1MIN, shared_file


def perturb_after(bars: Bars, t: int, seed: int) -> Bars:
    """The same bars up to t; after t, another consistent random path and volumes."""
    rng = np.random.default_rng(seed)
    frame = bars.frame.copy()
    n = len(frame) - t - 1
    if n > 0:
        last = frame["close"].iloc[t]
        close = last + np.cumsum(rng.normal(0, 8, n)).round() / 4 * 4
        open_ = np.r_[last, close[:-1]]
        frame.iloc[t + 1 :, frame.columns.get_loc("open")] = open_
        frame.iloc[t + 1 :, frame.columns.get_loc("close")] = close
        frame.iloc[t + 1 :, frame.columns.get_loc("high")] = np.maximum(open_, close) + rng.integers(0, 20, n) * 0.25
        frame.iloc[t + 1 :, frame.columns.get_loc("low")] = np.minimum(open_, close) - rng.integers(0, 20, n) * 0.25
        frame.iloc[t + 1 :, frame.columns.get_loc("volume")] = rng.integers(1, 5000, n).astype(float)
    return Bars(frame, bars.market, bars.bar_minutes, bars.source)


def walk_to(bars: Bars, target: int, phase: int, entry_at: int) -> tuple[np.ndarray, np.ndarray, TradingEnv]:
    """Run a fixed action plan (BUY at `entry_at`, trail later) until the agent looks at bar `target`."""
    env = TradingEnv(bars, compute_features(bars), EnvConfig(phase=phase, episode_sessions=None, reward_scale=100.0,
                                                             target_atr=0.0 if phase > 1 else 3.0))
    obs, _ = env.reset(seed=0, options={"start": 0})
    while env.current_index < target:
        mask = env.action_masks()
        t = env.current_index
        action = Action.HOLD
        if t >= entry_at and mask[Action.BUY]:
            action = Action.BUY
        elif phase > 1 and t >= entry_at + 5 and mask[Action.ENABLE_TRAIL]:
            action = Action.ENABLE_TRAIL
        obs, _, terminated, truncated, _ = env.step(action)
        assert not (terminated or truncated), "the plan ended before reaching t"
    assert env.current_index == target
    return obs, env.action_masks(), env


@pytest.mark.parametrize("phase", [2, 3])
def test_observation_and_mask_at_t_unchanged_when_every_later_bar_changes(phase):
    bars = load_bars(shared_file(NQ_1MIN))
    probe = TradingEnv(bars, compute_features(bars), EnvConfig(phase=phase, episode_sessions=None))
    windows = probe.episode_windows
    targets = []
    for w in (windows[0], windows[len(windows) // 2], windows[-2]):
        targets += [(w.first + 3, w.first), (w.first + 40, w.first + 10), (w.last - 1, w.last - 30)]
    for k, (t, entry_at) in enumerate(targets):
        obs, mask, env = walk_to(bars, t, phase, entry_at)
        changed = perturb_after(bars, t, seed=k)
        assert not np.array_equal(changed.close[t + 1 :], bars.close[t + 1 :])
        obs2, mask2, env2 = walk_to(changed, t, phase, entry_at)
        np.testing.assert_array_equal(obs, obs2, err_msg=f"observation at bar {t} saw the future")
        np.testing.assert_array_equal(mask, mask2, err_msg=f"mask at bar {t} saw the future")
        assert env.broker.trades == env2.broker.trades
