"""Bar feeds for the executor: a replayed file and a followed CSV (the gate every bar passes: ``live.bar_gate``).

* :class:`ReplayFeed` yields the bars of a file loaded by ``data.load_bars`` (same columns,
  time zones, checks and findings as ``data check``), optionally only some trading dates,
  as fast as possible or paced at ``speed`` x real time.
* :class:`FollowFeed` tails a CSV a platform appends bar by bar: complete lines only,
  header matched with the loader's column aliases, or NinjaTrader's header-less
  ``yyyyMMdd HHmmss;open;high;low;close;volume`` lines (``data.nt_export``: UTC, end-of-bar
  stamps moved to the bar's start), timestamps read by the loader's parser, rotation and
  truncation survived without repeating a bar (a renamed file is read to its end before the new one).
* :func:`parse_feed_spec` reads ``--feed replay:FILE[:SPEED]`` / ``follow:FILE``.
"""

from __future__ import annotations

import csv
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from hybrid_trader.calendar import EASTERN
from hybrid_trader.data.bars import Bars
from hybrid_trader.data.checks import COLUMNS
from hybrid_trader.data.columns import match_columns
from hybrid_trader.data.loader import load_bars, resolve_tz
from hybrid_trader.data.many import is_many
from hybrid_trader.data.nt_export import NT_NAMES, NT_SEP, NT_TZ, is_nt_export, resolve_stamps, stamp_shift_ns
from hybrid_trader.data.timestamps import parse_timestamps
from hybrid_trader.data.validate import Checker
from hybrid_trader.errors import UserError


@dataclass(frozen=True)
class Bar:
    """One bar as it arrived. ``time`` is the tz-aware ET bar start, None when unreadable."""

    time: pd.Timestamp | None
    open: float
    high: float
    low: float
    close: float
    volume: float
    line: int | None = None
    """File line (header = line 1) for a followed CSV; None for a replay."""
    raw: str | None = None
    """The line as written (followed CSV), for messages."""
    nonexistent: bool = False
    """The wall-clock time was skipped by a daylight-saving change."""
    time_text: str | None = None
    """The timestamp as written (followed CSV), for messages."""

    @property
    def time_ns(self) -> int | None:
        """Bar start in ns since the epoch (UTC), None when unreadable."""
        return None if self.time is None else int(self.time.value)

    @property
    def key(self) -> tuple[int | None, float, float, float, float]:
        """``(time ns, open, high, low, close)``: the bar by its prices too (another may come at the same time), as
        the journal's refused rows are read back (``JournalView.refused_keys``)."""
        return self.time_ns, self.open, self.high, self.low, self.close

    def values(self) -> dict[str, float]:
        return {"open": self.open, "high": self.high, "low": self.low, "close": self.close, "volume": self.volume}


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


# ---- replay --------------------------------------------------------------------------------------


def _as_dates(days: Iterable[Any]) -> np.ndarray:
    return np.array([np.datetime64(pd.Timestamp(d).date(), "D") for d in days], dtype="datetime64[D]")


