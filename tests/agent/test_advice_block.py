"""The advice block: one layout, written by name."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.agent.advice_block import (
    ADVICE,
    N_FEATURES,
    OBS_ADVICE,
    OBS_ADVICE_PRESENT,
    PHASE3_OBS_DIM,
    present,
    write_advice,
)
from hybrid_trader.llm.advice import LLM_ERROR, abstention, advice_from_mass

LEGAL = np.ones(N_ACTIONS, dtype=bool)


def test_layout_covers_every_value_once_when_laid_out():
    idx = np.arange(ADVICE.size)
    used = np.concatenate([idx[ADVICE.probs], [ADVICE.confidence, ADVICE.age, ADVICE.present]])
    assert sorted(used.tolist()) == idx.tolist()
    assert N_FEATURES + ADVICE.size == PHASE3_OBS_DIM
    assert np.arange(PHASE3_OBS_DIM)[OBS_ADVICE][ADVICE.present] == OBS_ADVICE_PRESENT


def test_write_advice_fills_named_values_when_advice_usable():
    adv = replace(advice_from_mass(np.array([1, 3, 0, 0, 0, 0.0]), LEGAL, min_coverage=0.0, backend="t"), age_steps=5)
    block = write_advice(adv, max_age=10)
    np.testing.assert_allclose(block[ADVICE.probs], [0.25, 0.75, 0, 0, 0, 0])
    assert block[ADVICE.confidence] == np.float32(0.75) and block[ADVICE.age] == 0.5 and present(block)
    assert write_advice(adv, max_age=10, age=30)[ADVICE.age] == 1.0  # capped


def test_write_advice_is_all_zero_when_abstained_or_none():
    out = np.full(ADVICE.size, 7.0, dtype=np.float32)
    assert not write_advice(abstention(LEGAL, LLM_ERROR), 10, out=out).any()
    assert not write_advice(None, 10).any() and not present(write_advice(None, 10))
