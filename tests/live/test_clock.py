"""EasternClock: the ET wall clock and trading date pandas gives, across daylight-saving changes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid_trader.calendar import EASTERN, SESSION_ROLL
from hybrid_trader.live.clock import EasternClock


def test_wall_clock_equals_pandas_when_crossing_dst_changes() -> None:
    clock = EasternClock()
    # every 7 minutes (and a second off) through 2024's two changes, and odd nanoseconds
    start, stop = pd.Timestamp("2024-03-09", tz="UTC").value, pd.Timestamp("2024-11-05", tz="UTC").value
    times = list(range(start, stop, 7 * 60 * 10**9 + 10**9)) + [pd.Timestamp("2024-03-10 07:00", tz="UTC").value - 1,
                                                                 pd.Timestamp("2024-11-03 06:00", tz="UTC").value - 1]
    for ns in times:
        et = pd.Timestamp(ns, tz="UTC").tz_convert(EASTERN)
        wall = clock.wall_ns(ns)
        assert wall == et.tz_localize(None).value
        assert EasternClock.minute_of_day(wall) == et.hour * 60 + et.minute
        assert clock.trading_date(wall) == np.datetime64((et.tz_localize(None) + SESSION_ROLL).date(), "D")
