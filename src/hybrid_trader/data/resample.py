"""Coarser bars from finer ones: ``data.bar_minutes`` (e.g. a 1-minute file traded at 5 minutes).

:func:`resample_bars` groups the bars of each Globex session into clock-aligned intervals of
``minutes`` counted from the session's 18:00 ET open (:mod:`hybrid_trader.calendar`), so that a
5-minute bar holds the minutes 09:30-09:34 and is stamped 09:30 (bars are stamped at their start,
as everywhere in :mod:`hybrid_trader.data`). OHLCV rules: open of the first bar inside the
interval, high the highest, low the lowest, close of the last, volume the sum. An interval
never crosses the session break (17:00-18:00 ET) or a day, and a bar holds only the bars
stamped inside its interval: minutes missing from the file leave it with those present,
never with bars from beyond a gap. A bar therefore uses no data from after its own end.

Refused (``UserError``): a size that does not divide the 23-hour session (1,380 minutes), one
finer than the data or not a multiple of its bar size, and source bars off that size's grid.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid_trader.calendar import SESSION_MINUTES, session_minute
from hybrid_trader.data.bars import Bars
from hybrid_trader.data.findings import DataFinding
from hybrid_trader.errors import UserError

BAR_MINUTES = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60)
"""Bar sizes up to an hour that divide the 1,380-minute session (the ones studies usually vary: 1, 3, 5, 15)."""


def check_bar_minutes(minutes: int, *, key: str = "data.bar_minutes") -> None:
    """Refuse a bar size that is not a whole divisor of the session, naming the sizes that are."""
    if not isinstance(minutes, int) or minutes < 1 or SESSION_MINUTES % minutes:
        raise UserError(f"{key}: {minutes!r} minutes does not divide the {SESSION_MINUTES}-minute Globex session "
                        "(18:00-17:00 ET): its last bar would span the session break", value=str(minutes),
                        fix=f"use one of {', '.join(map(str, BAR_MINUTES))} (or null: the file's own bars)")


def resample_bars(bars: Bars, minutes: int) -> Bars:
    """``bars`` as ``minutes``-minute bars (the same ``Bars`` when it already has that size); see the module."""
    check_bar_minutes(minutes)
    have = int(bars.bar_minutes)
    if minutes == have:
        return bars
    if minutes < have or minutes % have:
        raise UserError(f"data.bar_minutes: {minutes} cannot be built from {bars.source}'s {have}-minute bars "
                        f"({'finer than the data' if minutes < have else f'not a multiple of {have}'})",
                        file=bars.source, value=str(minutes),
                        fix=f"use a multiple of {have} minutes that divides {SESSION_MINUTES} (e.g. "
                            f"{', '.join(str(m) for m in BAR_MINUTES if m >= have and m % have == 0)}), or null "
                            "for the file's own bars")
    offset = session_minute(bars.minute_of_day.astype(np.int64))  # minutes since 18:00 ET; DST-safe (wall clock)
    off_grid = np.flatnonzero(offset % have)
    if len(off_grid):
        i = int(off_grid[0])
        raise UserError(f"data.bar_minutes: {bars.source} has {len(off_grid)} bar(s) off the {have}-minute grid of "
                        f"the 18:00 ET session open (first: {bars.frame.index[i]}), so a {minutes}-minute bar "
                        "would take bars from beyond its end", file=bars.source, row=i,
                        fix="use data on the session's minute grid, or the file's own bar size")
    frame = bars.frame
    start = (frame.index - pd.to_timedelta(offset % minutes, unit="min")).as_unit("ns")  # the interval's first minute
    out = frame.groupby([bars.session_id, start.asi8], sort=False).agg(
        open=("open", "first"), high=("high", "max"), low=("low", "min"), close=("close", "last"),
        volume=("volume", "sum"))
    out.index = pd.DatetimeIndex(out.index.get_level_values(1), tz="UTC").tz_convert(frame.index.tz).rename(
        frame.index.name)
    note = DataFinding("note", "resampled", f"resampled {len(frame):,} {have}-minute bars to {len(out):,} "
                                            f"{minutes}-minute bars (data.bar_minutes)")
    return Bars(out, market=bars.market, bar_minutes=minutes, source=bars.source,
                findings=[*bars.findings, note])
