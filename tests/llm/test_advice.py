"""Advice: renormalisation over legal actions, coverage, calibration, abstentions, decay."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hybrid_trader.llm.advice import (
    LLM_ILLEGAL_ACTION,
    LLM_LOW_COVERAGE,
    LLM_TIMEOUT,
    abstention,
    advice_from_choice,
    advice_from_mass,
    decayed,
)
from tests.llm import FLAT_MASK, LONG_MASK


def test_scores_when_renormalised_are_zero_on_illegal_and_sum_to_one():
    mass = np.array([0.2, 0.3, 0.1, 0.25, 0.05, 0.0])
    adv = advice_from_mass(mass, FLAT_MASK, min_coverage=0.05, backend="x")
    assert adv.probs.dtype == np.float32 and adv.probs.shape == (6,)
    assert np.allclose(adv.probs, [2 / 6, 3 / 6, 1 / 6, 0, 0, 0], atol=1e-6)
    assert adv.action == 1 and adv.confidence == pytest.approx(0.5)
    assert adv.coverage == pytest.approx(0.6)  # mass of the legal names before renormalising
    assert not adv.abstained


def test_low_coverage_when_below_threshold_abstains_uniform_over_legal():
    adv = advice_from_mass(np.array([0.01, 0.01, 0.01, 0.5, 0.4, 0.0]), FLAT_MASK, min_coverage=0.05, backend="x")
    assert adv.abstained and adv.abstain_reason == LLM_LOW_COVERAGE
    assert np.allclose(adv.probs, [1 / 3, 1 / 3, 1 / 3, 0, 0, 0])
    assert adv.confidence == 0.0 and adv.coverage == pytest.approx(0.03)


def test_calibration_when_given_divides_by_content_free_answer():
    mass = np.array([0.4, 0.4, 0.2, 0, 0, 0])
    cal = np.array([0.5, 0.25, 0.25, 0.1, 0.1, 0.1])  # the model likes HOLD regardless of content
    adv = advice_from_mass(mass, FLAT_MASK, min_coverage=0.0, backend="x", calibration=cal)
    assert adv.action == 1  # 0.4/0.25 beats 0.4/0.5
    assert np.allclose(adv.probs[:3], np.array([0.8, 1.6, 0.8]) / 3.2)


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, 6, elements=st.floats(0, 1)), arrays(bool, 6))
def test_any_scores_when_renormalised_give_a_distribution_over_legal(mass, legal):
    legal = legal.copy()
    legal[0] = True  # HOLD is always legal
    adv = advice_from_mass(mass, legal, min_coverage=0.0, backend="x")
    assert np.all(adv.probs[~legal] == 0)
    assert adv.probs.sum() == pytest.approx(1.0, abs=1e-5)
    assert legal[adv.action] and 0.0 <= adv.confidence <= 1.0


def test_named_choice_when_legal_gets_its_confidence_and_rest_is_shared():
    adv = advice_from_choice(1, 0.7, FLAT_MASK, backend="x", reason="up")
    assert np.allclose(adv.probs, [0.15, 0.7, 0.15, 0, 0, 0])
    assert adv.confidence == pytest.approx(0.7) and adv.reason == "up"


def test_named_choice_when_illegal_abstains():
    adv = advice_from_choice(1, 0.9, LONG_MASK, backend="x", reason=None)
    assert adv.abstained and adv.abstain_reason == LLM_ILLEGAL_ACTION
    assert np.allclose(adv.probs, [1 / 3, 0, 0, 1 / 3, 1 / 3, 0])


def test_abstention_when_made_is_uniform_over_legal_with_zero_confidence():
    adv = abstention(LONG_MASK, LLM_TIMEOUT)
    assert adv.abstained and adv.action == 0 and adv.confidence == 0.0
    logp = np.log(adv.probs[LONG_MASK])
    assert np.allclose(logp, logp[0])  # a logit prior w * log p changes nothing


def test_reused_advice_when_decayed_loses_confidence_and_flattens():
    adv = advice_from_mass(np.array([0.1, 0.8, 0.1, 0, 0, 0]), FLAT_MASK, min_coverage=0.0, backend="x")
    once, twice = decayed(adv, 1, 0.2, FLAT_MASK), decayed(adv, 2, 0.2, FLAT_MASK)
    assert once.confidence == pytest.approx(adv.confidence * 0.8)
    assert twice.confidence == pytest.approx(adv.confidence * 0.64)
    assert once.from_cache and twice.probs[1] < once.probs[1] < adv.probs[1]
    assert twice.probs.sum() == pytest.approx(1.0) and np.all(twice.probs[~FLAT_MASK] == 0)
