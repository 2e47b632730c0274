"""The row checks of a bars file as a declarative table (:data:`CHECKS`).

Each :class:`Check` is a record: a code, the column(s) it reads, a vectorised
predicate (``find``: the affected rows, the first one's column and value), whether a
repair drops the rows or fixes them (``action`` and ``repair``), and the texts of the
error (``problem``, ``fix``, ``repair_does``) and of the repair record (``reason``,
``done``, ``detail`` per row). :func:`hybrid_trader.data.validate.validate_frame` runs the
table in order on :class:`Rows`; a later check sees the rows the earlier ones left
(e.g. OHLC consistency is checked after the divide-by-100 prices were multiplied).

Every check is an error unless ``repair=True``; checks that only warn (tick grid,
shifted clock) are in :mod:`hybrid_trader.data.validate` and :mod:`hybrid_trader.data.clock`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import pandas as pd

from hybrid_trader.calendar import fmt_eastern

PRICES = ("open", "high", "low", "close")
COLUMNS = (*PRICES, "volume")
_MISSING_TEXT = ("nan", "na", "n/a", "null", "none", "-nan")


@dataclass(frozen=True)
class Rows:
    """The rows of a file while they are checked; every array has one entry per row, in order."""

    ts: np.ndarray
    """Bar start, ``datetime64[ns]`` naive UTC; NaT where unreadable or nonexistent."""
    nonexistent: np.ndarray
    """True where the wall-clock time was skipped by a daylight-saving change."""
    raw_ts: np.ndarray
    """Timestamp as written (object), for messages."""
    raw: dict[str, np.ndarray]
    """``open high low close volume`` as read (object or numeric), for messages."""
    num: dict[str, np.ndarray]
    """``open high low close volume`` as float64 (NaN where not a number)."""
    line: np.ndarray
    """File line (CSV, header = line 1) or 1-based row (Parquet) of each row (int64)."""

    def __len__(self) -> int:
        return len(self.line)

    def take(self, sel: np.ndarray) -> Rows:
        """The rows at ``sel`` (bool mask or positions), in that order."""
        return Rows(
            ts=self.ts[sel],
            nonexistent=self.nonexistent[sel],
            raw_ts=self.raw_ts[sel],
            raw={k: v[sel] for k, v in self.raw.items()},
            num={k: v[sel] for k, v in self.num.items()},
            line=self.line[sel],
        )

    def drop(self, pos: np.ndarray) -> Rows:
        keep = np.ones(len(self), dtype=bool)
        keep[pos] = False
        return self.take(keep)

    def with_num(self, **cols: np.ndarray) -> Rows:
        return replace(self, num={**self.num, **cols})

    def prices(self) -> np.ndarray:
        """``(N, 4)`` float64 open, high, low, close."""
        return np.stack([self.num[c] for c in PRICES], axis=1)


@dataclass
class Hits:
    """Rows a check found: positions in :class:`Rows`, the first one's column and value."""

    pos: np.ndarray
    """Positions of the affected rows (ascending)."""
    column: str
    """Column of the first affected row's problem."""
    value: Any
    """Offending value of the first affected row."""
    info: dict[str, Any] = field(default_factory=dict)
    """Whatever the check's texts and repair need (computed once, vectorised)."""


Where = Callable[[int], str]
"""File line -> ``"line 12"`` (CSV) or ``"row 11"`` (Parquet)."""


@dataclass(frozen=True)
class Check:
    """One row check: what it finds, what a repair does, and what the messages say."""

    code: str
    """Kind of problem, e.g. ``duplicate-timestamp`` (the repair record's code)."""
    columns: tuple[str, ...]
    """Columns the check reads."""
    action: Literal["dropped", "repaired"]
    """What ``repair=True`` does to the affected rows."""
    find: Callable[[Rows], Hits | None]
    """Vectorised predicate: the affected rows, or None."""
    problem: Callable[[Rows, Hits, Where], str]
    """The error's text about the first affected row."""
    fix: str
    """How to fix the file (the error's fix)."""
    repair_does: str
    """What ``--repair`` would do, imperative (appended to the error's fix)."""
    reason: str
    """The kind of problem (repair record)."""
    done: str
    """What was done (repair record)."""
    detail: Callable[[Rows, Hits, int, Where], str]
    """One affected row (i-th hit) for the repair's row notes."""
    repair: Callable[[Rows, Hits], Rows]
    """The rows after the repair."""
    severity: Literal["error"] = "error"
    """Every row check is an error unless repaired (warnings never stop loading)."""


# ---- helpers --------------------------------------------------------------------------


def _raw_repr(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, (np.integer, int)):
        return int(v)
    return v


