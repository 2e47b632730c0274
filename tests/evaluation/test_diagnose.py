"""Diagnosis of run directories (hybrid_trader.evaluation.diagnose and `hybrid-trader diagnose`).

Each run directory below is healthy except for the one failure it is built to show.
"""

from __future__ import annotations

import json

import pytest

from hybrid_trader.cli import main as cli_main
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.diagnose import CHECKS, CODES, Thresholds, diagnose, diagnose_run
from hybrid_trader.llm.backends.base import ERROR_KINDS
from tests.evaluation.fakes import write_run


def codes(run_dir) -> list[str]:
    return [f.code for f in diagnose_run(run_dir)]


def run_cli(monkeypatch, *argv: str) -> int:
    """``hybrid-trader diagnose ...`` through the real entry point, with only this command registered."""
    monkeypatch.setattr(cli_main, "COMMAND_MODULES", ["hybrid_trader.cli.diagnose"])
    return cli_main.main(["diagnose", *argv])


def test_healthy_run_has_no_findings_and_exit_code_0(tmp_path, monkeypatch, capsys):
    rd = write_run(tmp_path / "run")
    dx = diagnose(rd)
    assert dx.findings == [] and dx.healthy
    assert {"policy change", "value function", "episode length", "trading rate", "train/validation gap",
            "final checkpoint"} <= set(dx.checked)
    assert run_cli(monkeypatch, str(rd)) == 0
    assert "Healthy" in capsys.readouterr().out


def test_healthy_phase3_run_has_no_findings(tmp_path):
    rd = write_run(tmp_path / "run", phase=3)
    dx = diagnose(rd)
    assert dx.findings == []
    assert {"LLM query rate", "LLM confidence", "LLM agreement", "LLM advice age"} <= set(dx.checked)


NO_LLM_ERRORS = {f"llm/errors_{k}": 0.0 for k in ERROR_KINDS}
RL_ONLY_FIGURES = {"Net PnL [$]": -986.0, "Trades": 28, "Sharpe (ann.)": -0.41, "Apex verdict": "FAILED",
                   "PSR [%]": None}

SINGLE_FAILURES = {
    # code: keyword arguments of write_run that produce exactly that failure
    "POLICY_NOT_CHANGING": dict(override={"train/approx_kl": 1.24e-10, "train/clip_fraction": 0.0,
                                          "train/policy_gradient_loss": -6.62e-10}),
    "WEAK_VALUE_FUNCTION": dict(override={"train/explained_variance": 0.05}),
    "SHORT_EPISODES": dict(override={"rollout/ep_len_mean": 19.9, "trading/trades_per_episode": 1.0}),
    "NEVER_TRADES": dict(override={"trading/trades_per_episode": 0.0, "trading/win_rate_pct": None}),
    "OVERTRADING": dict(override={"trading/trades_per_episode": 80.0}),  # 80 per 380 bars = 21 per 100 bars
    "TRAIN_VAL_GAP": dict(validation=[{"time/total_timesteps": k * 16384, "train/net_pnl_per_day": 300.0,
                                       "val/net_pnl_per_day": -40.0, "train/sharpe": 3.2, "val/sharpe": -0.4}
                                      for k in range(1, 5)]),
    "NO_FINAL_CHECKPOINT": dict(model=False, status={"state": "interrupted", "total_timesteps": 40_960,
                                                     "target_timesteps": 81_920}),
    "LLM_QUERY_RATE_LOW": dict(phase=3, override={"llm/query_rate_pct": 0.45}),
    "LLM_CONFIDENCE_NEAR_ZERO": dict(phase=3, override={"confidence/llm_avg": 0.000232}),
    "LLM_AGREEMENT_FROM_ABSTENTION": dict(phase=3, override={"fusion/agreement_pct": 99.9,
                                                             "llm/abstain_rate_pct": 85.0}),
    "LLM_ADVICE_STALE": dict(phase=3, override={"llm/advice_age_mean_steps": 8.0}),  # limit 10: > 0.5 * 10
    "LLM_ERROR_RATE_HIGH": dict(phase=3, override={**NO_LLM_ERRORS, "llm/total_queries": 400.0,
                                                   "llm/error_rate_pct": 30.0, "llm/errors_timeout": 110.0,
                                                   "llm/errors_http_5xx": 10.0}),
    "LLM_AUTH_FAILED": dict(phase=3, override={**NO_LLM_ERRORS, "llm/total_queries": 5.0, "llm/errors_auth": 5.0,
                                               "llm/error_rate_pct": 100.0, "llm/circuit_opened": 1.0}),
    "LLM_UNREACHABLE": dict(phase=3, override={**NO_LLM_ERRORS, "llm/total_queries": 5.0,
                                               "llm/errors_connection": 5.0, "llm/error_rate_pct": 100.0,
                                               "llm/circuit_opened": 1.0}),
    "HYBRID_EQUALS_RL_ONLY": dict(phase=3, ablation={"hybrid (RL + LLM)": {**RL_ONLY_FIGURES},
                                                     "RL only (llm_weight 0)": {**RL_ONLY_FIGURES}}),
}


