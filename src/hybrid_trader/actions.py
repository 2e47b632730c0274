"""The action set. Phase 1 uses the first three; phases 2 and 3 use all six."""

from __future__ import annotations

from enum import IntEnum


class Action(IntEnum):
    HOLD = 0
    BUY = 1
    SELL = 2
    MOVE_SL_TO_BE = 3
    ENABLE_TRAIL = 4
    DISABLE_TRAIL = 5


ACTION_NAMES: tuple[str, ...] = tuple(a.name for a in Action)
N_ACTIONS_PHASE1 = 3
N_ACTIONS = 6


def n_actions(phase: int) -> int:
    """Number of discrete actions in a training phase (3 in phase 1, else 6)."""
    return N_ACTIONS_PHASE1 if phase == 1 else N_ACTIONS
