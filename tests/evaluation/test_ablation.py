"""The variants ablation (evaluate --ablation): same phase 2 start, bars, split and seeds; mean and spread."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.ablation import TEACHER_VARIANT, ablation_markdown, run_ablation, summarise
from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig


@pytest.mark.slow  # 30-40 s: five variants trained on two seeds (make test-slow)
def test_ablation_trains_evaluates_and_tabulates_every_variant_when_given_a_phase2_run(tmp_path, student_p2,
                                                                                       monkeypatch):
    out = tmp_path / "ablation"
    table = run_ablation(student_p2, out, timesteps=256, seeds=(0, 1), split="test", say=lambda s: None)
    assert list(table["variants"]) == ["RL only", "RL only, phase 3", "constant prior + student",
                                       "constant prior + trend rule", "learned fusion + student"]
    for v in table["variants"].values():
        assert v["seeds"] == 2 and len(v["per_seed"]) == 2
        assert {"Net PnL [$]", "Sharpe (ann.)", "Trades", "Net PnL, fresh days [$]", "Breached days, fresh"} \
            <= set(v["mean"])
        assert sum(v["verdicts"].values()) == 2
    student = table["variants"]["learned fusion + student"]
    assert student["mean"]["Query rate [%]"] == pytest.approx(100.0) and "Agreement [%]" in student["mean"]
    assert "Trust w(s) (mean)" in student["mean"]
    assert "Query rate [%]" not in table["variants"]["RL only"]["mean"]
    control = table["variants"]["RL only, phase 3"]["mean"]
    assert control.get("Query rate [%]") in (None, 0.0)  # the control is never advised
    rule = table["variants"]["constant prior + trend rule"]["mean"]  # the LLM's control: the trend label alone
    assert rule["Query rate [%]"] > 50.0
    assert RunDir(out / "trend-rule-s0").load_config(RunConfig).llm.backend == "trend_rule"
    saved = json.loads((out / "ablation.json").read_text())
    assert saved["variants"].keys() == table["variants"].keys() and saved["seeds"] == [0, 1]
    assert "| Net PnL [$] |" in (out / "ABLATION.md").read_text()
    # a rerun reuses the finished runs and their evaluations (nothing trained or evaluated again)
    def fail(*args, **kwargs):
        raise AssertionError("evaluated again")

    monkeypatch.setattr("hybrid_trader.evaluation.ablation.evaluate_run", fail)
    again = run_ablation(student_p2, out, timesteps=256, seeds=(0, 1), split="test", say=lambda s: None)
    for name, v in table["variants"].items():
        assert again["variants"][name]["mean"] == pytest.approx(v["mean"], nan_ok=True)
    # an evaluation of a replaced model is not reused
    (out / "rl-only-s0" / "eval" / "test" / "STALE.json").write_text("{}")
    with pytest.raises(AssertionError, match="evaluated again"):
        run_ablation(student_p2, out, timesteps=256, seeds=(0, 1), split="test", say=lambda s: None)
    # an evaluation by another advisor (evaluate RUN --llm mock) goes to its own folder: the run's own stays
    (out / "rl-only-s0" / "eval" / "test" / "STALE.json").unlink()
    from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run

    other = evaluate_run(out / "learned-s0", EvaluationRequest(split="test", seeds=1, quiet=True, ablation=False,
                                                                llm_overrides={"backend": "mock"}, fresh_days=True))
    assert other.out_dir == out / "learned-s0" / "eval" / "test-llm-mock"
    assert json.loads((other.out_dir / "results.json").read_text())["info"]["advisor_override"] == {"backend": "mock"}
    run_ablation(student_p2, out, timesteps=256, seeds=(0, 1), split="test", say=lambda s: None)


def test_ablation_cli_prints_json_and_writes_the_report_when_asked(tmp_path, student_p2, capsys):
    code = main(["evaluate", str(student_p2), "--ablation", str(tmp_path / "a"), "--ablation-steps", "256",
                 "--ablation-seeds", "1", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["split"] == "test" and len(data["variants"]) == 5
    html = (tmp_path / "a" / "report.html").read_text()
    assert data["report"] == str(tmp_path / "a" / "report.html")
    for name in data["variants"]:
        assert name in html
    assert html.count('class="chart-spec"') == 2 and "data:image/png" not in html  # interactive by default
    assert "seed 0" in html and "rl-p3-s0" in html  # one row per run
    # `report OUT --static` on an ablation folder writes the variants report again, with PNGs
    (tmp_path / "a" / "report.html").unlink()
    assert main(["report", str(tmp_path / "a"), "--static"]) == 0
    html = (tmp_path / "a" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and (tmp_path / "a" / "ablation_equity.png").stat().st_size
    assert "<script" not in html


def test_ablation_report_is_refused_when_the_folder_has_no_ablation(tmp_path):
    from hybrid_trader.evaluation.ablation_report import is_ablation_dir, write_ablation_report

    assert not is_ablation_dir(tmp_path)
    with pytest.raises(UserError, match="no ablation"):
        write_ablation_report(tmp_path)
    (tmp_path / "ablation.json").write_text('{"variants": {}}')
    with pytest.raises(UserError, match="no variants"):
        write_ablation_report(tmp_path)


def test_ablation_adds_the_real_llm_variant_when_given_a_teacher(tmp_path, student_p2):
    out = tmp_path / "ablation"
    table = run_ablation(student_p2, out, timesteps=256, seeds=(0,), split="test", teacher="mock", say=lambda s: None)
    assert list(table["variants"])[-1] == TEACHER_VARIANT and table["teacher"] == "mock"
    row = table["variants"][TEACHER_VARIANT]["per_seed"][0]
    assert row["run"] == table["variants"]["learned fusion + student"]["per_seed"][0]["run"]  # the same trained run
    # evaluated apart: the student's evaluation of that run is still its own
    assert (out / "learned-s0" / "eval" / "test-llm-mock" / "results.json").is_file()
    info = json.loads((out / "learned-s0" / "eval" / "test" / "results.json").read_text())["info"]
    assert info["llm_backend"] == "student"
    info = json.loads((out / "learned-s0" / "eval" / "test-llm-mock" / "results.json").read_text())["info"]
    assert info["llm_backend"] == "mock"
    with pytest.raises(UserError, match="teacher"):
        run_ablation(student_p2, out, timesteps=256, seeds=(0,), teacher="student", say=lambda s: None)


def test_ablation_is_refused_when_the_run_has_no_student(tmp_path, student_p2):
    with pytest.raises(UserError, match="no student"):
        run_ablation(student_p2, tmp_path / "a", timesteps=256, seeds=(0,), student=str(tmp_path / "none.pt"))


def test_summary_gives_mean_spread_and_verdict_counts_when_seeds_differ():
    s = summarise([{"Net PnL [$]": 100.0, "Trades": 4, "Apex verdict": "breached"},
                   {"Net PnL [$]": -50.0, "Trades": 6, "Apex verdict": "neither"},
                   {"Net PnL [$]": 10.0, "Trades": 5, "Apex verdict": "neither"}])
    assert s["mean"]["Net PnL [$]"] == pytest.approx(20.0) and s["std"]["Net PnL [$]"] > 0
    assert s["verdicts"] == {"breached": 1, "neither": 2}
    md = ablation_markdown({"split": "test", "variants": {"x": s}})
    assert "20.00 ±" in md and "neither 2" in md
    assert s["std"]["Net PnL [$]"] == pytest.approx(float(np.std([100.0, -50.0, 10.0], ddof=1)))  # the sample's
    one = summarise([{"Net PnL [$]": 100.0, "Apex verdict": "neither"}])
    assert one["std"]["Net PnL [$]"] is None
    assert "100.00 ±" not in ablation_markdown({"split": "t", "variants": {"x": one}})


class AlwaysBuy:
    """Buys whenever an entry is legal (trades every day)."""

    name = "always buy"

    def __call__(self, obs, mask, env):
        return 1 if mask[1] else 0


def test_fresh_days_trade_every_day_when_one_account_would_stop_on_the_first(student_p2):
    from hybrid_trader.evaluation.metrics import FRESH_DAY_FIGURES
    from hybrid_trader.evaluation.runner import evaluation_env, run_fresh_days, run_policy
    from hybrid_trader.run import RunDir
    from hybrid_trader.run.config import RunConfig
    from hybrid_trader.run.market import load_market

    cfg = RunDir(student_p2).load_config(RunConfig)
    market = load_market(cfg.data, cfg.split)
    fragile = dataclasses.replace(cfg.env, rules_overrides={"trailing_drawdown": 1.0})  # the first loss breaches
    sessions = market.sessions("test")
    assert len(sessions) > 1
    one = run_policy(AlwaysBuy(), evaluation_env(market, fragile, sessions))
    fresh = run_fresh_days(AlwaysBuy, market, fragile, sessions)
    assert set(fresh) == set(FRESH_DAY_FIGURES) and fresh["Days, fresh"] == len(sessions)
    assert one.breach_time is not None and len({t.date() for t in one.trades["entry_time"]}) == 1
    assert fresh["Breached days, fresh"] == len(sessions)  # every fresh day trades, and breaches on its first loss