@pytest.mark.parametrize("code", sorted(SINGLE_FAILURES))
def test_run_built_to_show_one_failure_gets_exactly_that_finding(tmp_path, monkeypatch, capsys, code):
    rd = write_run(tmp_path / "run", **SINGLE_FAILURES[code])
    findings = diagnose_run(rd)
    assert [f.code for f in findings] == [code]
    f = findings[0]
    assert f.evidence and f.fix and f.message and f.severity in ("error", "warning")
    assert code in CODES
    assert run_cli(monkeypatch, str(rd)) == 1
    out = capsys.readouterr().out
    assert code in out and "evidence:" in out and "fix:" in out


def test_policy_not_changing_names_the_freeze_schedule_longer_than_the_run(tmp_path):
    # The seed run: adapter_warmup_steps 100,000 with 81,920 steps trained.
    rd = write_run(tmp_path / "run", updates=20, n_steps=4096,
                   override={"train/approx_kl": 1.24e-10, "train/clip_fraction": 0.0},
                   config="env:\n  phase: 3\nphase3:\n  adapter_warmup_steps: 100000\n"
                          "  freeze_phase2_initially: true\n")
    (f,) = diagnose_run(rd)
    assert f.code == "POLICY_NOT_CHANGING"
    assert f.evidence["config phase3.adapter_warmup_steps"] == 100_000
    assert f.evidence["steps trained"] == 81_920
    assert f.evidence["approx_kl (max)"] == pytest.approx(1.24e-10)
    assert "phase3.adapter_warmup_steps" in f.fix and "8,192" in f.fix


def test_seed_report_run_shows_all_its_failures(tmp_path):
    # Numbers of 002_e41f1f8c1f19f629.txt: frozen policy, EV 0.192, 19.9-bar episodes, 0.45 % queries against
    # 20 % configured, LLM confidence 0.023 %, agreement 99.9 %, train/val reward 1.79 / 0.244.
    rd = write_run(tmp_path / "run", phase=3, override={
        "train/approx_kl": 1.24e-10, "train/clip_fraction": 0.0, "train/policy_gradient_loss": -6.62e-10,
        "train/explained_variance": 0.192, "rollout/ep_len_mean": 19.9, "trading/trades_per_episode": 1.0,
        "trading/win_rate_pct": 66.7, "llm/query_rate_pct": 0.45, "llm/configured_query_rate_pct": 20.0,
        "confidence/llm_avg": 0.000232, "fusion/agreement_pct": 99.9, "llm/abstain_rate_pct": None,
    }, validation=[{"time/total_timesteps": 81_920, "train/net_pnl_per_day": 179.0, "val/net_pnl_per_day": 24.4,
                    "train/sharpe": 1.79, "val/sharpe": 0.244}])
    assert set(codes(rd)) == {"POLICY_NOT_CHANGING", "WEAK_VALUE_FUNCTION", "SHORT_EPISODES", "LLM_QUERY_RATE_LOW",
                              "LLM_CONFIDENCE_NEAR_ZERO", "LLM_AGREEMENT_FROM_ABSTENTION", "TRAIN_VAL_GAP"}
    severities = [f.severity for f in diagnose_run(rd)]
    assert severities == sorted(severities, key=lambda s: s != "error"), "errors come first"


