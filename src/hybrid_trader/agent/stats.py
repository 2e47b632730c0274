"""Decision statistics of the hybrid agent, computed one way for training and evaluation.

The keys, meanings and units are defined once in :data:`hybrid_trader.llm.stats.DECISION_STATISTICS`;
this module computes them. Training's ``HybridStatsCallback`` feeds whole rollouts,
evaluation feeds each :class:`~hybrid_trader.agent.hybrid_agent.Decision`; both read
:meth:`DecisionStats.values`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hybrid_trader.agent.advice_block import ADVICE


def configured_query_rate_pct(query: Any) -> float:
    """``llm/configured_query_rate_pct``: the query rate the query policy's mode and interval alone imply [%]."""
    if query.mode == "always":
        return 100.0
    if query.mode == "never":
        return 0.0
    return 100.0 / max(query.interval, 1)


class DecisionStats:
    """Counts over decisions: advice used, agreement, override, confidences, queries."""

    def __init__(self, max_age: int) -> None:
        self.max_age = int(max_age)
        """``llm.batching.max_age_steps``: scales the advice block's age back to steps."""
        self.n = 0
        self.advised = 0
        self.agree = 0
        self.override = 0
        self.rl_conf_sum = 0.0
        self.llm_conf_sum = 0.0
        self.age_sum = 0.0
        self.queries = 0.0
        self.requests = 0.0

    def add(self, rl_action: np.ndarray, rl_confidence: np.ndarray, action: np.ndarray,
            block: np.ndarray) -> None:
        """Decisions ``(n,)``: the RL-only best action and its probability, the executed action,
        and the advice block ``(n, ADVICE.size)`` of each decision's observation."""
        rl_action = np.asarray(rl_action).reshape(-1)
        action = np.asarray(action).reshape(-1)
        block = np.asarray(block).reshape(-1, ADVICE.size)
        self.n += len(action)
        self.rl_conf_sum += float(np.sum(rl_confidence))
        self.override += int((action != rl_action).sum())
        advised = block[:, ADVICE.present] > 0.5
        if advised.any():
            used = block[advised]
            self.advised += int(advised.sum())
            self.agree += int((used[:, ADVICE.probs].argmax(axis=1) == rl_action[advised]).sum())
            self.llm_conf_sum += float(used[:, ADVICE.confidence].sum())
            self.age_sum += float(used[:, ADVICE.age].sum()) * self.max_age

    def count_queries(self, answers: float, requests: float | None = None) -> None:
        """Model answers (cache hits included) and, where known, advice requests made for these decisions."""
        self.queries += answers
        if requests is not None:
            self.requests += requests

    def values(self) -> dict[str, float]:
        """The statistics measured so far, by key (a rate is absent while its denominator is zero)."""
        out: dict[str, float] = {"llm/queries": self.queries}
        if self.n:
            out["llm/query_rate_pct"] = 100.0 * self.queries / self.n
            out["llm/request_rate_pct"] = 100.0 * self.requests / self.n
            out["llm/advised_pct"] = 100.0 * self.advised / self.n
            out["confidence/rl_avg"] = self.rl_conf_sum / self.n
            out["fusion/override_pct"] = 100.0 * self.override / self.n
        if self.advised:
            out["confidence/llm_avg"] = self.llm_conf_sum / self.advised
            out["fusion/agreement_pct"] = 100.0 * self.agree / self.advised
            out["llm/advice_age_mean_steps"] = self.age_sum / self.advised
        return out
