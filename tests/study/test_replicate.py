"""``study --replicate``: the same trials with fresh seeds in OUT-replicate; each verdict judged again, a flipped
one reported as not supported."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.study.replicate import compare_verdicts, replica_folder, replica_seeds, verdicts
from tests.study.test_study import study_file


def summary_with(diffs: dict[str, tuple[float, float, float]], baseline: str = "a") -> dict:
    """A study summary whose paired net P&L differences are ``name: (mean, ci_low, ci_high)``."""
    return {"baseline": baseline, "paired vs baseline": {
        name: {"pairs": 5, "Net PnL [$]": {"mean difference": m, "ci_low": lo, "ci_high": hi}}
        for name, (m, lo, hi) in diffs.items()}}


def test_a_verdict_that_flips_or_vanishes_on_replication_is_not_supported():
    study = summary_with({"b": (-1275, -2816, -210), "c": (100, -50, 250), "d": (300, 10, 600), "e": (5, -1, 9)})
    again = summary_with({"b": (25, -359, 407), "c": (400, 50, 700), "d": (250, 5, 500), "e": (0, -2, 3)})
    rows = {r["claim"]: r for r in compare_verdicts(study, again)}
    b = rows["b - a: Net PnL [$]"]  # issue 38's published advice result and its rerun
    assert (b["study"], b["replication"], b["survives"], b["result"]) == ("less", "no difference", False,
                                                                          "not supported")
    assert rows["c - a: Net PnL [$]"]["result"] == "not supported"  # an effect only in the replica
    assert rows["d - a: Net PnL [$]"]["result"] == "supported" and rows["d - a: Net PnL [$]"]["survives"]
    assert rows["e - a: Net PnL [$]"]["result"] == "no difference"


def test_a_pending_hypothesis_claims_nothing_until_both_sides_have_judged_it():
    # study --only x, then --confirm: both pending; a pending study against a judged confirmation is no flip either
    pending = {"hypotheses": [{"name": "h", "verdict": "pending"}]}
    judged = {"hypotheses": [{"name": "h", "verdict": "supported", "mean difference": 10.0}]}
    for first, second in ((pending, pending), (pending, judged), (judged, pending)):
        [row] = compare_verdicts(first, second, label="confirmation")
        assert (row["result"], row["survives"]) == ("pending", False), row


def test_declared_hypotheses_are_the_claims_when_a_study_has_them():
    hyp = {"hypotheses": [{"name": "gemma beats shuffled", "verdict": "supported", "p_value": 0.01}],
           **summary_with({"b": (1, 0.5, 2)})}
    flipped = {"hypotheses": {"gemma beats shuffled": {"verdict": "not supported", "p_value": 0.4}}}
    assert list(verdicts(hyp)) == ["gemma beats shuffled"]
    (row,) = compare_verdicts(hyp, flipped, label="confirmation")
    assert row["kind"] == "hypothesis" and row["result"] == "not supported" and row["confirmation"] == "not supported"


def test_replica_seeds_are_fresh_and_stable():
    assert replica_seeds([0, 1, 2]) == [10000, 10001, 10002]
    assert not set(replica_seeds([5, 12000])) & {5, 12000}
    assert replica_folder("/x/studies/nq").name == "nq-replicate"


@pytest.mark.slow  # 30-40 s: a study and its replica (make test-slow)
def test_replicate_reruns_the_trials_with_fresh_seeds_beside_the_study(tmp_path, capsys):
    path = study_file(tmp_path, seeds=[0])
    out = tmp_path / "nq"
    code = main(["study", path, "--out", str(out), "--replicate", "--workers", "2", "--no-progress", "--json"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    rep = tmp_path / "nq-replicate"
    assert sorted(pd.read_parquet(out / "trials.parquet")["trial"]) == ["fast-s0-f0", "slow-s0-f0"]
    assert sorted(pd.read_parquet(rep / "trials.parquet")["trial"]) == ["fast-s10000-f0", "slow-s10000-f0"]
    record = json.loads((rep / "replication.json").read_text())
    assert record["seeds"] == {"study": [0], "replication": [10000]}
    assert record["finished"] == {"study": [2, 2], "replication": [2, 2]}
    claims = {r["claim"]: r for r in record["verdicts"]}
    assert "fast - slow: Net PnL [$]" in claims and all(r["result"] in ("supported", "not supported",
                                                                       "no difference") for r in claims.values())
    assert record["fingerprints"]["same"] is True  # one machine, one fingerprint
    assert summary["replication"]["verdicts"] == record["verdicts"]
    assert "Verdicts: study vs replication" in (rep / "report.html").read_text()
    # the replica's folder is a study of its own: a plain rerun of it continues, never mixes with the study
    assert json.loads((rep / "study.json").read_text())["spec"]["seeds"] == [10000]


def test_replicate_and_confirm_are_exclusive(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["study", study_file(tmp_path), "--replicate", "--confirm", "x.csv"])
    assert "not allowed with" in capsys.readouterr().err
