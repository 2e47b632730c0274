"""The live point: which of the executor's accepted bars are traded.

An accepted bar that ends at or before the live point (``--live-from``) is history (reason ``history``): it warms
the features and nothing else. With ``max_bar_age_s`` (a followed feed) the wall clock judges each new bar: one
from the future is refused (``future``); one whose end is older than that when it arrives is ``late`` (its fills,
stops and window end are processed, no decision is made on it). A restart takes these verdicts from the journal
(the clock no longer says them).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from hybrid_trader.errors import UserError
from hybrid_trader.live.bar_gate import CODE_FUTURE, CODE_HISTORY, CODE_LATE, BarGate, Rejection
from hybrid_trader.live.feeds import Bar
from hybrid_trader.live.journal import Journal

Held = tuple[str, str | None]
"""Why an accepted bar is not traded: its reason code and message."""


class LivePoint:
    """The live point and the wall clock's rules of one executor, with the journal's verdicts for its bars."""

    def __init__(self, journal: Journal, live_from: pd.Timestamp | int | None, max_bar_age_s: float | None,
                 clock: Callable[[], float], bar_minutes: int) -> None:
        if max_bar_age_s is not None and not (math.isfinite(max_bar_age_s) and max_bar_age_s > 0):
            raise UserError(f"--max-bar-age {max_bar_age_s}: a positive number of seconds", value=max_bar_age_s,
                            fix=f"e.g. --max-bar-age {90 * bar_minutes} (1.5 bars)")
        self.from_ns = None if live_from is None else int(pd.Timestamp(live_from).value)
        self.max_bar_age_s = max_bar_age_s
        self.clock = clock
        self._bar_ns = bar_minutes * 60_000_000_000
        # the journal's verdicts for its bars (a restart replays them), and whether it went live
        self._history_to = journal.last_bar_time(reason=CODE_HISTORY)
        last_accepted = journal.last_bar_time()
        self._went_live = last_accepted is not None and (self._history_to is None or last_accepted > self._history_to)
        self._late_ns = journal.bar_times(CODE_LATE)
        self._future = journal.refused_keys(reason=CODE_FUTURE)
        """The bars refused as from the future, by time and prices: the real bar of that time may come later."""

    def now(self, replayed: bool) -> float | None:
        """The wall clock judging a followed feed's new bar (None: a replayed bar, or no wall-clock rules)."""
        return None if replayed or self.max_bar_age_s is None else self.clock()

    def check(self, gate: BarGate, bar: Bar, tns: int | None, replayed: bool, now: float | None) -> Rejection | None:
        """The gate's verdict; a replayed bar refused as from the future when it arrived is refused again."""
        if replayed and bar.key in self._future:
            return Rejection(bar, CODE_FUTURE, "refused from the future when it arrived")
        return gate.check(bar, now)

    def held(self, gate: BarGate, bar: Bar, tns: int, replayed: bool, now: float | None) -> Held | None:
        """Why an accepted bar is not traded: ``(history, None)`` before the live point, ``(late, message)`` when
        it ended more than ``max_bar_age_s`` before it arrived; None: traded. A replayed bar keeps its journal's."""
        if replayed:
            if self._history_to is not None and tns <= self._history_to:
                return CODE_HISTORY, None
            return (CODE_LATE, None) if tns in self._late_ns else None
        if not self._went_live:
            if self.from_ns is not None and tns + self._bar_ns <= self.from_ns:
                return CODE_HISTORY, None
            self._went_live = True
        late = None if now is None else gate.late(bar, now)
        return None if late is None else (late.code, late.message)
