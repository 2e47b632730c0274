"""HybridAgent.decide: the distribution training samples from, the reason codes, the RL confidence."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch as th

from hybrid_trader.actions import N_ACTIONS, Action
from hybrid_trader.agent.advice_block import N_FEATURES, PHASE3_OBS_DIM, write_advice
from hybrid_trader.agent.fusion import REASON_PRIOR, REASON_RL_ONLY, RULE_REASONS, FusionConfig
from hybrid_trader.agent.hybrid_agent import HybridAgent
from hybrid_trader.llm.advice import LLM_TIMEOUT, abstention, advice_from_mass

LEGAL = np.array([True, True, True, False, False, False])


@pytest.fixture
def features() -> np.ndarray:
    return np.random.default_rng(1).normal(size=N_FEATURES).astype(np.float32)


def sell_advice(age: int = 1):
    adv = advice_from_mass(np.array([0.1, 0.1, 0.8, 0, 0, 0]), LEGAL, min_coverage=0.0, backend="test")
    return replace(adv, age_steps=age)


def training_probs(policy, features, advice, max_age) -> np.ndarray:
    obs = np.concatenate([features, write_advice(advice, max_age)])[None]
    with th.no_grad():
        _, log_prob, _ = policy.evaluate_actions(th.as_tensor(np.repeat(obs, N_ACTIONS, 0)),
                                                 th.arange(N_ACTIONS), action_masks=np.tile(LEGAL, (N_ACTIONS, 1)))
    return log_prob.exp().numpy()


def test_decide_gives_the_distribution_training_samples_from_when_advice_present(policy, features):
    agent = HybridAgent(policy, FusionConfig(llm_weight=0.8), max_age=10)
    decision = agent.decide(features, LEGAL, sell_advice())
    np.testing.assert_allclose(decision.probs, training_probs(policy, features, sell_advice(), 10), atol=1e-6)
    assert decision.action == int(np.argmax(decision.probs)) and decision.reason == REASON_PRIOR
    assert decision.fused_by == "prior" and decision.advice is not None
    assert not np.allclose(decision.probs, decision.rl_probs), "the prior must move the distribution"
    assert decision.rl_confidence == pytest.approx(decision.rl_probs.max())
    assert (decision.probs[~LEGAL] == 0).all() and LEGAL[decision.action]


def test_policy_get_distribution_includes_the_prior_when_advice_present(policy, features):
    obs = np.concatenate([features, write_advice(sell_advice(), 10)])[None]
    with th.no_grad():
        probs = policy.get_distribution(th.as_tensor(obs), action_masks=LEGAL[None]).distribution.probs.numpy()[0]
    np.testing.assert_allclose(probs, training_probs(policy, features, sell_advice(), 10), atol=1e-6)


def test_decide_is_rl_only_when_advice_abstained_or_too_old(policy, features):
    agent = HybridAgent(policy, FusionConfig(llm_weight=0.8), max_age=10)
    for advice in (None, abstention(LEGAL, LLM_TIMEOUT), sell_advice(age=11)):
        decision = agent.decide(features, LEGAL, advice)
        assert decision.reason == REASON_RL_ONLY and decision.advice is None
        np.testing.assert_allclose(decision.probs, decision.rl_probs)
        np.testing.assert_allclose(decision.probs, training_probs(policy, features, None, 10), atol=1e-6)
        assert decision.action == decision.rl_action


def test_decide_ignores_advice_when_the_rl_only_ablation(policy, features):
    agent = HybridAgent(policy, FusionConfig(llm_weight=0.8, strategy="rules"), max_age=10, use_llm=False)
    decision = agent.decide(features, LEGAL, sell_advice())
    assert agent.llm_weight == 0.0 and decision.advice is None and decision.reason == REASON_RL_ONLY
    np.testing.assert_allclose(decision.rl_probs, training_probs(policy, features, None, 10), atol=1e-6)


def test_decide_applies_seed_rules_when_strategy_rules(policy, features):
    fusion = FusionConfig(llm_weight=0.8, strategy="rules", high_confidence=0.75, low_confidence=0.99)
    decision = HybridAgent(policy, fusion, max_age=10).decide(features, LEGAL, sell_advice())
    assert decision.fused_by == "rules" and decision.reason in RULE_REASONS and LEGAL[decision.action]
    if decision.rl_action != Action.SELL and decision.rl_confidence < 0.99:
        assert (decision.action, decision.reason) == (Action.SELL, "LLM_HIGH_CONFIDENCE")


def test_decide_normalises_the_observation_when_given_a_normaliser(policy, features):
    seen = []

    def normalize(x):
        seen.append(x.copy())
        return x * 0.5

    decision = HybridAgent(policy, FusionConfig(), max_age=10, normalize=normalize).decide(features, LEGAL, None)
    assert seen and seen[0].shape == (PHASE3_OBS_DIM,)
    half = np.concatenate([features, write_advice(None, 10)]) * 0.5
    with th.no_grad():
        rl = policy.rl_logits(th.as_tensor(half[None])).numpy()[0]
    assert decision.rl_action == int(np.argmax(np.where(LEGAL, rl, -np.inf)))
