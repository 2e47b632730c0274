"""Answer cache: reuse advice for nearly identical contexts (defaults: 5 minutes, 20% confidence decay per reuse).

The key is the context rounded by the ``cache.*_step`` options: market, position, trend, RSI, ADX,
price vs VWAP, momentum in ATR, unrealised P&L, balance, win rate, consecutive losses and the legal-
action mask, and with retrieval the retrieved examples' text (``PromptBuilder.examples_key``: two
states share an answer only when they read the same examples). Price and time are not in the key;
time enters through the time to live: an entry computed for the bar at market time T serves contexts
at times T..T+ttl_minutes only (never earlier bars). Each reuse multiplies the confidence by (1 -
decay) and flattens the distribution toward uniform by the same factor, so reused advice weighs less
and less. Abstentions are never cached.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hybrid_trader.llm.advice import Advice, decayed
from hybrid_trader.llm.config import CacheConfig
from hybrid_trader.llm.context import AdvisorContext


def _q(value: float, step: float) -> int | None:
    if value is None or not math.isfinite(value):
        return None
    return int(math.floor(value / step + 0.5))


@dataclass
class _Entry:
    advice: Advice
    minute: float
    legal: np.ndarray
    reuses: int = 0


class AdviceCache:
    """LRU cache of advice keyed on the rounded context, with a TTL in market minutes."""

    def __init__(self, config: CacheConfig, examples_of: Callable[[AdvisorContext], str] | None = None) -> None:
        self.config = config
        self.examples_of = examples_of
        """The text of the few-shot examples a context reads when they vary by state (retrieval): part of the key."""
        self._data: OrderedDict[tuple, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def key(self, ctx: AdvisorContext) -> tuple:
        c = self.config
        mom_atr = ctx.momentum / ctx.atr if ctx.atr and math.isfinite(ctx.atr) and ctx.atr > 0 else math.nan
        return (
            ctx.market, ctx.position, ctx.trend_score,
            _q(ctx.rsi, c.rsi_step), _q(ctx.adx, c.adx_step), _q(ctx.vwap_distance, c.vwap_step),
            _q(mom_atr, c.momentum_atr_step), _q(ctx.unrealized_pnl, c.pnl_step), _q(ctx.balance, c.pnl_step),
            _q(ctx.win_rate, 0.1), min(int(ctx.consecutive_losses), 5), ctx.legal.tobytes(),
            self.examples_of(ctx) if self.examples_of is not None else "",
        )

    def get(self, ctx: AdvisorContext) -> Advice | None:
        """Cached advice for this context, decayed by its reuse count, or None (miss / expired)."""
        if not self.config.enabled:
            return None
        k = self.key(ctx)
        now = ctx.minute
        with self._lock:
            e = self._data.get(k)
            if e is None:
                self.misses += 1
                return None
            age = now - e.minute
            if age < 0 or age > self.config.ttl_minutes:
                if age > self.config.ttl_minutes:
                    del self._data[k]
                self.misses += 1
                return None
            e.reuses += 1
            self._data.move_to_end(k)
            self.hits += 1
            return decayed(e.advice, e.reuses, self.config.decay, e.legal)

    def put(self, ctx: AdvisorContext, advice: Advice) -> None:
        """Store a fresh (non-abstained, model-made) answer."""
        if not self.config.enabled or advice.abstained or advice.from_cache:
            return
        k = self.key(ctx)
        with self._lock:
            self._data[k] = _Entry(advice=advice, minute=ctx.minute, legal=ctx.legal.copy())
            self._data.move_to_end(k)
            while len(self._data) > self.config.max_entries:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
