"""The validated bar container every other part of the system reads.

``Bars.frame`` is a pandas DataFrame indexed by a tz-aware ``DatetimeIndex`` in
US/Eastern (``America/New_York``), each bar stamped at its start, strictly increasing,
with float64 columns ``open, high, low, close, volume``. The numpy views below are
what the hot loop uses; pandas is never touched inside ``env.step()``.

Sessions follow CME Globex: a trading day runs from 18:00 ET on the previous calendar
day to 17:00 ET, so a bar's *trading date* is the calendar date of (ET time + 6 h).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

EASTERN = "America/New_York"
OHLCV = ("open", "high", "low", "close", "volume")
SESSION_ROLL_HOURS = 6
"""Bars at or after 18:00 ET belong to the next calendar day's session."""


@dataclass(eq=False)
class Bars:
    """Validated OHLCV bars of one market.

    Build with :func:`hybrid_trader.data.load_bars` (from a file) or
    :func:`hybrid_trader.data.synthetic.generate_bars` (built-in market).
    """

    frame: pd.DataFrame
    """Index: tz-aware ET timestamps (bar start); columns open, high, low, close, volume (float64)."""
    market: str = "NQ"
    """Root symbol of the contract these bars price (see ``hybrid_trader.markets``)."""
    bar_minutes: int = 1
    """Bar size in minutes (inferred from the data when loaded)."""
    source: str = "<memory>"
    """Where the bars came from: a file path or ``synthetic:...``."""
    notes: list[str] = field(default_factory=list)
    """What loading did: repairs, shifts, drops, each with its reason."""

    def __post_init__(self) -> None:
        idx = self.frame.index
        if not isinstance(idx, pd.DatetimeIndex) or idx.tz is None:
            raise ValueError("Bars.frame needs a tz-aware DatetimeIndex")
        if str(idx.tz) != EASTERN:
            self.frame = self.frame.tz_convert(EASTERN)
        missing = [c for c in OHLCV if c not in self.frame.columns]
        if missing:
            raise ValueError(f"Bars.frame lacks columns {missing}")
        self.frame = self.frame[list(OHLCV)].astype("float64")

    def __len__(self) -> int:
        return len(self.frame)

    # ---- numpy views for the hot loop -------------------------------------------
    @cached_property
    def open(self) -> np.ndarray:
        return self.frame["open"].to_numpy(np.float64)

    @cached_property
    def high(self) -> np.ndarray:
        return self.frame["high"].to_numpy(np.float64)

    @cached_property
    def low(self) -> np.ndarray:
        return self.frame["low"].to_numpy(np.float64)

    @cached_property
    def close(self) -> np.ndarray:
        return self.frame["close"].to_numpy(np.float64)

    @cached_property
    def volume(self) -> np.ndarray:
        return self.frame["volume"].to_numpy(np.float64)

    @cached_property
    def py_times(self) -> list:
        """Each bar's start as a tz-aware ``datetime`` (ET), built once: boxing a pandas
        ``Timestamp`` per lookup costs ~50 us, which the phase 3 advisor would pay per query."""
        return list(self.frame.index.to_pydatetime())

    @cached_property
    def minute_of_day(self) -> np.ndarray:
        """Minutes since midnight ET of each bar's start (int32)."""
        idx = self.frame.index
        return (idx.hour * 60 + idx.minute).to_numpy(np.int32)

    @cached_property
    def trading_date(self) -> np.ndarray:
        """Globex trading date of each bar (datetime64[D])."""
        idx = self.frame.index.tz_localize(None) + pd.Timedelta(hours=SESSION_ROLL_HOURS)
        return idx.normalize().to_numpy().astype("datetime64[D]")

    @cached_property
    def session_id(self) -> np.ndarray:
        """0-based index of each bar's trading date among all trading dates (int32)."""
        td = self.trading_date
        change = np.empty(len(td), dtype=bool)
        if len(td):
            change[0] = True
            change[1:] = td[1:] != td[:-1]
        return (np.cumsum(change) - 1).astype(np.int32)

    @cached_property
    def session_bounds(self) -> np.ndarray:
        """``(n_sessions, 2)`` int64 array of [first, last] bar index of each session."""
        sid = self.session_id
        if len(sid) == 0:
            return np.zeros((0, 2), dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
        ends = np.r_[starts[1:] - 1, len(sid) - 1]
        return np.stack([starts, ends], axis=1).astype(np.int64)

    @cached_property
    def session_dates(self) -> np.ndarray:
        """Trading date of each session (datetime64[D])."""
        return self.trading_date[self.session_bounds[:, 0]] if len(self) else np.array([], "datetime64[D]")

    @property
    def n_sessions(self) -> int:
        return int(self.session_bounds.shape[0])

    def slice_sessions(self, first: int, last: int) -> "Bars":
        """Bars of sessions ``first..last`` inclusive (a new ``Bars``)."""
        b = self.session_bounds
        lo, hi = int(b[first, 0]), int(b[last, 1])
        return Bars(self.frame.iloc[lo : hi + 1].copy(), self.market, self.bar_minutes, self.source, list(self.notes))
