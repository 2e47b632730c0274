"""The trading day: one definition of its window, read by the environment and the live executor.

A day's window is a span of session minutes (minutes since the 18:00 ET roll): a bar whose
session minute is in ``start <= minute < end`` is inside (``env.trade_start``..``trade_end``,
ended at the latest by the rules' flat-by time, and on the exchange calendar's early closes
before the close by the same margin), from the first bar whose observation is valid (the
feature warm-up, and a full 20-bar window); entries are decided on bars up to ``last_entry``
that are not the window's last (an entry fills at the next bar's open). The window's last bar
is the one whose end reaches ``end``; a position left open is closed at its close
(``SESSION_END``).

Only what a trader knows at a bar decides there: the calendar's early closes are known in
advance, the bars a feed will not deliver are not. A window whose bars stop before its end (a
data gap, an early close the calendar lacks) is traded to its last bar as if more were coming:
the position is closed at that bar's close, and the entry decided on it is dropped
(:attr:`EpisodeWindow.end_known` False). :class:`~hybrid_trader.env.trading_env.TradingEnv`
reads the windows of whole sessions at once (:meth:`DayWindow.sessions`); ``live.executor``
asks the same questions of each bar as it arrives (:meth:`DayWindow.at`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from hybrid_trader.calendar import (
    SESSION_MINUTES,
    early_closes,
    parse_hhmm,
    session_minute,
    window_end_session_minute,
)
from hybrid_trader.data.bars import Bars
from hybrid_trader.env.account import PropFirmAccount
from hybrid_trader.env.config import EnvConfig
from hybrid_trader.features.names import WINDOW

MIN_EPISODE_BARS = 2
"""Sessions whose trading window holds fewer bars are not used as the environment's episodes: with one bar, an entry
decided at its close has no bar of the window to fill on, so nothing can be traded (the executor, which cannot know a
window will be short, decides and cancels as the environment would). A short day is otherwise traded by both."""


@dataclass(frozen=True)
class EpisodeWindow:
    """Bar indices of one session's trading window."""

    session: int
    first: int
    last: int
    last_entry: int
    """Last bar whose close may decide an entry (-1: none)."""
    end_known: bool = True
    """The last bar's end reaches the window's end, so a trader knows at it that it is the last (False: the bars
    stopped early; the agent decides on the last bar too, then the position is closed at its close)."""


class Warm(Protocol):
    """Features with a warm-up: ``FeatureSet``, or the executor's ``IncrementalFeatures`` so far."""

    @property
    def warmup(self) -> int: ...


class WindowBar(NamedTuple):
    """Where one bar stands in its day's window (:meth:`DayWindow.at`)."""

    hours: bool
    """Inside the window's hours."""
    inside: bool
    """Inside them and tradable (at or after :meth:`DayWindow.first_bar`)."""
    last: bool
    """The window's last bar: its end reaches the window's end (the bars come one by one: no later bar is known)."""
    over: bool
    """After the window (a window whose last bar never came ends at the bar before)."""
    may_enter: bool
    """An entry may be decided on it (at or before ``last_entry``; not on the last bar: nothing would fill it)."""


