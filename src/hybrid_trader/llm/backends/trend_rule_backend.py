"""The trend-label rule: an "advisor" that reads only the prompt's trend score (-2..+2).

A control for the LLM (issue 21): whatever an advisor adds beyond the label our own code
writes into the prompt shows as the gap between it and this rule on the same states.

- flat: BUY with an uptrend, SELL with a downtrend, HOLD with no clear trend, with more
  weight the stronger the label;
- in a position: HOLD (the rule has no view on stop management).

Scores become probabilities by a softmax over the legal actions; ``mock.coverage`` of the
probability lands on action names, as for the mock back end (it shares that section).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hybrid_trader.actions import Action
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.backend_config import MockConfig
from hybrid_trader.llm.backends.base import Backend
from hybrid_trader.llm.context import AdvisorContext
from hybrid_trader.llm.prompt import RenderedQuery

_WORDS = {2: "strong uptrend", 1: "uptrend", 0: "no clear trend", -1: "downtrend", -2: "strong downtrend"}


def trend_rule_scores(ctx: AdvisorContext) -> np.ndarray:
    """Log-scores of the 6 actions from the trend score and the position alone."""
    s = np.full(6, -4.0)
    s[Action.HOLD] = 0.0
    if ctx.position == 0:
        s[Action.BUY] = 1.5 * ctx.trend_score - 0.75
        s[Action.SELL] = -1.5 * ctx.trend_score - 0.75
    return s


class TrendRuleBackend(Backend):
    """Advice from the trend label alone; deterministic, no model."""

    name = "trend_rule"

    def __init__(self, config: MockConfig | None = None) -> None:
        self.config = config or MockConfig()

    def _probabilities(self, ctx: AdvisorContext) -> np.ndarray:
        s = np.where(ctx.legal, trend_rule_scores(ctx), -np.inf)
        if not np.isfinite(s).any():
            s[Action.HOLD] = 0.0
        p = np.exp(s - s[np.isfinite(s)].max())
        return p / p.sum()

    def score(self, queries: Sequence[RenderedQuery]) -> np.ndarray:
        return np.stack([self.config.coverage * self._probabilities(q.context) for q in queries]) \
            if queries else np.zeros((0, 6))

    def generate(self, queries: Sequence[RenderedQuery], max_new_tokens: int, temperature: float) -> list[str]:
        texts = []
        for q in queries:
            p = self._probabilities(q.context)
            a = int(np.argmax(p))
            texts.append(f" {ACTION_WORDS[a]} | {p[a]:.2f} | {_WORDS.get(q.context.trend_score, 'trend')}")
        return texts

    def describe(self) -> str:
        return "trend_rule (reads only the prompt's trend label: a control for the LLM)"
