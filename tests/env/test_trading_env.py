"""Hand-computed cases for the trading environment.

Market: NQ ($20 a point, tick 0.25). Costs in these tests: commission $2.00 per side,
slippage 1 tick (0.25 points) per side on market orders. ATR is a constant 4 points,
so the default stop (1.5 ATR) is 6 points and the target (3 ATR) 12 points.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hybrid_trader.env import Action, EnvConfig, TradingEnv
from hybrid_trader.env.trading_env import EXIT_BREACH, EXIT_SESSION_END, EXIT_STOP, EXIT_TARGET, EXIT_TRAIL

from .helpers import flat_session, make_bars, set_bar, stub_features

COSTS = dict(commission_per_side=2.0, slippage_ticks=1.0)


def make_env(rows, **cfg) -> TradingEnv:
    bars = make_bars(rows)
    config = EnvConfig(**{**COSTS, **cfg})
    env = TradingEnv(bars, stub_features(bars), config)
    env.reset(seed=0)
    return env


def hold_until(env: TradingEnv, hhmm: str) -> None:
    """HOLD until the bar the agent looks at is stamped hhmm."""
    idx = env.bars.frame.index
    while idx[env.current_index].strftime("%H:%M") != hhmm:
        env.step(Action.HOLD)


def test_episode_starts_at_trade_start_when_reset():
    env = make_env(flat_session())
    assert env.bars.frame.index[env.current_index].strftime("%H:%M") == "09:30"
    obs, _ = env.reset(seed=1)
    assert obs.dtype == np.float32 and obs.shape == (228,)
    # The window ends on the current bar (stub feature 0 holds the bar index).
    assert obs[219 - 10] == env.current_index


def test_trade_net_pnl_when_target_hit():
    rows = flat_session()
    set_bar(rows, "09:35", 105, 113, 104, 110)
    env = make_env(rows)
    env.step(Action.BUY)  # decided on 09:30's close, fills at 09:31 open + 1 tick = 100.25
    assert env.account.balance == pytest.approx(50_000 - 2.0)
    hold_until(env, "09:35")
    trade = env.trade_log().iloc[0]
    # Target = 100.25 + 12 = 112.25 (a limit: no slippage); 09:35's high 113 reaches it.
    assert trade.exit_reason == EXIT_TARGET
    assert trade.entry_price == pytest.approx(100.25)
    assert trade.exit_price == pytest.approx(112.25)
    # Net: 12 points x $20 - 2 x $2 commission = $236. Gross (before slippage): 12.25 x 20 = $245.
    assert trade.net_pnl == pytest.approx(236.0)
    assert trade.gross_pnl == pytest.approx(245.0)
    assert trade.costs == pytest.approx(9.0)
    assert env.account.balance == pytest.approx(50_236.0)
    assert str(trade.entry_time.strftime("%H:%M")) == "09:31"


def test_stop_wins_when_one_bar_touches_stop_and_target():
    rows = flat_session()
    set_bar(rows, "09:33", 100, 113, 94, 100)
    env = make_env(rows)
    env.step(Action.BUY)
    hold_until(env, "09:33")
    trade = env.trade_log().iloc[0]
    # Stop = 100.25 - 6 = 94.25, filled one tick worse at 94.00: (94 - 100.25) x 20 - 4 = -129.
    assert trade.exit_reason == EXIT_STOP
    assert trade.exit_price == pytest.approx(94.0)
    assert trade.net_pnl == pytest.approx(-129.0)


def test_short_fills_at_next_open_when_sold():
    rows = flat_session()
    set_bar(rows, "09:31", 101, 101, 99, 100)
    set_bar(rows, "09:34", 95, 96, 87, 90)
    env = make_env(rows)
    env.step(Action.SELL)
    hold_until(env, "09:34")
    trade = env.trade_log().iloc[0]
    # Short at 101 - 0.25 = 100.75; target 88.75 reached by 09:34's low of 87.
    assert trade.side == -1 and trade.entry_price == pytest.approx(100.75)
    assert trade.exit_price == pytest.approx(88.75)
    assert trade.net_pnl == pytest.approx(12 * 20 - 4)


def test_stop_fills_at_open_when_bar_gaps_through_it():
    rows = flat_session()
    set_bar(rows, "09:33", 90, 91, 89, 90)
    env = make_env(rows)
    env.step(Action.BUY)
    hold_until(env, "09:33")
    trade = env.trade_log().iloc[0]
    assert trade.exit_price == pytest.approx(90 - 0.25)


def test_trailing_threshold_trails_then_stops_when_it_reaches_balance_plus_100():
    rows = flat_session()
    set_bar(rows, "09:32", 100, 150, 100, 140)
    set_bar(rows, "09:34", 140, 300, 140, 290)
    env = make_env(rows, target_atr=0.0, stop_atr=10.0)
    assert env.account.threshold == 47_500
    env.step(Action.BUY)  # long at 100.25, balance 49,998
    hold_until(env, "09:32")
    # Peak = 49,998 + (150 - 100.25) x 20 = 50,993 -> threshold 50,993 - 2,500 = 48,493.
    assert env.account.peak == pytest.approx(50_993.0)
    assert env.account.threshold == pytest.approx(48_493.0)
    hold_until(env, "09:34")
    # Peak 49,998 + (300 - 100.25) x 20 = 53,993 would put it at 51,493; it stops at 50,000 + 100.
    assert env.account.threshold == pytest.approx(50_100.0)


def test_breach_terminates_when_intrabar_low_crosses_threshold():
    rows = flat_session()
    set_bar(rows, "09:33", 99, 99, 75, 99)  # closes at 99: only the low breaches
    env = make_env(rows, stop_atr=10.0, rules_overrides={"trailing_drawdown": 500.0})
    env.step(Action.BUY)  # 100.25, balance 49,998, threshold 49,500
    env.step(Action.HOLD)
    _, reward, terminated, truncated, info = env.step(Action.HOLD)  # bar 09:33
    # Equity at the low: 49,998 + (75 - 100.25) x 20 = 49,493 <= 49,500.
    assert terminated and not truncated
    assert info["end_reason"] == "BREACH"
    trade = info["trades"][0]
    assert trade.exit_reason == EXIT_BREACH
    # Equity met the threshold at 100.25 - 498/20 = 75.35: the first tick at or below it is 75.25, one tick worse.
    assert trade.exit_price == pytest.approx(75.00)
    assert env.account.balance == pytest.approx(49_998 + (75.00 - 100.25) * 20 - 2)
    assert reward < -5.0  # the loss plus the breach penalty


def test_forced_exit_at_1659_when_trading_window_runs_to_1700():
    rows = flat_session(start="16:00", n=60)
    set_bar(rows, "16:58", 100, 104, 100, 103)
    env = make_env(rows, trade_start="16:30", trade_end="17:00", last_entry="16:50", target_atr=0.0)
    hold_until(env, "16:50")
    env.step(Action.BUY)  # fills 16:51
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(Action.HOLD)
        done = terminated or truncated
    trade = env.trade_log().iloc[0]
    assert trade.exit_reason == EXIT_SESSION_END
    assert trade.exit_time.strftime("%H:%M") == "16:59"
    assert trade.exit_price == pytest.approx(103 - 0.25)
    assert info["end_reason"] in ("DATA_END", "EPISODE_END")
    assert env.broker.side == 0


def test_masks_when_flat_in_position_and_trailing():
    rows = flat_session()
    set_bar(rows, "09:32", 100, 103, 99, 102)
    for hhmm in ("09:33", "09:34", "09:35"):
        set_bar(rows, hhmm, 102, 102, 102, 102)  # stays above the break-even stop
    env = make_env(rows, target_atr=0.0)
    assert env.action_masks().tolist() == [True, True, True, False, False, False]
    env.step(Action.BUY)  # in at 100.25; 09:31 closes at 100: a small loss
    assert env.action_masks().tolist() == [True, False, False, False, True, False]
    env.step(Action.HOLD)  # 09:32 closes at 102: beyond entry -> break-even is legal
    assert env.action_masks().tolist() == [True, False, False, True, True, False]
    env.step(Action.MOVE_SL_TO_BE)
    assert env.broker.stop == pytest.approx(100.25)
    assert env.action_masks().tolist() == [True, False, False, False, True, False]
    env.step(Action.ENABLE_TRAIL)
    assert env.action_masks().tolist() == [True, False, False, False, False, True]
    env.step(Action.DISABLE_TRAIL)
    assert env.action_masks().tolist() == [True, False, False, False, True, False]


def test_entries_masked_when_after_last_entry():
    env = make_env(flat_session(start="15:00", n=60), last_entry="15:45")
    hold_until(env, "15:45")
    assert env.action_masks()[1]
    env.step(Action.HOLD)
    assert env.action_masks().tolist() == [True, False, False, False, False, False]


def test_phase1_has_three_actions_and_only_hold_in_a_position():
    env = make_env(flat_session(), phase=1)
    assert env.action_space.n == 3
    assert env.action_masks().tolist() == [True, True, True]
    env.step(Action.BUY)
    assert env.action_masks().tolist() == [True, False, False]


def test_trail_stop_exits_when_price_falls_back():
    rows = flat_session()
    set_bar(rows, "09:32", 100, 110, 100, 110)
    set_bar(rows, "09:33", 110, 112, 110, 111)
    set_bar(rows, "09:34", 111, 111, 100, 101)
    env = make_env(rows, target_atr=0.0)
    env.step(Action.BUY)  # fills at 09:31's open
    env.step(Action.HOLD)  # now looking at 09:32, which closes at 110
    env.step(Action.ENABLE_TRAIL)  # trail 4 points from 110 -> stop 106; 09:33's high 112 -> 108
    assert env.broker.stop == pytest.approx(108.0)
    env.step(Action.HOLD)  # 09:34 falls to 100: out at 108 - 0.25
    trade = env.trade_log().iloc[0]
    assert trade.exit_reason == EXIT_TRAIL
    assert trade.exit_price == pytest.approx(107.75)


def test_masked_action_is_executed_as_hold_and_counted():
    env = make_env(flat_session())
    env.step(Action.DISABLE_TRAIL)
    assert env.broker.side == 0 and env.invalid_actions == 1


def test_reward_is_equity_change_in_reward_units():
    rows = flat_session()
    set_bar(rows, "09:32", 100, 103, 99, 102)
    env = make_env(rows, target_atr=0.0, reward_scale=100.0)
    _, r1, *_ = env.step(Action.BUY)  # fill 100.25, 09:31 closes at 100: -0.25 x 20 - 2 = -7
    assert r1 == pytest.approx(-0.07)
    _, r2, *_ = env.step(Action.HOLD)  # 09:32 closes at 102: +2 x 20 = +40
    assert r2 == pytest.approx(0.40)


def test_unknown_market_is_a_user_error():
    from hybrid_trader.errors import UserError

    bars = make_bars(flat_session())
    with pytest.raises(UserError, match="unknown market"):
        TradingEnv(bars, stub_features(bars), EnvConfig(market="NQQ"))


def test_contracts_over_rules_limit_is_a_user_error():
    from hybrid_trader.errors import UserError

    bars = make_bars(flat_session())
    with pytest.raises(UserError, match="limit"):
        TradingEnv(bars, stub_features(bars), EnvConfig(contracts=11))


def test_micro_contracts_count_as_tenth_of_a_mini():
    bars = make_bars(flat_session(), market="MNQ")
    env = TradingEnv(bars, stub_features(bars), EnvConfig(market="MNQ", contracts=20))
    assert math.isclose(env.contract.point_value, 2.0)


def test_phase3_info_carries_the_account_snapshot_when_advisor_info_is_default():
    env = make_env(flat_session(), phase=3)
    _, info = env.reset(seed=0)
    assert info["advisor_account"].mask == tuple(env.action_masks().tolist())
    info = env.step(Action.BUY)[4]
    assert "advisor_account" in info and "advisor_mask" not in info


def test_phase3_info_carries_only_the_mask_when_advisor_info_is_mask():
    env = make_env(flat_session(), phase=3)
    env.set_advisor_info("advisor_mask")
    _, info = env.reset(seed=0)
    assert info == {"advisor_mask": tuple(env.action_masks().tolist())}
    info = env.step(Action.BUY)[4]
    assert info["advisor_mask"] == tuple(env.action_masks().tolist()) and "advisor_account" not in info
    with pytest.raises(ValueError, match="advisor_info"):
        env.set_advisor_info("everything")


def test_phase3_info_carries_nothing_for_the_advisor_when_the_vectorised_environment_records_the_masks():
    env = make_env(flat_session(), phase=3)
    env.set_advisor_info("advisor_nothing")
    assert env.reset(seed=0)[1] == {} and env.step(Action.BUY)[4] == {}
