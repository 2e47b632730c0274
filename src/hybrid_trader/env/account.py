"""The prop-firm account as a state machine: balance, trailing threshold, daily limit, target.

``PropFirmAccount`` enforces every rule of a :class:`~hybrid_trader.env.rules.PropFirmRules`
preset through one table, :data:`TRANSITIONS`: (status, trigger) -> :class:`Transition`
(the status entered, its reason code, the forced liquidation the broker executes, the
verdict it gives). A trigger with no row in the current status raises
:class:`InvalidTransition`. Once per bar the environment calls :meth:`PropFirmAccount.on_bar`
after the broker's fills; the account books them, detects the triggers and, where a row
says so, has the broker liquidate the position.

=====================  ====================  =====================================================
rule                   trigger               effect (row of :data:`TRANSITIONS`)
=====================  ====================  =====================================================
profit target          ``TARGET_REACHED``    ``PASSED`` (trading goes on), verdict ``passed``
trailing threshold     ``THRESHOLD_TOUCHED`` liquidate at the threshold, ``BREACHED`` (final),
                                             verdict ``breached`` (unless passed before)
daily loss limit       ``DAILY_LOSS_HIT``    liquidate at the limit, ``LOCKED_FOR_DAY``
                                             (``PASSED_LOCKED_FOR_DAY`` after a pass)
flat-by time           ``SESSION_CLOSE``     liquidate at the close of the day's last bar
                                             (the window never ends after ``flat_by``)
new session            ``SESSION_OPEN``      a day lock ends
max contracts          -                     :meth:`PropFirmAccount.check_contracts` (set-up)
30% consistency        -                     :meth:`PropFirmAccount.consistency` (a report, no trigger)
=====================  ====================  =====================================================

A live account starts from the real account's standing (:class:`AccountStanding`,
:meth:`PropFirmAccount.start_from`) instead of the preset's starting balance.

The threshold trails the intraday peak of equity (balance plus open profit at each bar's
favourable extreme) or, in ``eod`` mode, the closing balance; it never passes
``rules.threshold_cap``. Each status change is kept with its reason code in
:attr:`PropFirmAccount.events`; the evaluation's verdict is fixed once, by the first
transition that gives one (:attr:`PropFirmAccount.verdict`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from hybrid_trader.calendar import window_end_session_minute
from hybrid_trader.env.broker import EXIT_BREACH, EXIT_DAILY_LOSS, EXIT_SESSION_END, EXIT_TARGET
from hybrid_trader.env.consistency import Consistency, consistency
from hybrid_trader.env.rules import PropFirmRules
from hybrid_trader.errors import UserError
from hybrid_trader.markets import ContractSpec

if TYPE_CHECKING:  # pragma: no cover
    from hybrid_trader.env.broker import Broker

RECENT_TRADES = 10
"""Trades in the recent win rate."""
RECENT_HISTORY = 100
"""Trade outcomes kept for the risk veto."""

# Reason codes of status changes.
BREACH_TRAILING_DRAWDOWN = "BREACH_TRAILING_DRAWDOWN"
DAILY_LOSS_LIMIT = "DAILY_LOSS_LIMIT"
PASS_PROFIT_TARGET = "PASS_PROFIT_TARGET"
NEW_DAY = "NEW_DAY"


class AccountStatus(StrEnum):
    """Where the evaluation account stands."""

    ACTIVE = "ACTIVE"
    """Trading, target not reached yet."""
    PASSED = "PASSED"
    """The profit target was reached (trading goes on; a later breach does not undo the pass)."""
    LOCKED_FOR_DAY = "LOCKED_FOR_DAY"
    """The daily loss limit was hit: flat, no entries until the next session."""
    PASSED_LOCKED_FOR_DAY = "PASSED_LOCKED_FOR_DAY"
    """Passed, then the daily loss limit was hit: flat until the next session, then ``PASSED``."""
    BREACHED = "BREACHED"
    """The trailing threshold was touched: the account failed (final)."""


class Trigger(StrEnum):
    """What can happen to the account on a bar."""

    TARGET_REACHED = "TARGET_REACHED"
    """The balance reached the starting balance plus the profit target (the first time)."""
    THRESHOLD_TOUCHED = "THRESHOLD_TOUCHED"
    """Equity at the bar's adverse extreme, or the balance, at or below the trailing threshold."""
    DAILY_LOSS_HIT = "DAILY_LOSS_HIT"
    """Equity at the bar's adverse extreme lost the daily loss limit since the session began."""
    SESSION_OPEN = "SESSION_OPEN"
    """A session's trading window begins."""
    SESSION_CLOSE = "SESSION_CLOSE"
    """The last bar of a session's trading window (at or before the rules' flat-by time)."""


