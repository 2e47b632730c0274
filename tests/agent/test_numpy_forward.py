"""The one numpy forward of phases 1-2 (``agent.numpy_forward``): SB3's decisions exactly on the test models, its
logits within float32 rounding; the executor's policy and the trainer's rollout both run it."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from hybrid_trader.agent.numpy_forward import NumpyMLP, actor_layers, torch_layers
from hybrid_trader.evaluation.evaluate import load_policy
from hybrid_trader.evaluation.policies import AgentPolicy
from hybrid_trader.evaluation.runner import evaluation_env
from hybrid_trader.live.fast_policy import NumpyAgentPolicy, numpy_policy
from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig
from hybrid_trader.training.lean_forward import LeanForward
from hybrid_trader.training.lean_ppo import LeanMaskablePPO


def _states(run, market, n: int = 1500) -> tuple[AgentPolicy, np.ndarray, np.ndarray]:
    """The run's SB3 policy and the observations and masks of its first ``n`` decisions on its test days."""
    config = RunDir(run).load_config(RunConfig)
    model, vec, _ = load_policy(run)
    agent = AgentPolicy(model, vec)
    env = evaluation_env(market, config.env, market.sessions("test"))
    obs, _ = env.reset(seed=0, options={"start": 0})
    seen, masks = [], []
    for _ in range(n):
        mask = env.action_masks()
        seen.append(obs)
        masks.append(mask)
        obs, _, done, truncated, _ = env.step(agent(obs, mask, env))
        if done or truncated:
            break
    return agent, np.asarray(seen), np.asarray(masks)


@pytest.mark.parametrize("phase", [1, 2])
def test_numpy_forward_decides_as_sb3_on_the_test_models(tiny_trained, phase):
    p2, _, market = tiny_trained
    run = p2 if phase == 2 else p2.parent / "p1"
    agent, obs, masks = _states(run, market)
    fast, why = numpy_policy(agent)
    assert isinstance(fast, NumpyAgentPolicy) and isinstance(fast.actor, NumpyMLP), why
    policy = agent.model.policy
    x = np.stack([agent.normalize(o) for o in obs]).astype(np.float32)
    with th.no_grad():
        t = th.as_tensor(x)
        sb3 = policy.action_net(policy.mlp_extractor.forward_actor(policy.extract_features(t))).numpy()
    mine = np.stack([fast.logits(o) for o in obs])
    np.testing.assert_allclose(mine, sb3, rtol=0, atol=1e-6)  # float32 rounding: another summation order
    for o, m in zip(obs, masks, strict=True):
        assert fast(o, m, None) == agent(o, m, None)  # the decisions, exactly (near-ties: torch's)
        np.testing.assert_allclose(fast.last_probs, agent.last_probs, rtol=0, atol=2e-6)
    assert len(obs) > 500 and fast.calls == len(obs)


def test_trainers_rollout_runs_the_same_forward_on_views_of_the_weights(tiny_trained):
    policy = LeanMaskablePPO.load(tiny_trained[0] / "model.zip", device="cpu").policy  # as training loads it
    lean = LeanForward.of(policy, fast_math=True)
    assert lean is not None and lean.numpy is not None
    actor, critic = lean.numpy
    assert isinstance(actor, NumpyMLP) and isinstance(critic, NumpyMLP)
    rows = np.random.default_rng(0).normal(0, 1, (4, policy.observation_space.shape[0])).astype(np.float32)
    with th.no_grad():  # an in-place change of the weights (as Adam's) is seen by the numpy forward at once
        policy.action_net.bias.add_(1.0)
        expected = policy.action_net(policy.mlp_extractor.forward_actor(th.as_tensor(rows))).numpy()
    np.testing.assert_allclose(actor(rows), expected, rtol=0, atol=1e-6)
    copies = actor_layers(policy)
    assert not isinstance(copies, str)
    np.testing.assert_allclose(NumpyMLP(copies)(rows), actor(rows), rtol=0, atol=1e-6)


def test_torch_layers_name_what_the_forward_does_not_cover():
    assert torch_layers([th.nn.Linear(3, 2), th.nn.LayerNorm(2)]) == "layer LayerNorm"
    assert torch_layers([th.nn.Linear(3, 2, bias=False)], views=True) == "a Linear layer without a bias"
    layers = torch_layers([th.nn.Linear(3, 4), th.nn.ReLU(), th.nn.Linear(4, 2), th.nn.Identity()])
    assert not isinstance(layers, str) and layers[1] == "ReLU" and layers[0][0].flags.c_contiguous
