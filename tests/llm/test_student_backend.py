"""The student back end: the distilled network behind the advisor's Backend interface."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybrid_trader.errors import UserError
from hybrid_trader.llm.advice import ACTION_WORDS, LLM_ERROR
from hybrid_trader.llm.async_advisor import Advisor
from hybrid_trader.llm.backends.student_backend import (
    StudentBackend,
    StudentConfig,
    StudentNet,
    layout_names,
    no_legal_fix,
    student_bytes,
    student_from_options,
)
from hybrid_trader.llm.config import load_llm_config
from hybrid_trader.llm.prompt import PromptBuilder, sample_context


@pytest.fixture
def student_path(tmp_path):
    torch.manual_seed(0)
    net = StudentNet(228, (16,))
    path = tmp_path / "student.pt"
    path.write_bytes(student_bytes(net, (16,), advice_hash="abc", advice_parts={"hash": "abc"}, metrics={},
                                  created_by="test"))
    return path


def advisor(path) -> Advisor:
    cfg = load_llm_config(overrides={"backend": "mock", "cache": {"enabled": False}})
    return Advisor(cfg, StudentBackend(StudentConfig(path=str(path))))


def test_advisor_returns_the_students_distribution_when_the_context_carries_the_observation(student_path):
    backend = StudentBackend(StudentConfig(path=str(student_path)))
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(3, 228)).astype(np.float32)
    ctxs = []
    for o in obs:
        c = sample_context()
        c.observation = o
        ctxs.append(c)
    masks = np.stack([c.legal for c in ctxs])
    want, _ = backend.advise_batch(obs, masks)
    with advisor(student_path) as adv:
        got = adv.advise_now(ctxs, raise_errors=True)
    for a, p in zip(got, want):
        assert not a.abstained and np.allclose(a.probs, p, atol=1e-6) and a.action == int(np.argmax(p))
    assert layout_names(228)[0] in backend.student.feature_names and "student" in backend.describe()


def test_advisor_abstains_loudly_when_the_context_has_no_observation(student_path):
    with advisor(student_path) as adv:
        a = adv.advise_now([sample_context()])[0]
        assert a.abstained and a.abstain_reason == LLM_ERROR and "observation" in a.raw
        with pytest.raises(UserError, match="no observation"):
            adv.advise_now([sample_context()], raise_errors=True)


def test_student_backend_refuses_when_the_path_is_missing_or_empty(tmp_path):
    with pytest.raises(UserError, match="llm.student.path is empty"):
        student_from_options({})
    with pytest.raises(UserError, match="student file not found"):
        student_from_options({"path": str(tmp_path / "nope.pt")})


def test_generate_names_the_students_top_action_when_asked(student_path):
    backend = StudentBackend(StudentConfig(path=str(student_path)))
    c = sample_context()
    c.observation = np.zeros(228, np.float32)
    text = backend.generate([backend_query(c)], 8, 0.0)[0]
    probs, conf = backend.advise_batch(c.observation[None], c.legal[None])
    assert text.split("|")[0].strip() == ACTION_WORDS[int(np.argmax(probs[0]))]
    assert float(text.split("|")[1]) == pytest.approx(float(conf[0]), abs=0.006)


def backend_query(ctx):
    return PromptBuilder(load_llm_config(overrides={"backend": "mock"})).query(ctx)


def _random_student(tmp_path, hidden=(32, 16), obs_dim=228) -> StudentBackend:
    torch.manual_seed(1)
    net = StudentNet(obs_dim, hidden)
    with torch.no_grad():  # non-trivial normalisation, so that clipping and scaling are exercised
        net.mean.normal_()
        net.std.uniform_(0.2, 3.0)
    path = tmp_path / "student.pt"
    path.write_bytes(student_bytes(net, hidden, advice_hash="abc", advice_parts={"hash": "abc"}, metrics={},
                                  created_by="test"))
    return StudentBackend(StudentConfig(path=str(path)))


@pytest.mark.parametrize("hidden", [(32, 16), (8,), (16, 8, 8)])
def test_cpu_kernel_equals_the_torch_network_when_the_student_runs_on_cpu(tmp_path, hidden):
    backend = _random_student(tmp_path, hidden)
    rng = np.random.default_rng(0)
    obs = (rng.normal(size=(64, 228)) * 4).astype(np.float32)
    masks = rng.random((64, 6)) > 0.5
    masks[0] = False  # no legal action: HOLD is made legal, as in the torch path
    probs, conf = backend.advise_batch(obs, masks)
    ref_probs, ref_conf = backend.student.advise_torch(obs, masks)
    assert probs.dtype == np.float32 and conf.dtype == np.float32
    np.testing.assert_allclose(probs, ref_probs, atol=1e-6)
    np.testing.assert_allclose(conf, ref_conf, atol=1e-6)
    assert (probs[1:][~masks[1:]] == 0).all() and probs[0, 0] == pytest.approx(1.0)


def test_block_writer_writes_the_features_and_the_answer_where_asked_when_given_wider_rows(tmp_path):
    backend = _random_student(tmp_path)
    rng = np.random.default_rng(2)
    obs = (rng.normal(size=(4, 240)) * 3).astype(np.float32)  # the student reads the first 228 values
    masks = rng.random((4, 6)) > 0.3
    out = np.full((4, 252), -7.0, dtype=np.float32)
    backend.block_writer(probs_col=241, conf_col=247, present_col=249, copy=240)(obs, masks, out)
    probs, conf = backend.advise_batch(obs[:, :228], masks)
    np.testing.assert_array_equal(out[:, :240], obs)
    np.testing.assert_array_equal(out[:, 241:247], probs)
    np.testing.assert_array_equal(out[:, 247], conf)
    assert (out[:, 249] == 1.0).all()
    assert (out[:, [240, 248, 250, 251]] == -7.0).all()  # columns not asked for are left as they were


def test_no_legal_fix_returns_the_masks_themselves_when_hold_is_legal_in_every_row():
    masks = np.array([[True, False, False, False, False, False], [True, True, True, False, False, False]])
    assert no_legal_fix(masks) is masks


def test_no_legal_fix_makes_hold_legal_only_where_no_action_is_when_hold_is_illegal_somewhere():
    masks = np.array([[False, True, False, False, False, False], [False] * 6, [True] + [False] * 5])
    fixed = no_legal_fix(masks)
    assert fixed.tolist() == [[False, True, False, False, False, False], [True] + [False] * 5,
                              [True] + [False] * 5]
    assert not masks[1].any()  # the caller's masks are not changed