class Verdict(StrEnum):
    """The evaluation's outcome: fixed by the first of target and breach."""

    PASSED = "passed"
    BREACHED = "breached"
    NEITHER = "neither"


@dataclass(frozen=True)
class Transition:
    """One row of :data:`TRANSITIONS`."""

    to: AccountStatus
    """The status entered."""
    code: str | None = None
    """Reason code recorded in ``events`` (None: nothing recorded, e.g. a day that simply begins)."""
    liquidate: str | None = None
    """Exit reason of the forced liquidation the broker executes (None: none)."""
    verdict: Verdict | None = None
    """The verdict this transition gives when none was given before."""


class InvalidTransition(RuntimeError):
    """A trigger that has no row for the account's current status (a bug, never a user error)."""


_S, _T = AccountStatus, Trigger
_BREACH = Transition(_S.BREACHED, BREACH_TRAILING_DRAWDOWN, EXIT_BREACH, Verdict.BREACHED)
_FLAT_BY = Transition(_S.ACTIVE, liquidate=EXIT_SESSION_END)

TRANSITIONS: dict[tuple[AccountStatus, Trigger], Transition] = {
    (_S.ACTIVE, _T.TARGET_REACHED): Transition(_S.PASSED, PASS_PROFIT_TARGET, verdict=Verdict.PASSED),
    (_S.ACTIVE, _T.THRESHOLD_TOUCHED): _BREACH,
    (_S.ACTIVE, _T.DAILY_LOSS_HIT): Transition(_S.LOCKED_FOR_DAY, DAILY_LOSS_LIMIT, EXIT_DAILY_LOSS),
    (_S.ACTIVE, _T.SESSION_OPEN): Transition(_S.ACTIVE),
    (_S.ACTIVE, _T.SESSION_CLOSE): _FLAT_BY,
    (_S.PASSED, _T.THRESHOLD_TOUCHED): _BREACH,
    (_S.PASSED, _T.DAILY_LOSS_HIT): Transition(_S.PASSED_LOCKED_FOR_DAY, DAILY_LOSS_LIMIT, EXIT_DAILY_LOSS),
    (_S.PASSED, _T.SESSION_OPEN): Transition(_S.PASSED),
    (_S.PASSED, _T.SESSION_CLOSE): Transition(_S.PASSED, liquidate=EXIT_SESSION_END),
    (_S.LOCKED_FOR_DAY, _T.TARGET_REACHED): Transition(_S.PASSED_LOCKED_FOR_DAY, PASS_PROFIT_TARGET,
                                                        verdict=Verdict.PASSED),
    (_S.LOCKED_FOR_DAY, _T.THRESHOLD_TOUCHED): _BREACH,
    (_S.LOCKED_FOR_DAY, _T.SESSION_OPEN): Transition(_S.ACTIVE, NEW_DAY),
    (_S.LOCKED_FOR_DAY, _T.SESSION_CLOSE): Transition(_S.LOCKED_FOR_DAY),
    (_S.PASSED_LOCKED_FOR_DAY, _T.THRESHOLD_TOUCHED): _BREACH,
    (_S.PASSED_LOCKED_FOR_DAY, _T.SESSION_OPEN): Transition(_S.PASSED, NEW_DAY),
    (_S.PASSED_LOCKED_FOR_DAY, _T.SESSION_CLOSE): Transition(_S.PASSED_LOCKED_FOR_DAY),
    (_S.BREACHED, _T.SESSION_OPEN): Transition(_S.BREACHED),
    (_S.BREACHED, _T.SESSION_CLOSE): Transition(_S.BREACHED),
}
"""The account's whole behaviour: (status, trigger) -> transition. A missing pair is invalid."""

