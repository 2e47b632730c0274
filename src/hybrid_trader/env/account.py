"""The prop-firm account: balance, trailing threshold, daily limit, target, and its states.

``PropFirmAccount`` enforces every rule of a :class:`~hybrid_trader.env.rules.PropFirmRules`
preset in one place (see ``rules.py`` for the rules themselves):

=====================  =======================================================================
rule                   enforced by
=====================  =======================================================================
max contracts          :meth:`PropFirmAccount.check_contracts` (at construction of the env)
flat-by time           :meth:`PropFirmAccount.flat_by_minute` (the trading windows end there)
trailing threshold     :meth:`PropFirmAccount.apply_bar` (intraday: the bar's favourable
                       extreme incl. open profit) and :meth:`PropFirmAccount.end_day` (EOD)
trail stop             the threshold never passes ``rules.threshold_cap``
breach                 :meth:`PropFirmAccount.apply_bar`: equity at the bar's adverse extreme
                       at or below the threshold -> ``BREACHED`` (final)
daily loss limit       :meth:`PropFirmAccount.apply_bar` -> ``LOCKED_FOR_DAY`` until the next day
profit target          :meth:`PropFirmAccount.settle` -> ``PASSED`` (trading goes on)
=====================  =======================================================================

Each state change is recorded with a reason code in :attr:`PropFirmAccount.events`;
:func:`apex_verdict` turns the first target and breach into the evaluation's verdict.
Adding a rule means adding a field to ``PropFirmRules`` (and presets), its check here,
a reason code, and a test in ``tests/env/test_account.py``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from hybrid_trader.calendar import parse_hhmm
from hybrid_trader.env.rules import PropFirmRules
from hybrid_trader.errors import UserError
from hybrid_trader.markets import ContractSpec

RECENT_TRADES = 10
"""Trades in the recent win rate."""
RECENT_HISTORY = 100
"""Trade outcomes kept for the risk veto."""

# Reason codes of state changes.
BREACH_TRAILING_DRAWDOWN = "BREACH_TRAILING_DRAWDOWN"
DAILY_LOSS_LIMIT = "DAILY_LOSS_LIMIT"
PASS_PROFIT_TARGET = "PASS_PROFIT_TARGET"
NEW_DAY = "NEW_DAY"

# Rule events apply_bar returns (the env liquidates the position on either).
RULE_OK = 0
RULE_BREACH = 1
RULE_DAILY_LOSS = 2


class AccountStatus(StrEnum):
    """Where the evaluation account stands."""

    ACTIVE = "ACTIVE"
    """Trading, target not reached yet."""
    PASSED = "PASSED"
    """The profit target was reached (trading goes on; a later breach does not undo the pass)."""
    LOCKED_FOR_DAY = "LOCKED_FOR_DAY"
    """The daily loss limit was hit: flat, no entries until the next session."""
    BREACHED = "BREACHED"
    """The trailing threshold was touched: the account failed (final)."""


@dataclass(frozen=True)
class AccountEvent:
    """One state change of the account."""

    index: int
    """Bar index where it happened."""
    code: str
    """Reason code, e.g. ``BREACH_TRAILING_DRAWDOWN``."""
    status: AccountStatus
    """The state entered."""


def apex_verdict(breach_at: Any, target_at: Any) -> str:
    """``"passed"`` when the target came no later than any breach, ``"breached"``, else ``"neither"``.

    ``breach_at`` and ``target_at`` are bar indices or timestamps (any ordered values), None when never.
    """
    if target_at is not None and (breach_at is None or target_at <= breach_at):
        return "passed"
    if breach_at is not None:
        return "breached"
    return "neither"


def liquidation_price(limit_equity: float, balance: float, entry: float, side: int, dollars_per_point: float,
                      bar_open: float) -> float:
    """Price (before slippage) at which the position's equity meets ``limit_equity``.

    The bar's open when it gapped through that level.
    """
    level = entry + (limit_equity - balance) / (dollars_per_point * side)
    return bar_open if side * (bar_open - level) < 0 else level


class PropFirmAccount:
    """A prop-firm evaluation account under one rules preset (all money in dollars)."""

    def __init__(self, rules: PropFirmRules) -> None:
        self.rules = rules
        self._intraday = rules.trail_mode == "intraday"  # read on every bar: resolved once
        self._daily_loss_limit = rules.daily_loss_limit
        self.reset()

    # ------------------------------------------------------------------ checks at set-up
    def check_contracts(self, contracts: int, contract: ContractSpec) -> None:
        """UserError when ``contracts`` of ``contract`` exceed the rules' max (a micro counts 1/10)."""
        r = self.rules
        minis = contracts / 10 if contract.is_micro else contracts
        if minis > r.max_contracts:
            raise UserError(
                f"env.contracts: {contracts} {contract.symbol} exceeds the {r.name} limit "
                f"of {r.max_contracts} mini contracts",
                fix=f"trade at most {r.max_contracts * (10 if contract.is_micro else 1)} contracts",
            )

    def flat_by_minute(self) -> int:
        """The flat-by time as minutes since midnight ET."""
        return parse_hhmm(self.rules.flat_by, "flat_by")

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """A fresh account at the preset's starting balance."""
        r = self.rules
        self.balance = float(r.account_size)
        self.peak = self.balance
        self.threshold = r.initial_threshold
        self.status = AccountStatus.ACTIVE
        self.breached = False
        self.day_locked = False
        self.passed = False
        self.can_enter = True
        """New entries allowed by the rules (not breached, not locked for the day)."""
        self.breach_index = -1
        self.target_index = -1
        self.day_start_balance = self.balance
        self.day_first = -1
        self.events: list[AccountEvent] = []
        self.consecutive_losses = 0
        self.recent: deque[int] = deque(maxlen=RECENT_HISTORY)
        self.recent_win_rate = math.nan
        """Share of winners among the last ``RECENT_TRADES`` trades (NaN before the first)."""
        self.last_exit_index = -1

    def _enter(self, t: int, code: str, status: AccountStatus) -> None:
        self.status = status
        self.events.append(AccountEvent(t, code, status))

    def begin_day(self, t: int) -> None:
        """A new session starts at bar t: the daily loss counts from here, a day lock ends."""
        self.day_first = t
        self.day_start_balance = self.balance
        if self.day_locked:
            self.day_locked = False
            self.can_enter = not self.breached
            if not self.breached:
                self._enter(t, NEW_DAY, AccountStatus.PASSED if self.passed else AccountStatus.ACTIVE)

    def pay(self, amount: float) -> None:
        """Take a cost (the entry commission) from the balance."""
        self.balance -= amount

    def settle(self, t: int, balance_change: float, net_pnl: float) -> None:
        """Book a closed trade at bar t: balance, streaks, recent win rate, the profit target."""
        self.balance += balance_change
        win = net_pnl > 0
        self.recent.append(1 if win else 0)
        recent = list(self.recent)[-RECENT_TRADES:]
        self.recent_win_rate = sum(recent) / len(recent)
        self.consecutive_losses = 0 if win else self.consecutive_losses + 1
        self.last_exit_index = t
        if self.target_index < 0 and self.balance >= self.rules.account_size + self.rules.profit_target:
            self.target_index = t
            self.passed = True
            if not self.breached and not self.day_locked:
                self._enter(t, PASS_PROFIT_TARGET, AccountStatus.PASSED)

    def apply_bar(self, t: int, peak_eq: float, trough_eq: float) -> int:
        """Apply the trailing threshold and the daily loss limit to one bar.

        ``peak_eq`` and ``trough_eq`` are the equity at the bar's favourable and adverse
        prices. Returns :data:`RULE_BREACH` when the threshold is touched (the caller
        liquidates, then calls :meth:`breach`), :data:`RULE_DAILY_LOSS` when the daily
        limit is (liquidate, then :meth:`lock_for_day`), else :data:`RULE_OK`.
        """
        if self.breached:
            return RULE_OK
        if self.balance > peak_eq:
            peak_eq = self.balance
        if self._intraday and peak_eq > self.peak:
            r = self.rules
            self.peak = peak_eq
            self.threshold = min(max(self.threshold, peak_eq - r.trailing_drawdown), r.threshold_cap)
        if trough_eq <= self.threshold or self.balance <= self.threshold:
            return RULE_BREACH
        limit = self._daily_loss_limit
        if limit is not None and trough_eq - self.day_start_balance <= -limit:
            return RULE_DAILY_LOSS
        return RULE_OK

    def breach_limit(self) -> float:
        """Equity at which the position is liquidated on a breach: the threshold."""
        return self.threshold

    def daily_loss_limit_equity(self) -> float:
        """Equity at which the position is liquidated by the daily loss limit."""
        return self.day_start_balance - self.rules.daily_loss_limit  # type: ignore[operator]

    def breach(self, t: int) -> None:
        self.breached = True
        self.can_enter = False
        self.breach_index = t
        self._enter(t, BREACH_TRAILING_DRAWDOWN, AccountStatus.BREACHED)

    def lock_for_day(self, t: int) -> None:
        if not self.day_locked:
            self._enter(t, DAILY_LOSS_LIMIT, AccountStatus.LOCKED_FOR_DAY)
        self.day_locked = True
        self.can_enter = False

    def end_day(self) -> None:
        """End of a session: the EOD trailing threshold moves from the closing balance."""
        r = self.rules
        if r.trail_mode == "eod" and not self.breached and self.balance > self.peak:
            self.peak = self.balance
            self.threshold = min(max(self.threshold, self.balance - r.trailing_drawdown), r.threshold_cap)

    # ------------------------------------------------------------------ queries
    def drawdown_buffer(self, equity: float) -> float:
        """Share of the trailing allowance still left above the threshold at ``equity`` (1 = untouched)."""
        return (equity - self.threshold) / self.rules.trailing_drawdown

    def bars_since_exit_today(self, t: int) -> int:
        """Bars since the last exit in the current session (a large number when none today)."""
        if self.last_exit_index < self.day_first:
            return 1 << 30
        return t - self.last_exit_index

    def recent_outcomes(self) -> list[int]:
        """Outcomes of the most recent trades (1 won, 0 lost), oldest first."""
        return list(self.recent)

    def verdict(self) -> str:
        """The evaluation's verdict: ``passed``, ``breached`` or ``neither`` (see :func:`apex_verdict`)."""
        return apex_verdict(self.breach_index if self.breach_index >= 0 else None,
                            self.target_index if self.target_index >= 0 else None)

    def summary(self, sessions: int) -> dict[str, Any]:
        """The account at the end of an episode (``info["account"]``)."""
        return {
            "balance": self.balance,
            "threshold": self.threshold,
            "peak": self.peak,
            "breach_index": self.breach_index,
            "target_index": self.target_index,
            "sessions": sessions,
            "status": self.status.value,
            "verdict": self.verdict(),
            "events": [(e.index, e.code, e.status.value) for e in self.events],
        }
