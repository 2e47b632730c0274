"""The account and the broker on the bars where the order of events inside a bar decides the outcome: a bar that
reaches the target and the threshold (the breach wins, as the stop does over the target), a bar that gaps through a
level (nothing after its open counts), the session's closing fill (its costs can breach), the daily loss (with the
exit commission), and a threshold that stops trailing at the profit target (``apex-2026-*``)."""

from __future__ import annotations

import pytest

from hybrid_trader.env.account import AccountStatus, PropFirmAccount, Verdict
from hybrid_trader.env.broker import Broker
from hybrid_trader.env.rules import get_rules


def nq(stop_atr: float, target_atr: float, commission: float = 0.0, slip: float = 0.0) -> Broker:
    return Broker(contracts=1, point_value=20.0, commission_per_side=commission, slippage_points=slip,
                  tick_size=0.25, stop_atr=stop_atr, target_atr=target_atr, trail_atr=1.0)


def account(preset: str, size: str, balance: float, peak: float, threshold: float) -> PropFirmAccount:
    acc = PropFirmAccount(get_rules(preset, size))
    acc.begin_day(0)
    acc.balance = acc.day_start_balance = balance
    acc.peak, acc.threshold = peak, threshold
    return acc


def test_a_bar_reaching_the_target_and_the_threshold_is_a_breach_not_a_pass():
    """Documented: within a bar the threshold is evaluated conservatively (adverse extreme), and the stop wins
    when a bar touches stop and target. A bar whose low touches the threshold and whose high touches the target
    is a breach, liquidated at the threshold (before: the target was booked first, and the verdict was 'passed')."""
    acc = account("apex-legacy", "50K", 52_900.0, 52_900.0, 50_100.0)  # target balance 53,000
    b2 = nq(stop_atr=20.0, target_atr=1.0)
    b2.open(1, 1, 100.0, 10.0)  # long 1 NQ at 100: target 110 (+$200), stop -100
    b2.on_bar(2, 0, 100.0, 110.0, -45.0, 10.0)  # low 145 pts down = -$2,900 -> equity 50,000 <= 50,100
    assert b2.bar_closed is not None and b2.bar_closed.exit_reason == "TARGET"
    acc.on_bar(2, b2, 100.0, 105.0, False)
    assert acc.verdict is Verdict.BREACHED and acc.status is AccountStatus.BREACHED
    assert b2.trades[-1].exit_reason == "BREACH_LIQUIDATION" and acc.balance <= 50_100.0


def test_a_bar_gapping_through_the_target_counts_nothing_after_its_open():
    """A bar that opens beyond the target fills at the open: the position is flat for the rest of the bar, so
    the bar's later low does not count against the threshold (before: it did, and breached a winning account)."""
    acc = account("apex-legacy", "50K", 50_600.0, 52_600.0, 50_100.0)
    b = nq(stop_atr=20.0, target_atr=1.0)
    b.open(1, 1, 100.0, 10.0)  # target 110, stop -100
    b.on_bar(2, 0, 115.0, 116.0, 70.0, 10.0)  # gaps through the target: out at 115 (+$300)
    assert b.bar_closed is not None and b.bar_closed.exit_price == 115.0
    breached = acc.on_bar(2, b, 115.0, 72.0, False)
    assert acc.balance == pytest.approx(50_900.0)
    assert not breached and acc.status is AccountStatus.ACTIVE


def test_a_bar_gapping_through_the_stop_does_not_trail_the_threshold_with_its_later_high():
    """A bar that opens beyond the stop fills at the open: its later high was never held by the position and
    does not raise the peak or the trailing threshold."""
    acc = account("apex-legacy", "50K", 50_000.0, 50_000.0, 47_500.0)
    b = nq(stop_atr=1.0, target_atr=0.0)
    b.open(1, 1, 100.0, 10.0)  # stop 90
    b.on_bar(2, 0, 85.0, 215.0, 84.0, 10.0)  # gaps through the stop: out at 85 (-$300); then rallies
    breached = acc.on_bar(2, b, 85.0, 200.0, False)
    assert acc.threshold == 47_500.0 and not breached


def test_the_apex_2026_threshold_stops_trailing_at_the_profit_target():
    """docs/ENVIRONMENT.md and rules.py: apex-2026 presets 'trail until the target' (trail_stop_offset None).
    Before, the cap was +inf: the threshold kept trailing after the target and a later pull-back breached."""
    acc = account("apex-2026-intraday", "50K", 50_000.0, 50_000.0, 48_000.0)  # dd 2,000, target 3,000
    acc.book(1, 3_000.0, 3_000.0)  # the target is reached: PASSED
    assert acc.status is AccountStatus.PASSED
    flat = nq(1.0, 0.0)
    flat.bar_entry_cost, flat.bar_closed, flat.bar_fav_pnl, flat.bar_worst_pnl = 0.0, None, 0.0, 0.0
    acc.on_bar(2, flat, 100.0, 100.0, False)
    flat.bar_fav_pnl, flat.bar_worst_pnl = 2_000.0, 0.0  # open profit takes equity to 55,000
    acc.on_bar(3, flat, 100.0, 100.0, False)
    assert acc.threshold <= 51_000.0


def test_a_session_close_exit_that_leaves_the_balance_at_the_threshold_is_a_breach():
    """The SESSION_END fill pays slippage and commission: when it leaves the balance at or below the threshold,
    the account has breached on that bar (before: the breach check ran before the session close and never again)."""
    acc = account("apex-legacy", "50K", 50_000.0, 50_000.0, 47_500.0)
    b = nq(stop_atr=200.0, target_atr=0.0, commission=2.10, slip=0.25)
    b.open(1, 1, 100.0, 10.0)  # entry 100.25
    acc.balance -= b.commission
    # low = close = 100.25 - 124.75 = -24.5 -> open pnl -2,495 -> trough 47,502.9 > 47,500
    b.on_bar(2, 0, 100.0, 100.0, -24.5, 10.0)
    breached = acc.on_bar(2, b, 100.0, -24.5, True)  # the window's last bar: SESSION_END at the close - 1 tick
    assert acc.balance <= acc.threshold
    assert breached or acc.status is AccountStatus.BREACHED


def test_the_daily_loss_limit_counts_the_exit_commission():
    """apex-2026-eod 50K, daily loss limit 1,000: a stop-out whose realised day loss (with both commissions)
    reaches 1,000 locks the day (before: the check read the equity before the exit commission)."""
    acc = account("apex-2026-eod", "50K", 50_000.0, 50_000.0, 48_000.0)
    b = nq(stop_atr=4.95, target_atr=0.0, commission=5.0)
    b.open(1, 1, 100.0, 10.0)  # stop 100 - 49.5 = 50.5 -> -$990
    acc.balance -= b.commission
    b.on_bar(2, 0, 100.0, 100.0, 40.0, 10.0)
    acc.on_bar(2, b, 100.0, 45.0, False)
    assert acc.balance - acc.day_start_balance <= -1_000.0
    assert acc.status is AccountStatus.LOCKED_FOR_DAY
