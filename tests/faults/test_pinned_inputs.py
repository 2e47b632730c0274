"""Issue 24, case 2: a phase 3 student run pins its student by absolute path and content hash.

Before: the run stored the path relative to the working directory and no hash, so
re-distilling the phase 2 run silently changed ``evaluate`` of the phase 3 run.
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from hybrid_trader.advise.distill import DistillConfig, distill
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run
from hybrid_trader.run.pins import PINS, check_pins, content_hash, read_pins
from hybrid_trader.training.runner import train_run
from tests.training.conftest import student_cfg


@pytest.fixture
def p3_run(tmp_path, student_market, student_p2, monkeypatch):
    p2 = tmp_path / "p2"
    shutil.copytree(student_p2, p2)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "p3"
    cfg = student_cfg(3, 256)
    train_run(cfg, out, init=p2, market=student_market, quiet=True)
    return out, p2


def test_student_is_pinned_by_absolute_path_and_hash_when_phase3_trains(p3_run):
    out, p2 = p3_run
    pins = read_pins(out)
    student = p2 / "advice" / "student.pt"
    assert pins["student"] == {"path": str(student.resolve()), "sha256": content_hash(student)}
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["llm"]["student"]["path"] == str(student.resolve())


def test_evaluate_and_resume_refuse_a_redistilled_student_naming_both_hashes(p3_run, student_market, tmp_path,
                                                                            monkeypatch):
    out, p2 = p3_run
    before = read_pins(out)["student"]["sha256"]
    distill(p2, DistillConfig(epochs=1, hidden=(4,)), say=lambda s: None)  # the student changes under the run
    after = content_hash(p2 / "advice" / "student.pt")
    assert after != before
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the pinned path is absolute: found from any directory, and still refused
    with pytest.raises(UserError, match=f"now sha256 {after[:12]}, the run pinned {before[:12]}"):
        evaluate_run(out, EvaluationRequest(quiet=True, market=student_market))
    with pytest.raises(UserError, match="--resume: the student this run used has changed"):
        train_run(student_cfg(3, 512), out, resume=True, market=student_market, quiet=True)
    assert not (out / "eval").exists()  # nothing was evaluated with the other student


def test_a_missing_pinned_folder_is_named_with_the_fix(tmp_path):
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "w.bin").write_bytes(b"1")
    (tmp_path / PINS).write_text('{"adapter": {"path": "%s", "sha256": "x"}}' % (tmp_path / "gone"))
    with pytest.raises(UserError, match="a pinned input is missing"):
        check_pins(tmp_path, doing="evaluate")


def test_the_student_records_the_dataset_it_was_distilled_from_by_content(student_p2):
    from hybrid_trader.llm.backends.student_backend import load_student
    from hybrid_trader.run.advice_dataset import dataset_digest

    student = load_student(student_p2 / "advice" / "student.pt")
    assert student.metrics["dataset_sha256"]["train"] == dataset_digest(student_p2, "train")
