"""Is the clock right? The RTH open's volume surge should be at 09:30 ET (warnings, never errors).

:func:`detect_rth_open` finds the minute of day with the sharpest lasting volume surge;
:func:`clock_findings` warns when it is not 09:30 ET (a shifted clock, or a file in UTC
or Chicago time read as Eastern) and suggests ``--time-shift`` or ``--tz``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid_trader.calendar import (
    EASTERN,
    MINUTES_PER_DAY,
    RTH_OPEN_MINUTE,
    fmt_minute,
    minute_of_day,
    utc_offset_labels,
)
from hybrid_trader.data.findings import DataFinding

CLOCK_WINDOW_MINUTES = 30
"""Length of the before/after windows compared when looking for the RTH volume surge."""
def _volume_profile(minute: np.ndarray, volume: np.ndarray) -> np.ndarray:
    """Mean volume per minute of day (1440,), NaN where too few bars to tell."""
    counts = np.bincount(minute, minlength=MINUTES_PER_DAY).astype(np.float64)
    sums = np.bincount(minute, weights=volume, minlength=MINUTES_PER_DAY)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sums / counts
    mean[counts < max(2.0, 0.3 * counts.max(initial=0.0))] = np.nan
    return mean


def rth_open_scores(minute: np.ndarray, volume: np.ndarray, bar_minutes: int) -> np.ndarray:
    """Per minute of day (1440,), how much it looks like the RTH open: a sharp and lasting volume surge.

    The score is the geometric mean of the jump from the previous bar
    (``profile[m] / profile[m - bar]``) and the level shift (mean volume over the 30
    minutes from ``m`` / mean over the 30 minutes before). A news spike (08:30) jumps
    but does not last; the afternoon does not jump. NaN where a window lacks data
    (for example right after the daily break).
    """
    prof = _volume_profile(np.asarray(minute, dtype=np.int64), np.asarray(volume, dtype=np.float64))
    step = max(1, int(bar_minutes))
    k = max(1, CLOCK_WINDOW_MINUTES // step)
    m = np.arange(MINUTES_PER_DAY)
    after = np.stack([prof[(m + j * step) % MINUTES_PER_DAY] for j in range(k)])
    before = np.stack([prof[(m - (j + 1) * step) % MINUTES_PER_DAY] for j in range(k)])

    def _mean(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ok = np.isfinite(x)
        n = ok.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(ok, x, 0.0).sum(axis=0) / n, n

    a_mean, a_n = _mean(after)
    b_mean, b_n = _mean(before)
    need = max(1, int(0.8 * k))
    prev = before[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.sqrt((prof / prev) * (a_mean / b_mean))
    bad = (a_n < need) | (b_n < need) | ~np.isfinite(prof) | ~np.isfinite(prev) | ~np.isfinite(score)
    score[bad] = np.nan
    return score


def detect_rth_open(index: pd.DatetimeIndex, volume: np.ndarray, bar_minutes: int) -> tuple[int | None, float]:
    """Minute of day (ET) of the strongest volume surge, i.e. the apparent RTH open, and its score.

    See :func:`rth_open_scores` (about 4 to 6 at a real 09:30 open, 1 to 3 elsewhere).
    ``(None, nan)`` when there is too little data.
    """
    if len(index) < 2:
        return None, float("nan")
    minute = minute_of_day(index).astype(np.int64)
    score = rth_open_scores(minute, volume, bar_minutes)
    if not np.isfinite(score).any():
        return None, float("nan")
    best = int(np.nanargmax(score))
    return best, float(score[best])


def rth_open_by_period(
    index: pd.DatetimeIndex, volume: np.ndarray, bar_minutes: int, min_days: int = 3
) -> dict[str, str | None]:
    """Detected RTH open separately for daylight (EDT) and standard (EST) time, when each has ``min_days`` full
    days (a date with at least half the bars of the period's fullest date: a file that ends two days after a
    DST change holds one trading day and two partial evenings there, whose "surge" is noise)."""
    labels = utc_offset_labels(index)
    out: dict[str, str | None] = {}
    for lab in ("EDT", "EST"):
        sel = labels == lab
        if not sel.any():
            continue
        idx = index[sel]
        _, per_date = np.unique(idx.tz_localize(None).normalize(), return_counts=True)
        days = int((per_date >= 0.5 * per_date.max()).sum())
        if days < min_days:
            continue
        m, _ = detect_rth_open(idx, np.asarray(volume)[sel], bar_minutes)
        out[lab] = fmt_minute(m)
    return out


def clock_findings(
    index: pd.DatetimeIndex, volume: np.ndarray, bar_minutes: int, *, time_shift: float = 0.0, tz: str | None = None
) -> list[DataFinding]:
    """Warnings when the volume surge of the RTH open is not at 09:30 ET (shifted clock)."""
    out: list[DataFinding] = []
    m, score = detect_rth_open(index, volume, bar_minutes)
    if m is None or not np.isfinite(score) or score < 2.0:
        return out
    minute = minute_of_day(index).astype(np.int64)
    all_scores = rth_open_scores(minute, volume, bar_minutes)
    s930 = all_scores[RTH_OPEN_MINUTE]
    by = rth_open_by_period(index, volume, bar_minutes)
    if len(by) == 2 and None not in by.values() and by["EDT"] != by["EST"]:
        out.append(_warn(
            f"the volume surge of the RTH open is at {by['EDT']} ET in daylight time but "
            f"{by['EST']} ET in standard time: the timestamps look like UTC or another zone without "
            "daylight saving; try --tz UTC"
        ))
        return out
    if m == RTH_OPEN_MINUTE or (np.isfinite(s930) and s930 >= 0.8 * score):
        return out
    off = (m - RTH_OPEN_MINUTE + 720) % MINUTES_PER_DAY - 720
    hours = off / 60.0
    k = int(round(hours))
    if k != 0 and abs(hours - k) * 60 <= max(1, bar_minutes):
        suggest = time_shift - k
        hint = ""
        if k == -1 and (tz in (None, EASTERN)):
            hint = " (a clock 1 h behind ET is typical of America/Chicago stamps: --tz America/Chicago)"
        out.append(_warn(
            f"the volume surge of the RTH open is at {fmt_minute(m)} ET instead of 09:30 ET: "
            f"the clock looks shifted by {k:+d} h; try --time-shift {suggest:g}{hint}"
        ))
    else:
        out.append(_warn(
            f"the strongest volume surge is at {fmt_minute(m)} ET, not at the 09:30 ET RTH open; "
            "check --tz and --time-shift"
        ))
    return out


def _warn(message: str) -> DataFinding:
    return DataFinding("warning", "clock", message)
