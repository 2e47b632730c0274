"""--nt-instrument roll: contract names, third-Friday expiries, the warning before them, expired refused."""

from __future__ import annotations

import datetime as dt

import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.live.contract_roll import parse_contract, roll_check

D = dt.date


@pytest.mark.parametrize(("name", "expiry", "roll", "following"), [
    ("NQ 12-24", D(2024, 12, 20), D(2024, 12, 12), "NQ 03-25"),  # CME: NQZ4 last trade Fri 20 Dec 2024
    ("NQ 06-24", D(2024, 6, 21), D(2024, 6, 13), "NQ 09-24"),
    ("ES 03-25", D(2025, 3, 21), D(2025, 3, 13), "ES 06-25"),
    ("mnq 09-26", D(2026, 9, 18), D(2026, 9, 10), "MNQ 12-26"),
    ("NQ 12-26", D(2026, 12, 18), D(2026, 12, 10), "NQ 03-27"),
])
def test_contract_expires_third_friday_and_rolls_8_days_earlier(name, expiry, roll, following) -> None:
    c = parse_contract(name)
    assert (c.expiry, c.roll_date, c.next().name) == (expiry, roll, following)
    assert c.expiry.weekday() == 4 and 15 <= c.expiry.day <= 21


def test_roll_check_is_quiet_far_from_expiry_and_warns_within_n_days() -> None:
    assert roll_check("NQ 12-26", D(2026, 11, 27)) is None  # 21 days left
    early = roll_check("NQ 12-26", D(2026, 12, 8))  # 10 days left, before the roll date
    assert early == ("--nt-instrument 'NQ 12-26' expires on Fri 2026-12-18 (10 days); "
                     "roll to 'NQ 03-27' by Thu 2026-12-10")
    late = roll_check("NQ 12-26", D(2026, 12, 11))
    assert late is not None and "the roll date Thu 2026-12-10 has passed" in late and "'NQ 03-27'" in late
    assert roll_check("NQ 12-26", D(2026, 11, 27), warn_days=30) is not None


@pytest.mark.parametrize("today", [D(2026, 12, 18), D(2027, 1, 4)])
def test_roll_check_refuses_a_contract_on_or_after_its_expiry(today) -> None:
    with pytest.raises(UserError, match="expired on Fri 2026-12-18") as err:
        roll_check("NQ 12-26", today)
    assert "--nt-instrument 'NQ 03-27'" in (err.value.fix or "")


@pytest.mark.parametrize(("name", "message"), [
    ("NQ DEC26", "is not a contract name like 'NQ 12-26'"),
    ("ZZ 12-26", "unknown root ZZ"),
    ("NQ 11-26", "NQ has no contract in month 11"),
])
def test_parse_contract_names_the_problem_when_name_is_bad(name: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_contract(name)
