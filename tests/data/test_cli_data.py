"""``hybrid-trader data check``: summary and exit 0, or one message on stderr and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid_trader.cli.main import main
from tests.conftest import ES_1MIN, NQ_5MIN, shared_file

GOOD = "timestamp,open,high,low,close,volume\n2023-11-20 09:30,10,12,9,11,5\n2023-11-20 09:31,11,12,10,10.5,6\n"


def write(tmp_path: Path, text: str, name: str = "NQ_cli.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_check_prints_summary_and_exits_0_when_file_is_valid(tmp_path, capsys):
    assert main(["data", "check", str(write(tmp_path, GOOD))]) == 0
    out = capsys.readouterr().out
    assert "rows          2" in out and "bar size      1 min" in out and "repairs       none" in out


def test_check_prints_json_when_asked(tmp_path, capsys):
    assert main(["data", "check", str(write(tmp_path, GOOD)), "--json", "--market", "MNQ"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["rows"] == 2 and s["market"] == "MNQ"


def test_check_exits_2_with_one_message_when_a_row_is_bad(tmp_path, capsys):
    path = write(tmp_path, GOOD.replace("11,12,10,10.5", "11,9,10,10.5"))
    assert main(["data", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}, row 2, column 'high', value 9.0: on line 3, high 9 is below low 10")
    assert "fix:" in err and "--repair" in err and "Traceback" not in err


def test_check_repairs_and_exits_0_when_repair_is_given(tmp_path, capsys):
    path = write(tmp_path, GOOD.replace("11,12,10,10.5", "11,9,10,10.5"))
    assert main(["data", "check", str(path), "--repair"]) == 0
    out = capsys.readouterr().out
    assert "repaired [high-below-low] 1 row" in out and "line 3: high 9 < low 10; swapped" in out


@pytest.mark.parametrize(
    "args, match",
    [
        (["missing.csv"], "file not found"),
        (["{empty}"], "the file is empty"),
        (["{good}", "--tz", "Nowhere/Land"], "unknown time zone"),
        (["{good}", "--market", "QQ"], "unknown market"),
        (["{parquet}"], "cannot read the Parquet file"),
    ],
)
def test_check_exits_2_without_traceback_when_input_is_wrong(tmp_path, capsys, args, match):
    paths = {
        "{empty}": str(write(tmp_path, "", "empty.csv")),
        "{good}": str(write(tmp_path, GOOD)),
        "{parquet}": str(write(tmp_path, "nope", "broken.parquet")),
    }
    argv = ["data", "check", *[paths.get(a, str(tmp_path / a) if a.endswith(".csv") else a) for a in args]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and match in err and "Traceback" not in err


def test_help_describes_every_option_when_asked(capsys):
    with pytest.raises(SystemExit) as info:
        main(["data", "check", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for opt in ("--tz ZONE", "--time-shift HOURS", "--market ROOT", "--repair", "--json", "ADDED"):
        assert opt in out


def test_check_summarises_shared_files_when_given_their_options(shared_data, capsys):
    assert main(["data", "check", str(shared_file(ES_1MIN)), "--time-shift", "-5"]) == 0
    out = capsys.readouterr().out
    assert "RTH open      09:30 ET" in out and "45 Globex trading days" in out
    assert main(["data", "check", str(shared_file(NQ_5MIN)), "--tz", "America/Chicago"]) == 0
    out = capsys.readouterr().out
    assert "bar size      5 min" in out and "back-adjusted" in out


def test_console_script_exits_2_with_message_when_run_as_subprocess(tmp_path):
    script = Path(sys.executable).parent / "hybrid-trader"
    if not script.exists():
        pytest.skip(f"console script not installed: {script} is absent")
    path = write(tmp_path, GOOD.replace("2023-11-20 09:31", "yesterday"))
    proc = subprocess.run([str(script), "data", "check", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "cannot read the timestamp" in proc.stderr and "line 3" in proc.stderr and "Traceback" not in proc.stderr
    ok = subprocess.run(
        [str(script), "data", "check", str(path), "--repair"], capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0 and "dropped [bad-timestamp] 1 row" in ok.stdout
