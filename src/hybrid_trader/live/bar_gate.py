"""The gate every arriving bar passes: ``data check``'s one-row rules and the stream's own.

:class:`BarGate` checks each arriving bar with ``data check``'s one-row rules (the
``data.checks.CHECKS`` table itself, and the tick grid of ``data.validate``) and the
stream's own rules (duplicate, out of order, from the future by the wall clock). A bad
bar comes back as a :class:`Rejection` with a reason code and a message, never as an
exception. A late bar (:meth:`BarGate.late`) is not refused: the executor warms its
features on it and does not trade it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.calendar import EASTERN
from hybrid_trader.data.bars import Bars
from hybrid_trader.data.checks import CHECKS, PRICES, Check, Rows
from hybrid_trader.data.validate import off_grid_mask
from hybrid_trader.live.feeds import Bar, _num
from hybrid_trader.markets import CONTRACTS


@dataclass(frozen=True)
class Rejection:
    """A bar the gate refused: the ``data check`` code (or a stream rule's) and what is wrong."""

    bar: Bar
    code: str
    message: str


ROW_CHECK_CODES = ("bad-timestamp", "nonexistent-time", "bad-price", "bad-volume", "non-positive-price",
                   "negative-volume", "high-below-low", "open-close-outside")
"""The checks of ``data.checks.CHECKS`` that apply to one bar, in the table's order."""
_ROW_CHECKS: tuple[Check, ...] = tuple(c for c in CHECKS if c.code in ROW_CHECK_CODES)
CODE_LATE = "late"
"""An accepted bar that ended more than ``BarGate.late_after_s`` before it arrived: not traded."""
CODE_FUTURE = "future"
"""A refused bar that ends later than the wall clock (plus ``BarGate.ahead_s``): the clock is not in sync."""
CODE_HISTORY = "history"
"""An accepted bar before the executor's live point: it warms the features and is never traded."""
STREAM_CODES = ("duplicate-timestamp", "out-of-order", CODE_FUTURE, "off-tick-grid")
FUTURE_TOLERANCE_S = 5.0
"""Seconds a bar's end may lie ahead of the wall clock (two clocks that differ a little) before it is refused."""


def _rows(bar: Bar) -> Rows:
    """One bar as the one-row :class:`Rows` the check table reads."""
    ts = np.array([np.datetime64("NaT", "ns") if bar.time is None else np.datetime64(bar.time_ns, "ns")])
    return Rows(
        ts=ts,
        nonexistent=np.array([bar.nonexistent]),
        raw_ts=np.array([bar.time_text or bar.raw or str(bar.time)], dtype=object),
        raw={c: np.array([v], dtype=object) for c, v in bar.values().items()},
        num={c: np.array([_num(v)]) for c, v in bar.values().items()},
        line=np.array([bar.line or 0], dtype=np.int64),
    )


def _plainly_valid(bar: Bar) -> bool:
    """True when no row check can reject ``bar``: a readable, existing time, float prices with
    ``0 < low <= open, close <= high < inf`` and a finite volume >= 0 (NaN fails every comparison)."""
    o, h, lo, c, v = bar.open, bar.high, bar.low, bar.close, bar.volume
    return (bar.time is not None and not bar.nonexistent
            and all(type(x) is float for x in (o, h, lo, c, v))
            and 0.0 < lo <= o <= h < math.inf and lo <= c <= h and 0.0 <= v < math.inf)


@dataclass
class BarGate:
    """Accepts or rejects each arriving bar; never raises on a bad bar.

    ``tick_size`` (from ``market`` by default) enables the tick-grid rule; set
    ``check_tick_grid=False`` for back-adjusted data (``data check``'s ``tick-grid`` note,
    which :meth:`for_bars` reads). The wall-clock rules (live feeds; a replay's bars are
    history): :meth:`check` given ``now`` refuses a bar whose end lies more than ``ahead_s``
    after it (``future``: the clock is not in sync with the bars); :meth:`late` says when a
    bar's end is more than ``late_after_s`` seconds older than ``now`` (``late``).
    """

    market: str | None = None
    bar_minutes: int = 1
    check_tick_grid: bool = True
    late_after_s: float | None = None
    tick_size: float | None = None
    ahead_s: float = FUTURE_TOLERANCE_S
    last_time_ns: int | None = None
    """Time of the last accepted bar (restored from the journal on restart)."""
    counts: dict[str, int] = field(default_factory=dict)
    """Rejections by code."""

    def __post_init__(self) -> None:
        if self.tick_size is None and self.market is not None:
            spec = CONTRACTS.get(str(self.market).strip().upper())
            self.tick_size = spec.tick_size if spec is not None else None

    @classmethod
    def for_bars(cls, bars: Bars, **kw: Any) -> BarGate:
        """A gate for bars like these: their market, bar size, and no tick-grid rule when they are off it."""
        off_grid = any(getattr(f, "code", None) == "tick-grid" for f in bars.findings)
        return cls(market=bars.market, bar_minutes=bars.bar_minutes, check_tick_grid=not off_grid, **kw)

    def check(self, bar: Bar, now: float | None = None) -> Rejection | None:
        """None when the bar is accepted (and becomes the last bar), else the rejection; ``now`` (the wall clock,
        s since the epoch) also refuses a bar from the future."""
        rejection = self._row_rules(bar) or self._stream_rules(bar, now)
        if rejection is not None:
            self.counts[rejection.code] = self.counts.get(rejection.code, 0) + 1
            return rejection
        self.last_time_ns = bar.time_ns
        return None

    def _row_rules(self, bar: Bar) -> Rejection | None:
        if _plainly_valid(bar):  # none of the row checks can hit: skip building their one-row table
            return None
        rows = _rows(bar)
        where = f"line {bar.line}" if bar.line else (str(bar.time) if bar.time is not None else "bar")
        for chk in _ROW_CHECKS:
            hits = chk.find(rows)
            if hits is not None:
                problem = chk.problem(rows, hits, lambda line: f"line {line}")
                return Rejection(bar, chk.code, f"{where}: {problem} (column {hits.column}, value {hits.value!r})")
        return None

    def late(self, bar: Bar, now: float) -> Rejection | None:
        """The ``late`` verdict of an accepted bar whose end is more than ``late_after_s`` seconds before ``now``
        (None: in time, or no ``late_after_s``); a verdict, not a refusal: the bar stays in the stream."""
        if self.late_after_s is None or bar.time_ns is None:
            return None
        age = now - (bar.time_ns / 1e9 + 60.0 * self.bar_minutes)
        if age <= self.late_after_s:
            return None
        return Rejection(bar, CODE_LATE, f"{bar.time}: the bar ended {age:.0f} s before it arrived (more than "
                         f"--max-bar-age {self.late_after_s:g} s): too old to trade on")

    def _stream_rules(self, bar: Bar, now: float | None) -> Rejection | None:
        t = bar.time_ns
        assert t is not None and bar.time is not None  # bad-timestamp was rejected above
        last = self.last_time_ns
        if last is not None and t == last:
            return Rejection(bar, "duplicate-timestamp", f"{bar.time}: the bar repeats the last accepted bar's time")
        if last is not None and t < last:
            return Rejection(bar, "out-of-order", f"{bar.time}: earlier than the last accepted bar "
                             f"({pd.Timestamp(last, tz='UTC').tz_convert(EASTERN)})")
        if now is not None:
            ahead = t / 1e9 + 60.0 * self.bar_minutes - now
            if ahead > self.ahead_s:
                clock = pd.Timestamp(now, unit="s", tz="UTC").tz_convert(EASTERN).strftime("%Y-%m-%d %H:%M:%S")
                return Rejection(bar, CODE_FUTURE, f"{bar.time}: the bar ends {ahead:.0f} s after this computer's "
                                 f"clock ({clock} ET): the clock is not in sync with the bars, or the feed's time "
                                 "zone (--tz, --time-shift) or stamps (the bar's end, not its start) are not the "
                                 "file's; no order is sent for it")
        if self.check_tick_grid and self.tick_size:
            px = np.array([[bar.open, bar.high, bar.low, bar.close]], dtype=np.float64)
            off = off_grid_mask(px, self.tick_size)[0]
            if off.any():
                col = PRICES[int(np.argmax(off))]
                return Rejection(bar, "off-tick-grid", f"{bar.time}: {col} {getattr(bar, col):g} is off the "
                                 f"{self.market} {self.tick_size:g} tick grid")
        return None


__all__ = ["CODE_FUTURE", "CODE_HISTORY", "CODE_LATE", "BarGate", "Rejection"]
