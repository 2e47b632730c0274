"""The advisor's answer: :class:`Advice`, the action vocabulary and the abstention codes.

Probabilities always have 6 entries in :class:`~hybrid_trader.actions.Action` order and
are zero on illegal actions. An **abstained** advice carries a *uniform distribution over
the legal actions* (so ``log p_llm`` is the same for every legal action and a logit prior
``w * log p_llm(a)`` changes nothing), ``confidence`` 0, ``action`` HOLD and a greppable
``abstain_reason``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hybrid_trader.actions import N_ACTIONS, Action

# The LLM's words for the actions (the prompt's answer vocabulary), in Action order.
ACTION_WORDS: tuple[str, ...] = ("HOLD", "BUY", "SELL", "MOVE_TO_BE", "ENABLE_TRAIL", "DISABLE_TRAIL")

# Abstention codes (greppable).
LLM_TIMEOUT = "LLM_TIMEOUT"
"""The answer did not arrive within ``batching.timeout_s`` (or the HTTP request timed out)."""
LLM_ERROR = "LLM_ERROR"
"""The back end raised (server unreachable, out of memory, ...)."""
LLM_PARSE_FAILURE = "LLM_PARSE_FAILURE"
"""Generation mode: the written answer names no action."""
LLM_ILLEGAL_ACTION = "LLM_ILLEGAL_ACTION"
"""Generation mode: the written answer names an action that is not legal now."""
LLM_LOW_COVERAGE = "LLM_LOW_COVERAGE"
"""Scoring mode: the legal action names got less probability than ``scoring.min_coverage``."""
ABSTAIN_CODES = (LLM_TIMEOUT, LLM_ERROR, LLM_PARSE_FAILURE, LLM_ILLEGAL_ACTION, LLM_LOW_COVERAGE)


def uniform_over(legal: np.ndarray) -> np.ndarray:
    """Uniform float32 distribution over the legal actions (HOLD alone if none is legal)."""
    legal = np.asarray(legal, dtype=bool)
    p = legal.astype(np.float32)
    if p.sum() == 0:
        p[Action.HOLD] = 1.0
    return p / p.sum()


@dataclass
class Advice:
    """One answer of the advisor for one context."""

    probs: np.ndarray
    """float32, length 6, zero on illegal actions; sums to 1 (uniform over legal when abstained)."""
    action: int
    """Most probable legal action (HOLD when abstained)."""
    confidence: float
    """Probability of ``action`` (generation: the stated confidence), decayed on cache reuse; 0 when abstained."""
    coverage: float
    """Probability mass the legal action names covered before renormalising (generation: 1 if parsed, else 0)."""
    reason: str | None = None
    """Generation mode: the model's short reason."""
    abstained: bool = False
    """True when the advisor has no opinion (see ``abstain_reason``)."""
    abstain_reason: str | None = None
    """LLM_TIMEOUT, LLM_ERROR, LLM_PARSE_FAILURE, LLM_ILLEGAL_ACTION, or LLM_LOW_COVERAGE."""
    latency_ms: float = 0.0
    """Time from submit (or the start of a synchronous call) to the answer [ms]."""
    backend: str = ""
    """Back end that answered (``cache`` suffix when reused)."""
    step: int = -1
    """Environment step the context belongs to (set by submit)."""
    age_steps: int = 0
    """Steps between the context's step and the step it is polled at (set by poll)."""
    from_cache: bool = False
    """True when the answer was reused from the cache."""
    raw: str | None = None
    """Generation mode: the model's raw text; error message when the back end failed."""

    @property
    def action_name(self) -> str:
        """The LLM word of ``action`` (HOLD, BUY, ..., MOVE_TO_BE, ...)."""
        return ACTION_WORDS[self.action]

    def with_age(self, step: int) -> Advice:
        return replace(self, age_steps=int(step) - int(self.step))

    def as_features(self) -> np.ndarray:
        """``[probs(6), confidence, abstained]`` as float32, for an observation (age is added by the caller)."""
        out = np.empty(N_ACTIONS + 2, dtype=np.float32)
        out[:N_ACTIONS] = self.probs
        out[N_ACTIONS] = self.confidence
        out[N_ACTIONS + 1] = 1.0 if self.abstained else 0.0
        return out


