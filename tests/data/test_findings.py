"""Bars carry typed findings: repairs and warnings as records, notes as their text."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hybrid_trader.data.findings import ROW_NOTE_LIMIT, DataFinding, Repair, RowNote, parse_repair_notes
from hybrid_trader.data.loader import load_bars
from hybrid_trader.data.summary import summarize
from hybrid_trader.data.synthetic import generate_bars

HEADER = "timestamp,open,high,low,close,volume"


def write(tmp_path: Path, rows: list[str], name: str = "NQ_test.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


def minute_rows(n: int, volume: str = "10") -> list[str]:
    t0 = pd.Timestamp("2023-11-20 09:30")
    return [f"{t0 + pd.Timedelta(minutes=i):%Y-%m-%d %H:%M:%S},15900,15901,15899,15900,{volume}" for i in range(n)]


def test_repairs_are_typed_records_when_loading_with_repair(tmp_path):
    rows = minute_rows(6)
    rows[2] = rows[2].rsplit(",", 1)[0] + ",-7"
    rows[4] = rows[3]
    bars = load_bars(write(tmp_path, rows), repair=True)
    assert [(r.code, r.action, r.rows, r.column) for r in bars.repairs] == [
        ("negative-volume", "repaired", 1, "volume"),
        ("duplicate-timestamp", "dropped", 1, "timestamp"),
    ]
    neg = bars.repairs[0]
    assert neg.row_notes == (RowNote("line 4", "volume -7 < 0; set to 0"),) and neg.rest_span is None
    assert neg.reason == "negative volume" and neg.done == "volume set to 0"


def test_notes_are_the_text_of_the_findings_when_parsed_back(tmp_path):
    rows = minute_rows(4)
    rows[1] = rows[1].replace("15901,15899", "15899,15901")
    bars = load_bars(write(tmp_path, rows), repair=True)
    assert parse_repair_notes(bars.notes) == [r.as_dict() for r in bars.repairs]
    assert bars.notes == [line for f in bars.findings for line in f.lines()]
    assert summarize(bars)["repairs"] == [r.as_dict() for r in bars.repairs]


def test_row_notes_stop_at_the_limit_and_keep_the_span_of_the_rest(tmp_path):
    bars = load_bars(write(tmp_path, minute_rows(ROW_NOTE_LIMIT + 5, volume="-1")), repair=True)
    (rep,) = bars.repairs
    assert rep.rows == ROW_NOTE_LIMIT + 5 and len(rep.row_notes) == ROW_NOTE_LIMIT
    assert rep.rest_span == (f"line {ROW_NOTE_LIMIT + 2}", f"line {ROW_NOTE_LIMIT + 6}")
    first, last = ROW_NOTE_LIMIT + 2, ROW_NOTE_LIMIT + 6
    assert rep.lines()[-1] == f"  ... and 5 rows more with the same repair (line {first} to line {last})"


def test_notes_and_warnings_are_typed_when_loading_needs_no_repair(tmp_path):
    bars = load_bars(write(tmp_path, minute_rows(3), name="bars.csv"))
    assert bars.repairs == [] and bars.warnings == []
    codes = [(f.level, f.code) for f in bars.findings]
    assert codes == [("note", "market"), ("note", "timezone")]
    assert all(isinstance(f, DataFinding) for f in bars.findings)


def test_clock_warning_is_a_typed_finding_when_the_clock_is_shifted(tmp_path):
    frame = generate_bars(5, seed=3).frame
    shifted = frame.copy()
    shifted.index = frame.index.tz_localize(None) + pd.Timedelta(hours=5)
    path = tmp_path / "ES_shifted.csv"
    shifted.to_csv(path, index_label="timestamp")
    bars = load_bars(path)
    (warn,) = bars.warnings
    assert warn.code == "clock" and "--time-shift -5" in warn.message
    assert summarize(bars)["warnings"] == warn.lines()


def test_slice_sessions_keeps_the_findings_when_slicing():
    bars = generate_bars(4, seed=1)
    part = bars.slice_sessions(1, 2)
    assert part.findings == bars.findings and part.findings is not bars.findings
    assert [f.code for f in part.findings] == ["synthetic", "synthetic"]


def test_repair_as_dict_joins_reason_and_done_like_the_text_header():
    reason = "timestamp earlier than the previous row's"
    rep = Repair("unsorted", "repaired", "timestamp", 2, reason, "rows sorted by time")
    assert rep.lines() == ["repaired [unsorted] 2 rows: timestamp earlier than the previous row's; rows sorted by time"]
    assert parse_repair_notes(rep.lines()) == [rep.as_dict()]
