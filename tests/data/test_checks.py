"""The check table: every check is a complete record, its repair removes what it found, the docs list it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data import validate
from hybrid_trader.data.checks import CHECKS, COLUMNS, Rows
from hybrid_trader.data.validate import Checker, run_checks
from hybrid_trader.errors import UserError


def rows_of(table: list[tuple]) -> Rows:
    """Rows from ``(ts or None, open, high, low, close, volume)`` tuples; lines 2, 3, ..."""
    n = len(table)
    ts = np.array([np.datetime64(r[0], "ns") if r[0] else np.datetime64("NaT", "ns") for r in table])
    raw = {c: np.array([r[k + 1] for r in table], dtype=object) for k, c in enumerate(COLUMNS)}
    num = {c: pd.to_numeric(pd.Series(raw[c]), errors="coerce").to_numpy(np.float64) for c in COLUMNS}
    return Rows(
        ts=ts,
        nonexistent=np.zeros(n, bool),
        raw_ts=np.array([r[0] for r in table], dtype=object),
        raw=raw,
        num=num,
        line=np.arange(2, n + 2, dtype=np.int64),
    )


GOOD = ("2023-11-20T14:30", 100.0, 101.0, 99.0, 100.5, 10.0)
PROBLEM_ROWS = {
    "bad-timestamp": [GOOD, (None, 100.0, 101.0, 99.0, 100.5, 10.0)],
    "bad-price": [GOOD, ("2023-11-20T14:31", 100.0, "x", 99.0, 100.5, 10.0)],
    "bad-volume": [GOOD, ("2023-11-20T14:31", 100.0, 101.0, 99.0, 100.5, "lots")],
    "non-positive-price": [GOOD, ("2023-11-20T14:31", 100.0, 101.0, 0.0, 100.5, 10.0)],
    "negative-volume": [GOOD, ("2023-11-20T14:31", 100.0, 101.0, 99.0, 100.5, -4.0)],
    "duplicate-timestamp": [GOOD, GOOD],
    "unsorted": [GOOD, ("2023-11-20T14:29", 100.0, 101.0, 99.0, 100.5, 10.0)],
    "divide-by-100": [(f"2023-11-20T14:{m:02d}", 100.0, 101.0, 99.0, 100.5, 10.0) for m in range(10)]
    + [("2023-11-20T14:10", 1.0, 1.01, 0.99, 1.005, 10.0)],
    "high-below-low": [GOOD, ("2023-11-20T14:31", 100.0, 99.0, 101.0, 100.5, 10.0)],
    "open-close-outside": [GOOD, ("2023-11-20T14:31", 103.0, 101.0, 99.0, 100.5, 10.0)],
}


def test_check_codes_are_unique_and_each_is_a_complete_record():
    codes = [c.code for c in CHECKS]
    assert len(codes) == len(set(codes)) == 11
    for c in CHECKS:
        assert c.action in ("dropped", "repaired") and c.severity == "error"
        assert c.fix and c.repair_does and c.reason and c.done and c.columns


def test_validate_docstring_lists_the_checks_in_the_order_they_run():
    doc = validate.__doc__ or ""
    listed = [line.split("``")[1] for line in doc.splitlines() if line.startswith("``")]
    assert listed == [c.code for c in CHECKS]


@pytest.mark.parametrize("check", [c for c in CHECKS if c.code in PROBLEM_ROWS], ids=lambda c: c.code)
def test_repair_leaves_nothing_for_the_check_to_find_when_it_ran(check):
    rows = rows_of(PROBLEM_ROWS[check.code])
    hits = check.find(rows)
    assert hits is not None and len(hits.pos) == 1
    fixed = check.repair(rows, hits)
    assert check.find(fixed) is None
    expected = len(rows) - 1 if check.action == "dropped" else len(rows)
    assert len(fixed) == expected


@pytest.mark.parametrize("check", [c for c in CHECKS if c.code in PROBLEM_ROWS], ids=lambda c: c.code)
def test_error_names_line_column_value_and_fix_when_not_repairing(check):
    rows = rows_of(PROBLEM_ROWS[check.code])
    hits = check.find(rows)
    assert hits is not None
    with pytest.raises(UserError) as info:
        Checker("f.csv").handle(check, rows, hits)
    err = info.value
    line = int(rows.line[hits.pos[0]])
    assert err.file == "f.csv" and err.row == line - 1 and f"on line {line}," in err.message
    assert err.column == hits.column and err.column in (*check.columns, "timestamp")
    assert check.fix in err.fix and check.repair_does in err.fix


def test_run_checks_records_typed_repairs_in_table_order_when_repairing():
    table = [
        GOOD,
        ("2023-11-20T14:32", 100.0, 101.0, 99.0, 100.5, -1.0),
        ("2023-11-20T14:31", 100.0, 99.0, 101.0, 100.5, 10.0),
        GOOD,
    ]
    ck = Checker("f.parquet", repair=True, csv=False)
    out = run_checks(rows_of(table), ck)
    assert [r.code for r in ck.repairs] == ["negative-volume", "duplicate-timestamp", "unsorted", "high-below-low"]
    assert [r.action for r in ck.repairs] == ["repaired", "dropped", "repaired", "repaired"]
    dup = ck.repairs[1]
    assert dup.rows == 1 and dup.column == "timestamp" and dup.row_notes[0].where == "row 5"  # Parquet rows
    assert "repeats row 2 (identical)" in dup.row_notes[0].text
    assert out.line.tolist() == [2, 4, 3] and out.num["volume"].tolist() == [10.0, 10.0, 0.0]
    assert out.num["high"][1] == 101.0 and out.num["low"][1] == 99.0
