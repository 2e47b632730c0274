"""evaluate --data OTHER writes its own folder and records which data produced the results;
report on a run never evaluated evaluates it first."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.data.synthetic import generate_bars
from tests.faults.helpers import fingerprint, train_args


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run = tmp_path_factory.mktemp("finished") / "run"
    assert main(train_args(run, 256, "--quiet")) == 0
    return run


def test_report_evaluates_first_saying_so_when_the_run_was_never_evaluated(finished, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{run} was never evaluated on the test split: evaluating it first" in out
    assert (run / "eval" / "test" / "report.html").exists()


def test_evaluate_on_other_data_writes_its_own_folder_with_the_data_recorded(finished, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    assert main(["evaluate", str(run), "--seeds", "1"]) == 0
    own = fingerprint(run / "eval" / "test")
    frame = generate_bars(8, seed=11).frame
    bars = tmp_path / "NQ_other.csv"
    frame.tz_convert("America/New_York").tz_localize(None).to_csv(bars, index_label="timestamp")
    sha = hashlib.sha256(bars.read_bytes()).hexdigest()
    capsys.readouterr()
    assert main(["evaluate", str(run), "--data", str(bars), "--split", "all", "--seeds", "1"]) == 0
    folder = run / "eval" / f"NQ_other-{sha[:8]}" / "all"
    assert f"results: {folder}" in capsys.readouterr().out
    assert fingerprint(run / "eval" / "test") == own, "the run's own test results are untouched"
    data = json.loads((folder / "results.json").read_text())["info"]["data"]
    assert data["path"] == str(bars) and data["sha256"] == sha
    assert {"tz", "time_shift", "market", "repair"} <= set(data)
    own_data = json.loads((run / "eval" / "test" / "results.json").read_text())["info"]["data"]
    assert own_data["synthetic"]["days"] == 12
    assert main(["report", str(run), "--split", "all", "--eval-dir", str(folder)]) == 0
    html = (folder / "report.html").read_text()
    assert "NQ_other.csv" in html and sha[:12] in html and "other bars than the run trained on" in html
