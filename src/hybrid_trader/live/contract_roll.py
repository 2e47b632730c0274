"""NinjaTrader contract names (``NQ 12-26``) and the roll: warn before expiry, refuse an expired contract.

CME equity index futures (NQ, ES, YM, RTY and their micros) list March, June, September and
December contracts; each expires on the **third Friday** of its month (trading stops at
09:30 ET that day), and volume moves to the next contract about **8 days earlier** (the
Thursday of the week before: the roll date). ``--nt-instrument`` names one contract, so a
long-running live setup must be rolled by hand: :func:`roll_check` says so ``warn_days``
before the expiry and refuses a contract whose expiry date has come. (An exchange holiday
on a third Friday would move the expiry a day earlier; none falls on one in these months.)
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from hybrid_trader.errors import UserError
from hybrid_trader.markets import CONTRACTS

QUARTERLY = (3, 6, 9, 12)
ROLL_DAYS = 8
"""Days from the roll date to the expiry (the second Thursday before the third Friday)."""
WARN_DAYS = 12
"""Default days before the expiry from which a run warns (4 days before the roll date)."""
_NAME = re.compile(r"^\s*([A-Za-z0-9]+)\s+(\d{1,2})-(\d{2})\s*$")


@dataclass(frozen=True)
class ContractMonth:
    """One futures contract as NinjaTrader names it."""

    root: str
    month: int
    year: int

    @property
    def name(self) -> str:
        return f"{self.root} {self.month:02d}-{self.year % 100:02d}"

    @property
    def expiry(self) -> dt.date:
        """The third Friday of the contract month."""
        first = dt.date(self.year, self.month, 1)
        return first + dt.timedelta(days=(4 - first.weekday()) % 7 + 14)

    @property
    def roll_date(self) -> dt.date:
        return self.expiry - dt.timedelta(days=ROLL_DAYS)

    def next(self) -> ContractMonth:
        month = self.month + 3
        return ContractMonth(self.root, month - 12 if month > 12 else month, self.year + (month > 12))


def parse_contract(name: str) -> ContractMonth:
    """``NQ 12-26`` -> NQ, December 2026; a UserError for another spelling, root or month."""
    m = _NAME.match(str(name))
    if m is None:
        raise UserError(f"--nt-instrument '{name}' is not a contract name like 'NQ 12-26'", value=name,
                        fix="root, a space, month-year as NinjaTrader names it, e.g. --nt-instrument 'NQ 12-26'")
    root, month, year = m.group(1).upper(), int(m.group(2)), 2000 + int(m.group(3))
    if root not in CONTRACTS:
        raise UserError(f"--nt-instrument '{name}': unknown root {root}", value=name,
                        fix=f"one of {', '.join(CONTRACTS)}, e.g. 'NQ 12-26'")
    if month not in QUARTERLY:
        raise UserError(f"--nt-instrument '{name}': {root} has no contract in month {month}", value=name,
                        fix="CME equity index futures expire in March, June, September and December: months "
                            f"03, 06, 09, 12, e.g. '{root} 12-{year % 100:02d}'")
    return ContractMonth(root, month, year)


def roll_check(name: str, today: dt.date, warn_days: int = WARN_DAYS) -> str | None:
    """A warning when the contract expires within ``warn_days`` (None otherwise); a UserError when it has expired
    (``today`` on or after its expiry date: trading in it stops that morning)."""
    c = parse_contract(name)
    left = (c.expiry - today).days
    if left <= 0:
        raise UserError(f"--nt-instrument '{name}' expired on {c.expiry:%a %Y-%m-%d}", value=name,
                        fix=f"trade the next contract: --nt-instrument '{c.next().name}'")
    if left > warn_days:
        return None
    rolled = today >= c.roll_date
    return (f"--nt-instrument '{name}' expires on {c.expiry:%a %Y-%m-%d} ({left} days); "
            + (f"the roll date {c.roll_date:%a %Y-%m-%d} has passed: volume is in '{c.next().name}', trade it"
               if rolled else f"roll to '{c.next().name}' by {c.roll_date:%a %Y-%m-%d}"))


__all__ = ["ContractMonth", "ROLL_DAYS", "WARN_DAYS", "parse_contract", "roll_check"]
