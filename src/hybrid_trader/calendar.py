"""The market calendar: US/Eastern time, the 18:00 ET Globex session roll, trading windows.

One definition for every layer (bottom layer: imports only the standard library, numpy,
pandas and :mod:`hybrid_trader.errors`).

CME Globex equity-index futures trade from 18:00 ET to 17:00 ET the next day. A bar's
*trading date* is the calendar date of its ET start + 6 h, so a bar at or after 18:00 ET
belongs to the next day's session (Sunday 18:00 opens Monday's session). Times of day
are minutes since midnight ET; *session minutes* count from the 18:00 ET open. All
arithmetic is on ET wall-clock time, so a session keeps its 18:00 open on both sides of
a daylight-saving change (it is then 22 h or 24 h long in real time, not 23 h).
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from typing import Any, overload

import numpy as np
import pandas as pd

from hybrid_trader.errors import UserError

EASTERN = "America/New_York"
"""IANA name of US/Eastern, the zone every timestamp of the system is in."""
MINUTES_PER_DAY = 1440
SESSION_OPEN_MINUTE = 18 * 60
"""18:00 ET, the Globex session open, in minutes since midnight."""
SESSION_CLOSE_MINUTE = 17 * 60
"""17:00 ET, the Globex session close (the daily break runs to 18:00)."""
SESSION_MINUTES = 23 * 60
"""Minutes from the session open to its close (18:00 to 17:00 ET)."""
SESSION_ROLL = pd.Timedelta(minutes=MINUTES_PER_DAY - SESSION_OPEN_MINUTE)
"""ET time + this = a time whose calendar date is the trading date (6 h)."""
RTH_OPEN_MINUTE = 9 * 60 + 30
"""09:30 ET, the regular-trading-hours open, in minutes since midnight."""
RTH_CLOSE_MINUTE = 16 * 60
"""16:00 ET, the regular-trading-hours close, in minutes since midnight."""
CME_CALENDAR = "CMES"
"""``exchange_calendars``' CME equity-index futures calendar (NQ, ES): its sessions, holidays and early closes."""
CALENDAR_START = "2000-01-03"
"""The first session an exchange calendar is built from (the library's default is 20 years before today, so the
early closes of older data would drift away as time passes)."""


# ---- time zone --------------------------------------------------------------------------


def to_eastern(index: pd.DatetimeIndex | pd.Series | np.ndarray) -> pd.DatetimeIndex:
    """Tz-aware timestamps converted to US/Eastern (ns); raises ValueError on naive ones."""
    idx = pd.DatetimeIndex(index)
    if idx.tz is None:
        raise ValueError("timestamps must be tz-aware (use eastern_from_utc for naive UTC values)")
    return idx.tz_convert(EASTERN).as_unit("ns")


def eastern_from_utc(values: np.ndarray | pd.DatetimeIndex) -> pd.DatetimeIndex:
    """Naive-UTC ``datetime64`` values as a tz-aware US/Eastern index (ns)."""
    return pd.DatetimeIndex(values).tz_localize("UTC").tz_convert(EASTERN).as_unit("ns")


def fmt_eastern(ts: Any) -> str:
    """One timestamp as ``"2023-11-20 09:31:00 EST"``; a naive one is read as UTC."""
    t = pd.Timestamp(ts)
    if t is pd.NaT:
        return "NaT"
    if t.tz is None:
        t = t.tz_localize("UTC")
    return t.tz_convert(EASTERN).strftime("%Y-%m-%d %H:%M:%S %Z")


def utc_offset_labels(index: pd.DatetimeIndex) -> np.ndarray:
    """``"EDT"`` / ``"EST"`` (``"other"`` otherwise) per timestamp of an ET index."""
    off = (index.tz_localize(None) - index.tz_convert("UTC").tz_localize(None)).total_seconds().to_numpy()
    return np.where(off == -4 * 3600, "EDT", np.where(off == -5 * 3600, "EST", "other"))


# ---- minutes and sessions ------------------------------------------------------------------


def minute_of_day(index: pd.DatetimeIndex) -> np.ndarray:
    """Minutes since midnight of each timestamp's wall clock (int32); pass an ET index."""
    return (index.hour * 60 + index.minute).to_numpy(np.int32)


@overload
def session_minute(minute: int) -> int: ...
@overload
def session_minute(minute: np.ndarray) -> np.ndarray: ...
def session_minute(minute: np.ndarray | int) -> np.ndarray | int:
    """Minutes since the 18:00 ET session open of a minute of the ET day (0..1439)."""
    return (minute - SESSION_OPEN_MINUTE) % MINUTES_PER_DAY


def trading_date(index: pd.DatetimeIndex) -> np.ndarray:
    """Globex trading date of each timestamp (``datetime64[D]``): the date of ET time + 6 h.

    A naive index is read as ET wall-clock time; an aware one is converted to ET first.
    """
    idx = pd.DatetimeIndex(index)
    if idx.tz is not None:
        idx = idx.tz_convert(EASTERN).tz_localize(None)
    return (idx + SESSION_ROLL).normalize().to_numpy().astype("datetime64[D]")


def session_ids(trading_dates: np.ndarray) -> np.ndarray:
    """0-based index of each bar's trading date among the dates seen so far, in order (int32).

    ``trading_dates`` must be non-decreasing (bars sorted by time); each change starts a session.
    """
    td = np.asarray(trading_dates)
    change = np.empty(len(td), dtype=bool)
    if len(td):
        change[0] = True
        change[1:] = td[1:] != td[:-1]
    return (np.cumsum(change) - 1).astype(np.int32)