def _what_is_wrong(raw: Any, num: float) -> str:
    if isinstance(raw, str):
        if not raw.strip() or raw.strip().lower() in _MISSING_TEXT:
            return "is missing"
    elif raw is None or pd.isna(raw):
        return "is missing"
    if np.isinf(num):
        return "is infinite"
    return "is not a number"


def _hits(
    mask: np.ndarray, column: Callable[[int], str] | str, value: Callable[[int], Any], **info: Any
) -> Hits | None:
    """Hits of ``mask``; ``column``/``value`` of the first hit's position."""
    pos = np.flatnonzero(mask)
    if len(pos) == 0:
        return None
    p0 = int(pos[0])
    return Hits(pos, column if isinstance(column, str) else column(p0), value(p0), info)


def _drop(rows: Rows, hits: Hits) -> Rows:
    return rows.drop(hits.pos)


def reference_level(close: np.ndarray, window: int = 2001) -> np.ndarray:
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
        local = np.log10(reference_level(px[:, 3]))[:, None]
        glob = np.median(np.log10(px[:, 3]))

    def band(d: np.ndarray) -> np.ndarray:
        return (d > -2.5) & (d < -1.5)

    return band(lp - local) | band(lp - glob)


# ---- timestamps ------------------------------------------------------------------------


def _find_bad_timestamp(r: Rows) -> Hits | None:
    return _hits(np.isnat(r.ts) & ~r.nonexistent, "timestamp", lambda p: r.raw_ts[p])


def _find_nonexistent(r: Rows) -> Hits | None:
    return _hits(r.nonexistent, "timestamp", lambda p: r.raw_ts[p])


def _find_duplicate(r: Rows) -> Hits | None:
    idx = pd.DatetimeIndex(r.ts)
    dup = idx.duplicated(keep="first")
    if not dup.any():
        return None
    first = pd.Series(np.arange(len(r)), index=idx).groupby(level=0).transform("first").to_numpy()
    return _hits(dup, "timestamp", lambda p: fmt_eastern(r.ts[p]), first=first)


def _dup_detail(r: Rows, h: Hits, i: int, where: Where) -> str:
    p = h.pos[i]
    f = h.info["first"][p]
    same = all(r.num[c][p] == r.num[c][f] or (np.isnan(r.num[c][p]) and np.isnan(r.num[c][f])) for c in COLUMNS)
    kind = "identical" if same else "different values"
    return f"{fmt_eastern(r.ts[p])} repeats {where(r.line[f])} ({kind}); dropped, first kept"


def _find_unsorted(r: Rows) -> Hits | None:
    ti = r.ts.astype(np.int64)
    mask = np.zeros(len(r), dtype=bool)
    mask[1:] = ti[1:] < ti[:-1]
    return _hits(mask, "timestamp", lambda p: fmt_eastern(r.ts[p]))


def _sort(r: Rows, h: Hits) -> Rows:
    return r.take(np.argsort(r.ts.astype(np.int64), kind="stable"))


# ---- numbers ---------------------------------------------------------------------------


def _find_bad_price(r: Rows) -> Hits | None:
    bad = np.zeros(len(r), dtype=bool)
    first_col = np.full(len(r), "", dtype=object)
    for c in PRICES:
        b = ~np.isfinite(r.num[c])
        first_col[b & ~bad] = c
        bad |= b
    return _hits(bad, lambda p: first_col[p], lambda p: _raw_repr(r.raw[first_col[p]][p]), first_col=first_col)


def _bad_price_problem(r: Rows, h: Hits, where: Where) -> str:
    p = h.pos[0]
    return f"the price {_what_is_wrong(r.raw[h.column][p], r.num[h.column][p])} (missing, text, NaN or inf)"


def _bad_price_detail(r: Rows, h: Hits, i: int, where: Where) -> str:
    p = h.pos[i]
    c = h.info["first_col"][p]
    raw = r.raw[c][p]
    return f"{c} {_raw_repr(raw)!r} {_what_is_wrong(raw, r.num[c][p])}; row dropped"


def _find_bad_volume(r: Rows) -> Hits | None:
    return _hits(~np.isfinite(r.num["volume"]), "volume", lambda p: _raw_repr(r.raw["volume"][p]))


def _bad_volume_detail(r: Rows, h: Hits, i: int, where: Where) -> str:
    p = h.pos[i]
    raw = r.raw["volume"][p]
    return f"volume {_raw_repr(raw)!r} {_what_is_wrong(raw, r.num['volume'][p])}; set to 0"


def _zero_volume(r: Rows, h: Hits) -> Rows:
    vol = r.num["volume"].copy()
    vol[h.pos] = 0.0
    return r.with_num(volume=vol)


def _find_non_positive(r: Rows) -> Hits | None:
    px = r.prices()
    bad = px <= 0
    col = np.argmax(bad, axis=1)
    return _hits(np.asarray(bad.any(axis=1)), lambda p: PRICES[col[p]], lambda p: float(px[p, col[p]]), px=px, col=col)