class ReplayFeed:
    """The bars of a file (or folder / glob), as ``data check`` loads them, one at a time.

    ``speed=None`` yields as fast as the consumer takes them; ``speed=s`` waits
    ``bar_minutes * 60 / s`` seconds between bars (on a monotonic schedule, so the
    consumer's work does not add up). ``stop`` (a ``threading.Event``) ends it early.
    """

    def __init__(self, path: str | Path, speed: float | None = None, *, tz: str = EASTERN,
                 time_shift: float = 0.0, market: str | None = None, sessions: Iterable[Any] | None = None,
                 stop: threading.Event | None = None, stamps: str | None = None) -> None:
        if speed is not None and not (math.isfinite(speed) and speed > 0):
            raise UserError(f"replay speed {speed!r} must be a positive number", value=speed,
                            fix="e.g. replay:bars.csv:60 (60 x real time), or leave it out for as fast as possible")
        self.path = str(path)
        self.speed = speed
        self.stop = stop or threading.Event()
        self.bars = load_bars(path, tz=tz, time_shift=time_shift, market=market, stamps=stamps)
        if sessions is not None:
            self.bars = self._only(self.bars, sessions)

    def _only(self, bars: Bars, sessions: Iterable[Any]) -> Bars:
        wanted = _as_dates(sessions)
        keep = np.isin(bars.trading_date, wanted)
        if not keep.any():
            first, last = bars.session_dates[0], bars.session_dates[-1]
            raise UserError(f"none of the {len(wanted)} requested trading dates is in the file "
                            f"(it holds {first} .. {last})", file=self.path,
                            fix="replay the run's own data file, or choose dates the file holds")
        return Bars(bars.frame.iloc[np.flatnonzero(keep)], bars.market, bars.bar_minutes, bars.source,
                    list(bars.findings))

    def restrict(self, sessions: Iterable[Any]) -> ReplayFeed:
        """Only the bars of these trading dates (e.g. a run's test days); returns self."""
        self.bars = self._only(self.bars, sessions)
        return self

    def __len__(self) -> int:
        return len(self.bars)

    def __iter__(self) -> Iterator[Bar]:
        index = self.bars.frame.index
        o, h, lo, c, v = (np.asarray(x, dtype=np.float64).tolist() for x in
                          (self.bars.open, self.bars.high, self.bars.low, self.bars.close, self.bars.volume))
        interval = None if self.speed is None else 60.0 * self.bars.bar_minutes / self.speed
        due = time.monotonic()
        for i, stamp in enumerate(index):
            if self.stop.is_set():
                return
            if interval is not None and i:
                due += interval
                if self.stop.wait(max(0.0, due - time.monotonic())):
                    return
            yield Bar(stamp, o[i], h[i], lo[i], c[i], v[i])


# ---- follow ---------------------------------------------------------------------------------------


FOLLOW_POLL_S = 0.02
"""How often a followed file is looked at (one ``stat`` when nothing was appended): a bar's line waits at most this
long before the executor reads it (``hybrid-trader bench live-latency``; 1 s made the bar-to-order p99 over 1 s)."""


