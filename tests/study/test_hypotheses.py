"""Pre-registered hypotheses: refused when malformed, fixed once trials ran, judged by the declared rule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from scipy.stats import wilcoxon

from hybrid_trader.advise.distill import DistillConfig, distill
from hybrid_trader.advise.placebo import shuffle_advice
from hybrid_trader.cli.main import main
from hybrid_trader.config import to_dict
from hybrid_trader.errors import UserError
from hybrid_trader.study.engine import run_study
from hybrid_trader.study.hypotheses import HypothesisSpec, judge
from hybrid_trader.study.spec import load_study
from hybrid_trader.study.stats import paired_difference
from tests.study.test_study import study_file
from tests.training.conftest import STUDENT_TINY

GOOD = {"name": "fast-wins", "variant": "fast", "against": "slow", "metric": "Net PnL [$]", "direction": "greater",
        "alpha": 0.05}


@pytest.mark.parametrize("change, message", [
    ({"variant": "nope"}, "hypothesis fast-wins: 'nope' is not a variant of the study"),
    ({"against": "gone"}, "'gone' is not a variant"),
    ({"metric": "Net PnL"}, "'Net PnL' is not a figure of the study's trials"),
    ({"alpha": 0.0}, "alpha 0.0 is outside \\(0, 1\\)"),
    ({"alpha": 1.5}, "alpha 1.5 is outside \\(0, 1\\)"),
    ({"direction": "up"}, "direction"),
    ({"against": "fast"}, "compares fast with itself"),
])
def test_a_malformed_hypothesis_is_refused_naming_the_fix(tmp_path, change, message):
    with pytest.raises(UserError, match=message) as err:
        load_study(study_file(tmp_path, hypotheses=[{**GOOD, **change}]))
    assert err.value.fix


def test_hypotheses_are_part_of_the_identity_and_fixed_once_trials_ran(tmp_path, monkeypatch):
    monkeypatch.setattr("hybrid_trader.study.engine._run_on_ray", lambda *a, **k: {})
    out = tmp_path / "out"
    run_study(study_file(tmp_path, hypotheses=[GOOD]), out, workers=1, progress=False, say=lambda s: None)
    with pytest.raises(UserError, match="its hypotheses differ") as err:
        run_study(study_file(tmp_path, hypotheses=[{**GOOD, "alpha": 0.1}]), out, workers=1, progress=False,
                  say=lambda s: None)
    assert "declared before the trials run" in err.value.fix
    # a study without hypotheses keeps the identity it had before they existed (old folders stay readable)
    spec = load_study(study_file(tmp_path))
    data = to_dict(spec)
    data.pop("name")
    data.pop("hypotheses")
    data["evaluate"].pop("prop")  # so do the verdict's default fees and pass value
    data["evaluate"].pop("fresh_days")  # and trials that trade no fresh days
    for key in ("space", "scheduler", "select"):  # and a study without a search space (study.search)
        data.pop(key)
    for key in ("reduction_factor", "grace_period"):  # and ASHA's default settings
        data.pop(key)
    import hashlib

    assert spec.identity() == hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def rows_of(a, b, metric="Net PnL [$]"):
    """Finished trials of variants x and y, pair i on seed i."""
    return ([{"variant": "x", "seed": i, "fold": 0, "status": "finished", metric: v} for i, v in enumerate(a)]
            + [{"variant": "y", "seed": i, "fold": 0, "status": "finished", metric: v} for i, v in enumerate(b)])


def hyp(**over):
    return HypothesisSpec(**{"name": "h", "variant": "x", "against": "y", **over})


def test_the_smallest_attainable_p_counts_only_the_pairs_the_test_ranks():
    # two of five pairs do not differ: the signed-rank test drops them, so 3 pairs all one way give p = 0.5 ** 3
    got = judge(hyp(), rows_of([0.0, 0.0, 150.0, 90.0, 40.0], [0.0] * 5))
    assert got["p-value"] == pytest.approx(0.125)
    assert got["smallest attainable p (exact test)"] == pytest.approx(0.125)


def test_a_steady_difference_is_supported_with_scipys_p_and_the_bootstrap_ci():
    a, b = [10.0, 12, 9, 15, 11, 14, 13, 8], [1.0, 2, 0, 3, -1, 2, 1, 0]
    got = judge(hyp(), rows_of(a, b))
    d = np.subtract(a, b)
    assert got["p-value"] == pytest.approx(wilcoxon(d, alternative="greater").pvalue)  # 1/256, exact
    assert got["p-value"] == pytest.approx(1 / 256)
    assert (got["mean difference"], got["ci_low"], got["ci_high"]) == paired_difference(a, b, level=0.95)
    assert got["verdict"] == "supported" and got["pairs"] == 8 and got["median difference"] == 11.0
    # the same pairs, the other direction declared: not supported
    assert judge(hyp(direction="less"), rows_of(a, b))["verdict"] == "not supported"


def test_one_heavy_tailed_pair_cannot_carry_a_hypothesis():
    """Seven small losses and one huge gain: the mean difference is positive, the rank test is not."""
    a, b = [-1.0, -2, -1, -3, -2, -1, -2, 500], [0.0] * 8
    got = judge(hyp(alpha=0.1), rows_of(a, b))
    assert got["mean difference"] > 50
    assert got["verdict"] == "not supported" and got["reason"].startswith("p_not_below_alpha")


def test_too_few_pairs_and_a_ci_holding_zero_are_not_supported():
    assert judge(hyp(), rows_of([5.0], [1.0]))["reason"].startswith("too_few_pairs")
    # nine small gains and one large loss: the ranks point up (p = 43/1024 < 0.05), the 95% CI of the mean holds 0
    got = judge(hyp(), rows_of([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, -30.0], [0.0] * 10))
    assert got["p-value"] == pytest.approx(43 / 1024)
    assert got["verdict"] == "not supported" and got["reason"].startswith("ci_holds_zero") and got["ci_low"] <= 0


def test_a_study_with_hypotheses_and_a_placebo_advisor_judges_each_by_the_declared_rule(tmp_path, student_p2,
                                                                                        capsys):
    """End to end through ``hybrid-trader study``: RL alone, the mock LLM and the shuffled placebo of the mock LLM's
    student (phase 2 then phase 3, tiny budgets); every hypothesis gets a verdict the rule recomputes."""
    placebo = tmp_path / "shuffled"
    shuffle_advice(student_p2, placebo, seed=0, say=lambda s: None)
    distill(placebo, DistillConfig(epochs=2, hidden=(32,)), say=lambda s: None)
    tiny = {k: v for k, v in STUDENT_TINY.items() if k != "llm"}
    hypotheses = [
        {"name": "mock-beats-placebo", "variant": "mock", "against": "shuffled", "metric": "Net PnL [$]",
         "direction": "greater", "alpha": 0.05},
        {"name": "placebo-beats-rl", "variant": "shuffled", "against": "rl-only", "metric": "Sharpe (ann.)",
         "direction": "greater", "alpha": 0.5},
        {"name": "mock-trades-less", "variant": "mock", "against": "rl-only", "metric": "Trades",
         "direction": "less", "alpha": 0.2},
    ]
    spec = {"base": {**tiny, "ppo.total_timesteps": 256, "llm.query.mode": "always", "llm.backend": "mock"},
            "seeds": [0, 1], "phases": [2, 3], "baseline": "rl-only", "evaluate": {"split": "test", "seeds": 1},
            "variants": [{"name": "rl-only", "set": {"fusion.llm_weight": 0.0, "fusion.advice_input": False}},
                         {"name": "mock", "set": {}},
                         {"name": "shuffled", "set": {"llm.backend": "student",
                                                      "llm.student.path": str(placebo / "advice" / "student.pt")}}],
            "hypotheses": hypotheses}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    code = main(["study", str(path), "--out", str(out), "--workers", "2", "--no-progress", "--json"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0, summary["errors"]
    rows = [json.loads((out / "trials" / f"{v}-s{s}-f0" / "trial.json").read_text())
            for v in ("rl-only", "mock", "shuffled") for s in (0, 1)]
    assert [h["name"] for h in summary["hypotheses"]] == [h["name"] for h in hypotheses]
    for declared, got in zip(hypotheses, summary["hypotheses"]):
        a = {r["seed"]: r[declared["metric"]] for r in rows if r["variant"] == declared["variant"]}
        b = {r["seed"]: r[declared["metric"]] for r in rows if r["variant"] == declared["against"]}
        d = [a[s] - b[s] for s in (0, 1)]
        p = 1.0 if not any(d) else wilcoxon(d, alternative=declared["direction"]).pvalue
        _, lo, hi = paired_difference([a[s] for s in (0, 1)], [b[s] for s in (0, 1)],
                                      level=1 - declared["alpha"])
        side = lo > 0 if declared["direction"] == "greater" else hi < 0
        assert got["pairs"] == 2 and got["p-value"] == pytest.approx(p)
        assert got["verdict"] == ("supported" if p < declared["alpha"] and side else "not supported")
    assert summary["hypotheses"][0]["verdict"] == "not supported"  # 2 pairs: the smallest p is 1/4 > 0.05
    # every trial the folder ran counts in the DSR; the many-comparison tests say why they need more days
    assert summary["trials run by the folder"]["attempts"] == 6 and summary["deflated sharpe"]["trials"] == 6
    assert "reason" in summary["many comparisons"] or "PBO" in summary["many comparisons"]
    report = (out / "report.html").read_text()
    assert "Pre-registered hypotheses" in report and "mock-beats-placebo" in report
    assert not any(math.isnan(summary["variants"][v]["figures"]["Net PnL [$]"]["median"]) for v in ("mock",))


def test_the_does_the_llm_help_study_declares_its_hypotheses_before_it_runs():
    from pathlib import Path

    spec = load_study(Path(__file__).resolve().parents[2] / "examples" / "studies" / "nq_does_llm_help.yaml")
    assert [v.name for v in spec.variants] == ["rl-only", "shuffled", "trend-rule", "gemma", "gemma-lora"]
    assert spec.baseline == "rl-only" and len(spec.seeds) == 10 and spec.folds == 3 and spec.phases == [2, 3]
    assert {(h.variant, h.against) for h in spec.hypotheses} == {
        ("gemma", "shuffled"), ("trend-rule", "shuffled"), ("shuffled", "rl-only"), ("gemma-lora", "shuffled"),
        ("gemma-lora", "gemma")}
    assert spec.evaluate.prop.pass_value > 0  # the expected outcome per attempt ranks variants by more than fees


def _fake_trials(record: list[str]):
    """A stand-in for Ray: each trial it is given finishes at once with a net P&L of 100 x its seed (fast: + 50)."""
    def run(spec, todo, out, *args, **kwargs):
        for t in todo:
            record.append(t.slug)
            folder = out / "trials" / t.slug
            folder.mkdir(parents=True, exist_ok=True)
            pnl = 100.0 * t.seed + (50.0 if t.variant == "fast" else 0.0)
            (folder / "trial.json").write_text(json.dumps(
                {"trial": t.slug, "variant": t.variant, "seed": t.seed, "fold": t.fold, "status": "finished",
                 "Net PnL [$]": pnl, "Trades": 3}))
        return {}
    return run


def test_a_study_runs_in_parts_with_only_and_judges_a_hypothesis_once_both_variants_ran(tmp_path, monkeypatch,
                                                                                         capsys):
    """``study --only``: the study is declared whole; the other variants' trials are 'not run' (not failures, exit
    0) and a hypothesis on them is pending; a later run without --only runs just those and judges it."""
    ran: list[str] = []
    monkeypatch.setattr("hybrid_trader.study.engine._run_on_ray", _fake_trials(ran))
    path = study_file(tmp_path, seeds=[0, 1, 2], hypotheses=[{**GOOD, "alpha": 0.2}])
    out = tmp_path / "out"
    code = main(["study", path, "--out", str(out), "--only", "fast", "--no-progress", "--json"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and ran == ["fast-s0-f0", "fast-s1-f0", "fast-s2-f0"]
    assert summary["not run"] == 3 and summary["variants not run"] == ["slow"] and summary["finished"] == 3
    assert summary["variants"]["slow"]["not run"] == 3 and summary["variants"]["fast"]["finished"] == 3
    h = summary["hypotheses"][0]
    assert h["verdict"] == "pending" and h["reason"].startswith("not_run_yet: 3 trial(s) of slow")
    assert "not run yet" in summary["many comparisons"]["reason"]  # the baseline (slow) has not run
    assert "pending" in (report := (out / "report.html").read_text()) and "3 not run yet (slow" in report
    # the same study file later, whole: only the trials not run yet run, and the hypothesis is judged by its rule
    ran.clear()
    code = main(["study", path, "--out", str(out), "--no-progress", "--json"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and ran == ["slow-s0-f0", "slow-s1-f0", "slow-s2-f0"] and summary["not run"] == 0
    h = summary["hypotheses"][0]
    assert h["pairs"] == 3 and h["mean difference"] == pytest.approx(50.0)
    assert h["p-value"] == pytest.approx(0.125) and h["verdict"] == "supported"  # 1/8 < 0.2; every pair +50
    said: list[str] = []
    run_study(path, out, workers=1, progress=False, only=["slow"], say=said.append)
    assert "6 finished before, 0 to run" in said[0]


def test_only_refuses_a_name_that_is_not_a_variant_of_the_study(tmp_path, capsys):
    code = main(["study", study_file(tmp_path), "--out", str(tmp_path / "out"), "--only", "fats"])
    err = capsys.readouterr().err
    assert code == 2 and "--only fats: not a variant of study" in err and "slow, fast" in err
    assert not (tmp_path / "out").exists()  # refused before anything is written


@pytest.mark.parametrize("student, message", [
    ({}, "llm.backend student without llm.student.path"),
    ({"llm.student.path": "nowhere/student.pt"}, "the student file is not there"),
])
def test_a_phase_3_variant_without_its_student_is_refused_before_any_trial_trains(tmp_path, student, message):
    """A trial's own phase 2 run has no distilled student: without a student file every trial would train phase 2
    and then fail. Refused before Ray starts, naming the variant."""
    tiny = {k: v for k, v in STUDENT_TINY.items() if k != "llm"}
    spec = {"base": {**tiny, "ppo.total_timesteps": 256, "llm.backend": "student"}, "seeds": [0], "phases": [2, 3],
            "variants": [{"name": "rl-only", "set": {"fusion.llm_weight": 0.0, "fusion.advice_input": False,
                                                     **student}},
                         {"name": "other", "set": {"fusion.llm_weight": 0.0, "fusion.advice_input": False}}]}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(UserError, match=f"study variant rl-only \\(phase 3\\): {message}") as err:
        run_study(path, tmp_path / "out", workers=1, progress=False, say=lambda s: None)
    assert "advise distill" in err.value.fix and not (tmp_path / "out").exists()


def test_trials_run_pair_by_pair_so_an_interrupted_study_holds_whole_pairs(tmp_path, monkeypatch):
    """Every variant of a seed and fold is given to Ray before the next seed's: a study stopped halfway has whole
    pairs for its hypotheses, not one variant's every trial and nothing of the others."""
    ran: list[str] = []
    monkeypatch.setattr("hybrid_trader.study.engine._run_on_ray", _fake_trials(ran))
    run_study(study_file(tmp_path, seeds=[0, 1], folds=2), tmp_path / "out", workers=1, progress=False,
              say=lambda s: None)
    assert ran == ["slow-s0-f0", "fast-s0-f0", "slow-s0-f1", "fast-s0-f1",
                   "slow-s1-f0", "fast-s1-f0", "slow-s1-f1", "fast-s1-f1"]
