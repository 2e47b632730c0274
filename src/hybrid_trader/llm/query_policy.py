"""Selective querying with a cooldown: when does an environment's submit ask the model?

Per environment, a query is due when **any** configured trigger fires, unless the
previous query of that environment was less than ``cooldown`` steps ago:

- ``uncertainty``: the RL policy's probability of its chosen action < ``uncertainty_threshold``
  (only when the caller passes ``rl_confidence``: a number, or a function returning one,
  called only when this trigger is checked, so that a hot loop computes it only then);
- ``flat``: no open position (an entry decision);
- ``interval``: ``interval`` steps or more since the previous query;
- ``state_change``: position, consecutive losses, balance (by ``balance_change`` $) or
  win rate (by ``win_rate_change``) changed since the previous query.

The policy reads four values of what it is given (an ``AdvisorContext``, or the
environment's ``AccountState`` so that no prompt context is built for a step that
will not query): ``position`` (sign), ``balance``, ``win_rate`` (NaN or None before the
first trade) and ``consecutive_losses``.

The first submit of an environment (or after :meth:`QueryPolicy.reset`) always queries.
``mode: always`` queries every submit (no cooldown); ``mode: never`` never does.
With the defaults (interval 5, cooldown 2) the query rate is 20-50% of steps. An interval
of 20 with a cooldown of 10 once asked on 0.5% of steps: too rare for the advice to matter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from hybrid_trader.llm.config import QueryPolicyConfig
from hybrid_trader.llm.context import AdvisorContext

RLConfidence = float | Callable[[], float | None] | None
"""The RL policy's probability of its chosen action: a number, a function computing it (None: unknown), or None."""


@dataclass
class _EnvState:
    step: int
    position: int
    balance: float
    win_rate: float
    consecutive_losses: int


class QueryPolicy:
    """Decides, per environment and step, whether a submit should reach the model."""

    def __init__(self, config: QueryPolicyConfig) -> None:
        self.config = config
        self._last: dict[int, _EnvState] = {}

    def decide(self, env_index: int, step: int, ctx: AdvisorContext,
               rl_confidence: RLConfidence = None) -> str | None:
        """The trigger that makes a query due now ('first', 'always', a trigger name), or None."""
        c = self.config
        if c.mode == "never":
            return None
        if c.mode == "always":
            return "always"
        last = self._last.get(env_index)
        if last is None or step < last.step:
            return "first"
        since = step - last.step
        if since == 0 or since < c.cooldown:
            return None
        triggers = c.triggers
        if "state_change" in triggers and self._changed(last, ctx):
            return "state_change"
        if "uncertainty" in triggers and rl_confidence is not None:
            conf = rl_confidence() if callable(rl_confidence) else rl_confidence
            if conf is not None and conf < c.uncertainty_threshold:
                return "uncertainty"
        if "flat" in triggers and ctx.position == 0:
            return "flat"
        if "interval" in triggers and since >= c.interval:
            return "interval"
        return None

    def _changed(self, last: _EnvState, ctx: AdvisorContext) -> bool:
        c = self.config
        if ctx.position != last.position or ctx.consecutive_losses != last.consecutive_losses:
            return True
        if abs(ctx.balance - last.balance) >= c.balance_change:
            return True
        a, b = _win_rate(ctx), last.win_rate
        if math.isnan(a) != math.isnan(b):
            return True
        return not math.isnan(a) and abs(a - b) >= c.win_rate_change

    def mark(self, env_index: int, step: int, ctx: AdvisorContext) -> None:
        """Record that environment ``env_index`` queried at ``step`` with context ``ctx``."""
        self._last[env_index] = _EnvState(step, ctx.position, ctx.balance, _win_rate(ctx), ctx.consecutive_losses)

    def reset(self, env_index: int | None = None) -> None:
        """Forget one environment's history (a new episode), or all of them."""
        if env_index is None:
            self._last.clear()
        else:
            self._last.pop(env_index, None)


def _win_rate(ctx: AdvisorContext) -> float:
    """The context's win rate, NaN when there is none yet."""
    return ctx.win_rate