class FollowFeed:
    """Tails a CSV that a platform appends bar by bar.

    Reads only complete lines (a last line without its newline waits), matches the header
    with the loader's column names, reads timestamps with the loader's parser (the format
    is picked from the lines seen so far, as ``data check`` picks it from the file).

    Rotation and replacement: the feed holds the file open and tracks its inode. When the
    path is renamed away (or names another inode), the open file is first read to its end
    (its last line taken even without a newline), then the new file is read from its
    start; a file truncated or rewritten in place (the bytes just before the read offset changed: a platform
    re-exporting its last bars each minute) is re-read from its start. After such a reopen a bar
    the feed already yielded (same time and prices) is skipped (``skipped``); any other line still
    comes out, an unseen bar not later than the last one included, so that the gate rejects
    it with its reason and the executor journals the row. A line that cannot be read comes
    out as a :class:`Bar` with ``time=None`` or NaN values, for the gate to reject.
    Ends when ``stop`` is set or after ``timeout_s`` seconds without a new line.
    (On Windows the file is not held between polls, so that the platform can rename it;
    lines written to it after the last poll and before a rename are then not seen.)

    ``stamps``: ``start`` or ``end`` (which end of the bar a timestamp marks; end stamps move back
    ``bar_minutes``); None: ``end`` for NinjaTrader's header-less lines, else ``start``.
    """

    SAMPLE = 100
    """Timestamp texts kept from the file's start and from its latest lines, for the format picker."""
    HOLD_OPEN = os.name != "nt"
    """Keep the file open between polls (a renamed file is then drained); Windows forbids renaming an open file."""

    def __init__(self, path: str | Path, poll_s: float = FOLLOW_POLL_S, *, tz: str = EASTERN, time_shift: float = 0.0,
                 stop: threading.Event | None = None, timeout_s: float | None = None, stamps: str | None = None,
                 bar_minutes: int = 1) -> None:
        if not (math.isfinite(poll_s) and poll_s > 0):
            raise UserError(f"poll interval {poll_s!r} s must be a positive number", fix="e.g. 0.5")
        self.path = Path(path).expanduser()
        self.poll_s = float(poll_s)
        self.tz = resolve_tz(tz)
        self.time_shift = float(time_shift)
        self.stop = stop or threading.Event()
        self.timeout_s = timeout_s
        self.stamps = None if stamps is None else resolve_stamps(stamps, False)
        self.bar_minutes = int(bar_minutes)
        self.nt_export = False
        """The file holds NinjaTrader's header-less lines (known from its first line)."""
        self._shift_ns = 0
        self.skipped = 0
        """Bars skipped after a reopen because they were already yielded."""
        self.reopened = 0
        """Files (or truncations) switched to after the first."""
        self.drained = 0
        """Lines read from a file after it was renamed away or replaced, before the new one."""
        self.last_time_ns: int | None = None
        self.on_idle: Callable[[], None] | None = None
        """Called each time the file holds no new line, before the wait (the executor commits its journal's batch)."""
        self._yielded: dict[int, tuple[float, float, float, float]] = {}
        """Each bar time given, with its prices: after a reopen the same bar is skipped, a revised one is not."""
        self._fh: BinaryIO | None = None
        self._inode: int | None = None
        self._offset = 0
        self._partial = b""
        self._tail = b""
        """The last bytes read before the offset: a rewrite in place changes them."""
        self._line_no = 0
        self._header: list[str] | None = None
        self._sep = ","
        self._spec: tuple[dict[str, int], tuple[str, tuple[int, ...]]] | None = None
        self._first: list[tuple[str, np.datetime64]] = []
        self._last: list[tuple[str, np.datetime64]] = []

    # ---- reading --------------------------------------------------------------------------
    def _reset(self, inode: int | None) -> None:
        self._inode, self._offset, self._partial, self._line_no, self._header = inode, 0, b"", 0, None
        self._tail = b""

    def close(self) -> None:
        """Release the followed file."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def poll(self) -> list[Bar]:
        """Bars of the lines completed since the last call (possibly none)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:  # renamed away, the new file not yet created: what the old one still holds
            return self._read(final=False) if self._fh is not None else []
        bars: list[Bar] = []
        if self._inode is not None and st.st_ino != self._inode:  # rotated or replaced: drain, then switch
            if self._fh is not None:
                before = self._line_no
                bars = self._read(final=True)
                self.drained += self._line_no - before
            self.close()
            self._reset(st.st_ino)
            self.reopened += 1
        elif self._inode is not None and (st.st_size < self._offset or self._rewritten()):  # in place: from its start
            self._reset(st.st_ino)
            self.reopened += 1
        elif self._inode is None:
            self._reset(st.st_ino)
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")  # noqa: SIM115 -- held across polls, closed by close()
            except FileNotFoundError:
                return bars
            if os.fstat(self._fh.fileno()).st_ino != self._inode:  # replaced again between stat and open
                self.close()
                return bars
        try:
            return bars + self._read(final=False)
        finally:
            if not self.HOLD_OPEN:
                self.close()

    TAIL_BYTES = 64
    """Bytes before the read offset compared at each poll (:meth:`_rewritten`)."""

    def _rewritten(self) -> bool:
        """Whether the bytes just before the read offset changed: the file was rewritten in place (same inode, at
        least as long), which a size check alone does not see."""
        tail = self._tail
        if not tail:
            return False
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset - len(tail))
                return fh.read(len(tail)) != tail
        except OSError:
            return False  # gone or locked this instant: the next poll looks again

    def _read(self, final: bool) -> list[Bar]:
        """The complete lines the open file holds past the offset (``final``: its last line too, newline or not)."""
        assert self._fh is not None
        self._fh.seek(self._offset)
        data = self._fh.read()
        self._offset += len(data)
        self._tail = (self._tail + data)[-self.TAIL_BYTES:]
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        if final and self._partial:
            complete.append(self._partial)
            self._partial = b""
        lines = [c.decode("utf-8", errors="replace").rstrip("\r") for c in complete]
        return self._parse(lines)

    def _parse(self, lines: list[str]) -> list[Bar]:
        numbered = []
        for text in lines:
            self._line_no += 1
            if self._header is None and (not text.strip() or not self._read_header(text)):
                continue  # blank, or the header (NinjaTrader's lines have none: the first is a bar)
            if not text.strip() or self._is_header(text):
                continue
            numbered.append((self._line_no, text))
        if not numbered:
            return []
        bars = self._to_bars(numbered)
        out = []
        for bar in bars:
            t = bar.time_ns
            prices = (bar.open, bar.high, bar.low, bar.close)
            if t is not None and self.reopened and self._yielded.get(t) == prices:
                self.skipped += 1  # already yielded from the file before this one (and journaled then)
                continue
            out.append(bar)  # (a revised bar comes out again: the gate refuses it as a duplicate, with its row)
            if t is not None:
                self._yielded.setdefault(t, prices)
                if self.last_time_ns is None or t > self.last_time_ns:
                    self.last_time_ns = t
        return out

    def _read_header(self, text: str) -> bool:
        """Read the first line's columns; True when it is a bar already (NinjaTrader's header-less lines)."""
        self.nt_export = is_nt_export(text, str(self.path))  # UserError for NinjaTrader's tick or daily lines
        self._shift_ns = stamp_shift_ns(resolve_stamps(self.stamps, self.nt_export), self.bar_minutes)
        if self.nt_export:
            self._sep, self.tz, self._header = NT_SEP, NT_TZ, list(NT_NAMES)
            pos, ts_spec, _notes = match_columns(self._header, str(self.path))
            self._spec = (pos, ts_spec)
            return True
        self._sep = max((",", ";", "\t", "|"), key=text.count) if any(d in text for d in ",;\t|") else ","
        names = [n.strip() for n in next(csv.reader([text], delimiter=self._sep))]
        pos, ts_spec, _notes = match_columns(names, str(self.path))  # UserError naming the missing columns
        self._header = names
        self._spec = (pos, ts_spec)
        return False

    def _is_header(self, text: str) -> bool:
        return [n.strip() for n in next(csv.reader([text], delimiter=self._sep))] == self._header

    def _to_bars(self, numbered: list[tuple[int, str]]) -> list[Bar]:
        assert self._spec is not None and self._header is not None
        pos, ts_spec = self._spec
        width = len(self._header)
        fields = [(next(csv.reader([t], delimiter=self._sep)) + [""] * width)[:width] for _, t in numbered]
        frame = pd.DataFrame(fields, columns=range(width), dtype=object).map(lambda s: s.strip() or None)
        lines = [n for n, _ in numbered]
        got_t, got_n = self._times(frame, ts_spec, lines)
        times = np.full(len(frame), np.datetime64("NaT", "ns"))
        nonexistent = np.zeros(len(frame), dtype=bool)
        if got_t is not None and got_n is not None:
            times, nonexistent = got_t, got_n
        else:  # the new lines would change how the earlier ones read: one at a time
            for k in range(len(frame)):
                one_t, one_n = self._times(frame.iloc[k : k + 1], ts_spec, lines[k : k + 1])
                if one_t is not None and one_n is not None:
                    times[k], nonexistent[k] = one_t[0], one_n[0]
        texts = self._timestamp_texts(frame, ts_spec)
        self._remember([(x, t) for x, t in zip(texts, times) if not np.isnat(t)])
        bars = []
        for k, (line, text) in enumerate(numbered):
            vals = {r: _num(frame.iat[k, pos[r]]) for r in COLUMNS}
            t = (None if np.isnat(times[k]) else
                 pd.Timestamp(times[k].astype(np.int64) + self._shift_ns, tz="UTC").tz_convert(EASTERN))
            bars.append(Bar(t, vals["open"], vals["high"], vals["low"], vals["close"], vals["volume"], line=line,
                            raw=text, nonexistent=bool(nonexistent[k]), time_text=texts[k]))
        return bars

    @staticmethod
    def _timestamp_texts(frame: pd.DataFrame, ts_spec: tuple[str, tuple[int, ...]]) -> list[str]:
        kind, cols = ts_spec
        if kind == "pair":
            return [f"{d} {t}" for d, t in zip(frame[cols[0]], frame[cols[1]])]
        return [str(x) for x in frame[cols[0]]]

    def _times(self, frame: pd.DataFrame, ts_spec: tuple[str, tuple[int, ...]],
               lines: list[int]) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
        """Naive-UTC datetime64[ns] per row (NaT when unreadable) and the DST-gap mask, by the loader's parser.

        Earlier timestamp texts of the file go first, so the format is picked as ``data check`` picks it
        for the whole file; (None, None) when these rows would make those earlier texts read otherwise
        (e.g. one 13/02/2024 in a file read as MM/DD): the format, once used, stays.
        """
        kind, cols = ts_spec
        context = self._first + self._last
        texts = [c for c, _ in context]
        if kind == "pair":
            d, _, t = zip(*(c.partition(" ") for c in texts)) if texts else ((), (), ())
            ctx = pd.DataFrame({0: list(d), 1: list(t)}, dtype=object)
        else:
            ctx = pd.DataFrame({0: texts}, dtype=object)
        part = frame[list(cols)].copy()
        part.columns = range(len(cols))
        part = pd.concat([ctx, part], ignore_index=True).astype(object)
        spec = (kind, tuple(range(len(cols))))
        n_ctx = len(context)
        all_lines = np.array([0] * n_ctx + lines, dtype=np.int64)
        try:
            ts, nonexistent, _raw, _notes = parse_timestamps(part, spec, self.tz, self.time_shift,
                                                             Checker(file=str(self.path), repair=True), all_lines)
        except UserError:
            return None, None
        if n_ctx and not np.array_equal(ts[:n_ctx], np.array([t for _, t in context], dtype="datetime64[ns]")):
            return None, None
        return ts[n_ctx:], nonexistent[n_ctx:]

    def _remember(self, good: list[tuple[str, np.datetime64]]) -> None:
        room = self.SAMPLE - len(self._first)
        if room > 0:
            self._first += good[:room]
            good = good[room:]
        self._last = (self._last + good)[-self.SAMPLE:]

    def __iter__(self) -> Iterator[Bar]:
        idle_since = time.monotonic()
        try:
            while not self.stop.is_set():
                bars = self.poll()
                if bars:
                    yield from bars
                    idle_since = time.monotonic()  # from the last bar done, not read: a slow consumer is not idle
                    continue
                if self.timeout_s is not None and time.monotonic() - idle_since >= self.timeout_s:
                    if self._fh is not None:  # a last line the writer left without its newline: not dropped
                        yield from self._read(final=True)
                    return
                if self.on_idle is not None:
                    self.on_idle()
                self.stop.wait(self.poll_s)
        finally:
            self.close()


