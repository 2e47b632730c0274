"""Decision rules run through the environment: the trained agent and the baselines.

A policy here is a callable ``(obs, mask, env) -> action``. Every one of them sees
exactly what the agent sees (the observation at bar t, the legal actions) plus the
environment for the bars up to t, and trades through the same environment, so the
costs, fills and rules are identical.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np

from hybrid_trader.env.actions import Action


class Policy(Protocol):
    name: str

    def __call__(self, obs: np.ndarray, mask: np.ndarray, env: Any) -> int: ...


class FlatPolicy:
    """Never trades."""

    name = "flat"

    def __call__(self, obs, mask, env) -> int:
        return int(Action.HOLD)


class RandomPolicy:
    """Random legal actions: enters on a share ``entry_rate`` of the bars where entry is legal.

    ``entry_rate`` is set from the agent's own trade rate so that the comparison is at
    the same activity; management actions (phases 2-3) are taken with probability
    ``manage_rate`` when legal.
    """

    def __init__(self, entry_rate: float, seed: int, manage_rate: float = 0.02) -> None:
        self.entry_rate = float(entry_rate)
        self.manage_rate = float(manage_rate)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.name = f"random (seed {seed})"
        self.result_extra = {"group": "random", "seed": seed, "role": "baseline"}

    def __call__(self, obs, mask, env) -> int:
        if mask[1] and self.rng.random() < self.entry_rate:
            return int(self.rng.choice([Action.BUY, Action.SELL]))
        if len(mask) > 3 and mask[3:].any() and self.rng.random() < self.manage_rate:
            return int(self.rng.choice(np.flatnonzero(mask[3:]) + 3))
        return int(Action.HOLD)


class MomentumPolicy:
    """A simple momentum rule: enter in the direction of the last ``lookback`` bars' move
    when it exceeds ``threshold_atr`` ATRs (bars <= t only); exits by stop and target."""

    name = "momentum"

    def __init__(self, lookback: int = 20, threshold_atr: float = 1.0) -> None:
        self.lookback = lookback
        self.threshold_atr = threshold_atr

    def __call__(self, obs, mask, env) -> int:
        if not mask[1]:
            return int(Action.HOLD)
        t = env.current_index
        if t < self.lookback:
            return int(Action.HOLD)
        close = env.bars.close
        move = (close[t] - close[t - self.lookback]) / env.features.atr[t]
        if move > self.threshold_atr:
            return int(Action.BUY)
        if move < -self.threshold_atr:
            return int(Action.SELL)
        return int(Action.HOLD)


class AgentPolicy:
    """The trained MaskablePPO policy, deterministic and masked, on normalised observations."""

    def __init__(self, model: Any, vec_normalize: Any = None, name: str = "agent", deterministic: bool = True) -> None:
        self.model = model
        self.vec_normalize = vec_normalize
        self.name = name
        self.deterministic = deterministic
        self.result_extra = {"role": "agent"}

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        if self.vec_normalize is None:
            return obs
        return self.vec_normalize.normalize_obs(obs)

    def __call__(self, obs, mask, env) -> int:
        action, _ = self.model.predict(self.normalize(obs), action_masks=mask, deterministic=self.deterministic)
        return int(action)


PolicyFn = Callable[[np.ndarray, np.ndarray, Any], int]
