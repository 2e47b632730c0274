"""``hybrid-trader bench train``: the phase 3 comparison runs and reports what it measured."""

from __future__ import annotations

import json

import pytest

from hybrid_trader.cli.main import main


def test_bench_train_when_phase_3_reports_ratio_against_phase_2_and_llm_share(capsys):
    code = main(["bench", "train", "--phase", "3", "--llm", "mock", "--steps", "256", "--n-envs", "1",
                 "--advice-input", "false"])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["phase"] == 3 and result["llm_backend"] == "mock"
    assert result["phase2_learn_seconds"] > 0 and result["phase3_learn_seconds"] > 0
    assert result["phase3_over_phase2"] == round(result["phase3_learn_seconds"] / result["phase2_learn_seconds"], 3)
    # the mock answers at once: the LLM took part in the timed phase 3 rollouts
    assert result["llm/total_queries"] > 0 and result["llm_query_rate_pct"] > 0
    assert "took" in lines[-3] and "x the time of phase 2" in lines[-3]
    assert result["advice_input"] is False and "advice as prior alone" in lines[-3]
    assert result["phase2_cpu_seconds"] > 0 and result["phase3_cpu_seconds"] > 0
    assert result["phase3_over_phase2_cpu"] == round(result["phase3_cpu_seconds"] / result["phase2_cpu_seconds"], 3)
    assert lines[-2].startswith("in CPU time")


@pytest.mark.slow  # 30-35 s: a student distilled, then phase 3 timed (make test-slow)
def test_bench_train_when_llm_is_student_builds_one_advises_every_decision_and_breaks_the_time_down(capsys):
    code = main(["bench", "train", "--phase", "3", "--llm", "student", "--steps", "256", "--n-envs", "2",
                 "--breakdown"])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    segments = result["segments_us_per_step"]
    # the student's forward and the advice wrapper exist in phase 3 only; both phases have the rest
    assert segments["student forward"]["phase2_us"] == 0 < segments["student forward"]["phase3_us"]
    assert segments["AdvisorVecEnv"]["phase3_us"] > 0 and segments["VecNormalize"]["phase2_us"] > 0
    assert segments["rollout"]["extra_us"] == pytest.approx(
        segments["rollout"]["phase3_us"] - segments["rollout"]["phase2_us"], abs=0.11)
    assert any(line.startswith("student forward") for line in lines)
    assert result["llm_backend"] == "student" and result["fusion_mode"] == "constant" and result["advice_input"]
    assert result["llm_query_rate_pct"] == 100.0 and result["llm_advised_pct"] == 100.0
    assert result["student_build_seconds"] > 0
    assert result["student_metrics"]["Rows"] > 0 and "Top-1 agreement [%]" in result["student_metrics"]
