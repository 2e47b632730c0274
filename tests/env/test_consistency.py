"""Apex's 30% consistency rule: golden values, and the account's days, best day and standing."""

from __future__ import annotations

import pytest

from hybrid_trader.env.account import AccountStanding, AccountStatus, PropFirmAccount, Verdict
from hybrid_trader.env.consistency import CONSISTENCY_30, CONSISTENCY_NO_PROFIT, CONSISTENCY_OK, consistency
from hybrid_trader.env.rules import get_rules
from tests.env.test_account import flat_broker


def test_consistency_golden_values_when_best_day_is_half_the_total() -> None:
    c = consistency(500.0, 1_000.0, 0.30)  # days +500, +300, +200
    assert c.code == CONSISTENCY_30 and not c.ok
    assert c.needed == pytest.approx(666.6667, abs=1e-3)  # 500 / 0.3 - 1,000
    assert c.day_cap == pytest.approx(428.5714, abs=1e-3)  # 0.3 x 1,000 / 0.7
    assert c.best_share == pytest.approx(0.5)
    assert "a payout needs 666.67 more profit" in c.message() and "[CONSISTENCY_30]" in c.message()


def test_consistency_ok_at_exactly_30_percent_and_no_profit_when_total_not_positive() -> None:
    assert consistency(300.0, 1_000.0, 0.30).code == CONSISTENCY_OK
    assert consistency(300.01, 1_000.0, 0.30).code == CONSISTENCY_30
    assert consistency(400.0, -50.0, 0.30).code == CONSISTENCY_NO_PROFIT


def _day(acc: PropFirmAccount, t: int, pnl: float) -> None:
    """One session with one closed trade of ``pnl`` dollars."""
    acc.begin_day(t)
    acc.book(t + 1, pnl, pnl)
    acc.close_session(t + 2, flat_broker(), 100.0)


def test_account_tracks_days_and_best_day_when_sessions_close() -> None:
    acc = PropFirmAccount(get_rules("apex-legacy", "50K"))
    for k, pnl in enumerate([500.0, 300.0, -100.0, 300.0]):
        _day(acc, 10 * k, pnl)
    acc.begin_day(100)
    acc.close_session(101, flat_broker(), 100.0)  # a day without a trade is not a trading day
    assert acc.days_traded == 4 and acc.best_day == 500.0
    c = acc.consistency()
    assert c is not None and c.total == 1_000.0 and c.code == CONSISTENCY_30
    assert PropFirmAccount(get_rules("apex-legacy", "50K", consistency_share=None)).consistency() is None


def test_account_starts_from_standing_and_counts_a_reached_target_as_passed() -> None:
    acc = PropFirmAccount(get_rules("apex-legacy", "50K"))
    acc.start_from(AccountStanding(balance=51_200.0, peak=51_300.0, threshold=48_800.0, days_traded=3,
                                   best_day=700.0))
    assert (acc.balance, acc.peak, acc.threshold, acc.days_traded) == (51_200.0, 51_300.0, 48_800.0, 3)
    assert acc.day_start_balance == 51_200.0 and acc.status is AccountStatus.ACTIVE
    c = acc.consistency()
    assert c is not None and c.code == CONSISTENCY_30 and c.needed == pytest.approx(700 / 0.3 - 1_200)
    passed = PropFirmAccount(get_rules("apex-legacy", "50K"))
    passed.start_from(AccountStanding(balance=53_100.0, peak=53_100.0, threshold=50_100.0))
    assert passed.status is AccountStatus.PASSED and passed.verdict is Verdict.PASSED
