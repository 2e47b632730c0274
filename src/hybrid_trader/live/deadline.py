"""Flat by the deadline, whatever happens: a wall-clock guard beside the bar loop.

The bar loop closes a position at its window's last bar (``SESSION_END``); that bar may never come (a stalled
feed, a feed that ends, an early close, a holiday's missing bars). :class:`FlatGuard` does not wait for a bar:

* **the flat-by time** (the rules' ``flat_by``, Apex 16:59 ET, or an earlier ``env.trade_end``) of the last bar's
  trading date, judged by the wall clock every ``poll_s`` seconds on its own thread (bars more than
  :data:`IN_SYNC_S` older than the clock are a simulation: not judged). It is the end of the day's window, the
  one the bar loop and the backtest use (:meth:`DayWindow.end_on`): on the ``env.calendar``'s early closes
  (``exchange_calendars``' CME equity calendar ``CMES`` by default) it moves before the close by the margin kept
  before the regular 17:00 ET close (Apex: 1 minute; 2024-11-29 closes 13:00 ET, flat by 12:59);
* **a stalled feed** (``stall_after_s``): no bar for that long while a position is open;
* **the feed's end** (a replay done, a follow feed's ``--idle-exit``), **SIGTERM** (the CLI) and **any exception**
  escaping the loop (flattened, then re-raised): :meth:`FlatGuard.run` and the CLI.

Each flattens with the executor's own stop path (:meth:`Executor.flatten`: the paper position closed at the last
close, ``MANUAL_EXIT``, journaled as a stop so that a restart's replay makes it again), and with NinjaTrader a
CLOSEPOSITION retried until NinjaTrader's position file reads FLAT, else a loud halt
(:meth:`BrokerLink.make_flat`, ``broker:flat_failed``). A journaled CLOSEPOSITION never written (a kill between the
journal's commit and the file) is written once by the restart (``BrokerLink``).

**Threads.** The guard's actions and :meth:`Executor.on_bar` run under the executor's one lock
(``Executor.lock``), so they never interleave. The journal keeps one writer (this process) and one SQLite
connection, opened usable from both threads (``check_same_thread=False``) and only ever used under that lock.

The wall-clock deadline is for a live (followed) feed: a replay's bars are not of today, so its windows end by its
bars as ``evaluate``'s do, and only the feed's end, SIGTERM and exceptions flatten it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hybrid_trader.calendar import EASTERN, SESSION_ROLL, trading_date
from hybrid_trader.errors import UserError

if TYPE_CHECKING:
    from hybrid_trader.env.day_window import DayWindow
    from hybrid_trader.live.executor import Executor, ExecutorSummary
    from hybrid_trader.live.feeds import Bar

CODE_DEADLINE = "flat:deadline"
CODE_STALL = "flat:stall"
CODE_FEED_END = "flat:feed_end"
CODE_SIGTERM = "flat:sigterm"
CODE_EXCEPTION = "flat:exception"
IN_SYNC_S = 4 * 86_400.0
"""The wall clock judges the flat-by time of a position held on bars at most this old (a weekend and a holiday);
older bars are an old file followed as if live (a simulation): the clock says nothing about them."""
FLAT = "flat"
"""``errors.location`` of the rows that say why a position was flattened (codes ``flat:*``)."""


def flat_by_time(trading_date: Any, window: DayWindow) -> pd.Timestamp:
    """The wall-clock deadline (UTC) of a trading date: its window's end (:meth:`DayWindow.end_on`: the rules'
    flat-by time or an earlier trade_end, moved before the calendar's early close)."""
    day = pd.Timestamp(trading_date).normalize().tz_localize(None)
    end = window.end_on(np.datetime64(day.date(), "D"))
    wall = day - SESSION_ROLL + pd.Timedelta(minutes=end)  # ET wall clock (the session opens 18:00 before)
    return wall.tz_localize(EASTERN, ambiguous=False, nonexistent="shift_forward").tz_convert("UTC")


def _trading_day(utc_ns: int) -> pd.Timestamp:
    """The trading date (a session opening 18:00 ET belongs to the next day) of a bar's start, in ns since the
    epoch (:func:`hybrid_trader.calendar.trading_date`)."""
    return pd.Timestamp(trading_date(pd.DatetimeIndex([pd.Timestamp(int(utc_ns), tz="UTC")]))[0])


