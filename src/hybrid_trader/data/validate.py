"""Validation and repair of loaded bars, and the checks that only warn.

Every check is either a :class:`~hybrid_trader.errors.UserError` naming the file, the
first offending row, the column, the value and the fix (``repair=False``), or, with
``repair=True``, a fix recorded in the notes: one header line per kind of problem
(``"repaired [kind] N rows: ..."`` or ``"dropped [kind] N rows: ..."``) followed by one
line per affected row (``"  line 12: ..."``; at most :data:`ROW_NOTE_LIMIT` per kind, then
a count of the rest). Nothing is dropped silently.

The checks, in the order they run (:func:`validate_frame`):

==========================  ==============================  =================================
kind                        problem                         repair
==========================  ==============================  =================================
``bad-timestamp``           timestamp cannot be parsed      row dropped
``nonexistent-time``        wall-clock time skipped by DST  row dropped
``bad-price``               price missing, text or inf      row dropped
``bad-volume``              volume missing, text or inf     volume set to 0
``non-positive-price``      price <= 0                      row dropped
``negative-volume``         volume < 0                      volume set to 0
``duplicate-timestamp``     timestamp seen before           later rows dropped, first kept
``unsorted``                earlier than the previous row   rows sorted by time (stable)
``divide-by-100``           prices ~1/100 of the level      those prices multiplied by 100
``high-below-low``          high < low                      high and low swapped
``open-close-outside``      open/close outside [low, high]  high/low widened to include them
==========================  ==============================  =================================

Warnings that never stop loading: prices off the contract's tick grid
(:func:`off_grid_mask`, "back-adjusted continuous contract?") and a clock that looks
shifted (:func:`detect_rth_open`, :func:`clock_findings`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from hybrid_trader.errors import UserError

ROW_NOTE_LIMIT = 100
"""Per kind of repair, at most this many row-by-row notes; the rest are counted."""

PRICES = ("open", "high", "low", "close")
RTH_OPEN_MINUTE = 9 * 60 + 30
"""09:30 ET, the regular-session open, in minutes since midnight."""
CLOCK_WINDOW_MINUTES = 30
"""Length of the before/after windows compared when looking for the RTH volume surge."""

_HEADER_RE = r"^(repaired|dropped) \[([a-z0-9-]+)\] (\d+) rows?: (.*)$"


def _plural(n: int, word: str = "row") -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _fmt_ts(ts: Any) -> str:
    """A naive-UTC datetime64 value as ``"2023-11-20 09:31:00 EST"`` (Eastern)."""
    t = pd.Timestamp(ts)
    if t is pd.NaT:
        return "NaT"
    if t.tz is None:
        t = t.tz_localize("UTC")
    return t.tz_convert("America/New_York").strftime("%Y-%m-%d %H:%M:%S %Z")


@dataclass
class Checker:
    """Turns findings into errors (``repair=False``) or into recorded repairs."""

    file: str
    """File name shown in messages."""
    repair: bool = False
    """Repair what can be repaired (and record it) instead of raising."""
    csv: bool = True
    """CSV rows are shown as file lines (header = line 1); Parquet rows as 1-based rows."""
    notes: list[str] = field(default_factory=list)
    """Header and row notes of every repair, in order."""

    def where(self, line: int) -> str:
        """``"line 12"`` for CSV, ``"row 11"`` for Parquet."""
        return f"line {int(line)}" if self.csv else f"row {int(line)}"

    def data_row(self, line: int) -> int:
        """1-based data row (header excluded), as :class:`UserError` expects."""
        return int(line) - 1 if self.csv else int(line)

    def handle(
        self,
        kind: str,
        lines: np.ndarray,
        *,
        problem: str,
        column: str | None,
        value: Any,
        fix: str,
        verb: str,
        action: str,
        reason: str,
        done: str,
        detail: Callable[[int], str],
    ) -> None:
        """Raise or record one kind of problem found on ``lines`` (file lines, in file order).

        ``detail(i)`` describes the i-th affected row (for the row-by-row notes),
        ``value`` is the first offending value, ``action`` what ``--repair`` does
        (imperative, for the error's fix), ``reason`` the kind of problem and ``done``
        what was done (for the repair note).
        """
        n = len(lines)
        if n == 0:
            return
        if not self.repair:
            raise UserError(
                f"on {self.where(lines[0])}, {problem} ({_plural(n)} affected; the first is shown)",
                file=self.file,
                row=self.data_row(lines[0]),
                column=column,
                value=value,
                fix=f"{fix}; or pass --repair (load_bars(..., repair=True)) to {action}",
            )
        self.notes.append(f"{verb} [{kind}] {_plural(n)}: {reason}; {done}")
        shown = min(n, ROW_NOTE_LIMIT)
        for i in range(shown):
            self.notes.append(f"  {self.where(lines[i])}: {detail(i)}")
        if n > shown:
            rest = np.asarray(lines[shown:])
            self.notes.append(
                f"  ... and {_plural(n - shown)} more with the same repair "
                f"({self.where(rest.min())} to {self.where(rest.max())})"
            )


def parse_repair_notes(notes: Sequence[str]) -> list[dict[str, Any]]:
    """The header notes of repairs as dicts ``{kind, action, rows, reason}``."""
    import re

    rx = re.compile(_HEADER_RE)
    out = []
    for note in notes:
        m = rx.match(note)
        if m:
            out.append({"kind": m.group(2), "action": m.group(1), "rows": int(m.group(3)), "reason": m.group(4)})
    return out


# ---- the checks ------------------------------------------------------------------


def _raw_repr(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, (np.integer, int)):
        return int(v)
    return v


def _what_is_wrong(raw: Any, num: float) -> str:
    if isinstance(raw, str):
        if not raw.strip() or raw.strip().lower() in ("nan", "na", "n/a", "null", "none", "-nan"):
            return "is missing"
    elif raw is None or pd.isna(raw):
        return "is missing"
    if np.isinf(num):
        return "is infinite"
    return "is not a number"


def validate_frame(
    work: pd.DataFrame,
    raw_ts: pd.Series | None,
    ck: Checker,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Check and (with ``ck.repair``) repair the file's rows.

    ``work`` has columns ``ts`` (datetime64[ns], naive UTC, NaT where unparseable),
    ``nonexistent`` (bool: wall-clock times skipped by DST), raw ``open high low close
    volume`` and ``line`` (file line of each row). ``raw_ts`` holds the timestamp text
    for messages. Returns a frame indexed by ET timestamps, float64 OHLCV, sorted,
    unique, consistent, and the file line of each of its rows.
    """
    # -- timestamps that could not be parsed or do not exist ----------------------
    bad_ts = work["ts"].isna().to_numpy()
    nonexist = work["nonexistent"].to_numpy() if "nonexistent" in work else np.zeros(len(work), bool)
    unparsed = bad_ts & ~nonexist
    if unparsed.any():
        pos = np.flatnonzero(unparsed)
        lines = work["line"].to_numpy()[pos]
        texts = raw_ts.iloc[pos].tolist() if raw_ts is not None else [None] * len(pos)
        ck.handle(
            "bad-timestamp",
            lines,
            problem="cannot read the timestamp",
            column="timestamp",
            value=texts[0],
            fix="write timestamps like 2023-11-19 18:00:00 (or 2023-11-19T18:00:00-05:00 with a UTC offset)",
            verb="dropped",
            action="drop those rows",
            reason="timestamp cannot be read",
            done="rows dropped",
            detail=lambda i: f"timestamp {texts[i]!r} cannot be read; row dropped",
        )
    if nonexist.any():
        pos = np.flatnonzero(nonexist)
        lines = work["line"].to_numpy()[pos]
        texts = raw_ts.iloc[pos].tolist() if raw_ts is not None else [None] * len(pos)
        ck.handle(
            "nonexistent-time",
            lines,
            problem="the wall-clock time does not exist in the given time zone (skipped by the daylight-saving change)",
            column="timestamp",
            value=texts[0],
            fix="check --tz (a file without daylight-saving jumps may be in UTC: --tz UTC) and --time-shift",
            verb="dropped",
            action="drop those rows",
            reason="wall-clock time skipped by the daylight-saving change",
            done="rows dropped",
            detail=lambda i: f"timestamp {texts[i]!r} does not exist on the local clock; row dropped",
        )
    if bad_ts.any():
        work = work.loc[~bad_ts]

    # -- numbers ------------------------------------------------------------------
    nums = {c: pd.to_numeric(work[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan) for c in PRICES + ("volume",)}
    lines_all = work["line"].to_numpy()
    price_bad = np.zeros(len(work), dtype=bool)
    first_bad_col = np.full(len(work), "", dtype=object)
    for c in PRICES:
        b = ~np.isfinite(nums[c])
        first_bad_col[b & ~price_bad] = c
        price_bad |= b
    if price_bad.any():
        pos = np.flatnonzero(price_bad)
        raw_cols = {c: work[c].to_numpy() for c in PRICES}

        def _desc(i: int, pos=pos, raw_cols=raw_cols) -> str:
            c = first_bad_col[pos[i]]
            raw = raw_cols[c][pos[i]]
            return f"{c} {_raw_repr(raw)!r} {_what_is_wrong(raw, nums[c][pos[i]])}; row dropped"

        c0 = first_bad_col[pos[0]]
        raw0 = raw_cols[c0][pos[0]]
        ck.handle(
            "bad-price",
            lines_all[pos],
            problem=f"the price {_what_is_wrong(raw0, nums[c0][pos[0]])} (missing, text, NaN or inf)",
            column=c0,
            value=_raw_repr(raw0),
            fix="correct or remove the row in the file (prices must be finite numbers)",
            verb="dropped",
            action="drop those rows",
            reason="price missing, text, NaN or infinite",
            done="rows dropped",
            detail=_desc,
        )
    vol = nums["volume"]
    vol_bad = ~np.isfinite(vol)
    if vol_bad.any():
        keep_pos = np.flatnonzero(vol_bad & ~price_bad)
        raw_v = work["volume"].to_numpy()
        if len(keep_pos):
            ck.handle(
                "bad-volume",
                lines_all[keep_pos],
                problem=f"the volume {_what_is_wrong(raw_v[keep_pos[0]], vol[keep_pos[0]])} (missing, text, NaN or inf)",
                column="volume",
                value=_raw_repr(raw_v[keep_pos[0]]),
                fix="correct the volume in the file (a finite number >= 0)",
                verb="repaired",
                action="set the volume to 0 (unknown)",
                reason="volume missing, text, NaN or infinite",
            done="volume set to 0",
            detail=lambda i: f"volume {_raw_repr(raw_v[keep_pos[i]])!r} {_what_is_wrong(raw_v[keep_pos[i]], vol[keep_pos[i]])}; set to 0",
            )
        vol = np.where(vol_bad, 0.0, vol)

    o, h, l, c = (nums[k] for k in PRICES)
    ts = work["ts"].to_numpy(dtype="datetime64[ns]")  # naive UTC
    keep = ~price_bad
    o, h, l, c, vol, ts, lines = o[keep], h[keep], l[keep], c[keep], vol[keep], ts[keep], lines_all[keep]

    # -- non-positive prices ------------------------------------------------------
    px = np.stack([o, h, l, c], axis=1)
    nonpos = (px <= 0).any(axis=1)
    if nonpos.any():
        pos = np.flatnonzero(nonpos)
        col_idx = np.argmax(px[pos] <= 0, axis=1)
        ck.handle(
            "non-positive-price",
            lines[pos],
            problem="a price is zero or negative",
            column=PRICES[col_idx[0]],
            value=float(px[pos[0], col_idx[0]]),
            fix="correct or remove the row (futures prices here are positive)",
            verb="dropped",
            action="drop those rows",
            reason="price zero or negative",
            done="rows dropped",
            detail=lambda i: f"{PRICES[col_idx[i]]} {px[pos[i], col_idx[i]]:g} <= 0; row dropped",
        )
        k = ~nonpos
        o, h, l, c, vol, ts, lines = o[k], h[k], l[k], c[k], vol[k], ts[k], lines[k]

    # -- negative volume ------------------------------------------------------------
    neg = vol < 0
    if neg.any():
        pos = np.flatnonzero(neg)
        vneg = vol[pos].copy()
        ck.handle(
            "negative-volume",
            lines[pos],
            problem="the volume is negative",
            column="volume",
            value=float(vneg[0]),
            fix="correct the volume in the file (>= 0)",
            verb="repaired",
            action="set the volume to 0 (unknown)",
            reason="negative volume",
            done="volume set to 0",
            detail=lambda i: f"volume {vneg[i]:g} < 0; set to 0",
        )
        vol = np.where(neg, 0.0, vol)

    # -- duplicate timestamps (file order: the first occurrence is kept) ------------
    ts_idx = pd.DatetimeIndex(ts)
    dup = ts_idx.duplicated(keep="first")
    if dup.any():
        pos = np.flatnonzero(dup)
        first_pos = pd.Series(np.arange(len(ts)), index=ts_idx).groupby(level=0).transform("first").to_numpy()
        same = np.stack([o, h, l, c, vol], axis=1)

        def _dup_desc(i: int) -> str:
            p, f = pos[i], first_pos[pos[i]]
            kind = "identical" if np.array_equal(same[p], same[f]) else "different values"
            return f"{_fmt_ts(ts[p])} repeats {ck.where(lines[f])} ({kind}); dropped, first kept"

        ck.handle(
            "duplicate-timestamp",
            lines[pos],
            problem=f"the timestamp repeats {ck.where(lines[first_pos[pos[0]]])}",
            column="timestamp",
            value=_fmt_ts(ts[pos[0]]),
            fix="remove the duplicate rows from the file",
            verb="dropped",
            action="drop the later duplicates and keep the first",
            reason="duplicate timestamp",
            done="later rows dropped, the first kept",
            detail=_dup_desc,
        )
        k = ~dup
        o, h, l, c, vol, ts, lines = o[k], h[k], l[k], c[k], vol[k], ts[k], lines[k]

    # -- unsorted timestamps ----------------------------------------------------------
    ti = ts.astype(np.int64)
    desc = np.flatnonzero(ti[1:] < ti[:-1]) + 1
    if len(desc):
        tsx = ts
        ck.handle(
            "unsorted",
            lines[desc],
            problem=f"the timestamp is earlier than the one on {ck.where(lines[desc[0] - 1])}",
            column="timestamp",
            value=_fmt_ts(tsx[desc[0]]),
            fix="sort the file by time",
            verb="repaired",
            action="sort the rows by time",
            reason="timestamp earlier than the previous row's",
            done="rows sorted by time",
            detail=lambda i: f"{_fmt_ts(tsx[desc[i]])} comes after {_fmt_ts(tsx[desc[i] - 1])} ({ck.where(lines[desc[i] - 1])}); sorted",
        )
        order = np.argsort(ti, kind="stable")
        o, h, l, c, vol, ts, lines = o[order], h[order], l[order], c[order], vol[order], ts[order], lines[order]

    # -- divide-by-100 corruption -----------------------------------------------------
    px = np.stack([o, h, l, c], axis=1)
    flag = divided_by_100_mask(px)
    rows100 = flag.any(axis=1)
    if rows100.any():
        pos = np.flatnonzero(rows100)
        level = _reference_level(px[:, 3])
        before = px[pos].copy()
        col0 = int(np.argmax(flag[pos[0]]))

        def _d100(i: int) -> str:
            p = pos[i]
            cols = [f"{PRICES[j]} {before[i, j]:g} -> {before[i, j] * 100:g}" for j in range(4) if flag[p, j]]
            return ", ".join(cols) + f" (level ~{level[p]:g}); multiplied by 100"

        ck.handle(
            "divide-by-100",
            lines[pos],
            problem=f"prices are about 1/100 of the surrounding level (~{level[pos[0]]:g}): the divide-by-100 corruption",
            column=PRICES[col0],
            value=float(px[pos[0], col0]),
            fix="re-export the bars from the source",
            verb="repaired",
            action="multiply those prices by 100",
            reason="prices about 1/100 of the surrounding level (divide-by-100 corruption)",
            done="multiplied by 100",
            detail=_d100,
        )
        px = np.where(flag, np.round(px * 100.0, 6), px)
        o, h, l, c = px[:, 0], px[:, 1], px[:, 2], px[:, 3]

    # -- OHLC consistency -----------------------------------------------------------
    hl = h < l
    if hl.any():
        pos = np.flatnonzero(hl)
        hh, ll = h[pos].copy(), l[pos].copy()
        ck.handle(
            "high-below-low",
            lines[pos],
            problem=f"high {hh[0]:g} is below low {ll[0]:g}",
            column="high",
            value=float(hh[0]),
            fix="correct high and low in the file (high >= low)",
            verb="repaired",
            action="swap high and low",
            reason="high below low",
            done="high and low swapped",
            detail=lambda i: f"high {hh[i]:g} < low {ll[i]:g}; swapped",
        )
        h, l = np.where(hl, l, h), np.where(hl, h, l)
    outside = (o > h) | (o < l) | (c > h) | (c < l)
    if outside.any():
        pos = np.flatnonzero(outside)
        oo, hh, ll, cc = o[pos], h[pos].copy(), l[pos].copy(), c[pos]
        o_out0 = (oo[0] > hh[0]) or (oo[0] < ll[0])
        col0 = "open" if o_out0 else "close"
        v0 = oo[0] if o_out0 else cc[0]

        def _od(i: int) -> str:
            nh, nl = max(hh[i], oo[i], cc[i]), min(ll[i], oo[i], cc[i])
            parts = []
            if nh != hh[i]:
                parts.append(f"high {hh[i]:g} -> {nh:g}")
            if nl != ll[i]:
                parts.append(f"low {ll[i]:g} -> {nl:g}")
            return f"open {oo[i]:g}, close {cc[i]:g} outside [{ll[i]:g}, {hh[i]:g}]; " + ", ".join(parts)

        ck.handle(
            "open-close-outside",
            lines[pos],
            problem=f"{col0} {v0:g} is outside [low {ll[0]:g}, high {hh[0]:g}]",
            column=col0,
            value=float(v0),
            fix="correct the bar in the file (low <= open, close <= high)",
            verb="repaired",
            action="widen high/low to include open and close",
            reason="open or close outside [low, high]",
            done="high/low widened to include them",
            detail=_od,
        )
        h = np.maximum.reduce([h, o, c])
        l = np.minimum.reduce([l, o, c])

    index = pd.DatetimeIndex(ts).tz_localize("UTC").tz_convert("America/New_York").as_unit("ns")
    index.name = "timestamp"
    return pd.DataFrame({"open": o, "high": h, "low": l, "close": c, "volume": vol}, index=index), lines


def _reference_level(close: np.ndarray, window: int = 2001) -> np.ndarray:
    """Surrounding price level: centred rolling median of the close."""
    w = int(min(window, max(1, len(close))))
    return pd.Series(close).rolling(w, center=True, min_periods=1).median().to_numpy()


def divided_by_100_mask(px: np.ndarray) -> np.ndarray:
    """``(N, 4)`` bool: prices about 1/100 of the surrounding level (between 1/316 and 1/32).

    The level is the centred rolling median of the close (2001 bars) or, for long
    corrupted runs that move the rolling median, the median of the whole file.
    """
    if len(px) == 0:
        return np.zeros(px.shape, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        lp = np.log10(px)
        local = np.log10(_reference_level(px[:, 3]))[:, None]
        glob = np.median(np.log10(px[:, 3]))
    band = lambda d: (d > -2.5) & (d < -1.5)  # noqa: E731
    return band(lp - local) | band(lp - glob)


# ---- warnings that never stop loading ----------------------------------------------


def off_grid_mask(prices: np.ndarray, tick: float, tol: float = 0.01) -> np.ndarray:
    """True where a price is more than ``tol`` ticks away from the contract's tick grid."""
    q = np.asarray(prices, dtype=np.float64) / tick
    return np.abs(q - np.round(q)) > tol


def tick_grid_finding(frame: pd.DataFrame, market: str, tick: float, where: Callable[[int], str] | None = None) -> str | None:
    """A note when prices are off the tick grid (never an error), else None."""
    px = frame[list(PRICES)].to_numpy(np.float64)
    off = off_grid_mask(px, tick)
    n_off = int(off.sum())
    if n_off == 0:
        return None
    first = int(np.flatnonzero(off.any(axis=1))[0])
    at = where(first) if where else f"bar {first}"
    pct = 100.0 * n_off / off.size
    return (
        f"note [tick-grid] {n_off} of {off.size} prices ({pct:.1f}%) are off {market}'s {tick:g} tick grid "
        f"(first at {at}, {frame.index[first]:%Y-%m-%d %H:%M} ET): back-adjusted continuous contract? "
        "Prices are kept as they are."
    )


def _volume_profile(minute: np.ndarray, volume: np.ndarray) -> np.ndarray:
    """Mean volume per minute of day (1440,), NaN where too few bars to tell."""
    counts = np.bincount(minute, minlength=1440).astype(np.float64)
    sums = np.bincount(minute, weights=volume, minlength=1440)
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
    m = np.arange(1440)
    after = np.stack([prof[(m + j * step) % 1440] for j in range(k)])
    before = np.stack([prof[(m - (j + 1) * step) % 1440] for j in range(k)])

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
    minute = (index.hour * 60 + index.minute).to_numpy(np.int64)
    score = rth_open_scores(minute, volume, bar_minutes)
    if not np.isfinite(score).any():
        return None, float("nan")
    best = int(np.nanargmax(score))
    return best, float(score[best])


def fmt_minute(m: int | None) -> str | None:
    """``570 -> "09:30"``."""
    return None if m is None else f"{m // 60:02d}:{m % 60:02d}"


def _offset_labels(index: pd.DatetimeIndex) -> np.ndarray:
    """'EDT' / 'EST' per bar of an ET index."""
    off = (index.tz_localize(None) - index.tz_convert("UTC").tz_localize(None)).total_seconds().to_numpy()
    return np.where(off == -4 * 3600, "EDT", np.where(off == -5 * 3600, "EST", "other"))


def rth_open_by_period(index: pd.DatetimeIndex, volume: np.ndarray, bar_minutes: int, min_days: int = 3) -> dict[str, str | None]:
    """Detected RTH open separately for daylight (EDT) and standard (EST) time, when each has data."""
    labels = _offset_labels(index)
    out: dict[str, str | None] = {}
    for lab in ("EDT", "EST"):
        sel = labels == lab
        if not sel.any():
            continue
        idx = index[sel]
        days = len(np.unique(idx.tz_localize(None).normalize()))
        if days < min_days:
            continue
        m, _ = detect_rth_open(idx, np.asarray(volume)[sel], bar_minutes)
        out[lab] = fmt_minute(m)
    return out


def clock_findings(
    index: pd.DatetimeIndex, volume: np.ndarray, bar_minutes: int, *, time_shift: float = 0.0, tz: str | None = None
) -> list[str]:
    """Warnings when the volume surge of the RTH open is not at 09:30 ET (shifted clock)."""
    out: list[str] = []
    m, score = detect_rth_open(index, volume, bar_minutes)
    if m is None or not np.isfinite(score) or score < 2.0:
        return out
    minute = (index.hour * 60 + index.minute).to_numpy(np.int64)
    all_scores = rth_open_scores(minute, volume, bar_minutes)
    s930 = all_scores[RTH_OPEN_MINUTE]
    by = rth_open_by_period(index, volume, bar_minutes)
    if len(by) == 2 and None not in by.values() and by["EDT"] != by["EST"]:
        out.append(
            f"warning [clock] the volume surge of the RTH open is at {by['EDT']} ET in daylight time but "
            f"{by['EST']} ET in standard time: the timestamps look like UTC or another zone without "
            "daylight saving; try --tz UTC"
        )
        return out
    if m == RTH_OPEN_MINUTE or (np.isfinite(s930) and s930 >= 0.8 * score):
        return out
    off = (m - RTH_OPEN_MINUTE + 720) % 1440 - 720
    hours = off / 60.0
    k = int(round(hours))
    if k != 0 and abs(hours - k) * 60 <= max(1, bar_minutes):
        suggest = time_shift - k
        hint = ""
        if k == -1 and (tz in (None, "America/New_York")):
            hint = " (a clock 1 h behind ET is typical of America/Chicago stamps: --tz America/Chicago)"
        out.append(
            f"warning [clock] the volume surge of the RTH open is at {fmt_minute(m)} ET instead of 09:30 ET: "
            f"the clock looks shifted by {k:+d} h; try --time-shift {suggest:g}{hint}"
        )
    else:
        out.append(
            f"warning [clock] the strongest volume surge is at {fmt_minute(m)} ET, not at the 09:30 ET RTH open; "
            "check --tz and --time-shift"
        )
    return out
