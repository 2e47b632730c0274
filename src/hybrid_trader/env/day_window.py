"""The trading day: one definition of its window, read by the environment and the live executor.

A day's window is a span of session minutes (minutes since the 18:00 ET roll): a bar whose
session minute is in ``start <= minute < end`` is inside (``env.trade_start``..``trade_end``,
ended at the latest by the rules' flat-by time), from the first bar whose observation is
valid (the feature warm-up, and a full 20-bar window); entries are decided on bars up to
``last_entry`` that are not the window's last (an entry fills at the next bar's open). The
window's last bar is the one whose end reaches ``end``; a position left open is closed at its
close (``SESSION_END``). :class:`~hybrid_trader.env.trading_env.TradingEnv` reads the windows
of whole sessions at once (:meth:`DayWindow.sessions`); ``live.executor`` asks the same
questions of each bar as it arrives (:meth:`DayWindow.at`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from hybrid_trader.calendar import parse_hhmm, session_minute, window_end_session_minute
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

    @classmethod
    def of(cls, cfg: EnvConfig, account: PropFirmAccount, bar_minutes: int = 1) -> DayWindow:
        """The window of ``cfg``'s ``trade_start``, ``trade_end`` and ``last_entry``, ended by ``account``'s
        flat-by time."""
        start = session_minute(parse_hhmm(cfg.trade_start, "trade_start"))
        end = window_end_session_minute(cfg.trade_end, "trade_end")
        end = min(end, account.flat_by_session_minute())  # the rules' flat-by time ends every window
        last_entry = window_end_session_minute(cfg.last_entry, "last_entry")
        return cls(start, end, last_entry, int(bar_minutes))

    @staticmethod
    def first_bar(warmup: int) -> int:
        """The first bar that may be traded: after the feature warm-up, with a full observation window."""
        return max(int(warmup), WINDOW - 1)

    def at(self, minute: int, t: int, features: Warm) -> WindowBar:
        """Where bar ``t`` at session minute ``minute`` stands in its day's window (``features``: the bars' features,
        their warm-up read only inside the window's hours)."""
        hours = self.start <= minute < self.end
        return WindowBar(hours, hours and t >= self.first_bar(features.warmup), minute + self.bar_minutes >= self.end,
                         minute >= self.end, minute <= self.last_entry)

    def sessions(self, bars: Bars, warmup: int, sessions: Sequence[int] | None = None) -> list[EpisodeWindow]:
        """The windows of ``sessions`` of ``bars`` (None: all) with at least :data:`MIN_EPISODE_BARS` bars inside,
        the bars known at once (the environment's days)."""
        sm = session_minute(bars.minute_of_day.astype(np.int64))
        first_valid = self.first_bar(warmup)
        bounds = bars.session_bounds
        chosen = range(len(bounds)) if sessions is None else sessions
        out = []
        for s in chosen:
            lo, hi = int(bounds[s, 0]), int(bounds[s, 1])
            idx = np.arange(max(lo, first_valid), hi + 1)
            if len(idx) == 0:
                continue
            m = sm[idx]
            inside = idx[(m >= self.start) & (m < self.end)]
            if len(inside) < MIN_EPISODE_BARS:
                continue
            # Entries need a later bar inside the window to fill on.
            entry_ok = inside[:-1][sm[inside[:-1]] <= self.last_entry]
            out.append(
                EpisodeWindow(int(s), int(inside[0]), int(inside[-1]), int(entry_ok[-1]) if len(entry_ok) else -1)
            )
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

    def new_date(self, date: np.datetime64) -> None:
        """A new trading date: its window not yet opened."""
        self.date, self.open, self.done = date, False, False

    def end(self) -> None:
        """The day's window ended: nothing pending, nothing traded until the next date."""
        self.open, self.done, self.pending = False, True, 0
