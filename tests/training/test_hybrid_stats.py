"""HybridStatsCallback: phase 3's statistics read the rollout's decisions from the rollout buffer."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch as th

from hybrid_trader.agent.advice_block import ADVICE, OBS_ADVICE, PHASE3_OBS_DIM
from hybrid_trader.training.hybrid_stats import HybridStatsCallback
from hybrid_trader.training.policy import HybridMaskablePolicy


def _callback(buffer: SimpleNamespace, steps: int, policy=None) -> HybridStatsCallback:
    cb = HybridStatsCallback(SimpleNamespace(submitted=0), SimpleNamespace(batching=SimpleNamespace(max_age_steps=5)))
    cb.model = SimpleNamespace(rollout_buffer=buffer, policy=policy)  # type: ignore[assignment]
    cb.steps = steps
    return cb


def _buffer(steps: int, envs: int, dim: int, pos: int, seed: int = 0) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    masks = (rng.random((steps, envs, 6)) > 0.4).astype(np.float32)
    masks[..., 0] = 1.0  # HOLD is always legal
    return SimpleNamespace(observations=rng.normal(size=(steps, envs, dim)).astype(np.float32), pos=pos,
                           action_masks=masks, actions=rng.integers(0, 6, size=(steps, envs, 1)).astype(np.float32))


def test_rollout_is_the_buffer_in_step_order_when_it_holds_every_counted_step():
    buffer = _buffer(2, 3, 4, pos=2)
    rollout = _callback(buffer, steps=2)._rollout()
    assert rollout is not None
    obs, masks, actions = rollout
    np.testing.assert_array_equal(obs, np.concatenate([buffer.observations[0], buffer.observations[1]]))
    np.testing.assert_array_equal(masks, np.concatenate(list(buffer.action_masks)) > 0.5)
    np.testing.assert_array_equal(actions, buffer.actions.reshape(-1))


def test_rollout_is_none_when_the_buffer_holds_other_steps_than_counted():
    assert _callback(_buffer(2, 3, 4, pos=1), steps=2)._rollout() is None


@pytest.mark.parametrize("logged", [True, False])
@pytest.mark.parametrize("mode", ["constant", "learned"])
def test_decisions_equal_the_policy_s_own_rollout_records_when_logged_or_computed_again(mode, logged):
    th.manual_seed(0)
    space = gym.spaces.Box(-np.inf, np.inf, (PHASE3_OBS_DIM,), np.float32)
    policy = HybridMaskablePolicy(space, gym.spaces.Discrete(6), lambda _: 3e-4, net_arch=[16, 16],
                                  llm_weight=0.3, fusion_mode=mode, w_max=1.0)
    policy.record_decisions = True
    steps, envs = 5, 3
    buffer = _buffer(steps, envs, PHASE3_OBS_DIM, pos=steps, seed=1)
    blocks = buffer.observations[..., OBS_ADVICE]
    blocks[...] = 0.0
    probs = np.random.default_rng(2).dirichlet(np.ones(6), size=(steps, envs)).astype(np.float32)
    blocks[..., ADVICE.probs] = probs * buffer.action_masks
    blocks[..., ADVICE.present] = 1.0
    buffer.observations[..., OBS_ADVICE] = blocks
    recorded_logits, recorded_trust = [], []
    cb = _callback(buffer, steps, policy)
    if logged:
        cb._log = policy.decision_log = []
    with th.no_grad():
        for t in range(steps):
            policy.forward(th.as_tensor(buffer.observations[t]), action_masks=buffer.action_masks[t] > 0.5)
            recorded_logits.append(policy.last_decision.rl_logits.numpy())
            if mode == "learned":
                recorded_trust.append(policy.last_decision.trust.numpy().reshape(-1))
    out = cb.decisions()
    assert out is not None
    obs, rl_logits, masks, actions, got_blocks, trust = out
    np.testing.assert_allclose(rl_logits, np.concatenate(recorded_logits), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got_blocks, blocks.reshape(-1, ADVICE.size))
    if mode == "learned":
        assert trust is not None
        np.testing.assert_allclose(trust, np.concatenate(recorded_trust), rtol=1e-5, atol=1e-6)
    else:
        assert trust is None


def test_policy_records_no_decision_when_nothing_reads_them():
    space = gym.spaces.Box(-np.inf, np.inf, (PHASE3_OBS_DIM,), np.float32)
    policy = HybridMaskablePolicy(space, gym.spaces.Discrete(6), lambda _: 3e-4, net_arch=[8], llm_weight=0.3)
    with th.no_grad():
        policy.forward(th.zeros((2, PHASE3_OBS_DIM)), action_masks=np.ones((2, 6), bool))
    assert policy.last_decision is None
