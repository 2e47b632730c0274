"""AdvisorVecEnv's cheap per-step pieces: the RL confidence the query policy reads on demand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.vec_env import DummyVecEnv

from hybrid_trader.account_state import AccountState
from hybrid_trader.agent.advice_block import N_FEATURES
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
    env, policy = SimpleNamespace(advise_into=None, teacher=None), SimpleNamespace()
    AdvisorVecEnv.follow(env, policy)
    assert policy.record_decisions  # the query policy reads them
    assert env.last_decision() is None  # no rollout step yet
    policy.last_decision = RolloutDecision(th.zeros((1, 2)), None)
    assert env.last_decision() is policy.last_decision


@pytest.mark.parametrize("teacher", [None, object()])
def test_follow_records_decisions_beside_an_always_on_student_only_when_a_teacher_reads_them(teacher):
    env, policy = SimpleNamespace(advise_into=print, teacher=teacher), SimpleNamespace(record_decisions=False)
    AdvisorVecEnv.follow(env, policy)
    assert policy.record_decisions is (teacher is not None)


class _FlatEnv(gym.Env):
    """A phase 3 shaped environment that never trades: zero features, an account snapshot in info."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(N_FEATURES,), dtype=np.float32)
    action_space = gym.spaces.Discrete(6)

    def reset(self, *, seed=None, options=None):
        return np.zeros(N_FEATURES, np.float32), {"advisor_account": AccountState()}

    def step(self, action):
        return np.zeros(N_FEATURES, np.float32), 0.0, False, False, {"advisor_account": AccountState()}


class _RecordingAdvisor:
    """Records the RL confidence the query policy would read; never queries."""

    def __init__(self) -> None:
        self.confidences: list[float | None] = []

    def expect_envs(self, n): ...
    def reset(self, env_index=None): ...
    def close(self): ...

    def latest(self, env_index, step):
        return None, 0

    def should_query(self, env_index, step, snap, rl_confidence=None):
        self.confidences.append(rl_confidence() if callable(rl_confidence) else rl_confidence)
        return False


def test_query_policy_gets_the_rl_confidence_of_the_followed_policy_when_it_decided():
    advisor = _RecordingAdvisor()
    env = AdvisorVecEnv(DummyVecEnv([_FlatEnv]), advisor, SimpleNamespace(bars=None, features=None), max_age=5)
    policy = SimpleNamespace(last_decision=None)
    env.follow(policy)
    env.reset()
    policy.last_decision = RolloutDecision(th.tensor([[0.0, math.log(3.0), 5.0, 0, 0, 0]]),
                                           np.array([[True, True, False, False, False, False]]))
    env.step(np.array([0]))
    assert advisor.confidences[0] is None  # no decision before the first step
    assert advisor.confidences[1] == pytest.approx(0.75)
