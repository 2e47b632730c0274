"""The evaluation policies: the agent's decision keeps the distribution it was taken from."""

from __future__ import annotations

import numpy as np
from sb3_contrib import MaskablePPO

from hybrid_trader.actions import ACTION_NAMES
from hybrid_trader.data import generate_bars
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.evaluation.policies import AgentPolicy


def test_agent_policy_decides_as_predict_and_records_the_masked_probabilities():
    bars = generate_bars(days=2, seed=3, market="NQ")
    env = TradingEnv(bars, config=EnvConfig(phase=2))
    model = MaskablePPO("MlpPolicy", env, seed=0, device="cpu", n_steps=64, batch_size=64)
    agent = AgentPolicy(model)
    obs, _ = env.reset(seed=0, options={"start": 0})
    seen = set()
    for _ in range(300):
        mask = env.action_masks()
        action = agent(obs, mask, env)
        expected, _ = model.predict(obs, action_masks=mask, deterministic=True)
        assert action == int(expected)
        probs = agent.decision_record()["probabilities"]
        assert list(probs) == list(ACTION_NAMES[:env.n_actions])
        p = np.array(list(probs.values()))
        assert abs(p.sum() - 1) < 1e-3 and np.all(p[~mask] == 0) and int(np.argmax(agent.last_probs)) == action
        seen.add(tuple(mask))
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    assert len(seen) > 1  # some masks had illegal actions


def test_hybrid_decision_record_holds_fused_probabilities_rule_and_advice():
    from hybrid_trader.agent.hybrid_agent import Decision
    from hybrid_trader.evaluation.policies import HybridAgentPolicy
    from hybrid_trader.llm.advice import Advice

    policy = HybridAgentPolicy.__new__(HybridAgentPolicy)  # the record reads the last decision only
    policy.last_decision = None
    assert policy.decision_record() == {}
    probs = np.array([0.1, 0.6, 0.3, 0.0, 0.0, 0.0])
    advice = Advice(probs=probs, action=1, confidence=0.8123, coverage=1.0, reason="breakout", age_steps=2)
    policy.last_decision = Decision(action=1, probs=probs, rl_action=2, rl_probs=probs[::-1].copy(),
                                    rl_confidence=0.3, fused_by="rules", reason="LLM_OVERRIDE", advice=advice,
                                    block=np.zeros(4))
    record = policy.decision_record()
    assert record["probabilities"]["BUY"] == 0.6 and record["rule"] == "LLM_OVERRIDE"
    assert record["advice"] == {"action": "BUY", "confidence": 0.812, "reason": "breakout", "age": 2}
