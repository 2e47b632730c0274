"""US/Eastern wall-clock time of UTC nanoseconds, without a pandas Timestamp per bar.

The executor and the incremental features need, per bar, the ET wall-clock minute and
the trading date. ``pd.Timestamp(ns, tz="UTC").tz_convert(EASTERN)`` costs ~20 µs; the
UTC offset of US/Eastern only changes on whole UTC hours (02:00 local = 07:00 / 06:00
UTC), so :class:`EasternClock` asks pandas once per UTC hour and adds the offset, giving
exactly the wall-clock nanoseconds pandas gives (``tests/live/test_clock.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.calendar import EASTERN, SESSION_ROLL

MINUTE_NS = 60 * 10**9
HOUR_NS = 3600 * 10**9
DAY_NS = 86_400 * 10**9
ROLL_NS = int(SESSION_ROLL.value)


class EasternClock:
    """UTC ns -> ET wall-clock ns, minute of the ET day and trading date (the offset cached per UTC hour)."""

    def __init__(self) -> None:
        self._hour: int | None = None
        self._offset = 0
        self._day: int | None = None
        self._date: Any = np.datetime64("NaT", "D")

    def wall_ns(self, utc_ns: int) -> int:
        """ET wall-clock ns, as ``Timestamp(utc_ns, tz="UTC").tz_convert(EASTERN).tz_localize(None).value``."""
        hour = utc_ns // HOUR_NS
        if hour != self._hour:
            start = hour * HOUR_NS
            self._offset = int(pd.Timestamp(start, tz="UTC").tz_convert(EASTERN).tz_localize(None).value) - start
            self._hour = hour
        return utc_ns + self._offset

    @staticmethod
    def minute_of_day(wall_ns: int) -> int:
        """Minute of the ET day (``hour * 60 + minute``) of a wall-clock ns."""
        return (wall_ns % DAY_NS) // MINUTE_NS

    def trading_date(self, wall_ns: int) -> np.datetime64:
        """The trading date (the ET date 6 hours later: a session opening at 18:00 belongs to the next day)."""
        day = (wall_ns + ROLL_NS) // DAY_NS
        if day != self._day:
            self._day = day
            self._date = np.datetime64(day, "D")
        return self._date
