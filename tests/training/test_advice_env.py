"""AdvisorVecEnv's cheap per-step pieces: the RL confidence the query policy reads on demand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from hybrid_trader.training.advice_env import AdvisorVecEnv


def test_rl_confidence_when_some_actions_are_illegal_is_the_best_legal_probability():
    env = SimpleNamespace(rl_logits=[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], rl_masks=[[True, True, False], [True, True, True]])
    assert AdvisorVecEnv.rl_confidence(env, 0) == pytest.approx(math.exp(2) / (math.exp(1) + math.exp(2)))
    assert AdvisorVecEnv.rl_confidence(env, 1) == pytest.approx(1 / 3)


def test_rl_confidence_when_no_masks_or_no_logits_yet():
    assert AdvisorVecEnv.rl_confidence(SimpleNamespace(rl_logits=[[0.0, math.log(3.0)]], rl_masks=None), 0) == \
        pytest.approx(0.75)
    assert AdvisorVecEnv.rl_confidence(SimpleNamespace(rl_logits=None, rl_masks=None), 0) is None