def _non_positive_detail(r: Rows, h: Hits, i: int, where: Where) -> str:
    p = h.pos[i]
    k = h.info["col"][p]
    return f"{PRICES[k]} {h.info['px'][p, k]:g} <= 0; row dropped"


def _find_negative_volume(r: Rows) -> Hits | None:
    return _hits(r.num["volume"] < 0, "volume", lambda p: float(r.num["volume"][p]))


# ---- price level and OHLC consistency ------------------------------------------------------


def _find_divided(r: Rows) -> Hits | None:
    px = r.prices()
    flag = divided_by_100_mask(px)
    rows = np.asarray(flag.any(axis=1))
    if not rows.any():
        return None
    level = reference_level(px[:, 3])
    col = np.argmax(flag, axis=1)
    return _hits(rows, lambda p: PRICES[col[p]], lambda p: float(px[p, col[p]]), px=px, flag=flag, level=level)


def _divided_detail(r: Rows, h: Hits, i: int, where: Where) -> str:
    p = h.pos[i]
    px, flag = h.info["px"], h.info["flag"]
    cols = [f"{PRICES[j]} {px[p, j]:g} -> {px[p, j] * 100:g}" for j in range(4) if flag[p, j]]
    return ", ".join(cols) + f" (level ~{h.info['level'][p]:g}); multiplied by 100"


def _times_100(r: Rows, h: Hits) -> Rows:
    px = np.where(h.info["flag"], np.round(h.info["px"] * 100.0, 6), h.info["px"])
    return r.with_num(**{c: px[:, j] for j, c in enumerate(PRICES)})


def _find_high_below_low(r: Rows) -> Hits | None:
    return _hits(r.num["high"] < r.num["low"], "high", lambda p: float(r.num["high"][p]))


def _swap_high_low(r: Rows, h: Hits) -> Rows:
    hl = r.num["high"] < r.num["low"]
    return r.with_num(high=np.where(hl, r.num["low"], r.num["high"]), low=np.where(hl, r.num["high"], r.num["low"]))


def _find_outside(r: Rows) -> Hits | None:
    o, hi, lo, c = (r.num[k] for k in PRICES)
    open_out = (o > hi) | (o < lo)
    col = np.where(open_out, "open", "close")
    return _hits(open_out | (c > hi) | (c < lo), lambda p: str(col[p]), lambda p: float(r.num[str(col[p])][p]))


def _outside_problem(r: Rows, h: Hits, where: Where) -> str:
    p = h.pos[0]
    return f"{h.column} {h.value:g} is outside [low {r.num['low'][p]:g}, high {r.num['high'][p]:g}]"


def _outside_detail(r: Rows, h: Hits, i: int, where: Where) -> str:
    p = h.pos[i]
    o, hi, lo, c = (r.num[k][p] for k in PRICES)
    nh, nl = max(hi, o, c), min(lo, o, c)
    parts = []
    if nh != hi:
        parts.append(f"high {hi:g} -> {nh:g}")
    if nl != lo:
        parts.append(f"low {lo:g} -> {nl:g}")
    return f"open {o:g}, close {c:g} outside [{lo:g}, {hi:g}]; " + ", ".join(parts)


def _widen(r: Rows, h: Hits) -> Rows:
    o, hi, lo, c = (r.num[k] for k in PRICES)
    return r.with_num(high=np.maximum.reduce([hi, o, c]), low=np.minimum.reduce([lo, o, c]))


# ---- the table ------------------------------------------------------------------------------

_DROP_ROWS = "drop those rows"
_ROWS_DROPPED = "rows dropped"
_ZERO_VOLUME = "set the volume to 0 (unknown)"

