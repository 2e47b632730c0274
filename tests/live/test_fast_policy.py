"""The numpy policy: torch's masked probabilities within float32 rounding (torch's own at a near-tie), torch's
decisions exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

import hybrid_trader.live.fast_policy as fast_policy
from hybrid_trader.evaluation.evaluate import load_policy
from hybrid_trader.evaluation.policies import AgentPolicy
from hybrid_trader.live.fast_policy import numpy_policy
from hybrid_trader.training.normalizer import rms_of
from tests.training.conftest import student_cfg, train_phase2


@pytest.fixture(scope="module")
def agent(tmp_path_factory, student_market) -> AgentPolicy:
    run = train_phase2(tmp_path_factory.mktemp("fast_policy"), student_cfg, student_market)
    model, vec, _ = load_policy(run)
    return AgentPolicy(model, vec)


def _observations(agent: AgentPolicy, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Raw observations spread over +-4 standard deviations of the normaliser (some clipped), and masks."""
    rng = np.random.default_rng(seed)
    rms = rms_of(agent.vec_normalize)
    obs = (rms.mean + rng.normal(0, 2.0, (n, len(rms.mean))) * np.sqrt(rms.var + 1e-8)).astype(np.float32)
    n_actions = int(agent.model.policy.action_space.n)
    masks = rng.random((n, n_actions)) < 0.6
    masks[:, 0] = True  # HOLD is always legal
    return obs, masks


def _torch_probs(agent: AgentPolicy, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    policy = agent.model.policy
    with th.no_grad():
        obs_t, _ = policy.obs_to_tensor(agent.normalize(obs))
        return policy.get_distribution(obs_t, action_masks=mask[None]).distribution.probs[0].numpy()


def test_numpy_policy_decides_as_torch_when_given_many_observations(agent: AgentPolicy) -> None:
    fast, why = numpy_policy(agent)
    assert fast is not None, why
    obs, masks = _observations(agent, 3000)
    for o, m in zip(obs, masks, strict=True):
        action = fast(o, m, None)
        assert action == agent(o, m, None)
        if fast.last_probs is not None:
            np.testing.assert_allclose(fast.last_probs, _torch_probs(agent, o, m), rtol=0, atol=2e-6)
            assert np.all(fast.last_probs[~m] == 0.0)
    assert fast.calls == 3000 and fast.fallbacks < 150


def test_numpy_policy_leaves_decision_to_torch_when_logits_are_close(agent: AgentPolicy, monkeypatch) -> None:
    fast, _ = numpy_policy(agent)
    assert fast is not None
    monkeypatch.setattr(fast_policy, "TIE_GAP", np.inf)
    obs, masks = _observations(agent, 50, seed=1)
    for o, m in zip(obs, masks, strict=True):
        assert fast(o, m, None) == agent(o, m, None)
        assert fast.last_probs is not None and np.array_equal(fast.last_probs, _torch_probs(agent, o, m))
    assert fast.fallbacks == fast.calls == 50


def test_numpy_policy_is_none_when_the_network_has_an_unsupported_layer(agent: AgentPolicy) -> None:
    import copy

    other = copy.copy(agent)
    other.model = copy.deepcopy(agent.model)
    other.model.policy.mlp_extractor.policy_net.append(th.nn.LayerNorm(8))
    fast, why = numpy_policy(other)
    assert fast is None and "LayerNorm" in why
    assert numpy_policy(AgentPolicy(agent.model, agent.vec_normalize, deterministic=False))[0] is None
