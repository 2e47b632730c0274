"""Apex's consistency rule: at payout, no trading day's profit above a share (30%) of the total profit.

The rule does not fail an evaluation or a funded account: it delays the payout until the
total profit is large enough for the best day to be at most ``share`` of it. So it is a
check the account reports (:func:`consistency`, ``PropFirmAccount.consistency()``), with
a reason code, never a trigger of ``env.account.TRANSITIONS``, and it does not block
entries: live decisions stay the ones ``evaluate`` makes (docs/ENVIRONMENT.md).

Golden values (share 0.30): days +500, +300, +200 make a total of 1,000 and a best day of
500 = 50% > 30%: ``CONSISTENCY_30``, the payout needs 500 / 0.3 - 1,000 = 666.67 more
profit; on such an account the next day may make at most 0.3 x 1,000 / 0.7 = 428.57 and
keep its own share at or below 30%.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CONSISTENCY_OK = "CONSISTENCY_OK"
CONSISTENCY_30 = "CONSISTENCY_30"
"""Reason code: the best day's profit is above the share of the total profit (a payout waits)."""
CONSISTENCY_NO_PROFIT = "CONSISTENCY_NO_PROFIT"
"""Reason code: no total profit yet (nothing to pay out, nothing to compare)."""


@dataclass(frozen=True)
class Consistency:
    """Where the account stands against the rule."""

    share: float
    """The largest share of the total profit one day may hold (Apex: 0.30)."""
    best_day: float
    """The largest profit of one trading day [$] (0 when no day made money)."""
    total: float
    """The total profit: balance minus the starting balance [$]."""
    code: str
    """``CONSISTENCY_OK``, ``CONSISTENCY_30`` or ``CONSISTENCY_NO_PROFIT``."""
    needed: float
    """More total profit the payout needs before the best day is at most ``share`` of it [$] (0 when ok)."""
    day_cap: float
    """The most one more day may make and stay at or below ``share`` of the new total [$] (0 without profit)."""

    @property
    def ok(self) -> bool:
        return self.code == CONSISTENCY_OK

    @property
    def best_share(self) -> float:
        """The best day's share of the total profit (NaN without profit)."""
        return self.best_day / self.total if self.total > 0 else math.nan

    def message(self) -> str:
        pct = f"{self.share:.0%}"
        if self.code == CONSISTENCY_NO_PROFIT:
            return f"consistency ({pct}): no total profit yet (best day {self.best_day:,.2f})"
        head = (f"consistency ({pct}): best day {self.best_day:,.2f} of a total profit {self.total:,.2f} "
                f"({self.best_share:.0%})")
        if self.ok:
            return f"{head}: a payout is allowed; the next day may make up to {self.day_cap:,.2f}"
        return f"{head} [{self.code}]: a payout needs {self.needed:,.2f} more profit"


def consistency(best_day: float, total: float, share: float) -> Consistency:
    """The rule at a best day's profit and a total profit (both in dollars)."""
    best = max(0.0, float(best_day))
    if total <= 0:
        return Consistency(share, best, float(total), CONSISTENCY_NO_PROFIT, 0.0, 0.0)
    ok = best <= share * total + 1e-9
    needed = 0.0 if ok else best / share - total
    return Consistency(share, best, float(total), CONSISTENCY_OK if ok else CONSISTENCY_30, needed,
                       share * total / (1.0 - share))


__all__ = ["CONSISTENCY_30", "CONSISTENCY_NO_PROFIT", "CONSISTENCY_OK", "Consistency", "consistency"]
