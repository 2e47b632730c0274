"""Gymnasium conformance, determinism and property tests of the trading environment."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid_trader.data.bars import Bars
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.env.account import AccountStatus

from .helpers import stub_features


def random_walk_bars(days: int = 3, seed: int = 0) -> Bars:
    """Sessions 08:00-16:30 ET of a tick-grid random walk with wide ranges."""
    rng = np.random.default_rng(seed)
    frames = []
    for d in pd.bdate_range("2024-01-02", periods=days):
        idx = pd.date_range(d + pd.Timedelta(hours=8), d + pd.Timedelta(hours=16, minutes=29), freq="1min")
        steps = rng.normal(0, 2.0, len(idx))
        close = np.round((15000 + np.cumsum(steps)) * 4) / 4
        open_ = np.r_[close[0], close[:-1]]
        high = np.maximum(open_, close) + np.round(rng.exponential(1.0, len(idx)) * 4) / 4
        low = np.minimum(open_, close) - np.round(rng.exponential(1.0, len(idx)) * 4) / 4
        frames.append(
            pd.DataFrame({"open": open_, "high": high, "low": low, "close": close, "volume": 100.0}, index=idx)
        )
    frame = pd.concat(frames)
    frame.index = frame.index.tz_localize("America/New_York")
    return Bars(frame, market="NQ", bar_minutes=1, source="random-walk")


@pytest.fixture(scope="module")
def market():
    bars = random_walk_bars()
    return bars, stub_features(bars, atr=3.0)


@pytest.mark.parametrize("phase", [1, 2, 3])
def test_env_passes_gymnasium_check_env_when_any_phase(market, phase):
    bars, feats = market
    env = TradingEnv(bars, feats, EnvConfig(phase=phase))
    check_env(env, skip_render_check=True)
    assert env.observation_space.shape == ((261,) if phase == 3 else (228,))


def run_episode(env: TradingEnv, seed: int, picks=None):
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    observations, rewards = [obs], []
    k = 0
    while True:
        legal = np.flatnonzero(env.action_masks())
        choice = picks[k % len(picks)] if picks is not None else int(rng.integers(len(legal)))
        k += 1
        obs, r, term, trunc, info = env.step(int(legal[choice % len(legal)]))
        observations.append(obs)
        rewards.append(r)
        if term or trunc:
            return np.array(observations), np.array(rewards), info


def test_env_is_deterministic_when_seeded(market):
    bars, feats = market
    cfg = EnvConfig(episode_sessions=2)
    o1, r1, i1 = run_episode(TradingEnv(bars, feats, cfg), seed=7)
    o2, r2, i2 = run_episode(TradingEnv(bars, feats, cfg), seed=7)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(r1, r2)
    assert i1["trades"] == i2["trades"]


def test_reset_samples_different_start_days_when_seeds_differ(market):
    bars, feats = market
    env = TradingEnv(bars, feats, EnvConfig())
    starts = set()
    for seed in range(20):
        env.reset(seed=seed)
        starts.add(env.current_index)
    assert len(starts) == len(env.episode_windows) == 3


def test_episode_spans_all_sessions_in_order_when_episode_sessions_none(market):
    bars, feats = market
    env = TradingEnv(bars, feats, EnvConfig(episode_sessions=None, rules_overrides={"trailing_drawdown": 1e9}))
    _, _, info = run_episode(env, seed=0)
    assert info["account"]["sessions"] == 3
    assert info["end_reason"] == "DATA_END"


def test_rewards_sum_to_equity_change_when_no_breach(market):
    bars, feats = market
    env = TradingEnv(bars, feats, EnvConfig(episode_sessions=None, rules_overrides={"trailing_drawdown": 1e9}))
    _, rewards, info = run_episode(env, seed=3)
    assert info["end_reason"] == "DATA_END"
    assert rewards.sum() * env.reward_scale == pytest.approx(env.account.balance - env.rules.account_size, abs=1e-6)
    assert sum(t.net_pnl for t in info["trades"]) == pytest.approx(env.account.balance - env.rules.account_size)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=60),
    seed=st.integers(0, 1000),
    phase=st.sampled_from([1, 2]),
    tight=st.booleans(),
)
def test_random_legal_actions_never_reach_an_illegal_state(market, picks, seed, phase, tight):
    bars, feats = market
    overrides = {"trailing_drawdown": 300.0} if tight else {}
    env = TradingEnv(bars, feats, EnvConfig(phase=phase, episode_sessions=3, rules_overrides=overrides))
    env.reset(seed=seed)
    k = 0
    last_entry_index, last_stop = -1, None
    while True:
        legal = np.flatnonzero(env.action_masks())
        assert legal[0] == 0  # HOLD is always legal
        action = int(legal[picks[k % len(picks)] % len(legal)])
        k += 1
        held = (env.broker.entry_index, env.broker.stop) if env.broker.side and not env.broker.trail_on else None
        _, reward, term, trunc, info = env.step(action)
        assert math.isfinite(reward)
        side = env.broker.side
        if side != 0:
            # A position always has a finite stop...
            assert math.isfinite(env.broker.stop)
            if action == 0 and held is not None and held[0] == env.broker.entry_index and not env.broker.trail_on:
                # ...which a bar that left the position open did not cross...
                t = env.current_index
                adverse = env.bars.low[t] if side > 0 else env.bars.high[t]
                assert side * (adverse - held[1]) > 0
            # ...and which only ever moves in the position's favour.
            if env.broker.entry_index == last_entry_index and last_stop is not None:
                assert side * (env.broker.stop - last_stop) >= -1e-9
            last_entry_index, last_stop = env.broker.entry_index, env.broker.stop
        assert side in (-1, 0, 1)
        assert env.invalid_actions == 0
        if (env.account.status is AccountStatus.BREACHED):
            assert not env.action_masks()[1:].any() or env.broker.side != 0
        if term or trunc:
            break
    trades = info["trades"]
    assert all(t.contracts == 1 for t in trades)
    if env.account.breach_index >= 0:
        assert all(t.entry_index <= env.account.breach_index for t in trades)
        assert env.broker.side == 0
        after = env.position_history[env.account.breach_index + 1 :]
        assert not after.any()
    # Trades never overlap and each exits after it enters.
    for a, b in zip(trades, trades[1:]):
        assert a.exit_index <= b.entry_index
    assert all(t.exit_index >= t.entry_index for t in trades)
