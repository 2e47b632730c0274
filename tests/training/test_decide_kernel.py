"""``training.decide_kernel.decide_into``: the rollout's normalisations and draw in one compiled call."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.training.decide_kernel import ALL_LEGAL, decide_into
from hybrid_trader.training.lean_backward import log_normalise
from hybrid_trader.training.lean_forward import HUGE_NEG


def _reference(logits: np.ndarray, masks: np.ndarray | None, queue: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The numpy formulas the kernel replaced: sb3-contrib's normalisations, then argmax(p / q)."""
    z = log_normalise(logits.copy())
    if masks is not None:
        z = log_normalise(np.where(masks, z, np.float32(HUGE_NEG)))
    chosen = np.argmax(np.exp(z) / queue, axis=-1)
    return chosen, z[np.arange(len(z)), chosen]


@pytest.mark.parametrize("masked", [True, False])
def test_decisions_match_the_numpy_formulas(masked):
    gen = np.random.default_rng(3)
    logits = (gen.standard_normal((500, 6)) * 3).astype(np.float32)
    queue = gen.exponential(size=(500, 6)).astype(np.float32)
    masks = gen.random((500, 6)) > 0.5 if masked else None
    if masks is not None:
        masks[:, 0] = True
    chosen, log_prob = np.empty(500, np.int64), np.empty(500, np.float32)
    assert decide_into(logits, ALL_LEGAL if masks is None else masks, HUGE_NEG, queue, chosen, log_prob)
    ref_chosen, ref_log_prob = _reference(logits, masks, queue)
    np.testing.assert_array_equal(chosen, ref_chosen)
    np.testing.assert_allclose(log_prob, ref_log_prob, rtol=1e-6, atol=1e-6)
    if masks is not None:
        assert masks[np.arange(500), chosen].all()  # never an illegal action
    assert len(set(chosen.tolist())) == 6  # the draws reach every action


def test_a_probability_that_is_not_finite_is_refused():
    logits = np.zeros((2, 6), np.float32)
    logits[1, 2] = np.nan
    chosen, log_prob = np.empty(2, np.int64), np.empty(2, np.float32)
    assert not decide_into(logits, ALL_LEGAL, HUGE_NEG, np.ones((2, 6), np.float32), chosen, log_prob)
