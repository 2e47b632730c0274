"""PropFirmAccount: states, reason codes, the trailing threshold, daily limit, target, liquidation price."""

from __future__ import annotations

import pytest

from hybrid_trader.env.account import (
    BREACH_TRAILING_DRAWDOWN,
    DAILY_LOSS_LIMIT,
    NEW_DAY,
    PASS_PROFIT_TARGET,
    RULE_BREACH,
    RULE_DAILY_LOSS,
    RULE_OK,
    AccountStatus,
    PropFirmAccount,
    apex_verdict,
    liquidation_price,
)
from hybrid_trader.env.rules import get_rules
from hybrid_trader.errors import UserError
from hybrid_trader.markets import get_contract


def test_threshold_trails_intraday_peak_and_stops_at_cap_when_legacy():
    acc = PropFirmAccount(get_rules("apex-legacy", "50K"))  # 50,000 - 2,500; stops at 50,100
    assert acc.threshold == 47_500
    assert acc.apply_bar(1, 51_000.0, 50_000.0) == RULE_OK  # open profit at the bar's high counts
    assert acc.threshold == 48_500 and acc.peak == 51_000
    acc.apply_bar(2, 60_000.0, 59_000.0)
    assert acc.threshold == 50_100  # the trail stopped at account size + 100
    assert acc.status is AccountStatus.ACTIVE


def test_breach_when_adverse_equity_touches_threshold_enters_breached_with_reason():
    acc = PropFirmAccount(get_rules("apex-legacy", "50K"))
    assert acc.apply_bar(5, 50_000.0, 47_500.0) == RULE_BREACH
    acc.breach(5)
    assert acc.status is AccountStatus.BREACHED and not acc.can_enter
    assert [(e.index, e.code) for e in acc.events] == [(5, BREACH_TRAILING_DRAWDOWN)]
    assert acc.apply_bar(6, 40_000.0, 40_000.0) == RULE_OK  # final: nothing more happens
    assert acc.verdict() == "breached"


def test_eod_threshold_moves_only_at_day_end_when_eod_preset():
    acc = PropFirmAccount(get_rules("apex-2026-eod", "50K"))  # 2,000 allowance, no cap
    acc.apply_bar(1, 55_000.0, 50_000.0)
    assert acc.threshold == 48_000
    acc.settle(1, 1_000.0, 1_000.0)
    acc.end_day()
    assert acc.threshold == 49_000 and acc.peak == 51_000


def test_daily_loss_locks_for_the_day_and_unlocks_next_day_when_eod_preset():
    acc = PropFirmAccount(get_rules("apex-2026-eod", "50K"))  # daily loss limit 1,000
    acc.begin_day(0)
    assert acc.apply_bar(3, 50_000.0, 49_000.0) == RULE_DAILY_LOSS
    acc.lock_for_day(3)
    assert acc.status is AccountStatus.LOCKED_FOR_DAY and not acc.can_enter
    assert acc.daily_loss_limit_equity() == 49_000
    acc.begin_day(10)
    assert acc.status is AccountStatus.ACTIVE and acc.can_enter
    assert [e.code for e in acc.events] == [DAILY_LOSS_LIMIT, NEW_DAY]


def test_profit_target_passes_and_a_later_breach_keeps_the_pass_when_target_came_first():
    acc = PropFirmAccount(get_rules("apex-legacy", "25K"))  # target 1,500
    acc.settle(7, 1_600.0, 1_600.0)
    assert acc.status is AccountStatus.PASSED and acc.target_index == 7
    acc.breach(9)
    assert acc.status is AccountStatus.BREACHED
    assert acc.verdict() == "passed"
    assert [e.code for e in acc.events] == [PASS_PROFIT_TARGET, BREACH_TRAILING_DRAWDOWN]


def test_verdict_orders_target_and_breach_when_given_indices_or_none():
    assert apex_verdict(None, None) == "neither"
    assert apex_verdict(5, 5) == "passed"
    assert apex_verdict(4, 5) == "breached"


def test_liquidation_price_meets_limit_or_takes_gapped_open_when_long_and_short():
    # Long 1 NQ ($20/pt) from 100 with balance 50,000: equity 49,500 at 75.
    assert liquidation_price(49_500.0, 50_000.0, 100.0, 1, 20.0, 99.0) == pytest.approx(75.0)
    assert liquidation_price(49_500.0, 50_000.0, 100.0, 1, 20.0, 70.0) == 70.0  # opened below: the open
    assert liquidation_price(49_500.0, 50_000.0, 100.0, -1, 20.0, 101.0) == pytest.approx(125.0)


def test_max_contracts_refused_when_over_limit_counting_micros_as_tenths():
    acc = PropFirmAccount(get_rules("apex-legacy", "25K"))  # 4 minis
    acc.check_contracts(4, get_contract("NQ"))
    acc.check_contracts(40, get_contract("MNQ"))
    with pytest.raises(UserError, match="exceeds"):
        acc.check_contracts(5, get_contract("NQ"))


def test_recent_win_rate_and_streak_when_trades_settle():
    acc = PropFirmAccount(get_rules())
    for i, pnl in enumerate([10.0, -5.0, -5.0]):
        acc.settle(i, pnl, pnl)
    assert acc.consecutive_losses == 2
    assert acc.recent_win_rate == pytest.approx(1 / 3)
    assert acc.recent_outcomes() == [1, 0, 0]
    acc.begin_day(10)
    assert acc.bars_since_exit_today(20) == 1 << 30  # no exit today
