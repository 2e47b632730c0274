"""Distilling the advice into a student: fidelity, the student file, compare, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybrid_trader.advise.collect import CollectRequest, collect_split
from hybrid_trader.advise.compare import compare_split, confusion_table
from hybrid_trader.advise.distill import METRIC_LABELS, DistillConfig, distill, fidelity_table, load_run_student
from hybrid_trader.cli.main import main
from hybrid_trader.errors import UserError
from hybrid_trader.features.names import FEATURE_NAMES
from hybrid_trader.run.advice_dataset import read_split


@pytest.fixture
def collected(run_dir, run_parts, mock_config):
    cfg, market, policy = run_parts
    for split in ("train", "val"):
        collect_split(run_dir, split, mock_config, CollectRequest(market=market, run_config=cfg, policy=policy,
                                                                  progress=False, say=lambda s: None))
    return run_dir


def test_distill_learns_the_teacher_when_trained_on_mock_advice(collected):
    out = distill(collected, DistillConfig(epochs=25, hidden=(64, 64)), say=lambda s: None)
    m = out["metrics"]
    assert set(m) == {"train", "val"} and set(m["val"]) == set(METRIC_LABELS)
    # better than always answering the most frequent action, on later (validation) days
    assert m["val"]["Top-1 agreement [%]"] > m["val"]["Majority baseline [%]"] + 5
    assert m["train"]["Mean KL [nats]"] < 0.2
    saved = json.loads((collected / "advice" / "student_metrics.json").read_text())
    assert saved["metrics"]["val"] == pytest.approx(m["val"])
    student = load_run_student(collected)
    _, meta = read_split(collected, "train")
    assert student.advice_hash == meta["advice"]["hash"] and student.obs_dim == 228
    assert student.feature_names == FEATURE_NAMES[:228]
    assert "Top-1 agreement [%]" in fidelity_table(m) and "Mean KL [nats]" in fidelity_table(m)


def test_student_probabilities_are_zero_on_illegal_actions_when_asked(collected):
    distill(collected, DistillConfig(epochs=2, hidden=(16,)), say=lambda s: None)
    student = load_run_student(collected)
    rows, _ = read_split(collected, "val")
    probs, conf = student.advise(rows.obs, rows.masks())
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5) and (probs[~rows.masks()] == 0).all()
    assert ((conf > 0) & (conf < 1)).all()


def test_student_is_refused_when_the_observation_layout_differs(collected):
    distill(collected, DistillConfig(epochs=1, hidden=(8,)), say=lambda s: None)
    student = load_run_student(collected)
    with pytest.raises(UserError, match="another observation layout") as err:
        student.check_layout(FEATURE_NAMES)  # a phase 3 (261) observation
    assert student.layout_hash in str(err.value) and "228" in str(err.value) and "261" in str(err.value)
    with pytest.raises(UserError, match="expects observations of 228"):
        student.advise(np.zeros((2, 261), np.float32), np.ones((2, 6), bool))


def test_compare_refuses_when_the_student_learnt_from_another_model(collected):
    distill(collected, DistillConfig(epochs=1, hidden=(8,)), say=lambda s: None)
    student = load_run_student(collected)
    student.advice_parts = {**student.advice_parts, "model": "transformers:gemma", "hash": "0123456789ab"}
    with pytest.raises(UserError, match="0123456789ab"):
        compare_split(collected, "val", student)


def test_compare_counts_every_usable_row_when_run(collected):
    distill(collected, DistillConfig(epochs=3, hidden=(32,)), say=lambda s: None)
    r = compare_split(collected, "val", load_run_student(collected))
    assert np.asarray(r["confusion"]).sum() == r["rows"] - r["abstained"] == r["fidelity"]["Rows"]
    assert "HOLD" in confusion_table(r["confusion"])


def test_distill_names_the_folder_when_no_train_advice_exists(run_dir):
    with pytest.raises(UserError, match="no advice collected for the train split"):
        distill(run_dir, DistillConfig(epochs=1), say=lambda s: None)


def test_cli_runs_collect_distill_compare_when_given_a_run(run_dir, capsys):
    assert main(["advise", "collect", str(run_dir), "--llm", "mock", "--split", "all", "--max-states", "120",
                 "--sampled", "0", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["split"] for r in out["collect"]] == ["train", "val", "test"]
    assert all(r["asked"] <= 120 for r in out["collect"]) and out["collect"][0]["asked"] == 120
    assert main(["advise", "distill", str(run_dir), "--epochs", "2", "--hidden", "16"]) == 0
    text = capsys.readouterr().out
    assert "Top-1 agreement [%]" in text and (run_dir / "advice" / "student.pt").exists()
    assert main(["advise", "compare", str(run_dir), "--split", "test"]) == 0
    assert "LLM \\ student" in capsys.readouterr().out


def test_cli_exits_2_when_the_student_file_is_truncated(collected, capsys):
    distill(collected, DistillConfig(epochs=1, hidden=(8,)), say=lambda s: None)
    path = collected / "advice" / "student.pt"
    path.write_bytes(path.read_bytes()[:200])
    assert main(["advise", "compare", str(collected)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "truncated" in err
