"""``BarsSoFar``: the bars seen so far, grown one bar at a time, read as a :class:`~hybrid_trader.data.bars.Bars`.

The executor appends each accepted bar (:meth:`BarsSoFar.push`); the trading core, the observation, the
asynchronous advisor's contexts (``llm.context.context_from_market``) and the executor's snapshot read it by the
attributes ``Bars`` has: ``market``, ``bar_minutes``, ``open high low close volume``, ``py_times``,
``minute_of_day``, ``trading_date``, ``session_high``, ``session_low``, ``len()``; and ``time_ns`` (UTC ns, the
journal's key). The series are Python lists, not numpy arrays: the hot loop indexes one value at a time, and a
list's float is a float (numpy's scalar would be slower and print differently). Each value equals the one
``Bars`` gives for the same bar (``tests/data/test_bars_so_far.py``).

A snapshot (``live.snapshot``) pickles the newest :data:`KEPT_BARS` bars only: the journal holds every bar's
prices, which :meth:`BarsSoFar.fill` takes back after the restore.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any, overload

import numpy as np
import pandas as pd

from hybrid_trader import calendar
from hybrid_trader.calendar import EASTERN, EasternClock

KEPT_BARS = 40
"""Bars a snapshot keeps (twice the observation's window: the core and the observation read the newest ones)."""
PRICES = ("open", "high", "low", "close", "volume", "time_ns")
"""The series a snapshot leaves to the journal (``Journal.bar_history``'s keys beside them: :data:`JOURNAL_KEYS`)."""
JOURNAL_KEYS = {"open": "o", "high": "h", "low": "lo", "close": "c", "volume": "v", "time_ns": "time_ns"}
DERIVED = ("minute_of_day", "trading_date", "session_high", "session_low")
"""The series computed from the prices and times (rebuilt by :meth:`BarsSoFar.fill`)."""


class EasternTimes(Sequence[datetime]):
    """``Bars.py_times`` of the bars so far: each bar's start as a tz-aware ET ``datetime``, made when read (the
    advisor reads one per question; making one per bar would cost ~20 µs a bar)."""

    def __init__(self, time_ns: list[int]) -> None:
        self._ns = time_ns

    def __len__(self) -> int:
        return len(self._ns)

    @overload
    def __getitem__(self, i: int) -> datetime: ...
    @overload
    def __getitem__(self, i: slice) -> list[datetime]: ...
    def __getitem__(self, i: int | slice) -> datetime | list[datetime]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return pd.Timestamp(self._ns[i], tz="UTC").tz_convert(EASTERN).to_pydatetime()


class BarsSoFar:
    """The accepted bars of a feed so far, with ``Bars``' attributes (see the module's docstring)."""

    def __init__(self, market: str, bar_minutes: int = 1) -> None:
        self.market = str(market)
        self.bar_minutes = int(bar_minutes)
        self.open: list[float] = []
        self.high: list[float] = []
        self.low: list[float] = []
        self.close: list[float] = []
        self.volume: list[float] = []
        self.time_ns: list[int] = []
        """Bar start, ns since the epoch (UTC)."""
        self.minute_of_day: list[int] = []
        """Minutes since midnight ET of the bar's start."""
        self.trading_date: list[np.datetime64] = []
        """Globex trading date of the bar (``datetime64[D]``)."""
        self.session_high: list[float] = []
        """Highest high of the bar's session up to and including the bar."""
        self.session_low: list[float] = []
        self.missing = 0
        """Leading bars whose prices a restored snapshot left to :meth:`fill`."""
        self._clock = EasternClock()

    @property
    def py_times(self) -> EasternTimes:
        return EasternTimes(self.time_ns)

    def __len__(self) -> int:
        return len(self.close)

    def push(self, time_ns: int, open: float, high: float, low: float, close: float, volume: float) -> None:
        """Append the next bar (the caller's gate has checked it is later than the last)."""
        clock = self._clock
        wall = clock.wall_ns(time_ns)
        date = clock.trading_date(wall)  # the same object all day long: `is` first, `==` once a day
        dates = self.trading_date
        if dates and (date is dates[-1] or date == dates[-1]):
            last_high, last_low = self.session_high[-1], self.session_low[-1]
            self.session_high.append(high if high > last_high else last_high)
            self.session_low.append(low if low < last_low else last_low)
        else:
            self.session_high.append(high)
            self.session_low.append(low)
        self.trading_date.append(date)
        self.minute_of_day.append(clock.minute_of_day(wall))
        self.open.append(open)
        self.high.append(high)
        self.low.append(low)
        self.close.append(close)
        self.volume.append(volume)
        self.time_ns.append(time_ns)

    # ---- snapshots --------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """The newest :data:`KEPT_BARS` bars of each series (:meth:`fill` takes the others back)."""
        n = len(self)
        k = max(0, n - KEPT_BARS)
        series = {name: getattr(self, name)[k:] for name in (*PRICES, *DERIVED)}
        return {"market": self.market, "bar_minutes": self.bar_minutes, "n": n, "start": k, "series": series}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["market"], state["bar_minutes"])  # type: ignore[misc]
        k = state["start"]
        for name, values in state["series"].items():
            pad: Any = 0 if name in ("time_ns", "minute_of_day") else np.datetime64("NaT", "D") \
                if name == "trading_date" else math.nan
            setattr(self, name, [pad] * k + list(values))
        self.missing = k

    def fill(self, prices: dict[str, np.ndarray]) -> None:
        """Put back what a snapshot left out: ``prices`` holds every bar's (``Journal.bar_history``: keys
        ``o h lo c v time_ns``); a ValueError if they are not the bars pushed."""
        k, n = self.missing, len(self)
        for name in PRICES:
            values = np.asarray(prices[JOURNAL_KEYS[name]]).tolist()
            kept = getattr(self, name)[k:]
            if len(values) != n or (name != "volume" and values[k:] != kept):
                raise ValueError(f"the journal's {len(values)} bars are not the {n} the snapshot was taken after")
            getattr(self, name)[:k] = values[:k]
        if k:
            index = pd.DatetimeIndex(pd.to_datetime(self.time_ns[:k], utc=True)).tz_convert(EASTERN)
            dates = calendar.trading_date(index)
            self.minute_of_day[:k] = calendar.minute_of_day(index).tolist()
            self.trading_date[:k] = list(dates)
            self.session_high[:k] = pd.Series(self.high[:k]).groupby(dates).cummax().tolist()
            self.session_low[:k] = pd.Series(self.low[:k]).groupby(dates).cummin().tolist()
        self.missing = 0