# ---- --feed --------------------------------------------------------------------------------------

FEED_SCHEMES = ("replay", "follow")


@dataclass(frozen=True)
class FeedSpec:
    scheme: str
    path: Path
    speed: float | None = None


def parse_feed_spec(spec: str) -> FeedSpec:
    """``replay:FILE[:SPEED]`` or ``follow:FILE`` (FILE may hold ``:``, e.g. a Windows drive)."""
    text = str(spec).strip()
    scheme, sep, rest = text.partition(":")
    if not sep or scheme not in FEED_SCHEMES:
        raise UserError(f"unknown feed '{text}': expected replay:FILE[:SPEED] or follow:FILE", value=text,
                        fix="e.g. --feed replay:data/nq.csv:60 (60 x real time) or --feed follow:export.csv")
    speed: float | None = None
    path_text = rest
    if scheme == "replay":
        head, colon, tail = rest.rpartition(":")
        if colon and head and not Path(rest).expanduser().exists():
            try:
                speed = float(tail)
            except ValueError:
                raise UserError(f"replay speed '{tail}' is not a number", value=tail,
                                fix="e.g. replay:FILE:60 (60 x real time), or replay:FILE for as fast as possible"
                                ) from None
            if not (math.isfinite(speed) and speed > 0):
                raise UserError(f"replay speed {tail} must be positive", value=tail,
                                fix="e.g. replay:FILE:60 (60 x real time), or replay:FILE for as fast as possible")
            path_text = head
    if not path_text:
        raise UserError(f"the feed '{text}' names no file", value=text, fix=f"e.g. --feed {scheme}:bars.csv")
    path = Path(path_text).expanduser()
    if scheme == "replay" and not (path.exists() or is_many(path_text)):
        raise UserError("the replay file does not exist", file=str(path),
                        fix="check the path (a bars file, a folder of them, or a quoted glob)")
    if scheme == "follow" and not path.parent.is_dir():
        raise UserError("the folder of the followed file does not exist", file=str(path),
                        fix="point --feed follow: at the file the platform writes, e.g. follow:C:/NT/export.csv")
    return FeedSpec(scheme, path, speed)


def open_feed(spec: str | FeedSpec, *, stop: threading.Event | None = None, **kw: Any) -> Iterable[Bar]:
    """The feed a ``--feed`` spec names (extra keywords go to the feed: tz, time_shift, ...)."""
    fs = parse_feed_spec(spec) if isinstance(spec, str) else spec
    if fs.scheme == "replay":
        return ReplayFeed(fs.path, fs.speed, stop=stop, **kw)
    return FollowFeed(fs.path, stop=stop, **kw)


__all__ = ["FOLLOW_POLL_S", "Bar", "FeedSpec", "FollowFeed", "ReplayFeed", "open_feed", "parse_feed_spec"]
