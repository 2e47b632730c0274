"""AdvisedPolicy: one advised decision; an unlimited budget answers every question before its decision (evaluation),
a finite one waits at most that long for it (the executor), the student advises every decision."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from hybrid_trader.account_state import AccountState
from hybrid_trader.agent.advice_block import N_FEATURES
from hybrid_trader.agent.advised import AdvisedPolicy
from hybrid_trader.agent.fusion import REASON_RL_ONLY, FusionConfig
from hybrid_trader.agent.hybrid_agent import HybridAgent
from hybrid_trader.llm import build_advisor
from tests.llm import mock_config

LEGAL = np.array([True, True, True, False, False, False])
STEPS = 12


@pytest.fixture(scope="module")
def agent(policy) -> HybridAgent:
    return HybridAgent(policy, FusionConfig(llm_weight=0.8), max_age=10)


def advisor(latency_ms: float = 0.0):
    """The mock LLM, asked every third step (the interval trigger alone)."""
    return build_advisor(mock_config(query={"mode": "selective", "triggers": ["interval"], "interval": 3,
                                            "cooldown": 1}, mock={"latency_ms": latency_ms}))


def decisions(policy: AdvisedPolicy, market, pause_s: float = 0.0) -> list[tuple]:
    """``STEPS`` decisions on consecutive bars of ``market`` (random features): action, reason, advice and its age."""
    rng = np.random.default_rng(3)
    t0 = int(market.features.warmup) + 5
    out = []
    for t in range(STEPS):
        view = SimpleNamespace(bars=market.bars, features=market.features, current_index=t0 + t,
                               account_snapshot=AccountState)
        d = policy.decide(rng.normal(size=N_FEATURES).astype(np.float32), LEGAL, view)
        advice = None if d.advice is None else (d.advice.action, d.advice.age_steps, tuple(d.advice.probs))
        out.append((d.action, d.reason, advice))
        time.sleep(pause_s)
    return out


def test_unlimited_budget_answers_each_question_before_its_decision_in_the_callers_thread(agent, student_market):
    adv = advisor()
    policy = AdvisedPolicy(agent, adv)
    made = decisions(policy, student_market)
    adv.close()
    assert not policy.asynchronous and adv._thread is None, "no worker thread: asked in the caller's thread"
    assert [a[1] for _, _, a in made] == [0, 1, 2] * (STEPS // 3), "asked every third step, aged in between"
    assert policy.asked == policy.fresh == STEPS // 3


def test_finite_budget_that_covers_the_answer_decides_as_the_unlimited_budget(agent, student_market):
    unlimited = AdvisedPolicy(agent, advisor(latency_ms=2.0))
    expected = decisions(unlimited, student_market)
    adv = advisor(latency_ms=2.0)
    budgeted = AdvisedPolicy(agent, adv, budget_ms=5_000)
    got = decisions(budgeted, student_market)
    adv.close()
    unlimited.close()
    assert budgeted.asynchronous and adv._thread is not None, "asked through the advisor's worker"
    assert got == expected
    assert budgeted.asked == budgeted.fresh == unlimited.asked


def test_zero_budget_never_waits_and_decides_with_answers_asked_earlier(agent, student_market):
    adv = advisor(latency_ms=5.0)
    policy = AdvisedPolicy(agent, adv, budget_ms=0)
    made = decisions(policy, student_market, pause_s=0.05)  # bars 50 ms apart: each answer comes before the next
    adv.close()
    assert policy.asked == STEPS // 3 and policy.fresh == 0, "no decision waited for its own bar's answer"
    assert made[0][2] is None and made[0][1] == REASON_RL_ONLY
    assert [a[1] for _, _, a in made[1:]] == [1, 2, 3] * (STEPS // 3 - 1) + [1, 2]


def test_the_student_advises_every_decision_at_age_zero_whatever_the_budget(agent, student_market):
    asked = []

    def advise_batch(obs, masks):
        asked.append(obs.shape)
        return np.array([[0.1, 0.1, 0.8, 0.0, 0.0, 0.0]]), np.array([0.9])

    student = SimpleNamespace(backend=SimpleNamespace(advise_batch=advise_batch,
                                                      student=SimpleNamespace(obs_dim=228)))
    for budget in (None, 0.0):
        asked.clear()
        policy = AdvisedPolicy(agent, student, budget_ms=budget)
        made = decisions(policy, student_market)
        assert not policy.asynchronous and policy.asked == STEPS and asked == [(1, 228)] * STEPS
        assert all(a is not None and a[:2] == (2, 0) for _, _, a in made)


def test_rl_only_never_asks_and_decides_without_advice(agent, student_market):
    rl_only = HybridAgent(agent.policy, agent.fusion, max_age=10, use_llm=False)
    adv = advisor()
    policy = AdvisedPolicy(rl_only, adv)
    made = decisions(policy, student_market)
    adv.close()
    assert policy.advisor is None and policy.asked == 0
    assert {(reason, a) for _, reason, a in made} == {(REASON_RL_ONLY, None)}