def test_advice_stale_when_the_model_answers_slower_than_max_age_even_with_no_advice_used(tmp_path):
    # Gemma on a CPU: answers arrive hundreds of steps late, so no advice is ever fresh enough to be read
    rd = write_run(tmp_path / "run", phase=3,
                   override={"llm/advice_age_mean_steps": None, "llm/answer_lag_steps": 240.0})
    (f,) = diagnose_run(rd)
    assert f.code == "LLM_ADVICE_STALE" and "expire unread" in f.message
    assert f.evidence["model answer lag (mean) [steps]"] == pytest.approx(240.0)
    assert "max_age_steps" in f.fix
    fast = write_run(tmp_path / "fast", phase=3, override={"llm/answer_lag_steps": 3.0})
    assert diagnose_run(fast) == []


def test_query_rate_low_when_the_model_is_too_slow_names_the_model_as_the_bottleneck(tmp_path):
    rd = write_run(tmp_path / "run", phase=3, override={"llm/query_rate_pct": 0.22, "llm/answer_lag_steps": 900.0})
    low = {f.code: f for f in diagnose_run(rd)}["LLM_QUERY_RATE_LOW"]
    assert "model is the bottleneck" in low.fix and low.evidence["model answer lag (mean) [steps]"] == 900.0
    rd = write_run(tmp_path / "policy", phase=3, override={"llm/query_rate_pct": 0.22})
    assert "query interval" in {f.code: f for f in diagnose_run(rd)}["LLM_QUERY_RATE_LOW"].fix


def test_finished_run_whose_model_file_is_gone_has_no_final_checkpoint(tmp_path):
    rd = write_run(tmp_path / "run")
    (rd / "model.zip").unlink()
    (f,) = diagnose_run(rd)
    assert f.code == "NO_FINAL_CHECKPOINT" and f.evidence["final_model_exists"] is False


def test_interrupted_run_fix_says_how_to_resume(tmp_path):
    rd = write_run(tmp_path / "run", model=False, status={"state": "running", "final_model": None})
    (f,) = diagnose_run(rd)
    assert "--resume" in f.fix and "checkpoints/step_000040960.zip" in f.fix
    assert "killed" in f.message


def test_never_trades_is_found_in_evaluation_metrics_too(tmp_path):
    rd = write_run(tmp_path / "run")
    (rd / "eval" / "test").mkdir(parents=True)
    (rd / "eval" / "test" / "metrics.json").write_text(json.dumps({"agent": {"Trades": 0, "Days": 20},
                                                                    "momentum": {"Trades": 50, "Days": 20}}))
    (f,) = diagnose_run(rd)
    assert f.code == "NEVER_TRADES" and f.evidence["trades in evaluation (test)"] == 0


def test_overtrading_is_found_in_evaluation_metrics(tmp_path):
    rd = write_run(tmp_path / "run")
    (rd / "eval" / "val").mkdir(parents=True)
    (rd / "eval" / "val" / "metrics.json").write_text(json.dumps(
        {"agent": {"Trades": 1000, "Days": 10, "Costs [$]": 8400.0, "Gross PnL [$]": 1200.0}}))
    (f,) = diagnose_run(rd)
    assert f.code == "OVERTRADING" and f.evidence["trades per day (val)"] == 100.0


def test_missing_keys_are_skipped_not_failed(tmp_path):
    rd = write_run(tmp_path / "run", override={"train/explained_variance": None, "rollout/ep_len_mean": None})
    dx = diagnose(rd)
    assert dx.findings == []
    assert any("value function" in s for s in dx.skipped) and any("episode length" in s for s in dx.skipped)


def test_too_few_updates_skips_the_training_checks(tmp_path):
    rd = write_run(tmp_path / "run", updates=2, override={"train/approx_kl": 0.0})
    dx = diagnose(rd)
    assert dx.findings == [] and any("only 2 PPO updates" in s for s in dx.skipped)


def test_recent_window_ignores_early_frozen_updates(tmp_path):
    rd = write_run(tmp_path / "run", updates=30)
    lines = (rd / "progress.jsonl").read_text().splitlines()
    early = [json.dumps(dict(json.loads(x), **{"train/approx_kl": 0.0, "train/clip_fraction": 0.0}))
             for x in lines[:20]]
    (rd / "progress.jsonl").write_text("\n".join(early + lines[20:]) + "\n")
    assert codes(rd) == []  # the last 10 updates move
    late = [json.dumps(dict(json.loads(x), **{"train/approx_kl": 0.0, "train/clip_fraction": 0.0}))
            for x in lines[20:]]
    (rd / "progress.jsonl").write_text("\n".join(lines[:20] + late) + "\n")
    assert codes(rd) == ["POLICY_NOT_CHANGING"]  # the policy stopped moving at the end
    assert [f.code for f in diagnose_run(rd, Thresholds(recent_updates=30))] == []  # a wider window sees it move


