"""What the executor writes to its journal, its stops and its restart checks.

The base of :class:`~hybrid_trader.live.executor_trading.ExecutorTrading` (the executor's trading state).

Each decision with its probabilities and reason codes, the entry order it makes, the broker's fills, the
account's rows; a pending entry cancelled. **Restarts** replay the journal's bars: what they wrote is not
written again, and when the replay reaches the journal's last bar the position and balance it rebuilt are
checked against the journal's fills and account row (:meth:`ExecutorJournal.check_recovery`; a feed that ends
before that bar is not the journal's). **Stops** (Ctrl-C, SIGTERM, the flat guard's ``flatten``) are journaled
after their bar, so that a restart's replay makes them again.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from hybrid_trader.actions import ACTION_NAMES
from hybrid_trader.agent.advised import AdvisedPolicy
from hybrid_trader.calendar import EASTERN
from hybrid_trader.env.account import AccountStatus
from hybrid_trader.env.broker import Trade
from hybrid_trader.env.core import CoreViews, TradingCore
from hybrid_trader.env.day_window import DayState
from hybrid_trader.errors import UserError
from hybrid_trader.live.account_sync import consistency_note
from hybrid_trader.live.broker_link import BrokerLink
from hybrid_trader.live.executor_parts import ExecutorSummary, utc
from hybrid_trader.live.journal import MANUAL_EXIT, Journal
from hybrid_trader.live.ninjatrader import order_id

if TYPE_CHECKING:
    from hybrid_trader.live.feed_position import BarStep, FeedPosition
    from hybrid_trader.live.snapshot import Snapshots

__all__ = ["EXIT_MANUAL", "ExecutorJournal", "JournalMarks", "OnExit"]
OnExit = Literal["flatten", "protect"]
EXIT_MANUAL = MANUAL_EXIT
"""Exit reason of a position flattened when the executor stops (``--on-exit flatten``)."""


@dataclass
class JournalMarks:
    """What the journal held when the executor started: a restart's replay writes none of it again, makes its stops
    again, and checks the state it rebuilt at the first new bar."""

    decisions: int | None
    """The journal's last decision (ns; None: none)."""
    account: int | None
    """The journal's last account row (ns; None: none)."""
    recovery_checked: bool
    """The rebuilt state was checked against the journal's (or there was nothing to rebuild)."""
    stops: dict[int, str] = field(default_factory=dict)
    """The journal's stops by the bar they followed (``Journal.stops``), set once the journal is claimed."""


