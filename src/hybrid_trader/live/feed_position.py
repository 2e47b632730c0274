"""The executor's position in its feed: the bars so far, their features, the gate and the live point.

Each arriving bar (:meth:`FeedPosition.accept`) is judged (a bar the restored snapshot holds is skipped; the gate and
the live point refuse or hold it, ``live.live_point``), journaled (a new one; a replayed one is the journal's
already), counted in the summary, and pushed to the bars so far (``data.bars_so_far.BarsSoFar``) and their
incremental features (``features.incremental``, rows in ``features.features_so_far.FeaturesSoFar``). What follows
(the decision, its orders) is the trading's (``live.executor_trading``), given the accepted bar as a :class:`BarStep`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from hybrid_trader.calendar import EASTERN
from hybrid_trader.data.bars_so_far import BarsSoFar
from hybrid_trader.env.core import CoreSeries
from hybrid_trader.errors import UserError
from hybrid_trader.features.features_so_far import FeaturesSoFar
from hybrid_trader.features.incremental import IncrementalFeatures
from hybrid_trader.live.bar_gate import CODE_HISTORY, BarGate
from hybrid_trader.live.executor_parts import ExecutorSummary
from hybrid_trader.live.feeds import Bar
from hybrid_trader.live.journal import Journal
from hybrid_trader.live.journal_tx import CommitBatch
from hybrid_trader.live.live_point import Held, LivePoint

if TYPE_CHECKING:
    from hybrid_trader.live.snapshot import Snapshots


@dataclass(slots=True)
class BarStep:
    """An accepted bar on its way through the executor."""

    bar: Bar
    tns: int
    """Its time (ns, UTC)."""
    t: int
    """Its index in the bars so far."""
    arrived: float
    """``time.perf_counter()`` when it arrived (the decision's latency starts there)."""
    replayed: bool
    """A bar the journal holds already (a restart's replay: nothing of it is written again)."""
    held: Held | None
    """Why it is not traded (``LivePoint.held``: history, late); None: traded."""
    rebind: bool
    """The feature rows' matrices were reallocated: the observation builder must read the new ones."""
    checked: bool = False
    """NinjaTrader's events were read for it (a history bar's never are: the link is first read at the live
    point)."""
    decided: bool = False
    """A decision was made on it (its latency is kept)."""

    @property
    def history(self) -> bool:
        return self.held is not None and self.held[0] == CODE_HISTORY


class FeedPosition:
    """Where the executor is in its feed: the accepted bars and their features so far, the gate and the live point,
    the journal's batch of bar rows and the restart's marker (the journal's last bar: bars up to it are replayed)."""

    def __init__(self, journal: Journal, summary: ExecutorSummary, live_point: LivePoint, symbol: str,
                 bar_minutes: int, raw_keys: tuple[str, ...]) -> None:
        self.journal = journal
        self.summary = summary
        self.live_point = live_point
        """Which accepted bars are traded (history, late, future: ``live.live_point``)."""
        self.bars = BarsSoFar(symbol, bar_minutes)
        """The accepted bars so far (``Bars``' attributes)."""
        self.rows = FeaturesSoFar(raw_keys=raw_keys)
        """Their features (``FeatureSet``'s attributes; ``raw``: what an asynchronous advisor's contexts read)."""
        self.features: IncrementalFeatures | None = None
        self.gate: BarGate | None = None
        self.batch = CommitBatch(journal)
        """The journal's rows of untraded bars, committed together."""
        self.journaled_to = journal.last_bar_time()
        """The journal's last accepted bar (a restart: the bars up to it are replayed, not written again)."""
        self._refused_after = journal.refused_keys(after_ns=self.journaled_to)
        """The journal's refused bars stamped after its last accepted one, by time and prices: replayed (refused
        again, not written again) when the feed gives them, while the bars the feed gives after the last accepted
        one are new, whatever time a refused bar (one from the future) was stamped with."""
        self.last_seen_ns: int | None = None
        """The latest bar time the feed gave (the snapshot's skipped bars included)."""

    def series(self) -> CoreSeries:
        """What the trading core reads per bar: the bars so far and their feature rows."""
        b, r = self.bars, self.rows
        return CoreSeries(b.open, b.high, b.low, b.close, r.atr, r.windows, r.llm_market)

    def resume(self, features: IncrementalFeatures, gate: BarGate, bars: BarsSoFar, rows: FeaturesSoFar) -> None:
        """Continue from a snapshot's features, gate, bars and feature rows (the gate judging late bars by this
        command's ``--max-bar-age``)."""
        self.features, self.gate, self.bars, self.rows = features, gate, bars, rows
        gate.late_after_s = self.live_point.max_bar_age_s

    def accept(self, bar: Bar, snapshots: Snapshots) -> BarStep | None:
        """Judge, journal, count and push an arriving ``bar``; the accepted bar's step, or None (a bar the restored
        snapshot holds; a refused one, journaled with its reason code)."""
        arrived = time.perf_counter()
        tns = bar.time_ns
        if tns is not None and (self.last_seen_ns is None or tns > self.last_seen_ns):
            self.last_seen_ns = tns
        if snapshots.skip(bar):  # a bar the restored snapshot holds
            return None
        if self.features is None:
            b = self.bars
            self.features = IncrementalFeatures(b.market, b.bar_minutes)
            self.gate = BarGate(market=b.market, bar_minutes=b.bar_minutes, check_tick_grid=False,
                                late_after_s=self.live_point.max_bar_age_s)
        gate = self.gate
        assert gate is not None
        self.batch.begin(arrived)  # committed after a traded bar, or every BATCH_BARS / BATCH_S of the others
        replayed = tns is not None and ((self.journaled_to is not None and tns <= self.journaled_to)
                                        or bar.key in self._refused_after)
        point = self.live_point
        now = point.now(replayed)
        rejection = point.check(gate, bar, tns, replayed, now)
        if rejection is not None:
            self.summary.rejected += 1
            if not replayed:
                self.journal.record_bar(bar.time, (bar.open, bar.high, bar.low, bar.close, bar.volume),
                                        accepted=False, reason=rejection.code, message=rejection.message,
                                        raw=bar.raw)
            self.batch.bar_done(False, arrived)
            return None
        assert tns is not None and bar.time is not None
        if replayed:
            self._check_replayed(bar, tns)
        held = point.held(gate, bar, tns, replayed, now)
        self._count(bar, tns, replayed, held)
        row = self.features.append(tns, bar.open, bar.high, bar.low, bar.close, bar.volume)
        self.bars.push(tns, bar.open, bar.high, bar.low, bar.close, bar.volume)
        rebind = self.rows.push(row)
        step = BarStep(bar, tns, row.index, arrived, replayed, held, rebind)
        step.checked = step.history  # history: NinjaTrader is first read at the live point
        return step

    def _check_replayed(self, bar: Bar, tns: int) -> None:
        """A restart's replayed bar must be the journal's (where it holds one), and no bar the journal accepted may be
        missing before it: else the feed is not the one the journal was written from (rotated, revised or cut while
        the run was down) and the replay would rebuild another history than the one traded (a UserError naming the
        bar)."""
        journal = self.journal
        times = self.bars.time_ns
        missing = journal.first_accepted_between(times[-1] if times else None, tns)
        prices = journal.accepted_prices(tns)
        got = (bar.open, bar.high, bar.low, bar.close)
        if missing is None and prices in (None, got):  # (None: a row the journal lost; the feed still has the bar)
            return
        when = pd.Timestamp(missing if missing is not None else tns, tz="UTC").tz_convert(EASTERN)
        what = (f"the journal's bar at {when} is missing from the feed" if missing is not None else
                f"the feed's bar at {when} {got} is not the journal's {prices}")
        raise UserError(f"{what}: the feed does not hold the bars the journal {journal.path} was written from (a file "
                        "rotated, revised or cut while the run was down)", fix="give the feed the journal was written "
                        "from, whole (for a rotated export, the old file's bars first), or use a new --journal file")

    def _count(self, bar: Bar, tns: int, replayed: bool, held: Held | None) -> None:
        """An accepted bar journaled (a new one) and counted, with why it is not traded (``held``)."""
        summary = self.summary
        if not replayed:
            self.journal.record_bar(tns, (bar.open, bar.high, bar.low, bar.close, bar.volume),
                                    reason=None if held is None else held[0], message=None if held is None else held[1])
        else:
            summary.recovered_bars += 1
        summary.bars += 1
        if held is not None:
            if held[0] == CODE_HISTORY:
                summary.history_bars += 1
            else:
                summary.late_bars += 1