class FlatGuard:
    """Flatten ``executor``'s position at the flat-by time and on a stalled feed, on its own thread.

    ``clock``: wall-clock seconds (tests inject one); ``deadline``: judge the flat-by time by it (a followed feed;
    off for a replay); ``stall_after_s``: flatten after that long without a bar while a position is open (None:
    off); ``poll_s``: how often the thread looks. The feed's end and exceptions: :meth:`run`.
    """

    def __init__(self, executor: Executor, *, clock: Callable[[], float] = time.time, deadline: bool = True,
                 stall_after_s: float | None = None, poll_s: float = 0.5) -> None:
        if stall_after_s is not None and not stall_after_s > 0:
            raise UserError(f"--stall-after {stall_after_s}: a positive number of seconds", value=stall_after_s,
                            fix="e.g. --stall-after 180 (three 1-minute bars), or drop it")
        self.executor = executor
        self.clock = clock
        self.deadline = deadline
        self.stall_after_s = stall_after_s
        self.poll_s = float(poll_s)
        self._last_bar = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired: list[str] = []
        """The reason codes of the flattens made, in order."""
        self.error: BaseException | None = None
        """An exception the thread's flatten raised (re-raised by :meth:`run` in the loop's thread)."""

    def deadline_of(self, bar_ns: int) -> pd.Timestamp:
        """The flat-by time (UTC) of the trading date of the bar at ``bar_ns`` (the position's session: past 18:00
        ET the clock is in the next trading date, but today's position is still late)."""
        return flat_by_time(_trading_day(bar_ns), self.executor.window)

    def bar_arrived(self) -> None:
        """A bar came (the stall clock restarts)."""
        self._last_bar = self.clock()

    def check(self) -> str | None:
        """One look (the thread's, every ``poll_s``): flatten if the flat-by time passed or the feed stalled with a
        position open; the reason code acted on, or None."""
        ex = self.executor
        with ex.lock:
            if not ex.holds_position():
                return None
            now = self.clock()
            code = why = None
            last = ex.bars.time_ns[-1] if ex.bars.time_ns else None
            due = None if not self.deadline or last is None else self.deadline_of(last)
            if due is not None and now >= due.timestamp() and now - (last or 0) / 1e9 <= IN_SYNC_S:
                code = CODE_DEADLINE
                why = f"the flat-by time {due.tz_convert(EASTERN):%Y-%m-%d %H:%M %Z} passed"
            elif self.stall_after_s is not None and now - self._last_bar >= self.stall_after_s:
                code = CODE_STALL
                why = f"no bar for {now - self._last_bar:.0f} s (--stall-after {self.stall_after_s:g})"
            if code is None:
                return None
            self.flatten(code, why or code)
            return code

    def flatten(self, code: str, why: str) -> None:
        """Flatten now (the executor's stop path), remembering the reason code."""
        with self.executor.lock:
            if self.executor.flatten(code, why):
                self.fired.append(code)

    # ------------------------------------------------------------------ the thread and the loop
    def start(self) -> FlatGuard:
        self._thread = threading.Thread(target=self._watch, name="flat-guard", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check()
            except BaseException as err:  # said now (a followed feed may wait long); the loop's thread re-raises it
                print(f"error: the flat guard could not flatten ({type(err).__name__}: {err}); check the position "
                      "by hand", file=sys.stderr, flush=True)
                self.error = err
                return

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30.0)
        self._thread = None

    def run(self, feed: Iterable[Bar], on_bar: Callable[[Executor], None] | None = None) -> ExecutorSummary:
        """The executor's loop with the guard: flat at the feed's end; an exception escaping the loop flattens, then
        propagates (KeyboardInterrupt/SIGTERM: the caller's :meth:`Executor.stop`)."""
        def bars() -> Iterable[Bar]:
            for bar in feed:
                if self.error is not None:
                    raise self.error
                yield bar
                self.bar_arrived()
        self.executor.commit_when_idle(feed)  # the wrapper below hides the feed from the executor
        try:
            summary = self.executor.run_feed(bars(), on_bar)
        except Exception as err:
            try:
                self.flatten(CODE_EXCEPTION, f"{type(err).__name__}: {err}")
            except Exception as second:  # the first error is the one to see; the second is noted with it
                err.add_note(f"flattening after it failed too: {second}")
            raise
        with self.executor.lock:
            self.flatten(CODE_FEED_END, "the feed ended")
            self.executor.journal.commit()
        return summary
