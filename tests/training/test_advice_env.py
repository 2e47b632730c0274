"""AdvisorVecEnv's cheap per-step pieces: the RL confidence the query policy reads on demand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch as th

from hybrid_trader.training.advice_env import AdvisorVecEnv, decision_confidence
from hybrid_trader.training.policy import RolloutDecision


def test_decision_confidence_when_some_actions_are_illegal_is_the_best_legal_probability():
    decision = RolloutDecision(th.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]),
                               np.array([[True, True, False], [True, True, True]]))
    assert decision_confidence(decision, 0) == pytest.approx(math.exp(2) / (math.exp(1) + math.exp(2)))
    assert decision_confidence(decision, 1) == pytest.approx(1 / 3)


def test_decision_confidence_when_no_masks():
    assert decision_confidence(RolloutDecision(th.tensor([[0.0, math.log(3.0)]]), None), 0) == pytest.approx(0.75)


def test_follow_reads_the_policy_s_latest_decision_when_asked():
    env, policy = SimpleNamespace(), SimpleNamespace()
    AdvisorVecEnv.follow(env, policy)
    assert env.last_decision() is None  # no rollout step yet
    policy.last_decision = RolloutDecision(th.zeros((1, 2)), None)
    assert env.last_decision() is policy.last_decision
