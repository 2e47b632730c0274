"""Match a bars file's header to the columns :func:`~hybrid_trader.data.loader.load_bars` needs.

:func:`match_columns` finds open, high, low, close, volume and the timestamp (one column, or a
date + time pair) by name: case-insensitive, letters and digits only, common aliases accepted,
extra columns ignored. A header that lacks one raises a :class:`UserError` naming the accepted
names. Used by the loader and by the live CSV feed.
"""

from __future__ import annotations

import re
from typing import Any

from hybrid_trader.data.findings import AnyFinding, DataFinding
from hybrid_trader.errors import UserError, did_you_mean

TIMESTAMP_ALIASES = (
    "timestamp", "datetime", "ts", "dt", "datetimeutc", "timestamputc", "datetimeet",
    "bartime", "starttime", "opentime", "localtime", "gmttime", "utctime", "utc",
)
"""Normalised names (lower case, letters and digits only) of a full timestamp column."""
DATE_ALIASES = ("date", "day", "tradedate")
TIME_ALIASES = ("time", "timeofday")
COLUMN_ALIASES: dict[str, tuple[str, ...]] = {
    "open": ("open", "o", "openprice", "op"),
    "high": ("high", "h", "highprice", "hi", "max"),
    "low": ("low", "l", "lowprice", "lo", "min"),
    "close": ("close", "c", "last", "closeprice", "lastprice", "cl"),
    "volume": ("volume", "vol", "v", "totalvolume", "qty", "quantity"),
}
"""Accepted names of each price/volume column (after normalisation), best first."""


def _norm(name: Any) -> str:
    return re.sub(r"[^a-z0-9]", "", str(name).strip().lower())


def match_columns(names: list[str], file: str) -> tuple[dict[str, int], tuple[str, tuple[int, ...]], list[AnyFinding]]:
    """Positions of open..volume, the timestamp spec ``(kind, positions)`` and notes."""
    normed = [_norm(n) for n in names]
    notes: list[AnyFinding] = []

    def find(aliases: tuple[str, ...]) -> int | None:
        for alias in aliases:
            hits = [i for i, n in enumerate(normed) if n == alias]
            if hits:
                if len(hits) > 1:
                    notes.append(
                        DataFinding(
                            "note", "columns", f"{len(hits)} columns are named like '{names[hits[0]]}'; using the first"
                        )
                    )
                return hits[0]
        return None

    pos: dict[str, int] = {}
    for role, aliases in COLUMN_ALIASES.items():
        i = find(aliases)
        if i is not None:
            pos[role] = i
    ts_spec: tuple[str, tuple[int, ...]] | None = None
    i = find(TIMESTAMP_ALIASES)
    if i is not None:
        ts_spec = ("single", (i,))
    else:
        d, t = find(DATE_ALIASES), find(TIME_ALIASES)
        if d is not None and t is not None:
            ts_spec = ("pair", (d, t))
        elif d is not None or t is not None:
            ts_spec = ("single", (next(k for k in (d, t) if k is not None),))
        elif names and (normed[0] == "" or normed[0].startswith("unnamed") or normed[0] == "index"):
            ts_spec = ("single", (0,))
            notes.append(DataFinding("note", "columns", "the first, unnamed column is read as the timestamp"))

    missing = [
        r
        for r in ("timestamp", *COLUMN_ALIASES)
        if (r == "timestamp" and ts_spec is None) or (r != "timestamp" and r not in pos)
    ]
    if missing or ts_spec is None:
        raise _missing_columns_error(names, missing, pos, file)
    used_pos = set(pos.values()) | set(ts_spec[1])
    renamed = [f"{names[p]} -> {r}" for r, p in pos.items() if normed[p] != r]
    renamed += [
        f"{names[p]} -> {'timestamp' if ts_spec[0] == 'single' else ('date' if k == 0 else 'time')}"
        for k, p in enumerate(ts_spec[1])
        if normed[p] != "timestamp"
    ]
    ignored = [str(names[k]) for k in range(len(names)) if k not in used_pos]
    if renamed or ignored:
        parts = []
        if renamed:
            parts.append("columns matched: " + ", ".join(renamed))
        if ignored:
            parts.append("ignored: " + ", ".join(ignored))
        notes.append(DataFinding("note", "columns", "; ".join(parts)))
    return pos, ts_spec, notes


def _missing_columns_error(names: list[str], missing: list[str], pos: dict[str, int], file: str) -> UserError:
    """The error for a header without the ``missing`` columns (or without any header line)."""
    # A first line of numbers means the file has no header line.
    numeric = sum(bool(re.fullmatch(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?", str(n).strip())) for n in names)
    if numeric >= 3:
        return UserError(
            f"the first line holds data, not column names ({', '.join(map(str, names[:6]))}).",
            file=file,
            row=None,
            fix="add a header line such as: timestamp,open,high,low,close,volume",
        )
    used = set(pos.values())
    unused = [names[k] for k in range(len(names)) if k not in used]
    hints = []
    for m in missing:
        options = (*TIMESTAMP_ALIASES, *DATE_ALIASES) if m == "timestamp" else COLUMN_ALIASES[m]
        best = did_you_mean(m, unused) or did_you_mean(m, [str(u).lower() for u in unused])
        hints.append(
            f"{m} (accepted names: {', '.join(options[:6])}{', ...' if len(options) > 6 else ''})"
            + (f";{best}" if best else "")
        )
    return UserError(
        f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
        f"the header has: {', '.join(map(str, names))}.",
        file=file,
        column=missing[0],
        fix="name the columns timestamp (or date + time), open, high, low, close, volume (any case); "
        + "; ".join(hints),
    )