ENTRY_STATUSES = frozenset({AccountStatus.ACTIVE, AccountStatus.PASSED})
"""Statuses in which the rules allow new entries."""
_LOCKED = frozenset({AccountStatus.LOCKED_FOR_DAY, AccountStatus.PASSED_LOCKED_FOR_DAY})


def verdict_of(breach_at: Any, target_at: Any) -> Verdict:
    """The verdict from when the breach and the target happened (None: never; any ordered values).

    For results that carry no account (made by hand, or saved before the account kept its
    verdict); the account itself fixes its verdict at the transition.
    """
    if target_at is not None and (breach_at is None or target_at <= breach_at):
        return Verdict.PASSED
    if breach_at is not None:
        return Verdict.BREACHED
    return Verdict.NEITHER


@dataclass(frozen=True)
class AccountEvent:
    """One status change of the account."""

    index: int
    """Bar index where it happened."""
    code: str
    """Reason code, e.g. ``BREACH_TRAILING_DRAWDOWN``."""
    status: AccountStatus
    """The status entered."""


@dataclass(frozen=True)
class AccountStanding:
    """A real account's standing to start from (``hybrid-trader run --account-state``), checked by
    ``live.account_sync`` against the rules: balance above the threshold, threshold within its range."""

    balance: float
    """The account balance now [$]."""
    peak: float
    """The highest balance (intraday: equity) the threshold trailed [$]."""
    threshold: float
    """The trailing threshold now [$]."""
    days_traded: int = 0
    """Trading days so far."""
    best_day: float = 0.0
    """The largest profit of one trading day so far [$] (the consistency rule)."""