def abstention(legal: np.ndarray, code: str, *, backend: str = "", latency_ms: float = 0.0,
               coverage: float = 0.0, raw: str | None = None, step: int = -1) -> Advice:
    """An abstained advice: uniform over legal actions, confidence 0, HOLD, with the reason code."""
    return Advice(
        probs=uniform_over(legal), action=int(Action.HOLD), confidence=0.0, coverage=float(coverage),
        abstained=True, abstain_reason=code, latency_ms=float(latency_ms), backend=backend, raw=raw, step=step,
    )


def advice_from_mass(mass: np.ndarray, legal: np.ndarray, *, min_coverage: float, backend: str,
                     latency_ms: float = 0.0, calibration: np.ndarray | None = None) -> Advice:
    """Scoring mode: renormalise the name probabilities over the legal actions.

    ``mass[a]`` is the next-token probability the model gave to action ``a``'s name
    (its first tokens). ``coverage`` = total mass on legal names; below ``min_coverage``
    the advisor abstains with LLM_LOW_COVERAGE. With ``calibration`` (the content-free
    answer's masses), each mass is divided by it before renormalising.
    """
    legal = np.asarray(legal, dtype=bool)
    m = np.where(legal, np.asarray(mass, dtype=np.float64), 0.0)
    m = np.where(np.isfinite(m) & (m > 0), m, 0.0)
    coverage = float(m.sum())
    if coverage <= 0.0 or coverage < min_coverage:
        return abstention(legal, LLM_LOW_COVERAGE, backend=backend, latency_ms=latency_ms, coverage=coverage)
    if calibration is not None:
        cal = np.asarray(calibration, dtype=np.float64)
        cal = np.where(legal & (cal > 0), cal, 1.0)
        m = m / cal
    p = (m / m.sum()).astype(np.float32)
    action = int(np.argmax(p))
    return Advice(probs=p, action=action, confidence=float(p[action]), coverage=min(coverage, 1.0),
                  backend=backend, latency_ms=float(latency_ms))


def advice_from_choice(action: int, confidence: float, legal: np.ndarray, *, backend: str, reason: str | None,
                       latency_ms: float = 0.0, raw: str | None = None) -> Advice:
    """Generation mode: the named action gets ``confidence``, the other legal actions share the rest."""
    legal = np.asarray(legal, dtype=bool)
    if not legal[action]:
        return abstention(legal, LLM_ILLEGAL_ACTION, backend=backend, latency_ms=latency_ms, coverage=1.0, raw=raw)
    conf = float(min(max(confidence, 0.0), 1.0))
    others = legal.copy()
    others[action] = False
    p = np.zeros(N_ACTIONS, dtype=np.float64)
    if others.any():
        p[others] = (1.0 - conf) / others.sum()
        p[action] = conf
    else:
        p[action] = 1.0
    p = (p / p.sum()).astype(np.float32)
    return Advice(probs=p, action=int(action), confidence=conf, coverage=1.0, reason=reason,
                  backend=backend, latency_ms=float(latency_ms), raw=raw)


def decayed(advice: Advice, reuses: int, decay: float, legal: np.ndarray) -> Advice:
    """The advice reused ``reuses`` times: confidence times (1-decay)^reuses, distribution flattened alike."""
    if advice.abstained or reuses <= 0 or decay <= 0:
        return replace(advice, from_cache=reuses > 0 or advice.from_cache)
    f = (1.0 - decay) ** reuses
    p = (f * advice.probs + (1.0 - f) * uniform_over(legal)).astype(np.float32)
    p /= p.sum()
    return replace(advice, probs=p, confidence=float(advice.confidence * f), from_cache=True)
