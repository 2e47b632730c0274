"""DecisionStats: the decision statistics training and evaluation both report."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hybrid_trader.agent.advice_block import ADVICE
from hybrid_trader.agent.stats import DecisionStats, configured_query_rate_pct
from hybrid_trader.llm.stats import DECISION_STATISTICS


def block(probs=None, confidence=0.0, age=0.0) -> np.ndarray:
    out = np.zeros(ADVICE.size)
    if probs is not None:
        out[ADVICE.probs] = probs
        out[ADVICE.confidence] = confidence
        out[ADVICE.age] = age
        out[ADVICE.present] = 1.0
    return out


def test_values_count_agreement_override_and_confidences_when_some_steps_advised():
    s = DecisionStats(max_age=10)
    blocks = np.stack([block([0, 1, 0, 0, 0, 0], 0.8, 0.2), block([0, 0, 1, 0, 0, 0], 0.4, 0.4), block()])
    s.add(np.array([1, 1, 0]), np.array([0.5, 0.7, 0.9]), np.array([1, 2, 0]), blocks)
    s.count_queries(2, 3)
    v = s.values()
    assert v["llm/advised_pct"] == pytest.approx(200 / 3)
    assert v["fusion/agreement_pct"] == pytest.approx(50.0)  # step 0 agrees, step 1 does not
    assert v["fusion/override_pct"] == pytest.approx(100 / 3)  # step 1 executed SELL over RL's BUY
    assert v["confidence/rl_avg"] == pytest.approx(0.7) and v["confidence/llm_avg"] == pytest.approx(0.6)
    assert v["llm/advice_age_mean_steps"] == pytest.approx(3.0)
    assert v["llm/query_rate_pct"] == pytest.approx(200 / 3) and v["llm/request_rate_pct"] == pytest.approx(100.0)


def test_values_leave_out_advice_rates_when_no_step_advised():
    s = DecisionStats(max_age=10)
    s.add(np.array([0]), np.array([1.0]), np.array([0]), block())
    assert "fusion/agreement_pct" not in s.values() and s.values()["llm/advised_pct"] == 0.0


def test_every_value_is_a_defined_statistic_when_reported():
    s = DecisionStats(max_age=10)
    s.add(np.array([1]), np.array([0.5]), np.array([1]), block([0, 1, 0, 0, 0, 0], 0.8))
    assert set(s.values()) <= {d.key for d in DECISION_STATISTICS}


def test_configured_query_rate_when_each_mode():
    assert configured_query_rate_pct(SimpleNamespace(mode="always", interval=5)) == 100.0
    assert configured_query_rate_pct(SimpleNamespace(mode="never", interval=5)) == 0.0
    assert configured_query_rate_pct(SimpleNamespace(mode="selective", interval=5)) == 20.0
