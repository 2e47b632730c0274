"""The advice block: the LLM's advice as the values appended to a phase 3 observation.

One definition of its layout; every reader and writer uses the names below, never
literal positions. Inside a block of ``ADVICE.size`` values:

=====================  ==========================================================================
name                   value
=====================  ==========================================================================
``ADVICE.probs``       LLM probabilities of the six actions, zero on illegal ones [0-1]
``ADVICE.confidence``  LLM confidence [0-1]
``ADVICE.age``         age of the advice in steps / ``llm.batching.max_age_steps``, capped at 1 [0-1]
``ADVICE.present``     1 when fresh, non-abstained advice is in the block, else 0 (then all are 0)
=====================  ==========================================================================

A phase 3 observation is the ``N_FEATURES`` features followed by the block
(``OBS_ADVICE``); ``PartialVecNormalize`` leaves the block unnormalised, so the
probabilities stay probabilities for the prior.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.features.names import FEATURE_NAMES


class AdviceLayout:
    """Positions of the advice values inside the block (read-only class attributes)."""

    __slots__ = ()

    probs = slice(0, N_ACTIONS)
    """LLM probabilities of the six actions."""
    confidence = N_ACTIONS
    """LLM confidence."""
    age = N_ACTIONS + 1
    """Age of the advice / max age."""
    present = N_ACTIONS + 2
    """Presence flag."""
    size = N_ACTIONS + 3
    """Values in the block."""

    present_column = slice(N_ACTIONS + 2, N_ACTIONS + 3)
    """The presence flag as a one-wide slice (keeps the last axis for broadcasting)."""


ADVICE = AdviceLayout()
"""The advice block's layout."""
N_FEATURES = len(FEATURE_NAMES)
"""Features before the block in a phase 3 observation."""
OBS_ADVICE = slice(N_FEATURES, N_FEATURES + ADVICE.size)
"""The block inside a phase 3 observation."""
OBS_ADVICE_PRESENT = N_FEATURES + ADVICE.present
"""The presence flag inside a phase 3 observation."""
PHASE3_OBS_DIM = N_FEATURES + ADVICE.size
"""Length of a phase 3 observation."""


def empty_block() -> np.ndarray:
    """A block without advice (all zeros), float32."""
    return np.zeros(ADVICE.size, dtype=np.float32)


def block_bounds() -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the block's values (for an observation space)."""
    return np.zeros(ADVICE.size, np.float32), np.ones(ADVICE.size, np.float32)


def write_advice(advice: Any, max_age: int, age: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """The block of one observation for ``advice`` (an ``Advice`` or None; zeros when not usable).

    ``age`` overrides ``advice.age_steps``; ``out`` (``ADVICE.size`` values) is filled in place.
    """
    if out is None:
        out = empty_block()
    if advice is None or advice.abstained:
        out[:] = 0.0
        return out
    out[ADVICE.probs] = advice.probs
    out[ADVICE.confidence] = advice.confidence
    out[ADVICE.age] = min((advice.age_steps if age is None else age) / max(max_age, 1), 1.0)
    out[ADVICE.present] = 1.0
    return out


def present(block: np.ndarray) -> np.ndarray:
    """Rows of ``block`` (``(..., ADVICE.size)``) that carry advice."""
    return block[..., ADVICE.present] > 0.5
