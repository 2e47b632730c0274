"""NinjaTrader 8's header-less minute-bar export (``data.nt_export``) read by the loader and ``data check``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.data import load_bars
from hybrid_trader.data.nt_export import is_nt_export, resolve_stamps
from hybrid_trader.errors import UserError

# A recorded NinjaTrader 8 export (Tools > Historical Data > Export, NQ, 1 minute): UTC, end-of-bar stamps,
# CRLF line ends. The 14:31:00 UTC line is the 09:30 ET bar (EST: UTC-5).
NT_SAMPLE = ("20240102 143100;16825.25;16827.00;16824.50;16826.75;412\r\n"
             "20240102 143200;16826.75;16830.00;16826.00;16829.50;388\r\n"
             "20240102 143300;16829.50;16829.75;16822.25;16823.00;501\r\n"
             "20240102 143400;16823.00;16825.00;16821.50;16824.25;297\r\n")
# The same bars in our CSV: a header, the bar's start in US/Eastern.
OURS = ("timestamp,open,high,low,close,volume\n"
        "2024-01-02 09:30:00,16825.25,16827.00,16824.50,16826.75,412\n"
        "2024-01-02 09:31:00,16826.75,16830.00,16826.00,16829.50,388\n"
        "2024-01-02 09:32:00,16829.50,16829.75,16822.25,16823.00,501\n"
        "2024-01-02 09:33:00,16823.00,16825.00,16821.50,16824.25,297\n")


def write(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def test_loader_reads_nt_export_as_the_same_bars_when_stamps_are_end_and_utc(tmp_path: Path) -> None:
    nt = load_bars(write(tmp_path, NT_SAMPLE, "NQ 03-24.txt"), market="NQ", tz="America/Chicago")  # tz: not used
    ours = load_bars(write(tmp_path, OURS, "nq.csv"), market="NQ")
    pd.testing.assert_frame_equal(nt.frame, ours.frame)
    assert nt.frame.index[0] == pd.Timestamp("2024-01-02 09:30", tz="America/New_York")
    assert any(f.code == "stamps" and "moved back 1 min" in f.message for f in nt.findings)


def test_loader_shifts_by_the_bar_size_when_bars_are_5_minutes(tmp_path: Path) -> None:
    lines = "".join(f"20240102 14{m:02d}00;100;101;99;100.5;10\n" for m in (35, 40, 45))
    bars = load_bars(write(tmp_path, lines, "nq5.txt"), market="NQ")
    assert bars.bar_minutes == 5
    assert bars.frame.index[0] == pd.Timestamp("2024-01-02 09:30", tz="America/New_York")


def test_loader_keeps_or_moves_stamps_when_stamps_is_given(tmp_path: Path) -> None:
    start = load_bars(write(tmp_path, NT_SAMPLE, "a.txt"), market="NQ", stamps="start")
    assert start.frame.index[0] == pd.Timestamp("2024-01-02 09:31", tz="America/New_York")  # one bar late
    end = load_bars(write(tmp_path, OURS, "b.csv"), market="NQ", stamps="end")
    assert end.frame.index[0] == pd.Timestamp("2024-01-02 09:29", tz="America/New_York")


def test_data_check_prints_bar_start_times_when_file_is_nt_export(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, NT_SAMPLE, "NQ 03-24.txt")
    assert main(["data", "check", str(path), "--market", "NQ", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 4 and str(summary["first"]).startswith("2024-01-02 09:30")


@pytest.mark.parametrize(("line", "kind"), [
    ("20240102 143100 0450000;16825.25;16825.0;16825.5;1", "tick data"),
    ("20240102;16825.25;16827.00;16824.50;16826.75;412", "daily bars"),
    ("20240102 143100;16825,25;16827,00;16824,50;16826,75;412", "comma decimals"),
])
def test_loader_refuses_nt_text_when_it_is_not_minute_bars(tmp_path: Path, line: str, kind: str) -> None:
    with pytest.raises(UserError, match=kind) as err:
        load_bars(write(tmp_path, line + "\n", "x.txt"), market="NQ")
    assert err.value.row == 1 and ("Minute bars" in (err.value.fix or "") or "'.'" in (err.value.fix or ""))


def test_is_nt_export_is_false_when_line_is_a_header_or_a_comma_line() -> None:
    assert not is_nt_export("timestamp;open;high;low;close;volume", "f")
    assert not is_nt_export("2024-01-02 09:30:00,1,2,0.5,1.5,3", "f")
    assert is_nt_export("20240102 143100;16825.25;16827;16824.5;16826.75;412", "f")


def test_resolve_stamps_defaults_by_format_and_refuses_other_words() -> None:
    assert resolve_stamps(None, True) == "end" and resolve_stamps(None, False) == "start"
    assert resolve_stamps("END", False) == "end"
    with pytest.raises(UserError, match="--stamps 'middle'"):
        resolve_stamps("middle", True)


def test_loader_names_the_row_as_the_line_when_nt_export_has_no_header(tmp_path: Path) -> None:
    bad = NT_SAMPLE.replace("16826.75;16830.00;16826.00", "16826.75;16820.00;16826.00")  # line 2: high < low
    with pytest.raises(UserError, match="high 16820 is below low 16826") as err:
        load_bars(write(tmp_path, bad, "bad.txt"), market="NQ")
    assert err.value.row == 2 and err.value.column == "high"
