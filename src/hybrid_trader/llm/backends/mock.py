"""A deterministic rule-based "model" over the context: for tests and fast training runs.

Rules (scores turned into probabilities by a softmax; the same context always gives the
same answer):

- flat: BUY leans with the trend score and RSI momentum, SELL against; an RSI beyond
  70/30 pulls toward HOLD (no chasing); 3+ consecutive losses pull strongly toward HOLD;
- in a position: MOVE_TO_BE when the open profit is positive, ENABLE_TRAIL when the
  trend runs with the position, DISABLE_TRAIL when it turns against it, HOLD otherwise.

``mock.coverage`` of the probability lands on action names (the rest on "other text").
Generation writes ``ACTION | confidence | reason`` from the same rules.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np

from hybrid_trader.actions import Action
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.backends.base import Backend
from hybrid_trader.llm.config import MockConfig
from hybrid_trader.llm.context import AdvisorContext
from hybrid_trader.llm.prompt import COT_START, RenderedQuery


def _finite(x: float, default: float) -> float:
    return x if x is not None and math.isfinite(x) else default


def mock_scores(ctx: AdvisorContext) -> tuple[np.ndarray, str]:
    """Unnormalised log-scores of the 6 actions and a short reason."""
    s = np.full(6, -4.0)
    rsi = _finite(ctx.rsi, 50.0)
    trend = ctx.trend_score
    pos = ctx.position
    s[Action.HOLD] = 0.5
    if pos == 0:
        lean = 0.9 * trend + (rsi - 50.0) / 20.0
        s[Action.BUY] = lean
        s[Action.SELL] = -lean
        if rsi >= 70:
            s[Action.BUY] -= 1.5
            s[Action.HOLD] += 0.8
        if rsi <= 30:
            s[Action.SELL] -= 1.5
            s[Action.HOLD] += 0.8
        if ctx.consecutive_losses >= 3:
            s[Action.HOLD] += 2.5
        words = {2: "strong uptrend", 1: "uptrend", 0: "no clear trend", -1: "downtrend", -2: "strong downtrend"}
        reason = words[trend]
        reason += f", RSI {rsi:.0f}"
    else:
        with_trend = trend * pos
        pnl = _finite(ctx.unrealized_pnl, 0.0)
        s[Action.HOLD] = 1.0
        s[Action.MOVE_SL_TO_BE] = 1.2 if pnl > 0 else -2.0
        s[Action.ENABLE_TRAIL] = 0.6 * with_trend + (0.5 if pnl > 0 else -1.0)
        s[Action.DISABLE_TRAIL] = -0.8 * with_trend - 0.5
        reason = (
            "protect open profit" if pnl > 0 else ("trend with position" if with_trend > 0 else "let the stop work")
        )
    return s, reason


class MockBackend(Backend):
    """Deterministic advice from simple rules; no model, no randomness."""

    name = "mock"

    def __init__(self, config: MockConfig | None = None) -> None:
        self.config = config or MockConfig()

    def _sleep(self) -> None:
        if self.config.latency_ms > 0:
            time.sleep(self.config.latency_ms / 1000.0)

    def score(self, queries: Sequence[RenderedQuery]) -> np.ndarray:
        self._sleep()
        out = np.zeros((len(queries), 6))
        for i, q in enumerate(queries):
            s, _ = mock_scores(q.context)
            s = np.where(q.context.legal, s, -np.inf)
            if not np.isfinite(s).any():
                s[Action.HOLD] = 0.0
            p = np.exp(s - s[np.isfinite(s)].max())
            out[i] = self.config.coverage * p / p.sum()
        return out

    def generate(self, queries: Sequence[RenderedQuery], max_new_tokens: int, temperature: float) -> list[str]:
        self._sleep()
        texts = []
        for q in queries:
            s, reason = mock_scores(q.context)
            s = np.where(q.context.legal, s, -np.inf)
            p = np.exp(s - s[np.isfinite(s)].max())
            p /= p.sum()
            a = int(np.argmax(p))
            answer = f"{ACTION_WORDS[a]} | {p[a]:.2f} | {reason}"
            if q.suffix.endswith(COT_START):  # a chain of thought: the four steps, the decision last
                legal = " ".join(w for w, ok in zip(ACTION_WORDS, q.context.legal) if ok)
                answer = (f" {reason}.\n2. Options: {legal}.\n"
                          f"3. Risks: {q.context.position_status}, ATR {q.context.atr:.2f}.\n4. Decision: {answer}")
            texts.append(f" {answer}")
        return texts

    def describe(self) -> str:
        return "mock (deterministic rules over trend, RSI and position)"
