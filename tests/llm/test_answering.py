"""The Answerer alone: one back-end call per batch, calibration, failures as abstentions, the circuit breaker."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm.answering import Answerer
from hybrid_trader.llm.backends.base import BackendError
from hybrid_trader.llm.health import LLM_CIRCUIT_OPEN
from hybrid_trader.llm.prompt import PromptBuilder

from . import FakeBackend, make_context, mock_config


def answerer(backend: FakeBackend, **over) -> Answerer:
    config = mock_config(**over)
    return Answerer(config, backend, PromptBuilder(config))


def test_answer_when_scoring_a_batch_makes_one_backend_call_with_legal_probabilities():
    backend = FakeBackend()
    a = answerer(backend)
    queries = [a.prompts.query(make_context(rsi=r)) for r in (30.0, 50.0, 70.0)]
    advices = a.answer(queries)
    assert backend.batches == [3]
    assert all(not adv.abstained and adv.probs.sum() == pytest.approx(1.0) for adv in advices)
    assert a.health.consecutive == 0


def test_answer_when_calibrating_divides_by_the_markets_content_free_answer_once():
    mass = [0.1, 0.6, 0.2, 0.05, 0.05, 0.0]
    backend = FakeBackend(mass=mass)
    a = answerer(backend, **{"scoring.calibrate": True})
    adv = a.answer([a.prompts.query(make_context())])[0]
    assert backend.batches == [1, 1]  # the content-free query of NQ, then the query
    assert "NQ" in a._calibration
    # the same mass divided by itself: the legal actions become equally likely
    assert adv.probs[:3] == pytest.approx([1 / 3] * 3, abs=1e-6)
    a.answer([a.prompts.query(make_context())])
    assert backend.batches == [1, 1, 1]  # calibration fitted once per market


def test_answer_when_backend_fails_abstains_with_the_error_code_or_raises_when_asked():
    a = answerer(FakeBackend(fail=BackendError("server exploded")))
    adv = a.answer([a.prompts.query(make_context())])[0]
    assert adv.abstained and "server exploded" in adv.raw
    assert a.health.consecutive == 1
    with pytest.raises(UserError, match="back end failed"):
        a.answer([a.prompts.query(make_context())], raise_errors=True)


def test_answer_when_circuit_is_open_sends_nothing_and_abstains_at_once():
    backend = FakeBackend(fail=BackendError("down"))
    a = answerer(backend, **{"batching.circuit_errors": 2, "batching.circuit_cooldown_s": 60.0})
    for _ in range(2):
        a.answer([a.prompts.query(make_context())])
    assert a.health.circuit_open
    calls = len(backend.batches)
    adv = a.answer([a.prompts.query(make_context())])[0]
    assert adv.abstain_reason == LLM_CIRCUIT_OPEN and len(backend.batches) == calls
    a.close()
    assert backend.closed


def test_answer_when_backend_returns_a_wrong_shape_is_an_error_not_advice():
    backend = FakeBackend()
    backend.score = lambda queries: np.zeros((len(queries), 3))  # type: ignore[method-assign]
    a = answerer(backend)
    adv = a.answer([a.prompts.query(make_context())])[0]
    assert adv.abstained and "shape" in adv.raw
