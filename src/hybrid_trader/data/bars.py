"""The validated bar container every other part of the system reads.

``Bars.frame`` is a pandas DataFrame indexed by a tz-aware ``DatetimeIndex`` in
US/Eastern (``America/New_York``), each bar stamped at its start, strictly increasing,
with float64 columns ``open, high, low, close, volume``. The numpy views below are
what the hot loop uses; pandas is never touched inside ``env.step()``.

Sessions follow CME Globex: a trading day runs from 18:00 ET on the previous calendar
day to 17:00 ET, so a bar's *trading date* is the calendar date of (ET time + 6 h)
(:mod:`hybrid_trader.calendar`).

What loading found and did is in ``findings`` (typed notes, warnings and repairs,
:mod:`hybrid_trader.data.findings`); ``notes`` is their text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from hybrid_trader import calendar
from hybrid_trader.calendar import EASTERN
from hybrid_trader.data.findings import AnyFinding, DataFinding, Repair, finding_lines

__all__ = ["Bars", "EASTERN", "OHLCV"]

OHLCV = ("open", "high", "low", "close", "volume")


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
    findings: list[AnyFinding] = field(default_factory=list)
    """What loading found and did, in order: notes, warnings and repairs (typed records)."""

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

    # ---- what loading found ---------------------------------------------------------
    @property
    def notes(self) -> list[str]:
        """The findings as text lines (a repair's header, then one line per listed row)."""
        return finding_lines(self.findings)

    @property
    def repairs(self) -> list[Repair]:
        """The repairs (dropped or repaired rows), in the order the checks ran."""
        return [f for f in self.findings if isinstance(f, Repair)]

    @property
    def warnings(self) -> list[DataFinding]:
        """Findings of level ``warning`` (the data probably need an option)."""
        return [f for f in self.findings if isinstance(f, DataFinding) and f.level == "warning"]

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
        return calendar.minute_of_day(self.frame.index)

    @cached_property
    def trading_date(self) -> np.ndarray:
        """Globex trading date of each bar (datetime64[D])."""
        return calendar.trading_date(self.frame.index)

    @cached_property
    def session_id(self) -> np.ndarray:
        """0-based index of each bar's trading date among all trading dates (int32)."""
        return calendar.session_ids(self.trading_date)

    @cached_property
    def session_bounds(self) -> np.ndarray:
        """``(n_sessions, 2)`` int64 array of [first, last] bar index of each session."""
        return calendar.session_bounds(self.session_id)

    @cached_property
    def session_high(self) -> np.ndarray:
        """Highest high of each bar's session up to and including the bar (causal)."""
        return pd.Series(self.high).groupby(self.session_id).cummax().to_numpy(np.float64)

    @cached_property
    def session_low(self) -> np.ndarray:
        """Lowest low of each bar's session up to and including the bar (causal)."""
        return pd.Series(self.low).groupby(self.session_id).cummin().to_numpy(np.float64)

    @cached_property
    def session_dates(self) -> np.ndarray:
        """Trading date of each session (datetime64[D])."""
        return self.trading_date[self.session_bounds[:, 0]] if len(self) else np.array([], "datetime64[D]")

    @property
    def n_sessions(self) -> int:
        return int(self.session_bounds.shape[0])

    def slice_sessions(self, first: int, last: int) -> Bars:
        """Bars of sessions ``first..last`` inclusive (a new ``Bars``)."""
        b = self.session_bounds
        lo, hi = int(b[first, 0]), int(b[last, 1])
        frame = self.frame.iloc[lo : hi + 1].copy()
        return Bars(frame, self.market, self.bar_minutes, self.source, list(self.findings))