class ExecutorJournal(CoreViews):
    """The executor's journal writing, stops and restart checks, on the trading state of its subclass
    (``live.executor_trading.ExecutorTrading``)."""

    say: Any
    journal: Journal
    order_tag: str
    core: TradingCore
    day: DayState
    feed: FeedPosition
    link: BrokerLink | None
    policy: Any
    advice_calibration: Any
    summary: ExecutorSummary
    last_decision: tuple[int, int, list[str]] | None
    entry_id: str | None
    step: BarStep | None
    marks: JournalMarks

    @staticmethod
    def journal_marks(journal: Journal) -> JournalMarks:
        """The journal's marks at start (its stops once it is claimed: :meth:`claimed`)."""
        return JournalMarks(journal.last_time("decisions"), journal.last_time("account"),
                            journal.last_time("bars") is None)

    @property
    def notes(self) -> list[str]:
        """What the run should tell its user (the summary's notes)."""
        return self.summary.notes

    def claimed(self, order_tag: str) -> None:
        """The journal is this run's (``Journal.claim``): the order ids start with ``order_tag``, and the stops it
        holds are made again by the replay."""
        self.order_tag = order_tag
        self.marks.stops = self.journal.stops()

    @property
    def replayed(self) -> bool:
        """The bar being traded is a restart's replay of the journal's."""
        return self.step is not None and self.step.replayed

    def check_feed_end(self, snapshots: Snapshots) -> None:
        """The feed ended: on a restart it must have reached the journal's last bar, where the recovery check is made;
        a feed that ends before it is not the journal's (a UserError: a summary of part of the journal is wrong)."""
        if self.marks.recovery_checked:
            return
        last, seen = self.feed.journaled_to, self.feed.last_seen_ns
        assert last is not None
        if seen is None or seen < last:
            ended = "gave no bar" if seen is None else f"ended at {utc(seen).tz_convert(EASTERN)}"
            raise UserError(f"the feed {ended}, before the journal's last bar at {utc(last).tz_convert(EASTERN)}: it "
                            f"does not hold the bars the journal {self.journal.path} was written from (a shorter or "
                            "another file)", fix="give the feed the journal was written from, whole, or use a new "
                            "--journal file for this feed")
        snapshots.check_seen()
        self.check_recovery()

    def replay_stop(self, replayed: bool, tns: int) -> None:
        """A replayed bar after which the journal holds a stop (Ctrl-C): the stop made again (nothing new written)."""
        if replayed and tns in self.marks.stops:
            self._apply_stop(self.marks.stops[tns])

    def _drop_pending(self, why: str) -> None:
        """An entry decided but never filled: cancelled in the journal (and closed at NinjaTrader)."""
        if self.entry_id is not None:
            if self.link is not None:
                self.link.drop(self.feed.bars.time_ns[-1])
            self.journal.update_order_state(self.entry_id, "cancelled", note=why)
            self.entry_id = None
        self.day.pending = 0

    # ------------------------------------------------------------------ journal
    def _journal_decision(self, tns: int, action: int, codes: list[str], arrived: float) -> None:
        """The decision (probabilities, reason codes: ``veto:<code>``, ``account:<status>``,
        ``window:after_last_entry``) and the entry order it makes."""
        pending = self.day.pending
        if pending:
            oid = order_id(self.order_tag, utc(tns), "entry")
            self.journal.record_order(oid, tns, "entry", "BUY" if pending > 0 else "SELL",
                                      self.broker.qty, state="sent")
            self.entry_id = oid
            if self.link is not None:
                self.link.entry(oid, pending, self.broker.qty, self.feed.bars.close[-1], self.feed.rows.atr[-1],
                                tns)
        latency = (time.perf_counter() - arrived) * 1000.0  # rows written, not yet committed
        assert self.step is not None
        self.step.decided = True
        self.last_decision = (tns, action, codes)
        journaled = self.marks.decisions
        if journaled is not None and tns <= journaled:
            return
        decision = getattr(self.policy, "last_decision", None)  # phase 3: the hybrid agent's Decision
        advice = None
        if decision is None:  # phases 1-2: the numpy forward's distribution, or SB3's when torch decided
            probs = self.policy.last_probs
        else:
            probs = decision.probs
            codes = [f"fusion:{decision.reason}", *codes]
            self.last_decision = (tns, action, codes)
            if decision.advice is not None:
                advice = {"action": ACTION_NAMES[decision.advice.action],
                          "confidence": round(float(decision.advice.confidence), 4),
                          "backend": decision.advice.backend, "trust": round(float(decision.trust), 4)}
                if self.advice_calibration:
                    advice["calibration"] = self.advice_calibration
        self.journal.record_decision(tns, action, {ACTION_NAMES[i]: round(float(p), 6) for i, p in enumerate(probs)},
                                     advice=advice, rule_codes=codes, latency_ms=latency)

    def _journal_fills(self, t: int, tns: int, n_before: int) -> None:
        b = self.core.broker
        new: list[Trade] = b.trades[n_before:]
        if self.entry_id is not None and (b.side or new):
            entry_price = new[0].entry_price if new and new[0].entry_index == t else b.entry
            self.journal.record_fill(self.entry_id, b.qty, entry_price, tns, fill_id=self.entry_id)
            self.journal.update_order_state(self.entry_id, "filled")
            self.entry_id = None
        for trade in new:
            oid = order_id(self.order_tag, utc(tns), f"exit-{trade.exit_reason}")
            self.journal.record_order(oid, tns, "exit", "SELL" if trade.side > 0 else "BUY", trade.contracts,
                                      state="filled", note=trade.exit_reason)
            self.journal.record_fill(oid, trade.contracts, trade.exit_price, tns, fill_id=oid)
            if self.link is not None:
                self.link.exit(trade.exit_reason, tns)

    def _journal_account(self, tns: int) -> None:
        journaled = self.marks.account
        if journaled is not None and tns <= journaled:
            return
        acc, b = self.core.account, self.core.broker
        self.journal.record_account(tns, acc.status.value, {
            "balance": acc.balance, "threshold": acc.threshold, "peak": acc.peak, "equity": self.core.equity_now,
            "position": b.side * (b.qty if b.side else 0),
            "day_pnl": acc.balance - acc.day_start_balance, "verdict": acc.verdict.value,
            "day_limit": None if acc.rules.daily_loss_limit is None else  # the equity that locks the day
            acc.day_start_balance - acc.rules.daily_loss_limit,
            **({} if self.link is None else {"broker_position": self.link.broker_position})})

    def check_recovery(self) -> None:
        """At the first bar after the journal's last one: the rebuilt state must be the journal's."""
        self.marks.recovery_checked = True
        pos = self.journal.position_from_fills()
        have = self.broker.side * (self.broker.qty if self.broker.side else 0)
        if pos.qty != have:
            raise UserError(f"the journal {self.journal.path} holds a position of {pos.qty} but the replay of its "
                            f"bars rebuilt {have}: the journal was written from another feed or config",
                            fix="use a new --journal file for this run and feed")
        last = self.journal.last_account()
        if last is not None and not math.isclose(float(last.snapshot.get("balance", math.nan)),
                                                 self.account.balance, abs_tol=1e-6):
            raise UserError(f"the journal {self.journal.path} ends with a balance of {last.snapshot.get('balance')} "
                            f"but the replay of its bars rebuilt {self.account.balance}",
                            fix="use a new --journal file for this run and feed")
        self.say(f"recovered from {self.journal.path}: {self.summary.recovered_bars} bars replayed, position "
                 f"{have}, balance {self.account.balance:.2f}")

    # ------------------------------------------------------------------ the end
    def stop(self, on_exit: OnExit) -> None:
        """Stop early (Ctrl-C, SIGTERM): ``flatten`` closes an open position at the last close (with NinjaTrader:
        until its position file reads FLAT, else a halt); ``protect`` keeps it. The stop is journaled (an ``errors``
        row of location ``stop``) so that a restart's replay makes it again. (Under the executor's lock.)"""
        self.summary.interrupted = True
        if not self.marks.recovery_checked:  # still replaying: the journal holds more than the state rebuilt so far
            self.notes.append("stopped while replaying the journal's bars: nothing written, the journal is as it "
                              "was")
            self.finish_summary()
            return
        self._journal_stop(on_exit, f"stopped (--on-exit {on_exit})")
        if on_exit == "flatten":
            self._make_flat()
        self.finish_summary()

    def holds_position(self) -> bool:
        """Whether anything is open: the paper position, an entry not yet filled, or NinjaTrader's last position."""
        return bool(self.broker.side) or self.entry_id is not None or (
            self.link is not None and self.link.broker_position != 0)

    def flatten(self, code: str, why: str) -> bool:
        """Flatten now, whatever the bar (the flat guard: ``live.deadline``, code ``flat:*``): the stop path of
        ``--on-exit flatten`` (journaled as a stop, made again by a restart's replay), a ``flat`` row with the
        reason code, and with NinjaTrader CLOSEPOSITION until FLAT. False when nothing was open (or the journal
        is still being replayed). (Under the executor's lock.)"""
        bars = self.feed.bars
        if not self.marks.recovery_checked or not bars.time_ns or not self.holds_position():
            return False
        last = bars.time_ns[-1]
        self.journal.record_error("flat", f"flattened: {why}", last, code=code)
        self.say(f"FLATTEN [{code}]: {why}")
        self._journal_stop("flatten", f"flattened ({code})")
        self._make_flat()
        self.finish_summary()
        return True

    def _journal_stop(self, on_exit: str, what: str) -> None:
        """The stop applied and journaled after the last bar, committed, then its orders written (the journal
        first, then NinjaTrader: CLOSEPOSITION for flatten)."""
        self._apply_stop(on_exit)
        if self.feed.bars.time_ns:
            last = self.feed.bars.time_ns[-1]
            self.journal.record_error("stop", f"{what} after the bar at {utc(last).tz_convert(EASTERN)}", last,
                                      code=f"stop:{on_exit}")
        self.journal.commit()
        if self.link is not None:
            self.link.flush(live=True)

    def _make_flat(self) -> None:
        """With NinjaTrader: its position made FLAT (CLOSEPOSITION re-sent until it is), else a loud halt."""
        if self.link is not None and self.feed.bars.time_ns:
            self.link.make_flat(self.feed.bars.time_ns[-1])
            self.journal.commit()

    def _apply_stop(self, on_exit: str) -> None:
        """What a stop does to the state and the journal: the pending entry cancelled, and with ``flatten`` an open
        position closed at the last close (``MANUAL_EXIT``); made again idempotently (same ids) by a replay."""
        self._drop_pending("stopped before its fill")
        t = self.core.t
        bars = self.feed.bars
        if on_exit == "flatten" and self.broker.side and t >= 0:
            n_before = len(self.broker.trades)
            trade, cash = self.broker.close_at_bar_close(t, bars.close[t], EXIT_MANUAL)
            self.account.book(t, cash, trade.net_pnl)
            self._journal_fills(t, bars.time_ns[t], n_before)
            self._journal_account(bars.time_ns[t])
        elif self.broker.side and not self.replayed:
            self.notes.append("stopped with an open position, left protected by its stop and target "
                              "(--on-exit protect)")

    def finish_summary(self) -> None:
        """The summary's totals and notes from the state now."""
        s = self.summary
        s.trades = len(self.broker.trades)
        s.net_pnl = float(sum(tr.net_pnl for tr in self.broker.trades))
        s.balance = float(self.account.balance)
        s.account_status = self.account.status.value
        if isinstance(self.policy, AdvisedPolicy) and self.policy.asynchronous:
            notice = self.policy.advisor.health.rl_only_notice()
            if notice and notice not in self.notes:
                self.notes.append(notice)
        halted = f"new entries halted ({self.link.halted}): see the journal's errors table" if self.link else ""
        if self.link is not None and self.link.halted and halted not in self.notes:
            s.halted = self.link.halted
            self.notes.append(halted)
        breached = "the account breached its trailing threshold: trading halted"
        if self.account.status is AccountStatus.BREACHED and breached not in self.notes:
            self.notes.append(breached)
        note = consistency_note(self.account)
        if note and note not in self.notes:
            self.notes.append(note)
