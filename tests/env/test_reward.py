"""The rewards of ``env.reward`` (env/reward.py): hand-computed steps on hand-built bars, the differential
Sharpe ratio against direct computations, and Gymnasium conformance of each.

Market as in test_trading_env.py: NQ ($20 a point), commission $2.00 a side, slippage 1 tick, ATR 4.
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from hybrid_trader.env import Action, EnvConfig, TradingEnv
from hybrid_trader.env.reward import DSR_CLIP, REWARDS, DifferentialSharpe
from hybrid_trader.errors import UserError

from .helpers import flat_session, make_bars, set_bar, stub_features
from .test_env_properties import random_walk_bars

COSTS = dict(commission_per_side=2.0, slippage_ticks=1.0, reward_scale=100.0)


def rewards_of(rows, actions, **cfg) -> list[float]:
    bars = make_bars(rows)
    env = TradingEnv(bars, stub_features(bars), EnvConfig(**{**COSTS, **cfg}))
    env.reset(seed=0)
    out = []
    for a in actions:
        _, r, term, trunc, _ = env.step(a)
        out.append(r)
        if term or trunc:
            break
    return out


def two_winning_trades() -> list[tuple]:
    """A long from 09:31 (100.25) to its target (112.25) at 09:35, another from 09:41 to its target at 09:45."""
    rows = flat_session()
    set_bar(rows, "09:35", 105, 113, 104, 110)
    for i in range(36, 60):  # the market stays at 110
        set_bar(rows, f"09:{i:02d}", 110, 110, 110, 110)
    set_bar(rows, "09:45", 110, 123, 110, 122)
    return rows


TWO_TRADES = [Action.BUY] + [Action.HOLD] * 9 + [Action.BUY] + [Action.HOLD] * 10


def test_prop_pays_the_target_bonus_once_on_the_step_the_target_is_reached():
    rows = two_winning_trades()
    over = {"rules_overrides": {"profit_target": 200.0}}
    pnl = rewards_of(rows, TWO_TRADES, **over)
    prop = rewards_of(rows, TWO_TRADES, reward="prop", prop_target_bonus=7.0, **over)
    extra = np.array(prop) - np.array(pnl)
    # the first trade nets $236 >= $200 at 09:35 (step 5); the second trade's target pays nothing more; the
    # threshold is never within half the $2,500 allowance: no penalty
    assert np.flatnonzero(extra).tolist() == [4]
    assert extra[4] == pytest.approx(7.0)
    assert pnl[4] > 0 and pnl[14] > 0  # both trades did win on those steps


def test_prop_penalty_is_negative_and_grows_linearly_to_the_threshold():
    rows = flat_session()
    set_bar(rows, "09:32", 100, 100, 85, 85)  # closes 85: equity 49,998 + (85 - 100.25) x 20 = 49,693
    set_bar(rows, "09:33", 85, 85, 80, 80)  # closes 80: equity 49,593
    over = {"stop_atr": 10.0, "rules_overrides": {"trailing_drawdown": 500.0}}  # threshold 49,500
    steps = [Action.BUY, Action.HOLD, Action.HOLD]
    pnl = rewards_of(rows, steps, **over)
    prop = rewards_of(rows, steps, reward="prop", prop_threshold_penalty=1.0, prop_threshold_zone=0.5, **over)
    extra = np.array(prop) - np.array(pnl)
    # zone: 0.5 x $500 = $250 above the threshold; penalty 1 x (1 - gap / 250)
    assert extra[0] == 0.0  # 49,993 - 49,500 = 493 > 250
    assert extra[1] == pytest.approx(-(1 - 193 / 250))
    assert extra[2] == pytest.approx(-(1 - 93 / 250))


def test_prop_penalty_is_the_full_penalty_on_a_breach_with_the_breach_penalty():
    rows = flat_session()
    set_bar(rows, "09:33", 99, 99, 75, 99)  # the low breaches (test_trading_env's breach)
    over = {"stop_atr": 10.0, "rules_overrides": {"trailing_drawdown": 500.0}}
    pnl = rewards_of(rows, [Action.BUY, Action.HOLD, Action.HOLD], **over)
    prop = rewards_of(rows, [Action.BUY, Action.HOLD, Action.HOLD], reward="prop", prop_threshold_penalty=0.3, **over)
    assert len(pnl) == len(prop) == 3
    assert prop[2] - pnl[2] == pytest.approx(-0.3)  # liquidated at or below the threshold: min(1, ...) = 1


def direct_dsr(returns: np.ndarray, eta: float) -> np.ndarray:
    """D_t from the closed-form moving estimates A_{t-1} = eta sum_i (1 - eta)^(t-1-i) R_i (likewise B on R^2)."""
    out = np.zeros(len(returns))
    for t in range(len(returns)):
        w = eta * (1 - eta) ** np.arange(t - 1, -1, -1)
        a, b = float(w @ returns[:t]), float(w @ returns[:t] ** 2)
        r = returns[t]
        var = b - a * a
        out[t] = (b * (r - a) - 0.5 * a * (r * r - b)) / var**1.5 if var > 1e-12 else 0.0
    return out


def test_differential_sharpe_matches_a_direct_computation_and_the_sharpe_ratio_derivative():
    rng = np.random.default_rng(3)
    returns = rng.normal(0.05, 1.0, 200)
    dsr = DifferentialSharpe(eta=0.05, scale=1.0)
    got = np.array([dsr(float(r), 0.0) for r in returns])
    want = direct_dsr(returns, 0.05)
    inside = np.abs(want) < DSR_CLIP
    assert inside[20:].all()
    np.testing.assert_allclose(got[inside], want[inside], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[~inside], np.sign(want[~inside]) * DSR_CLIP)
    # Moody & Saffell: D_t is dS_t/d(eta) at eta = 0, S = A / sqrt(B - A^2) updated with rate eta from t-1
    a, b, r, h = dsr.a, dsr.b, 0.7, 1e-7
    s0 = a / np.sqrt(b - a * a)
    a1, b1 = a + h * (r - a), b + h * (r * r - b)
    assert dsr(r, 0.0) == pytest.approx((a1 / np.sqrt(b1 - a1 * a1) - s0) / h, rel=1e-5)


def test_sharpe_reward_is_the_scaled_dsr_of_the_pnl_rewards_and_restarts_each_episode():
    rows = two_winning_trades()
    pnl = rewards_of(rows, TWO_TRADES)
    sharpe = rewards_of(rows, TWO_TRADES, reward="sharpe", sharpe_eta=0.2, sharpe_scale=0.5)
    dsr = DifferentialSharpe(eta=0.2, scale=0.5)
    assert sharpe == [dsr(r, 0.0) for r in pnl]
    # golden: the first step (-$7 = -0.07) has no variance yet: 0; the second is clipped
    assert sharpe[0] == 0.0 and pnl[0] == pytest.approx(-0.07)
    assert max(abs(r) for r in sharpe) <= 0.5 * DSR_CLIP
    bars = make_bars(rows)
    env = TradingEnv(bars, stub_features(bars), EnvConfig(**COSTS, reward="sharpe", sharpe_eta=0.2, sharpe_scale=0.5))
    for _ in range(2):  # a reset starts A and B at 0 again: the same rewards
        env.reset(seed=0)
        assert [env.step(a)[1] for a in TWO_TRADES] == sharpe


@pytest.mark.parametrize("reward", REWARDS)
def test_env_passes_gymnasium_check_env_with_each_reward(reward):
    bars = random_walk_bars(days=2)
    env = TradingEnv(bars, stub_features(bars, atr=3.0), EnvConfig(reward=reward))
    check_env(env, skip_render_check=True)


@pytest.mark.parametrize("over, message", [
    ({"reward": "sortino"}, "env.reward: 'sortino' is not a reward"),
    ({"reward": "prop", "prop_threshold_zone": 0.0}, "prop_threshold_zone"),
    ({"prop_target_bonus": -1.0}, "prop_target_bonus"),
    ({"sharpe_eta": 1.0}, "sharpe_eta"),
    ({"sharpe_scale": 0.0}, "sharpe_scale"),
])
def test_bad_reward_settings_are_refused_with_the_fix(over, message):
    with pytest.raises(UserError, match=message) as err:
        EnvConfig(**over)
    if over.get("reward") == "sortino":
        assert err.value.fix == "use one of: pnl, prop, sharpe"
