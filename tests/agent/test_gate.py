"""The learned trust gate: starts as the constant prior, stays in [0, w_max], is trained with the policy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th

from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.agent.advice_block import ADVICE, N_FEATURES, OBS_ADVICE, PHASE3_OBS_DIM, write_advice
from hybrid_trader.agent.fusion import FusionConfig, fused_logits
from hybrid_trader.agent.gate import (
    GATE_CONTEXT_INDEX,
    GATE_STATISTICS,
    N_GATE_INPUTS,
    TrustGate,
    trust_buckets,
    trust_table,
)
from hybrid_trader.agent.hybrid_agent import HybridAgent
from hybrid_trader.config import ConfigError
from hybrid_trader.llm.advice import advice_from_mass
from hybrid_trader.training.policy import HybridMaskablePolicy

LEGAL = np.array([True, True, True, False, False, False])


def rows(n: int = 32, seed: int = 0) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    """Observations with advice blocks, RL logits and masks."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, PHASE3_OBS_DIM)).astype(np.float32)
    masks = rng.random((n, N_ACTIONS)) > 0.3
    masks[:, 0] = True
    for i in range(n):
        probs = rng.dirichlet(np.ones(N_ACTIONS)) * masks[i]
        adv = advice_from_mass(probs / probs.sum(), masks[i], min_coverage=0.0, backend="test")
        obs[i, OBS_ADVICE] = write_advice(adv, 10, age=int(rng.integers(0, 10)))
    return th.as_tensor(obs), th.as_tensor(obs[:, OBS_ADVICE]), th.as_tensor(rng.normal(size=(n, N_ACTIONS)),
                                                                          dtype=th.float32), th.as_tensor(masks)


def policy(mode: str, seed: int = 0) -> HybridMaskablePolicy:
    th.manual_seed(seed)
    space = gym.spaces.Box(-np.inf, np.inf, shape=(PHASE3_OBS_DIM,), dtype=np.float32)
    pol = HybridMaskablePolicy(space, gym.spaces.Discrete(N_ACTIONS), lambda _: 1e-3, llm_weight=0.4,
                               fusion_mode=mode, w_max=1.5)
    pol.set_training_mode(False)
    return pol


def test_gate_gives_the_configured_constant_weight_when_at_step_zero():
    obs, advice, logits, masks = rows()
    gate = TrustGate(0.3, 1.0)
    w = gate(obs, logits, advice, masks)
    assert w.shape == (32, 1)
    np.testing.assert_allclose(w.detach().numpy(), 0.3, atol=1e-6)
    np.testing.assert_allclose(fused_logits(logits, advice, w).detach().numpy(),
                               fused_logits(logits, advice, 0.3).numpy(), atol=1e-6)
    assert gate.inputs(obs, logits, advice, masks).shape == (32, N_GATE_INPUTS)


def test_learned_policy_equals_the_constant_prior_when_at_step_zero():
    obs, _, _, masks = rows()
    constant, learned = policy("constant"), policy("learned")
    learned.load_state_dict({**constant.state_dict(), **{k: v for k, v in learned.state_dict().items()
                                                          if k.startswith("gate.")}})
    with th.no_grad():
        p_c = constant.get_distribution(obs, action_masks=masks.numpy()).distribution.probs
        p_l = learned.get_distribution(obs, action_masks=masks.numpy()).distribution.probs
    np.testing.assert_allclose(p_l.numpy(), p_c.numpy(), atol=1e-6)
    # the gate is part of the policy: its parameters are optimised by PPO's loss
    gate_params = {id(p) for p in learned.gate.parameters()}
    optimised = {id(p) for group in learned.optimizer.param_groups for p in group["params"]}
    assert gate_params and gate_params <= optimised


def test_gate_trust_depends_on_the_state_when_trained_and_stays_within_bounds():
    obs, advice, logits, masks = rows(64)
    gate = TrustGate(0.3, 1.0)
    with th.no_grad():
        gate.out.weight.fill_(50.0)  # saturating weights
    w = gate(obs, logits, advice, masks).detach().numpy()
    assert w.min() >= 0.0 and w.max() <= 1.0 and w.std() > 0.05
    # a gradient step through the fused log-probability moves the gate's parameters
    gate2 = TrustGate(0.3, 1.0)
    logp = th.log_softmax(fused_logits(logits, advice, gate2(obs, logits, advice, masks)).masked_fill(~masks, -1e9), -1)
    logp[:, 0].sum().backward()
    assert gate2.out.weight.grad is not None and gate2.out.weight.grad.abs().sum() > 0


def test_gate_reads_the_market_context_by_name_when_building_inputs():
    obs, advice, logits, masks = rows(4)
    gate = TrustGate(0.3, 1.0)
    x = gate.inputs(obs, logits, advice, masks)
    np.testing.assert_allclose(x[:, -len(GATE_CONTEXT_INDEX):].numpy(), obs[:, GATE_CONTEXT_INDEX].numpy())
    assert max(GATE_CONTEXT_INDEX) < N_FEATURES


def test_learned_fusion_is_refused_when_the_start_weight_is_outside_zero_and_w_max():
    with pytest.raises(ConfigError, match="w_max"):
        FusionConfig(mode="learned", llm_weight=1.2, w_max=1.0)
    with pytest.raises(ValueError):
        TrustGate(0.0, 1.0)


def test_trust_buckets_group_the_gate_by_trend_and_volatility_when_given_raw_features():
    trust = np.array([0.1, 0.2, 0.9, 0.5])
    trend = np.array([-1.0, 0.0, 1.0, 0.1])
    vol = np.array([-0.5, 0.0, 0.5, 0.5])
    out = trust_buckets(trust, trend, vol)
    assert out["fusion/trust_trend_down"] == pytest.approx(0.1)
    assert out["fusion/trust_trend_flat"] == pytest.approx(0.35)
    assert out["fusion/trust_trend_up"] == pytest.approx(0.9)
    assert out["fusion/trust_vol_high"] == pytest.approx(0.7)
    assert out["fusion/gate_mean"] == pytest.approx(trust.mean())
    assert set(out) <= set(GATE_STATISTICS)
    assert "| trend up | 0.900 |" in trust_table(out)


def test_agent_decides_with_the_learned_trust_when_the_policy_has_a_gate():
    pol = policy("learned")
    with th.no_grad():
        pol.gate.out.weight.normal_(0.0, 2.0)
    features = np.random.default_rng(1).normal(size=N_FEATURES).astype(np.float32)
    adv = advice_from_mass(np.array([0.1, 0.1, 0.8, 0, 0, 0]), LEGAL, min_coverage=0.0, backend="test")
    agent = HybridAgent(pol, FusionConfig(llm_weight=0.4, mode="learned", w_max=1.5), max_age=10)
    decision = agent.decide(features, LEGAL, adv)
    obs = np.concatenate([features, decision.block])[None]
    with th.no_grad():
        w = pol.trust(th.as_tensor(obs), pol.rl_logits(th.as_tensor(obs)), th.as_tensor(LEGAL[None]))
        probs = pol.get_distribution(th.as_tensor(obs), action_masks=LEGAL[None]).distribution.probs[0].numpy()
    assert decision.trust == pytest.approx(float(w[0, 0]), abs=1e-6) and decision.trust != pytest.approx(0.4)
    np.testing.assert_allclose(decision.probs, probs, atol=1e-6)
    assert agent.decide(features, LEGAL, None).trust == 0.0
    assert ADVICE.size == decision.block.shape[0]
