"""Issue 31, items 10-12: commands that refused, crashed or said nothing now do what they say, and say what
happened with the fix."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.data.synthetic import generate_bars
from tests.faults.helpers import train_args

MONTHS = ["--set", "data.synthetic_days=45", "--set", "split.unit=month", "--set", "split.train_months=1",
          "--set", "split.val_months=0", "--set", "split.test_months=1"]
"""Calendar-month folds: January trains, February tests (45 synthetic days from 2024-01-02)."""


@pytest.fixture(scope="module")
def month_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("months") / "run"
    assert main(train_args(run, 128, "--quiet", *MONTHS)) == 0
    return run


def other_bars(folder, days: int = 8):
    """A CSV of ``days`` synthetic days, all in January 2024 (one calendar month)."""
    path = folder / "NQ_other.csv"
    generate_bars(days, seed=11).frame.tz_convert("America/New_York").tz_localize(None).to_csv(
        path, index_label="timestamp")
    return path


def test_split_all_on_other_data_ignores_the_runs_month_folds(month_run, tmp_path, capsys):
    bars = other_bars(tmp_path)
    assert main(["evaluate", str(month_run), "--data", str(bars), "--split", "all", "--seeds", "1"]) == 0
    assert "on all: 8 days (2024-01-02 to 2024-01-11)" in capsys.readouterr().out


def test_the_folds_error_says_how_many_months_the_data_holds_and_how_many_folds_fit(month_run, tmp_path, capsys):
    bars = other_bars(tmp_path)
    assert main(["evaluate", str(month_run), "--data", str(bars), "--split", "test", "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert "the data holds 1 calendar month(s) of sessions (2024-01-02 to 2024-01-11)" in err
    assert "1+0+1 = 2 months per fold fit 0 fold(s)" in err
    assert "fix: use at most 1 month(s) per fold" in err and "--split all" in err


def test_an_openai_base_url_that_is_not_a_url_is_refused_naming_it(capsys):
    assert main(["llm", "ask", "--backend", "openai", "--base-url", "not-a-url"]) == 2
    err = capsys.readouterr().err
    assert "llm.openai.base_url: 'not-a-url' is not a server URL" in err
    assert "fix: give the server's address, e.g. --base-url http://127.0.0.1:8080/v1" in err


def test_a_gzip_csv_without_its_suffix_is_named_gzip_with_the_rename(tmp_path, capsys):
    plain = other_bars(tmp_path)
    packed = tmp_path / "NQ_packed.csv"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert main(["data", "check", str(packed)]) == 2
    err = capsys.readouterr().err
    assert f"{packed}: is gzip-compressed, but its name does not end in .gz" in err
    assert f"fix: rename it to {packed}.gz or decompress it" in err
    packed.rename(tmp_path / "NQ_packed.csv.gz")
    assert main(["data", "check", str(tmp_path / "NQ_packed.csv.gz")]) == 0  # the rename the fix names works


def test_a_follow_feed_on_a_missing_file_says_it_waits_for_it(month_run, tmp_path, capsys):
    missing = tmp_path / "export.csv"
    assert main(["run", str(month_run), "--feed", f"follow:{missing}", "--idle-exit", "0.2", "--journal",
                 str(tmp_path / "j.sqlite"), "--no-status"]) == 0
    out, err = capsys.readouterr()
    assert err.count(f"waiting for {missing} to appear") == 1, "said once, on stderr"
    assert f"note: {missing} never appeared: no bar was read" in out


def test_a_two_day_verdict_warns_of_its_small_sample_with_the_attempts(month_run, tmp_path, capsys):
    bars = other_bars(tmp_path, days=2)
    assert main(["evaluate", str(month_run), "--data", str(bars), "--split", "all", "--seeds", "1",
                 "--verdict", "rolling"]) == 0
    out = capsys.readouterr().out
    # the interval is the pass rate's (0/2: 0% to 66%, 1/2: 9% to 91%), whichever the trained agent gets
    assert re.search(r"warning: small sample: 2 attempt\(s\) over 2 trading day\(s\); its pass rate of ([012])/2 is "
                     r"anywhere from \d+% to \d+% \(95% interval\)", out)
    assert main(["evaluate", str(month_run), "--data", str(bars), "--split", "all", "--seeds", "1",
                 "--verdict", "rolling", "--json"]) == 0
    assert "small sample: 2 attempt(s)" in json.loads(capsys.readouterr().out.splitlines()[-1])["prop_verdict"][
        "warning"]


def test_an_unquoted_glob_gets_the_hint_to_quote_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for month in ("01", "02", "03"):
        (tmp_path / "data" / f"nq-2024-{month}.csv").write_text("timestamp,open,high,low,close,volume\n")
    expanded = ["data/nq-2024-01.csv", "data/nq-2024-02.csv", "data/nq-2024-03.csv"]  # what the shell passes
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--phase", "1", "--data", *expanded])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "unrecognized arguments: data/nq-2024-02.csv data/nq-2024-03.csv" in err
    assert "hint: 3 files where one value goes: the shell expanded an unquoted pattern" in err
    assert "e.g. --data 'data/*.csv'" in err
    with pytest.raises(SystemExit):
        main(["data", "check", "data/nq-2024-01.csv", "no-such-thing"])
    assert "hint" not in capsys.readouterr().err, "arguments that are not files get argparse's message alone"
