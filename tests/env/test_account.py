"""PropFirmAccount: the transition table, reason codes, threshold, daily limit, target, flat-by time, verdict."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.actions import Action
from hybrid_trader.data import generate_bars
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.env.account import (
    BREACH_TRAILING_DRAWDOWN,
    DAILY_LOSS_LIMIT,
    NEW_DAY,
    PASS_PROFIT_TARGET,
    TRANSITIONS,
    AccountStatus,
    InvalidTransition,
    PropFirmAccount,
    Trigger,
    Verdict,
    verdict_of,
)
from hybrid_trader.env.broker import EXIT_BREACH, EXIT_SESSION_END, Broker, liquidation_price
from hybrid_trader.env.rules import get_rules
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.metrics import compute_metrics
from hybrid_trader.evaluation.runner import collect_result
from hybrid_trader.features import compute_features
from hybrid_trader.markets import get_contract


def flat_broker() -> Broker:
    return Broker(contracts=1, point_value=20.0, commission_per_side=0.0, slippage_points=0.0, tick_size=0.25,
                  stop_atr=2.0, target_atr=0.0, trail_atr=1.0)


def bar(acc: PropFirmAccount, t: int, fav: float, worst: float, *, close: bool = False,
        broker: Broker | None = None) -> bool:
    """One bar with the position's open profit at the bar's favourable and adverse prices [$]."""
    b = broker or flat_broker()
    b.bar_entry_cost, b.bar_closed = 0.0, None
    b.bar_fav_pnl, b.bar_worst_pnl = fav, worst
    return acc.on_bar(t, b, 100.0, 100.0, close)


def test_threshold_trails_intraday_peak_and_stops_at_cap_when_legacy():
    acc = PropFirmAccount(get_rules("apex-legacy", "50K"))  # 50,000 - 2,500; stops at 50,100
    assert acc.threshold == 47_500
    assert not bar(acc, 1, 1_000.0, 0.0)  # open profit at the bar's high counts
    assert acc.threshold == 48_500 and acc.peak == 51_000
    acc.balance += 9_000.0  # a winning trade booked
    bar(acc, 2, 1_000.0, 0.0)
    assert acc.threshold == 50_100  # the trail stopped at account size + 100
    assert acc.status is AccountStatus.ACTIVE


def test_breach_when_adverse_equity_touches_threshold_enters_breached_with_reason():
    acc = PropFirmAccount(get_rules("apex-legacy", "50K"))
    assert bar(acc, 5, 0.0, -2_500.0)
    assert acc.status is AccountStatus.BREACHED and not acc.can_enter
    assert [(e.index, e.code) for e in acc.events] == [(5, BREACH_TRAILING_DRAWDOWN)]
    assert not bar(acc, 6, -10_000.0, -10_000.0)  # final: nothing more happens
    assert acc.breach_index == 5 and acc.verdict is Verdict.BREACHED


def test_breach_liquidates_through_the_broker_at_the_threshold_when_in_a_position():
    acc = PropFirmAccount(get_rules("apex-legacy", "50K"))
    b = flat_broker()
    b.open(3, 1, 100.0, 10.0)  # long 1 NQ at 100: $20 a point, threshold 47,500 = 125 points down
    b.on_bar(4, 0, 99.0, 99.5, -40.0, 10.0)  # the stop (80) is hit first: out at the stop, no breach
    assert b.bar_closed is not None and b.bar_closed.exit_reason == "STOP"
    b2 = Broker(contracts=1, point_value=20.0, commission_per_side=0.0, slippage_points=0.0, tick_size=0.25,
                stop_atr=100.0, target_atr=0.0, trail_atr=1.0)
    b2.open(3, 1, 100.0, 10.0)  # stop 1,000 points away: the threshold comes first
    b2.on_bar(4, 0, 99.0, 99.5, -40.0, 10.0)
    assert acc.on_bar(4, b2, 99.0, 99.0, False)
    trade = b2.trades[-1]
    assert trade.exit_reason == EXIT_BREACH and b2.side == 0
    assert trade.exit_price == pytest.approx(100.0 - 2_500 / 20)  # where equity met the threshold
    assert acc.balance == pytest.approx(47_500.0)


def test_eod_threshold_moves_only_at_session_close_when_eod_preset():
    acc = PropFirmAccount(get_rules("apex-2026-eod", "50K"))  # 2,000 allowance, no cap
    acc.begin_day(0)
    bar(acc, 1, 5_000.0, 0.0)
    assert acc.threshold == 48_000
    acc.balance += 1_000.0
    bar(acc, 2, 0.0, 0.0, close=True)
    assert acc.threshold == 49_000 and acc.peak == 51_000


def test_daily_loss_locks_for_the_day_and_unlocks_next_day_when_eod_preset():
    acc = PropFirmAccount(get_rules("apex-2026-eod", "50K"))  # daily loss limit 1,000
    acc.begin_day(0)
    bar(acc, 3, 0.0, -1_000.0)
    assert acc.status is AccountStatus.LOCKED_FOR_DAY and not acc.can_enter
    bar(acc, 4, 0.0, -1_000.0)  # still locked: no second event
    acc.begin_day(10)
    assert acc.status is AccountStatus.ACTIVE and acc.can_enter
    assert [e.code for e in acc.events] == [DAILY_LOSS_LIMIT, NEW_DAY]


def test_daily_loss_after_a_pass_returns_to_passed_next_day():
    acc = PropFirmAccount(get_rules("apex-2026-eod", "25K", daily_loss_limit=200.0))  # target 1,500
    acc.begin_day(0)
    acc._book(1, 1_600.0, 1_600.0)
    assert acc.status is AccountStatus.PASSED
    acc.begin_day(2)
    bar(acc, 3, 0.0, -200.0)
    assert acc.status is AccountStatus.PASSED_LOCKED_FOR_DAY and not acc.can_enter
    acc.begin_day(10)
    assert acc.status is AccountStatus.PASSED and acc.can_enter
    assert acc.verdict is Verdict.PASSED


def test_profit_target_passes_and_a_later_breach_keeps_the_pass_when_target_came_first():
    acc = PropFirmAccount(get_rules("apex-legacy", "25K"))  # target 1,500
    acc._book(7, 1_600.0, 1_600.0)
    assert acc.status is AccountStatus.PASSED and acc.target_index == 7
    acc.fire(9, Trigger.THRESHOLD_TOUCHED)
    assert acc.status is AccountStatus.BREACHED
    assert acc.verdict is Verdict.PASSED
    assert [e.code for e in acc.events] == [PASS_PROFIT_TARGET, BREACH_TRAILING_DRAWDOWN]


@pytest.mark.parametrize("status", list(AccountStatus))
@pytest.mark.parametrize("trigger", list(Trigger))
def test_every_status_and_trigger_follows_the_table_or_raises(status, trigger):
    acc = PropFirmAccount(get_rules("apex-2026-eod", "50K"))
    acc.status = status
    row = TRANSITIONS.get((status, trigger))
    if row is None:
        with pytest.raises(InvalidTransition, match=f"{trigger.value} is not a valid trigger in status"):
            acc.fire(3, trigger)
        assert acc.status is status and acc.events == []
        return
    assert acc.fire(3, trigger) is row
    assert acc.status is row.to
    assert [e.code for e in acc.events] == ([row.code] if row.code else [])
    if row.verdict is not None:
        assert acc.verdict is row.verdict


def test_breached_is_final_and_only_days_pass_when_breached():
    assert {trigger for (status, trigger) in TRANSITIONS if status is AccountStatus.BREACHED} == {
        Trigger.SESSION_OPEN, Trigger.SESSION_CLOSE}
    assert all(row.to is AccountStatus.BREACHED for (status, _), row in TRANSITIONS.items()
               if status is AccountStatus.BREACHED)


def test_verdict_orders_target_and_breach_when_given_indices_or_none():
    assert verdict_of(None, None) is Verdict.NEITHER
    assert verdict_of(5, 5) is Verdict.PASSED
    assert verdict_of(4, 5) is Verdict.BREACHED


def test_liquidation_price_meets_limit_or_takes_gapped_open_when_long_and_short():
    # Long 1 NQ ($20/pt) from 100 with balance 50,000: equity 49,500 at 75.
    assert liquidation_price(49_500.0, 50_000.0, 100.0, 1, 20.0, 99.0, 0.25) == pytest.approx(75.0)
    assert liquidation_price(49_500.0, 50_000.0, 100.0, 1, 20.0, 70.0, 0.25) == 70.0  # opened below: the open
    assert liquidation_price(49_500.0, 50_000.0, 100.0, -1, 20.0, 101.0, 0.25) == pytest.approx(125.0)


def test_liquidation_price_is_the_first_tick_at_or_beyond_the_level_never_a_fraction_better():
    # Long 1 NQ ($20/pt) from 100.00, balance 50,000, limit 49,507.10: equity meets it at 75.355, between ticks.
    # The market order fills at a traded price: 75.25 for the long (down), 124.75 for a short (up from 124.645).
    assert liquidation_price(49_507.1, 50_000.0, 100.0, 1, 20.0, 99.0, 0.25) == 75.25
    assert liquidation_price(49_507.1, 50_000.0, 100.0, -1, 20.0, 101.0, 0.25) == 124.75
    # a gap beyond the snapped level still fills at the open
    assert liquidation_price(49_507.1, 50_000.0, 100.0, 1, 20.0, 75.0, 0.25) == 75.0
    # on a coarser grid (ES-like 0.25 of a $50 point, or a 0.5 tick) the rounding follows the contract's tick
    assert liquidation_price(49_507.1, 50_000.0, 100.0, 1, 20.0, 99.0, 0.5) == 75.0


def test_max_contracts_refused_when_over_limit_counting_micros_as_tenths():
    acc = PropFirmAccount(get_rules("apex-legacy", "25K"))  # 4 minis
    acc.check_contracts(4, get_contract("NQ"))
    acc.check_contracts(40, get_contract("MNQ"))
    with pytest.raises(UserError, match="exceeds"):
        acc.check_contracts(5, get_contract("NQ"))


def test_recent_win_rate_and_streak_when_trades_settle():
    acc = PropFirmAccount(get_rules())
    for i, pnl in enumerate([10.0, -5.0, -5.0]):
        acc._book(i, pnl, pnl)
    assert acc.consecutive_losses == 2
    assert acc.recent_win_rate == pytest.approx(1 / 3) == acc.win_rate(10)
    assert acc.win_rate(2) == 0.0
    acc.begin_day(10)
    assert acc.bars_since_exit_today(20) == 1 << 30  # no exit today


@pytest.fixture(scope="module")
def market():
    bars = generate_bars(days=6, seed=5, market="NQ")
    return bars, compute_features(bars)


def test_flat_by_time_closes_the_position_at_the_last_bar_before_it_not_a_bar_early(market):
    bars, feats = market
    env = TradingEnv(bars, feats, EnvConfig(phase=2, episode_sessions=1, trade_end="16:00", last_entry="15:30",
                                            stop_atr=50.0, target_atr=0.0, commission_per_side=0.0,
                                            rules_overrides={"flat_by": "15:45"}))
    env.reset(seed=0, options={"start": 0})
    idx = bars.frame.index
    while idx[env.current_index].strftime("%H:%M") != "15:00":
        env.step(Action.HOLD)
    env.step(Action.BUY)
    while True:
        t = env.current_index
        _, _, term, trunc, info = env.step(Action.HOLD)
        if trunc or term:
            break
        assert env.broker.side == 1, f"closed early at {idx[env.current_index]}"
    trade = info["trades"][-1]
    assert trade.exit_reason == EXIT_SESSION_END and trade.exit_at_close
    assert idx[trade.exit_index].strftime("%H:%M") == "15:44"  # the last bar before the 15:45 flat-by time
    assert trade.exit_index == t + 1


def test_verdict_read_by_evaluation_is_the_accounts(market):
    bars, feats = market
    env = TradingEnv(bars, feats, EnvConfig(phase=1, episode_sessions=None, terminate_on_breach=False,
                                            rules_overrides={"trailing_drawdown": 300.0}))
    env.reset(seed=0, options={"start": 0})
    rng = np.random.default_rng(1)
    while True:
        legal = np.flatnonzero(env.action_masks())
        _, _, term, trunc, _ = env.step(int(rng.choice(legal)))
        if term or trunc:
            break
    result = collect_result(env, "random")
    assert env.account.verdict is not Verdict.NEITHER
    assert compute_metrics(result)["Apex verdict"] == env.account.verdict.value
    assert result.extra["account"]["status"] == env.account.status.value