@dataclass(frozen=True)
class DayWindow:
    """The trading window of every day, as session minutes (since 18:00 ET), and the bar size [min]."""

    start: int
    end: int
    """The first session minute past the window (the rules' flat-by time at the latest)."""
    last_entry: int
    bar_minutes: int = 1
    early_ends: Mapping[np.datetime64, int] = field(default_factory=dict)
    """The window's end on the exchange calendar's early closes (trading date -> session minute)."""

    @classmethod
    def of(cls, cfg: EnvConfig, account: PropFirmAccount, bar_minutes: int = 1) -> DayWindow:
        """The window of ``cfg``'s ``trade_start``, ``trade_end`` and ``last_entry``, ended by ``account``'s
        flat-by time, and on ``cfg.calendar``'s early closes before the close by the margin that flat-by time
        keeps before the regular 17:00 ET close (Apex: 1 minute; 2024-11-29 closes 13:00 ET, flat by 12:59)."""
        start = session_minute(parse_hhmm(cfg.trade_start, "trade_start"))
        end = window_end_session_minute(cfg.trade_end, "trade_end")
        flat_by = account.flat_by_session_minute()
        end = min(end, flat_by)  # the rules' flat-by time ends every window
        last_entry = window_end_session_minute(cfg.last_entry, "last_entry")
        margin = max(SESSION_MINUTES - flat_by, 1)
        early = {date: min(end, session_minute(close) - margin) for date, close in early_closes(cfg.calendar).items()}
        return cls(start, end, last_entry, int(bar_minutes), early)

    def end_on(self, date: np.datetime64) -> int:
        """The window's end (a session minute) on trading date ``date`` (``datetime64[D]``)."""
        return self.early_ends.get(date, self.end)

    @staticmethod
    def first_bar(warmup: int) -> int:
        """The first bar that may be traded: after the feature warm-up, with a full observation window."""
        return max(int(warmup), WINDOW - 1)

    def at(self, minute: int, t: int, features: Warm, end: int) -> WindowBar:
        """Where bar ``t`` at session minute ``minute`` stands in its day's window, which ends at ``end``
        (:meth:`end_on` its date; ``features``: the bars' features, their warm-up read only inside the hours)."""
        hours = self.start <= minute < end
        return WindowBar(hours, hours and t >= self.first_bar(features.warmup), minute + self.bar_minutes >= end,
                         minute >= end, minute <= self.last_entry)

    def sessions(self, bars: Bars, warmup: int, sessions: Sequence[int] | None = None) -> list[EpisodeWindow]:
        """The windows of ``sessions`` of ``bars`` (None: all) with at least :data:`MIN_EPISODE_BARS` bars inside,
        the bars known at once (the environment's days)."""
        sm = session_minute(bars.minute_of_day.astype(np.int64))
        first_valid = self.first_bar(warmup)
        bounds = bars.session_bounds
        dates = bars.session_dates
        chosen = range(len(bounds)) if sessions is None else sessions
        out = []
        for s in chosen:
            lo, hi = int(bounds[s, 0]), int(bounds[s, 1])
            idx = np.arange(max(lo, first_valid), hi + 1)
            if len(idx) == 0:
                continue
            m = sm[idx]
            end = self.end_on(dates[s])
            inside = idx[(m >= self.start) & (m < end)]
            if len(inside) < MIN_EPISODE_BARS:
                continue
            # Entries need a later bar inside the window to fill on: not on a last bar known as the last; on one
            # that is not (the bars stopped early) an entry is decided, then dropped, as a trader's would be.
            known = int(sm[inside[-1]]) + self.bar_minutes >= end
            may = inside[:-1] if known else inside
            entry_ok = may[sm[may] <= self.last_entry]
            out.append(EpisodeWindow(int(s), int(inside[0]), int(inside[-1]),
                                     int(entry_ok[-1]) if len(entry_ok) else -1, known))
        return out


@dataclass
class DayState:
    """Where a bar-by-bar trader (the live executor) is in its days: the trading date of the latest bar, whether
    its window is open or done, and the entry decided at the last bar's close (to fill at the next bar's open)."""

    date: np.datetime64 | None = None
    open: bool = False
    done: bool = False
    pending: int = 0
    """The pending entry's side (0: none)."""
    window_end: int = 0
    """The date's window end (a session minute: :meth:`DayWindow.end_on`)."""

    def new_date(self, date: np.datetime64, window_end: int) -> None:
        """A new trading date, whose window ends at session minute ``window_end``: not yet opened."""
        self.date, self.open, self.done, self.window_end = date, False, False, window_end

    def end(self) -> None:
        """The day's window ended: nothing pending, nothing traded until the next date."""
        self.open, self.done, self.pending = False, True, 0
