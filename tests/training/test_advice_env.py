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


class _StudentLike:
    """An always-on advisor whose advice is a function of the features and the legal actions, as the student's."""

    config = SimpleNamespace(batching=SimpleNamespace(max_age_steps=8))

    def __init__(self) -> None:
        self.backend = SimpleNamespace(block_writer=self.writer)

    @staticmethod
    def writer(*, probs_col: int, conf_col: int, present_col: int, copy: int):
        def write(obs, masks, out):
            out[:, :copy] = obs[:, :copy]
            z = np.where(masks, obs[:, 220:226] + 0.01 * obs[:, 0:6], -np.inf)
            p = np.exp(z - z.max(axis=1, keepdims=True))
            out[:, probs_col:probs_col + 6] = p / p.sum(axis=1, keepdims=True)
            out[:, conf_col] = 1 / (1 + np.exp(-(obs[:, 0] + obs[:, 224])))
            out[:, present_col] = 1.0
        return write

    def expect_envs(self, n): pass

    def reset(self, i=None): pass

    def close(self): pass


def test_a_truncated_episodes_terminal_observation_carries_the_advice_on_that_state_when_always_on():
    # the value bootstrap's input: the student's advice on the terminal state, not the previous state's
    from hybrid_trader.agent.advice_block import ADVICE, OBS_ADVICE
    from hybrid_trader.config import merge_overrides
    from hybrid_trader.run.config import RunConfig
    from hybrid_trader.run.market import env_factory, load_market
    from hybrid_trader.training.vec_env import LeanDummyVecEnv

    c = merge_overrides(RunConfig(), {"data.synthetic_days": 12, "env.phase": 3})
    market = load_market(c.data, c.split)
    base = LeanDummyVecEnv([env_factory(market, c.env, market.sessions("train"), 5 + i) for i in range(2)])
    venv = AdvisorVecEnv(base, _StudentLike(), market, max_age=8)
    write = _StudentLike.writer(probs_col=N_FEATURES + ADVICE.probs.start, conf_col=N_FEATURES + ADVICE.confidence,
                                present_col=N_FEATURES + ADVICE.present, copy=N_FEATURES)
    rng = np.random.default_rng(0)
    venv.reset()
    checked = 0
    for _ in range(3000):
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in base.masks])
        _, _, dones, infos = venv.step(actions)
        for i in np.flatnonzero(dones):
            if not infos[i].get("TimeLimit.truncated"):
                continue
            term = infos[i]["terminal_observation"]
            own = np.zeros((1, term.shape[0]), np.float32)
            write(term[None, :N_FEATURES].astype(np.float32), infos[i]["terminal_mask"][None], own)
            np.testing.assert_array_equal(term[OBS_ADVICE], own[0, OBS_ADVICE])
            checked += 1
        if checked >= 3:
            break
    assert checked >= 3
    venv.close()
