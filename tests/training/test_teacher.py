"""The teacher beside the student: phase 3's training decisions answered by the real LLM into the dataset."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from hybrid_trader.advise.collect import CollectRequest, RunPolicy, collect_llm_config, collect_split
from hybrid_trader.advise.distill import DistillConfig, distill
from hybrid_trader.errors import UserError
from hybrid_trader.features.names import FEATURE_NAMES
from hybrid_trader.llm.backends.student_backend import load_student
from hybrid_trader.run.advice_dataset import META_KEY, part_files, read_split
from hybrid_trader.run.advice_identity import advice_identity
from hybrid_trader.run.files import Manifest
from hybrid_trader.training.runner import train_run, with_default_student
from hybrid_trader.training.teacher import TRAINING_PASS, teacher_config
from tests.training.conftest import student_cfg

TEACHER = {"llm.student.teacher": "mock"}  # llm.query.mode always (STUDENT_TINY): every new state is offered


def test_teacher_answers_training_decisions_into_the_run_s_dataset_when_set(tmp_path, student_market, student_p2):
    out = tmp_path / "p3"
    config = student_cfg(3, 512, **TEACHER)
    train_run(config, out, init=student_p2, market=student_market, quiet=True)
    rows, meta = read_split(out, "train")
    assert len(rows) > 20
    # the identity advise collect --llm mock gives the same run: a later collect continues this dataset
    assert meta["advice"] == advice_identity(collect_llm_config(config, backend="mock"))
    assert meta["advice"] == advice_identity(teacher_config(config.llm))
    assert rows.obs.shape[1] == len(FEATURE_NAMES) and (rows.rollout == TRAINING_PASS).all()
    assert len(rows.keys()) == len(rows)  # each state asked once
    masks = rows.masks()
    assert (masks.sum(axis=1) >= 2).all()  # never a state with one legal action
    np.testing.assert_allclose(rows.probs.sum(axis=1), 1.0, atol=1e-5)
    assert (rows.probs[~masks] == 0).all()
    # each stored observation is its state's: position and entry flag agree with the key
    position, can_enter = FEATURE_NAMES.index("position"), FEATURE_NAMES.index("can_enter")
    np.testing.assert_array_equal(rows.obs[:, position], rows.position)
    np.testing.assert_array_equal(rows.obs[:, can_enter], masks[:, 1])
    assert len(set(rows.context)) > 1 and all(str(s).strip() for s in rows.context)
    logged = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    last = [r for r in logged if "llm/teacher_queued" in r][-1]
    assert last["llm/teacher_queued"] >= last["llm/teacher_answered"] > 0
    assert last["llm/teacher_batch_size_avg"] > 2  # more than one query per environment (2) in a batch: the slots
    assert last["llm/query_rate_pct"] == pytest.approx(100.0)  # the student still advises every decision


def test_collect_skips_the_teacher_s_states_when_continuing_its_dataset(tmp_path, student_market, student_p2):
    out = tmp_path / "p3"
    config = student_cfg(3, 256, **TEACHER)
    train_run(config, out, init=student_p2, market=student_market, quiet=True)
    before, _ = read_split(out, "train")
    result = collect_split(out, "train", collect_llm_config(config, backend="mock", batch=64),
                           CollectRequest(market=student_market, run_config=config, policy=RunPolicy(out),
                                          progress=False, say=lambda s: None))
    after, _ = read_split(out, "train")
    assert result.stored_before == len(before) and len(after) == len(before) + result.asked
    assert len(after.keys()) == len(after)  # nothing the teacher answered was asked again
    # the next round: held-out days, then a student of phase 3's own states (261 features)
    collect_split(out, "val", collect_llm_config(config, backend="mock", batch=64), CollectRequest(
        market=student_market, run_config=config, policy=RunPolicy(out), progress=False, max_states=400,
        say=lambda s: None))
    distilled = distill(out, DistillConfig(epochs=2, hidden=(16,)), say=lambda s: None)
    assert distilled["info"]["train_rows"] == len(after)
    assert load_student(out / "advice" / "student.pt").obs_dim == len(FEATURE_NAMES)


def test_teacher_refuses_a_dataset_of_another_model_when_the_run_resumes(tmp_path, student_market, student_p2):
    out = tmp_path / "p3"
    train_run(student_cfg(3, 256, **TEACHER), out, init=student_p2, market=student_market, quiet=True)
    # the run's dataset now holds another model's advice (as advise collect --llm X into it would leave)
    for part in part_files(out, "train"):
        table = pq.read_table(part)
        meta = json.loads(table.schema.metadata[META_KEY])
        meta["advice"] = {**meta["advice"], "model": "transformers:other", "hash": "0" * 12}
        pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()}), part)
        Manifest(part.parent).record({part: part.read_bytes()})  # as another model's writer would have recorded it
    config = with_default_student(student_cfg(3, 512, **TEACHER), student_p2)
    with pytest.raises(UserError, match="another model or prompt"):
        train_run(config, out, resume=True, market=student_market, quiet=True)


def test_teacher_is_refused_when_the_back_end_is_not_the_student(tmp_path, student_market, student_p2):
    config = student_cfg(3, 256, **{**TEACHER, "llm.backend": "mock"})
    with pytest.raises(UserError, match="answers beside the student"):
        train_run(config, tmp_path / "p3", init=student_p2, market=student_market, quiet=True)
    assert not (tmp_path / "p3").exists()


def test_student_config_refuses_a_teacher_that_is_not_a_language_model():
    with pytest.raises(UserError, match="not a language-model back end"):
        student_cfg(3, 256, **{"llm.student.teacher": "student"})
