"""Confirmation on later data (``study --confirm DATA``): every finished trial's model on a file the study never
touched, the same tables beside the study's; refusals of another market, overlapping days, no finished trial."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.data.synthetic import generate_bars
from hybrid_trader.errors import UserError
from hybrid_trader.study.confirm import confirm_study
from hybrid_trader.study.engine import run_study
from tests.conftest import shared_file
from tests.study.conftest import QUIET
from tests.study.test_study import TINY, study_file


def bars_file(path, days: int, start: str, market: str = "NQ"):
    """Synthetic bars written as a CSV (US/Eastern wall clock, the loader's default)."""
    frame = generate_bars(days, seed=5, start=start, market=market).frame
    frame.tz_convert("America/New_York").tz_localize(None).to_csv(path, index_label="timestamp")
    return path


def test_confirmation_evaluates_every_finished_trial_on_the_later_file_beside_the_study(tiny, capsys, monkeypatch):
    root, path, out = tiny
    before = (out / "summary.json").read_text()
    later = bars_file(root / "NQ_later.csv", 3, "2024-03-04")
    code = main(["study", path, "--out", str(out), "--confirm", str(later), "--no-progress", "--json"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and summary["finished"] == 2
    folder = out / "confirm-NQ_later"
    table = pd.read_parquet(folder / "trials.parquet")
    assert sorted(table["trial"]) == ["fast-s0-f0", "slow-s0-f0"]
    assert all(list(d) == ["2024-03-04", "2024-03-06"] for d in table["dates"])  # every day of the file
    assert table["Pass rate [%]"].between(0, 100).all() and table["fingerprint"].notna().all()
    assert summary["confirmation"]["study's last day"] == "2024-01-19"
    assert {r["claim"] for r in summary["vs study"]} >= {"fast - slow: Net PnL [$]"}
    assert "Verdicts: study vs confirmation" in (folder / "report.html").read_text()
    assert (out / "summary.json").read_text() == before  # the study's own results untouched
    # each evaluation's files in its trial's run, under eval/<stem>-<hash8>/all, not over the study's own
    assert all("/eval/NQ_later-" in e and e.endswith("/all") for e in table["evaluation"])
    # a rerun reads the confirmed trials back (no evaluation again)
    monkeypatch.setattr("hybrid_trader.study.confirm.evaluate_run", lambda *a, **k: 1 / 0)
    again = confirm_study(path, out, later, **QUIET)
    assert again["finished"] == 2 and again["variants"]["fast"]["figures"]["Net PnL [$]"]["mean"] == pytest.approx(
        summary["variants"]["fast"]["figures"]["Net PnL [$]"]["mean"])


def test_a_confirmation_file_of_another_market_is_refused(tiny):
    root, path, out = tiny
    es = bars_file(root / "ES_later.csv", 3, "2024-03-04", market="ES")
    with pytest.raises(UserError, match="holds ES bars .* trained on NQ") as err:
        confirm_study(path, out, es, **QUIET)
    assert "later file of NQ" in (err.value.fix or "")
    assert not (out / "confirm-ES_later").exists()


def test_a_confirmation_file_overlapping_the_studys_days_is_refused(tiny):
    root, path, out = tiny
    overlap = bars_file(root / "NQ_overlap.csv", 3, "2024-01-16")  # the trials' validation and test days
    with pytest.raises(UserError, match="starts on 2024-01-16, not after the days the study used.*2024-01-19") as err:
        confirm_study(path, out, overlap, **QUIET)
    assert "after 2024-01-19" in (err.value.fix or "")


def test_a_study_without_a_finished_trial_or_another_studys_folder_is_refused(tiny, tmp_path):
    root, path, out = tiny
    later = bars_file(tmp_path / "NQ_later.csv", 3, "2024-03-04")
    with pytest.raises(UserError, match="holds no study") as err:
        confirm_study(path, tmp_path / "empty", later, **QUIET)
    assert "run the study first" in (err.value.fix or "")
    with pytest.raises(UserError, match="holds another study"):
        confirm_study(study_file(tmp_path, seeds=[7]), out, later, **QUIET)
    (tmp_path / "failed").mkdir()
    (tmp_path / "failed" / "study.json").write_text((out / "study.json").read_text())
    with pytest.raises(UserError, match="no finished trial"):
        confirm_study(path, tmp_path / "failed", later, **QUIET)
    with pytest.raises(UserError, match="confirmation file not found"):
        confirm_study(path, out, tmp_path / "nope.csv", **QUIET)


@pytest.mark.slow
def test_confirmation_of_a_2024_nq_study_on_2025_bars(tmp_path):
    """Real data: a tiny study on December 2024 NQ (the vendor's MM/DD files), confirmed on the 2025 file (its
    DD/MM dates, the same vendor); the 2024 file itself is refused as overlapping."""
    december = shared_file("NQ_1min_2024_central/nq-2024-12.csv")
    later = shared_file("NQ_1min_2025-01_03_central_ddmm.csv")
    path = study_file(tmp_path, seeds=[0], base={**TINY, "data.path": str(december), "data.tz": "America/Chicago",
                                                  "data.synthetic_days": 60},
                      variants=[{"name": "a", "set": {}}], evaluate={"split": "test", "seeds": 1, "verdict": "none"})
    out = tmp_path / "out"
    assert run_study(path, out, workers=1, **QUIET)["finished"] == 1
    summary = confirm_study(path, out, later, **QUIET)
    assert summary["finished"] == 1, summary["errors"]
    assert summary["confirmation"]["first day"].startswith("2025-01-0")
    assert not math.isnan(summary["variants"]["a"]["figures"]["Net PnL [$]"]["mean"])
    with pytest.raises(UserError, match="not after the days the study used"):
        confirm_study(path, out, december, **QUIET)


def test_a_confirmation_of_a_study_run_in_part_keeps_hypotheses_on_the_variants_not_run_pending(tmp_path):
    """``study --only``, then ``--confirm``: the variant not run is 'not run' and its hypothesis pending, in the
    confirmation as in the study (before: judged on 0 pairs, 'not supported: too_few_pairs')."""
    from tests.study.test_hypotheses import GOOD

    path = study_file(tmp_path, seeds=[0], hypotheses=[GOOD])
    out = tmp_path / "out"
    run_study(path, out, workers=1, only=["fast"], **QUIET)
    summary = confirm_study(path, out, bars_file(tmp_path / "NQ_later.csv", 3, "2024-03-04"), **QUIET)
    assert summary["finished"] == 1 and summary["variants"]["slow"]["not run"] == 1
    [h] = summary["hypotheses"]
    assert h["verdict"] == "pending" and h["reason"].startswith("not_run_yet")
    assert summary["trials run by the folder"] == {"attempts": 1}, "the DSR counts the trial run, not the one waiting"