class PropFirmAccount:
    """A prop-firm evaluation account under one rules preset (all money in dollars)."""

    def __init__(self, rules: PropFirmRules) -> None:
        self.rules = rules
        self._intraday = rules.trail_mode == "intraday"  # read on every bar: resolved once
        self._daily_loss_limit = rules.daily_loss_limit
        self.reset()

    # ------------------------------------------------------------------ set-up
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

    def flat_by_session_minute(self) -> int:
        """The flat-by time as a session minute (minutes since 18:00 ET): no trading window ends later."""
        return window_end_session_minute(self.rules.flat_by, "flat_by", "rules")

    def reset(self) -> None:
        """A fresh account at the preset's starting balance."""
        self.balance = float(self.rules.account_size)
        self.peak = self.balance
        self.threshold = self.rules.initial_threshold
        self.status = AccountStatus.ACTIVE
        self.can_enter = True
        """New entries allowed by the rules: ``status in ENTRY_STATUSES``, kept by :meth:`fire` (read every step)."""
        self.verdict = Verdict.NEITHER
        self.breach_index = -1
        self.target_index = -1
        self.day_start_balance = self.balance
        self.day_first = -1
        self.events: list[AccountEvent] = []
        self.consecutive_losses = 0
        self.recent: deque[int] = deque(maxlen=RECENT_HISTORY)
        self.recent_win_rate = math.nan
        """Share of winners among the last ``RECENT_TRADES`` trades (NaN before the first); read every step."""
        self.last_exit_index = -1
        self.days_traded = 0
        """Sessions with at least one closed trade (plus the standing's, :meth:`start_from`)."""
        self.best_day = 0.0
        """The largest profit of one session [$], for :meth:`consistency`."""

    def start_from(self, standing: AccountStanding) -> None:
        """Start from a real account's standing (after :meth:`reset`); reaching the target counts as passed."""
        self.balance = self.day_start_balance = float(standing.balance)
        self.peak = float(standing.peak)
        self.threshold = float(standing.threshold)
        self.days_traded = int(standing.days_traded)
        self.best_day = float(standing.best_day)
        if self.balance >= self.rules.account_size + self.rules.profit_target:
            self.fire(0, Trigger.TARGET_REACHED)

    # ------------------------------------------------------------------ the state machine
    def fire(self, t: int, trigger: Trigger, broker: Broker | None = None, bar_open: float = math.nan,
             close: float = math.nan) -> Transition:
        """Apply ``trigger`` at bar t: the row of :data:`TRANSITIONS`, its liquidation and its verdict.

        Raises :class:`InvalidTransition` when the current status has no row for it.
        """
        row = self._row(t, trigger)
        if row.liquidate is not None and broker is not None and broker.side:
            if trigger is Trigger.SESSION_CLOSE:
                trade, cash = broker.close_at_bar_close(t, close, row.liquidate)
            else:
                trade, cash = broker.liquidate(t, self._limit_equity(trigger), self.balance, bar_open, row.liquidate)
            self._book(t, cash, trade.net_pnl)
            row = self._row(t, trigger)  # booking the liquidation may have reached the target
        if row.verdict is not None and self.verdict is Verdict.NEITHER:
            self.verdict = row.verdict
        if trigger is Trigger.THRESHOLD_TOUCHED:
            self.breach_index = t
        elif trigger is Trigger.TARGET_REACHED:
            self.target_index = t
        self.status = row.to
        self.can_enter = row.to in ENTRY_STATUSES
        if row.code is not None:
            self.events.append(AccountEvent(t, row.code, row.to))
        return row

    def _row(self, t: int, trigger: Trigger) -> Transition:
        row = TRANSITIONS.get((self.status, trigger))
        if row is None:
            raise InvalidTransition(f"{trigger.value} is not a valid trigger in status {self.status.value} "
                                    f"(bar {t}); see env.account.TRANSITIONS")
        return row

    def _limit_equity(self, trigger: Trigger) -> float:
        """Equity at which a forced liquidation fills: the threshold, or the daily loss limit."""
        if trigger is Trigger.THRESHOLD_TOUCHED:
            return self.threshold
        return self.day_start_balance - self.rules.daily_loss_limit  # type: ignore[operator]

    # ------------------------------------------------------------------ one bar
    def begin_day(self, t: int) -> None:
        """A new session starts at bar t: the daily loss counts from here, a day lock ends."""
        self.day_first = t
        self.day_start_balance = self.balance
        self.fire(t, Trigger.SESSION_OPEN)

    def on_bar(self, t: int, broker: Broker, bar_open: float, close: float, session_close: bool) -> bool:
        """Book bar t's fills (``broker.on_bar`` ran first), apply every rule; True when it breached.

        The position's equity at the bar's favourable and adverse prices (the broker's
        ``bar_fav_pnl`` and ``bar_worst_pnl``, before any exit) drives the intraday
        threshold and the breach and daily loss checks. On the last bar of the session's
        window (``session_close``) any position left is closed at the bar's close.
        """
        if broker.bar_entry_cost:
            self.balance -= broker.bar_entry_cost
        balance = self.balance
        peak_eq = balance + broker.bar_fav_pnl
        trough_eq = balance + broker.bar_worst_pnl
        closed = broker.bar_closed
        if (closed is not None and closed.exit_reason == EXIT_TARGET and self.status is not AccountStatus.BREACHED
                and trough_eq <= (self._trailed(peak_eq) if self._intraday else self.threshold)):
            # the bar reached the target and, at its adverse extreme, the threshold: which came first is unknown,
            # so the breach does (as the stop does when a bar touches stop and target): liquidated at the threshold
            broker.undo_bar_exit()
            closed = None
        if closed is not None:
            self._book(t, broker.bar_cash, closed.net_pnl)
        breached = False
        if self.status is not AccountStatus.BREACHED:
            if self.balance > peak_eq:
                peak_eq = self.balance
            if self._intraday:
                self._trail(peak_eq)
            if trough_eq <= self.threshold or self.balance <= self.threshold:
                self.fire(t, Trigger.THRESHOLD_TOUCHED, broker, bar_open)
                breached = True
            elif (self._daily_loss_limit is not None and self.status not in _LOCKED
                  and min(trough_eq, self.balance) - self.day_start_balance <= -self._daily_loss_limit):
                self.fire(t, Trigger.DAILY_LOSS_HIT, broker, bar_open)
        if session_close:
            self.close_session(t, broker, close, bar_open)
            breached = breached or self.breach_index == t
        return breached

    def close_session(self, t: int, broker: Broker, close: float, bar_open: float = math.nan) -> None:
        """The end of the day's window at bar t: a position left is closed at ``close``; end-of-day trailing."""
        self.fire(t, Trigger.SESSION_CLOSE, broker, bar_open, close)
        self._breach_if_at_threshold(t)  # the close's slippage and commission can take it there
        if not self._intraday and self.status is not AccountStatus.BREACHED:
            self._trail(self.balance)
        if self.last_exit_index >= self.day_first >= 0:
            self.days_traded += 1
            self.best_day = max(self.best_day, self.balance - self.day_start_balance)

    def _trailed(self, peak: float) -> float:
        """The threshold after a peak of ``peak``: moved up by a new peak (never down, never past the cap)."""
        if peak <= self.peak:
            return self.threshold
        r = self.rules
        return min(max(self.threshold, peak - r.trailing_drawdown), r.threshold_cap)

    def _trail(self, peak: float) -> None:
        """Move the trailing threshold up after a new peak (:meth:`_trailed`)."""
        if peak > self.peak:
            self.threshold = self._trailed(peak)
            self.peak = peak

    def book(self, t: int, balance_change: float, net_pnl: float) -> None:
        """Book a trade closed outside :meth:`on_bar` (the executor's flatten on exit); a breach if its costs took
        the balance to the threshold."""
        self._book(t, balance_change, net_pnl)
        self._breach_if_at_threshold(t)

    def _breach_if_at_threshold(self, t: int) -> None:
        """A fill outside the bar's breach check (a closing fill, with its slippage and commission) that left the
        balance at or below the threshold: the breach, at bar t."""
        if self.status is not AccountStatus.BREACHED and self.balance <= self.threshold:
            self.fire(t, Trigger.THRESHOLD_TOUCHED)

    def _book(self, t: int, balance_change: float, net_pnl: float) -> None:
        """Book a closed trade at bar t: balance, streaks, recent win rate, the profit target."""
        self.balance += balance_change
        win = net_pnl > 0
        self.recent.append(1 if win else 0)
        self.recent_win_rate = self.win_rate(RECENT_TRADES)
        self.consecutive_losses = 0 if win else self.consecutive_losses + 1
        self.last_exit_index = t
        if self.target_index < 0 and self.balance >= self.rules.account_size + self.rules.profit_target:
            self.fire(t, Trigger.TARGET_REACHED)

    # ------------------------------------------------------------------ queries
    def consistency(self) -> Consistency | None:
        """The consistency rule now: the best day against the total profit (None when the rules have none)."""
        share = self.rules.consistency_share
        if share is None:
            return None
        return consistency(self.best_day, self.balance - self.rules.account_size, share)

    def win_rate(self, last: int) -> float:
        """Share of winners among the last ``last`` trades (NaN before the first)."""
        recent = list(self.recent)[-last:]
        return sum(recent) / len(recent) if recent else math.nan

    def drawdown_buffer(self, equity: float) -> float:
        """Share of the trailing allowance still left above the threshold at ``equity`` (1 = untouched)."""
        return (equity - self.threshold) / self.rules.trailing_drawdown

    def bars_since_exit_today(self, t: int) -> int:
        """Bars since the last exit in the current session (a large number when none today)."""
        if self.last_exit_index < self.day_first:
            return 1 << 30
        return t - self.last_exit_index

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
            "verdict": self.verdict.value,
            "events": [(e.index, e.code, e.status.value) for e in self.events],
            "days_traded": self.days_traded,
            "best_day": self.best_day,
        }