def test_truncated_last_log_line_is_skipped_with_a_note(tmp_path):
    rd = write_run(tmp_path / "run")
    with (rd / "progress.jsonl").open("a") as fh:
        fh.write('{"time/total_timesteps": 9999, "train/appr')
    dx = diagnose(rd)
    assert dx.findings == [] and any("incomplete" in n for n in dx.notes)


def test_broken_middle_log_line_is_a_user_error_with_exit_code_2(tmp_path, monkeypatch, capsys):
    rd = write_run(tmp_path / "run")
    lines = (rd / "progress.jsonl").read_text().splitlines()
    lines[3] = "{oops"
    (rd / "progress.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match="row 4"):
        diagnose(rd)
    assert run_cli(monkeypatch, str(rd)) == 2
    assert "progress.jsonl" in capsys.readouterr().err


def test_missing_or_non_run_directory_exits_2(tmp_path, monkeypatch, capsys):
    assert run_cli(monkeypatch, str(tmp_path / "nope")) == 2
    assert "run directory not found" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert run_cli(monkeypatch, str(tmp_path / "empty")) == 2
    assert "not a run directory" in capsys.readouterr().err
    rd = write_run(tmp_path / "run")
    (rd / "status.json").write_text("{not json")
    assert run_cli(monkeypatch, str(rd)) == 2


def test_run_without_training_log_is_reported(tmp_path):
    rd = write_run(tmp_path / "run")
    (rd / "progress.jsonl").unlink()
    assert codes(rd) == ["NO_TRAINING_LOG"]


def test_json_output_is_one_object_on_the_last_line(tmp_path, monkeypatch, capsys):
    rd = write_run(tmp_path / "run", override={"train/explained_variance": 0.05})
    assert run_cli(monkeypatch, str(rd), "--json") == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    data = json.loads(last)
    assert data["healthy"] is False
    assert data["findings"][0]["code"] == "WEAK_VALUE_FUNCTION"
    assert data["findings"][0]["evidence"]["threshold"] == 0.2


def test_thresholds_are_documented():
    from hybrid_trader.config import field_docs

    docs = field_docs(Thresholds)
    assert set(docs) == set(Thresholds.__dataclass_fields__)


# ---------------------------------------------------------------- LLM failures that show
def test_codes_when_registered_belong_to_exactly_one_check():
    owned = [code for check in CHECKS for code in check.codes]
    assert sorted(owned) == sorted(CODES) and len(owned) == len(set(owned))


def test_every_401_when_logged_is_auth_failed_with_the_key_variable_in_the_fix(tmp_path):
    # issue 13: every query answered 401 and diagnose said "healthy"
    rd = write_run(tmp_path / "run", phase=3, override={
        **NO_LLM_ERRORS, "llm/total_queries": 5.0, "llm/errors_auth": 5.0, "llm/error_rate_pct": 100.0,
        "llm/query_rate_pct": 0.3}, config="env:\n  phase: 3\nllm:\n  backend: openai\n  openai:\n"
                                           "    api_key_env: MY_LLM_KEY\n")
    found = {f.code: f for f in diagnose_run(rd)}
    assert "LLM_AUTH_FAILED" in found and "LLM_QUERY_RATE_LOW" not in found
    f = found["LLM_AUTH_FAILED"]
    assert "export MY_LLM_KEY=" in f.fix and f.evidence["key variable (llm.openai.api_key_env)"] == "MY_LLM_KEY"


def test_connection_refused_for_the_whole_run_says_the_server_is_down_not_query_rate(tmp_path):
    # issue 13: diagnose blamed the query rate and suggested the back end already in use
    rd = write_run(tmp_path / "run", phase=3, override={
        **NO_LLM_ERRORS, "llm/total_queries": 5.0, "llm/errors_connection": 5.0, "llm/error_rate_pct": 100.0,
        "llm/circuit_opened": 1.0, "llm/query_rate_pct": 0.05, "llm/answer_lag_steps": 900.0},
        config="env:\n  phase: 3\nllm:\n  backend: openai\n  openai:\n    base_url: http://127.0.0.1:9/v1\n")
    found = {f.code: f for f in diagnose_run(rd)}
    assert "LLM_UNREACHABLE" in found and "LLM_QUERY_RATE_LOW" not in found
    f = found["LLM_UNREACHABLE"]
    assert "down" in f.message and "http://127.0.0.1:9/v1" in f.fix and "--llm openai" not in f.fix
    assert f.evidence["connection errors (training)"] == 5


def test_query_rate_low_with_a_slow_server_does_not_suggest_the_server_back_end_again(tmp_path):
    rd = write_run(tmp_path / "run", phase=3, override={"llm/query_rate_pct": 0.22, "llm/answer_lag_steps": 900.0},
                   config="env:\n  phase: 3\nllm:\n  backend: openai\n")
    low = {f.code: f for f in diagnose_run(rd)}["LLM_QUERY_RATE_LOW"]
    assert "model is the bottleneck" in low.fix and "--llm openai" not in low.fix


def test_error_rate_high_names_the_dominant_kind_and_its_fix(tmp_path):
    rd = write_run(tmp_path / "run", **SINGLE_FAILURES["LLM_ERROR_RATE_HIGH"])
    (f,) = diagnose_run(rd)
    assert f.evidence["dominant error kind"] == "timeout" and "timeout" in f.message
    assert "request_timeout_s" in f.fix
    assert f.evidence["error rate [%] (training)"] == 30.0


def test_error_rate_below_threshold_is_healthy(tmp_path):
    rd = write_run(tmp_path / "run", phase=3, override={**NO_LLM_ERRORS, "llm/total_queries": 400.0,
                                                        "llm/error_rate_pct": 2.0, "llm/errors_timeout": 8.0})
    dx = diagnose(rd)
    assert dx.findings == [] and "LLM server" in dx.checked


@pytest.mark.parametrize("why, extra, override", [
    ("circuit opened", {}, {**NO_LLM_ERRORS, "llm/total_queries": 5.0, "llm/errors_timeout": 5.0,
                            "llm/error_rate_pct": 100.0, "llm/circuit_opened": 1.0}),
    ("weight is 0", {"LLM weight": 0.0, "Advised decisions [%]": 40.0}, {}),
    ("no advice arrived", {"LLM weight": 1.0, "Advised decisions [%]": 0.0}, {}),
    ("never changed a decision", {"LLM weight": 1.0, "Advised decisions [%]": 40.0}, {}),
])
def test_hybrid_equal_to_rl_only_says_why_the_advice_had_no_effect(tmp_path, why, extra, override):
    # issue 13: evaluate against a dead server reported "hybrid" figures identical to RL-only, exit 0
    rd = write_run(tmp_path / "run", phase=3, override=override or None,
                   ablation={"hybrid (RL + LLM)": RL_ONLY_FIGURES, "RL only (llm_weight 0)": RL_ONLY_FIGURES})
    if extra:
        split = rd / "eval" / "test"
        split.mkdir(parents=True)
        (split / "metrics.json").write_text(json.dumps({"agent": {"Trades": 28, "Days": 20}}))
        (split / "results.json").write_text(json.dumps({"strategies": [
            {"name": "agent", "role": "agent", "extra": {"llm": extra}}]}))
    found = {f.code: f for f in diagnose_run(rd)}
    f = found["HYBRID_EQUALS_RL_ONLY"]
    assert why in f.message and f.severity == "error" and f.fix


def test_hybrid_different_from_rl_only_is_healthy(tmp_path):
    rd = write_run(tmp_path / "run", phase=3, ablation={"hybrid (RL + LLM)": {**RL_ONLY_FIGURES, "Trades": 31},
                                                        "RL only (llm_weight 0)": RL_ONLY_FIGURES})
    dx = diagnose(rd)
    assert dx.findings == [] and "hybrid vs RL-only" in dx.checked


def test_freeze_schedule_when_in_the_typed_config_is_named(tmp_path):
    rd = write_run(tmp_path / "run", updates=20, n_steps=4096,
                   override={"train/approx_kl": 1.24e-10, "train/clip_fraction": 0.0},
                   config="env:\n  phase: 2\nppo:\n  total_timesteps: 200000\ntrain:\n  freeze_body_steps: 90000\n")
    (f,) = diagnose_run(rd)
    assert f.evidence["config train.freeze_body_steps"] == 90_000 and "train.freeze_body_steps" in f.fix


def student_run(tmp_path, agreement: float, query_rate: float = 100.0):
    """A phase 3 run advised by a student whose student_metrics.json reports ``agreement`` on validation days."""
    advice = tmp_path / "p2" / "advice"
    advice.mkdir(parents=True)
    (advice / "student_metrics.json").write_text(json.dumps({"metrics": {
        "train": {"Top-1 agreement [%]": 97.0}, "val": {"Top-1 agreement [%]": agreement, "Rows": 800,
                                                        "Majority baseline [%]": 41.0, "Mean KL [nats]": 0.4}}}))
    config = f"env:\n  phase: 3\nllm:\n  backend: student\n  student:\n    path: {advice / 'student.pt'}\n"
    return write_run(tmp_path / "run", phase=3, config=config,
                     override={"llm/query_rate_pct": query_rate, "llm/configured_query_rate_pct": 100.0,
                               "llm/advice_age_mean_steps": 0.0})


def test_student_run_is_not_flagged_for_query_rate_when_every_decision_is_advised(tmp_path):
    dx = diagnose(student_run(tmp_path, agreement=93.0))
    assert dx.findings == []
    assert {"LLM query rate", "student fidelity"} <= set(dx.checked)


def test_student_fidelity_low_is_flagged_with_the_fix_when_held_out_agreement_is_below_80(tmp_path):
    found = {f.code: f for f in diagnose_run(student_run(tmp_path, agreement=62.5))}
    assert set(found) == {"STUDENT_FIDELITY_LOW"}
    f = found["STUDENT_FIDELITY_LOW"]
    assert f.evidence["top-1 agreement on val days [%]"] == 62.5 and f.evidence["threshold [%]"] == 80.0
    assert "advise collect" in f.fix and "advise distill" in f.fix
    assert Thresholds().min_student_agreement_pct == 80.0


def test_student_fidelity_reads_the_test_days_when_the_student_was_scored_on_them(tmp_path):
    rd = student_run(tmp_path, agreement=95.0)
    path = tmp_path / "p2" / "advice" / "student_metrics.json"
    data = json.loads(path.read_text())
    data["metrics"]["test"] = {"Top-1 agreement [%]": 70.0}
    path.write_text(json.dumps(data))
    assert codes(rd) == ["STUDENT_FIDELITY_LOW"]


def test_student_fidelity_is_skipped_with_a_reason_when_the_metrics_file_is_missing(tmp_path):
    rd = student_run(tmp_path, agreement=95.0)
    (tmp_path / "p2" / "advice" / "student_metrics.json").unlink()
    dx = diagnose(rd)
    assert dx.findings == [] and any("student_metrics.json" in s for s in dx.skipped)


def with_flat_share(tmp_path, share: float, raw: str | None = None) -> None:
    """Give the student of :func:`student_run` a measured flat top-action share (as advise distill writes it)."""
    path = tmp_path / "p2" / "advice" / "student_metrics.json"
    data = json.loads(path.read_text())
    data["metrics"]["val"].update({"Flat states": 240, "Flat top action share [%]": share})
    data["info"] = {"flat_top_action": {"val": "BUY"}, "raw_advice": raw}
    path.write_text(json.dumps(data))


def test_constant_student_is_named_with_evidence_when_one_action_tops_over_90_percent_of_flat_states(tmp_path):
    rd = student_run(tmp_path, agreement=99.0)
    with_flat_share(tmp_path, 97.5, raw="collected with --no-calibrate")
    (f,) = diagnose_run(rd)
    assert f.code == "STUDENT_CONSTANT" and f.severity == "error" and "BUY" in f.message
    assert f.evidence["top action share in flat states of val days [%]"] == 97.5 and f.evidence["flat states"] == 240
    assert f.evidence["advice"] == "raw (collected with --no-calibrate)" and f.evidence["threshold [%]"] == 90.0
    assert "advise collect" in f.fix and "advise distill" in f.fix


def test_varied_student_is_not_named_constant_when_its_top_action_is_under_90_percent_of_flat_states(tmp_path):
    rd = student_run(tmp_path, agreement=99.0)
    with_flat_share(tmp_path, 62.0)
    dx = diagnose(rd)
    assert dx.findings == [] and "constant student" in dx.checked
    with_flat_share(tmp_path, 90.0)  # the threshold itself is not above it
    assert diagnose(rd).findings == []