def session_bounds(session_id: np.ndarray) -> np.ndarray:
    """``(n_sessions, 2)`` int64 [first, last] position of each session in ``session_id``."""
    sid = np.asarray(session_id)
    if len(sid) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
    ends = np.r_[starts[1:] - 1, len(sid) - 1]
    return np.stack([starts, ends], axis=1).astype(np.int64)


def session_open_times(dates: pd.DatetimeIndex) -> np.ndarray:
    """Naive ET wall-clock time of the 18:00 open (the evening before) of each trading date (``datetime64[m]``)."""
    return (pd.DatetimeIndex(dates).normalize() - SESSION_ROLL).to_numpy().astype("datetime64[m]")


# ---- times of day and trading windows ------------------------------------------------------


def fmt_minute(m: int | None) -> str | None:
    """Minute of day as text: ``570 -> "09:30"``; None stays None."""
    return None if m is None else f"{m // 60:02d}:{m % 60:02d}"


def parse_hhmm(text: Any, name: str, section: str = "env") -> int:
    """``"09:30"`` -> 570 minutes since midnight; ``"24:00"`` -> 1440.

    Raises :class:`UserError` naming ``section.name`` and the value, with the fix.
    """
    key = f"{section}.{name}" if section else name
    try:
        hh, mm = str(text).split(":")
        value = int(hh) * 60 + int(mm)
        if not (0 <= int(hh) <= 24 and 0 <= int(mm) < 60 and value <= MINUTES_PER_DAY):
            raise ValueError
        return value
    except ValueError:
        raise UserError(f"{key}: '{text}' is not a time of day", fix='write it as "HH:MM", e.g. "09:30"') from None


def window_end_session_minute(text: Any, name: str, section: str = "env") -> int:
    """Session minute of a window's end ``"HH:MM"`` ET; 18:00 (the session open) means the whole session, 1440."""
    return session_minute(parse_hhmm(text, name, section)) or MINUTES_PER_DAY


def trading_window(
    start: Any, end: Any, *, section: str = "env", names: tuple[str, str] = ("trade_start", "trade_end")
) -> tuple[int, int]:
    """``(start, end)`` session minutes of a trading window given as ``"HH:MM"`` ET times.

    A bar is inside when ``start <= session_minute < end``; an end of 18:00 means the
    session's end. Raises :class:`UserError` for a malformed time or an empty window.
    """
    lo = session_minute(parse_hhmm(start, names[0], section))
    hi = window_end_session_minute(end, names[1], section)
    if hi <= lo:
        raise UserError(
            f"{section}.{names[0]} '{start}' is not before {section}.{names[1]} '{end}' "
            "in the session (it opens 18:00 ET)",
            fix="give a window inside the 18:00-17:00 ET session, e.g. 09:30 to 16:00",
        )
    return lo, hi


def in_window(session_minutes: np.ndarray, window: tuple[int, int]) -> np.ndarray:
    """Bool mask: session minutes inside ``[start, end)`` of a :func:`trading_window`."""
    sm = np.asarray(session_minutes)
    return (sm >= window[0]) & (sm < window[1])


# ---- the exchange's calendar: holidays and early closes -------------------------------------


@lru_cache(maxsize=4)
def exchange_calendar(name: str = CME_CALENDAR) -> Any:
    """The maintained ``exchange_calendars`` calendar ``name`` (loaded once per process, ~0.5 s); a UserError
    for a name the library does not know."""
    import exchange_calendars as xcals  # loads only when a calendar is asked for

    if name not in xcals.get_calendar_names(include_aliases=True):
        raise UserError(f"env.calendar: {name!r} is not an exchange calendar", value=name,
                        fix=f"use {CME_CALENDAR!r} (CME equity-index futures: NQ, ES), another name of "
                            "exchange_calendars.get_calendar_names(), or '' for none")
    with warnings.catch_warnings():  # the library's own use of a pandas API pandas 3.1 deprecates
        warnings.filterwarnings("ignore", message="Series.values returning")
        try:
            return xcals.get_calendar(name, start=CALENDAR_START)
        except ValueError:  # a calendar whose data starts later than CALENDAR_START
            return xcals.get_calendar(name)


@lru_cache(maxsize=4)
def early_closes(name: str = CME_CALENDAR) -> dict[np.datetime64, int]:
    """The early closes of calendar ``name``: trading date (``datetime64[D]``) -> close in minutes since midnight
    ET (CME equity index: 13:00 on Thanksgiving, the day after, Christmas Eve, and the Monday holidays). ``''``:
    none. Known in advance, so the backtest and the live executor may both end those days early."""
    if not name:
        return {}
    cal = exchange_calendar(name)
    closes = cal.closes[cal.early_closes]
    et = pd.DatetimeIndex(closes.to_numpy(), tz="UTC") if closes.dt.tz is None else pd.DatetimeIndex(closes)
    et = et.tz_convert(EASTERN)
    return {np.datetime64(d.date(), "D"): int(c.hour * 60 + c.minute) for d, c in zip(closes.index, et)}


# ---- one bar at a time: the wall clock of UTC nanoseconds ------------------------------------------

MINUTE_NS = 60 * 10**9
HOUR_NS = 3600 * 10**9
DAY_NS = 86_400 * 10**9
ROLL_NS = int(SESSION_ROLL.value)


class EasternClock:
    """UTC ns -> ET wall-clock ns, minute of the ET day and trading date, without a pandas Timestamp per bar.

    ``pd.Timestamp(ns, tz="UTC").tz_convert(EASTERN)`` costs ~20 µs; the UTC offset of US/Eastern only changes
    on whole UTC hours (02:00 local = 07:00 / 06:00 UTC), so the offset is asked of pandas once per UTC hour and
    added, giving exactly the wall-clock nanoseconds pandas gives (``tests/test_calendar.py``). Used by the
    incremental features and the executor, one bar at a time.
    """

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
