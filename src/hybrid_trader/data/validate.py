"""Validation and repair of loaded bars: runs the check table, and the tick-grid warning.

Every row check (:data:`hybrid_trader.data.checks.CHECKS`) is either a
:class:`~hybrid_trader.errors.UserError` naming the file, the first offending row, the
column, the value and the fix (``repair=False``), or, with ``repair=True``, a
:class:`~hybrid_trader.data.findings.Repair` record: the kind of problem, the rows
affected, what was done and one note per affected row (at most :data:`ROW_NOTE_LIMIT`,
then a count of the rest). Nothing is dropped silently.

The checks, in the order they run (:func:`validate_frame`):

==========================  ==============================  =================================
code                        problem                         repair
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
shifted (:mod:`hybrid_trader.data.clock`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hybrid_trader.calendar import eastern_from_utc
from hybrid_trader.data.checks import CHECKS, COLUMNS, PRICES, Check, Hits, Rows, divided_by_100_mask
from hybrid_trader.data.findings import ROW_NOTE_LIMIT, DataFinding, Repair, RowNote, parse_repair_notes, plural
from hybrid_trader.errors import UserError

__all__ = [
    "CHECKS",
    "PRICES",
    "ROW_NOTE_LIMIT",
    "Checker",
    "divided_by_100_mask",
    "off_grid_mask",
    "parse_repair_notes",
    "tick_grid_finding",
    "validate_frame",
]


@dataclass
class Checker:
    """Turns what a check found into an error (``repair=False``) or a :class:`Repair` record."""

    file: str
    """File name shown in messages."""
    repair: bool = False
    """Repair what can be repaired (and record it) instead of raising."""
    csv: bool = True
    """CSV rows are shown as file lines (header = line 1); Parquet rows as 1-based rows."""
    repairs: list[Repair] = field(default_factory=list)
    """Every repair, in the order the checks ran."""

    def where(self, line: int) -> str:
        """``"line 12"`` for CSV, ``"row 11"`` for Parquet."""
        return f"line {int(line)}" if self.csv else f"row {int(line)}"

    def data_row(self, line: int) -> int:
        """1-based data row (header excluded), as :class:`UserError` expects."""
        return int(line) - 1 if self.csv else int(line)

    def handle(self, check: Check, rows: Rows, hits: Hits) -> None:
        """Raise the check's error about the first hit, or record the repair of every hit."""
        lines = rows.line[hits.pos]
        n = len(lines)
        if not self.repair:
            raise UserError(
                f"on {self.where(lines[0])}, {check.problem(rows, hits, self.where)} "
                f"({plural(n)} affected; the first is shown)",
                file=self.file,
                row=self.data_row(lines[0]),
                column=hits.column,
                value=hits.value,
                fix=f"{check.fix}; or pass --repair (load_bars(..., repair=True)) to {check.repair_does}",
            )
        shown = min(n, ROW_NOTE_LIMIT)
        notes = tuple(RowNote(self.where(lines[i]), check.detail(rows, hits, i, self.where)) for i in range(shown))
        rest = lines[shown:]
        span = (self.where(rest.min()), self.where(rest.max())) if len(rest) else None
        self.repairs.append(
            Repair(check.code, check.action, hits.column, n, check.reason, check.done, row_notes=notes, rest_span=span)
        )


def _rows_of(work: pd.DataFrame, raw_ts: pd.Series | None) -> Rows:
    n = len(work)
    nonexistent = work["nonexistent"].to_numpy(bool) if "nonexistent" in work else np.zeros(n, bool)
    texts = raw_ts.to_numpy(object) if raw_ts is not None else np.full(n, None, dtype=object)
    return Rows(
        ts=work["ts"].to_numpy(dtype="datetime64[ns]"),
        nonexistent=nonexistent,
        raw_ts=texts,
        raw={c: work[c].to_numpy() for c in COLUMNS},
        num={c: pd.to_numeric(work[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan) for c in COLUMNS},
        line=work["line"].to_numpy(np.int64),
    )


def run_checks(rows: Rows, ck: Checker, checks: tuple[Check, ...] = CHECKS) -> Rows:
    """Run ``checks`` in order; each sees the rows the previous ones left (repaired)."""
    for check in checks:
        hits = check.find(rows)
        if hits is None:
            continue
        ck.handle(check, rows, hits)
        rows = check.repair(rows, hits)
    return rows


def validate_frame(work: pd.DataFrame, raw_ts: pd.Series | None, ck: Checker) -> tuple[pd.DataFrame, np.ndarray]:
    """Check and (with ``ck.repair``) repair the file's rows.

    ``work`` has columns ``ts`` (datetime64[ns], naive UTC, NaT where unparseable),
    ``nonexistent`` (bool: wall-clock times skipped by DST), raw ``open high low close
    volume`` and ``line`` (file line of each row). ``raw_ts`` holds the timestamp text
    for messages (positionally aligned with ``work``). Returns a frame indexed by ET
    timestamps, float64 OHLCV, sorted, unique, consistent, and the file line of each
    of its rows.
    """
    rows = run_checks(_rows_of(work, raw_ts), ck)
    index = eastern_from_utc(rows.ts)
    index.name = "timestamp"
    return pd.DataFrame({c: rows.num[c] for c in COLUMNS}, index=index), rows.line


# ---- warnings that never stop loading ----------------------------------------------


def off_grid_mask(prices: np.ndarray, tick: float, tol: float = 0.01) -> np.ndarray:
    """True where a price is more than ``tol`` ticks away from the contract's tick grid."""
    q = np.asarray(prices, dtype=np.float64) / tick
    return np.abs(q - np.round(q)) > tol


def tick_grid_finding(
    frame: pd.DataFrame, market: str, tick: float, where: Callable[[int], str] | None = None
) -> DataFinding | None:
    """A note when prices are off the tick grid (never an error), else None."""
    px = frame[list(PRICES)].to_numpy(np.float64)
    off = off_grid_mask(px, tick)
    n_off = int(off.sum())
    if n_off == 0:
        return None
    first = int(np.flatnonzero(off.any(axis=1))[0])
    at = where(first) if where else f"bar {first}"
    pct = 100.0 * n_off / off.size
    return DataFinding(
        "note",
        "tick-grid",
        f"{n_off} of {off.size} prices ({pct:.1f}%) are off {market}'s {tick:g} tick grid "
        f"(first at {at}, {frame.index[first]:%Y-%m-%d %H:%M} ET): back-adjusted continuous contract? "
        "Prices are kept as they are.",
    )