CHECKS: tuple[Check, ...] = (
    Check(
        code="bad-timestamp", columns=("timestamp",), action="dropped",
        find=_find_bad_timestamp,
        problem=lambda r, h, w: "cannot read the timestamp",
        fix="write timestamps like 2023-11-19 18:00:00 (or 2023-11-19T18:00:00-05:00 with a UTC offset)",
        repair_does=_DROP_ROWS, reason="timestamp cannot be read", done=_ROWS_DROPPED,
        detail=lambda r, h, i, w: f"timestamp {r.raw_ts[h.pos[i]]!r} cannot be read; row dropped",
        repair=_drop,
    ),
    Check(
        code="nonexistent-time", columns=("timestamp",), action="dropped",
        find=_find_nonexistent,
        problem=lambda r, h, w: (
            "the wall-clock time does not exist in the given time zone (skipped by the daylight-saving change)"
        ),
        fix="check --tz (a file without daylight-saving jumps may be in UTC: --tz UTC) and --time-shift",
        repair_does=_DROP_ROWS, reason="wall-clock time skipped by the daylight-saving change", done=_ROWS_DROPPED,
        detail=lambda r, h, i, w: f"timestamp {r.raw_ts[h.pos[i]]!r} does not exist on the local clock; row dropped",
        repair=_drop,
    ),
    Check(
        code="bad-price", columns=PRICES, action="dropped",
        find=_find_bad_price,
        problem=_bad_price_problem,
        fix="correct or remove the row in the file (prices must be finite numbers)",
        repair_does=_DROP_ROWS, reason="price missing, text, NaN or infinite", done=_ROWS_DROPPED,
        detail=_bad_price_detail,
        repair=_drop,
    ),
    Check(
        code="bad-volume", columns=("volume",), action="repaired",
        find=_find_bad_volume,
        problem=lambda r, h, w: (
            f"the volume {_what_is_wrong(r.raw['volume'][h.pos[0]], r.num['volume'][h.pos[0]])} "
            "(missing, text, NaN or inf)"
        ),
        fix="correct the volume in the file (a finite number >= 0)",
        repair_does=_ZERO_VOLUME, reason="volume missing, text, NaN or infinite", done="volume set to 0",
        detail=_bad_volume_detail,
        repair=_zero_volume,
    ),
    Check(
        code="non-positive-price", columns=PRICES, action="dropped",
        find=_find_non_positive,
        problem=lambda r, h, w: "a price is zero or negative",
        fix="correct or remove the row (futures prices here are positive)",
        repair_does=_DROP_ROWS, reason="price zero or negative", done=_ROWS_DROPPED,
        detail=_non_positive_detail,
        repair=_drop,
    ),
    Check(
        code="negative-volume", columns=("volume",), action="repaired",
        find=_find_negative_volume,
        problem=lambda r, h, w: "the volume is negative",
        fix="correct the volume in the file (>= 0)",
        repair_does=_ZERO_VOLUME, reason="negative volume", done="volume set to 0",
        detail=lambda r, h, i, w: f"volume {r.num['volume'][h.pos[i]]:g} < 0; set to 0",
        repair=_zero_volume,
    ),
    Check(
        code="duplicate-timestamp", columns=("timestamp",), action="dropped",
        find=_find_duplicate,
        problem=lambda r, h, w: f"the timestamp repeats {w(r.line[h.info['first'][h.pos[0]]])}",
        fix="remove the duplicate rows from the file",
        repair_does="drop the later duplicates and keep the first",
        reason="duplicate timestamp", done="later rows dropped, the first kept",
        detail=_dup_detail,
        repair=_drop,
    ),
    Check(
        code="unsorted", columns=("timestamp",), action="repaired",
        find=_find_unsorted,
        problem=lambda r, h, w: f"the timestamp is earlier than the one on {w(r.line[h.pos[0] - 1])}",
        fix="sort the file by time",
        repair_does="sort the rows by time", reason="timestamp earlier than the previous row's",
        done="rows sorted by time",
        detail=lambda r, h, i, w: (
            f"{fmt_eastern(r.ts[h.pos[i]])} comes after {fmt_eastern(r.ts[h.pos[i] - 1])} "
            f"({w(r.line[h.pos[i] - 1])}); sorted"
        ),
        repair=_sort,
    ),
    Check(
        code="divide-by-100", columns=PRICES, action="repaired",
        find=_find_divided,
        problem=lambda r, h, w: (
            f"prices are about 1/100 of the surrounding level (~{h.info['level'][h.pos[0]]:g}): "
            "the divide-by-100 corruption"
        ),
        fix="re-export the bars from the source",
        repair_does="multiply those prices by 100",
        reason="prices about 1/100 of the surrounding level (divide-by-100 corruption)", done="multiplied by 100",
        detail=_divided_detail,
        repair=_times_100,
    ),
    Check(
        code="high-below-low", columns=("high", "low"), action="repaired",
        find=_find_high_below_low,
        problem=lambda r, h, w: f"high {h.value:g} is below low {r.num['low'][h.pos[0]]:g}",
        fix="correct high and low in the file (high >= low)",
        repair_does="swap high and low", reason="high below low", done="high and low swapped",
        detail=lambda r, h, i, w: f"high {r.num['high'][h.pos[i]]:g} < low {r.num['low'][h.pos[i]]:g}; swapped",
        repair=_swap_high_low,
    ),
    Check(
        code="open-close-outside", columns=PRICES, action="repaired",
        find=_find_outside,
        problem=_outside_problem,
        fix="correct the bar in the file (low <= open, close <= high)",
        repair_does="widen high/low to include open and close", reason="open or close outside [low, high]",
        done="high/low widened to include them",
        detail=_outside_detail,
        repair=_widen,
    ),
)
"""The row checks, in the order they run."""
