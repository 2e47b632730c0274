"""The ``llm.prompt.retrieval`` section: few-shot examples retrieved from labelled training-day states.

Imports nothing of the LLM package (the config module imports it); the retrieval itself
is in :mod:`hybrid_trader.llm.retrieval`, the pool is built by
:mod:`hybrid_trader.hindsight.retrieval_pool`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hybrid_trader.config import check
from hybrid_trader.errors import did_you_mean

RetrievalMode = Literal["exact", "clusters"]

RETRIEVAL_FIELDS: dict[str, tuple[str, ...]] = {
    "trend_score": ("trend", "trend_score"),
    "adx": ("adx", "trend"),
    "rsi": ("rsi",),
    "momentum": ("momentum",),
    "vwap_distance": ("vwap_distance", "vwap_bp"),
    "macd_hist": ("macd_hist",),
    "atr": ("atr",),
    "ret_5": ("ret_5", "ret_5_bp"),
    "ret_20": ("ret_20", "ret_20_bp"),
    "ret_60": ("ret_60", "ret_60_bp"),
    "session_high_atr": ("session_high_atr",),
    "session_low_atr": ("session_low_atr",),
    "session_minutes": ("session_minutes", "time", "current_time"),
}
"""Context numbers a state may be compared by -> the template fields that show them (``trend``'s
"strong" is ADX >= 25, so it shows ADX too; ``time`` shows the minutes since the session open)."""


@dataclass
class RetrievalConfig:
    """Few-shot examples retrieved per flat state: the k nearest labelled training-day states (issue 21)."""

    k: int = 0
    """Retrieved examples per flat state, shown with their hindsight label as the answer; 0: off (the fixed
    examples). They replace the fixed examples; states in a position keep the fixed prefix."""
    mode: RetrievalMode = "exact"
    """exact: each state's own k nearest (after the cached system text, in the per-query part); clusters: the
    pool's k-means groups, each a cached prefix of the k states nearest its centre, chosen per state."""
    clusters: int = 8
    """Groups of the clusters mode (each one cached prefix per market)."""
    pool_states: int = 2000
    """Labelled training-day states in the pool (evenly spread over the training days)."""
    horizon: int = 60
    """Bars a pool state's hindsight label may look ahead (clipped at its session's end: never another day)."""
    features: list[str] = field(default_factory=list)
    """Context numbers states are compared by (z-scored over the pool); empty: every one the template shows."""

    def __post_init__(self) -> None:
        check(0 <= self.k <= 16, "k", f"{self.k} is not in 0..16", fix="use 0 (off) or a few examples, e.g. 4")
        check(1 <= self.clusters <= 16, "clusters", f"{self.clusters} is not in 1..16",
              fix="use a few groups, e.g. 8 (each is one cached prefix)")
        check(self.pool_states >= 1, "pool_states", f"{self.pool_states} must be >= 1", fix="use e.g. 2000")
        check(self.horizon >= 1, "horizon", f"{self.horizon} must be >= 1 bar", fix="use e.g. 60")
        for name in self.features:
            check(name in RETRIEVAL_FIELDS, "features", f"has unknown field '{name}'", value=name,
                  fix=f"use some of: {', '.join(RETRIEVAL_FIELDS)}.{did_you_mean(name, RETRIEVAL_FIELDS)}")

    @property
    def enabled(self) -> bool:
        return self.k > 0
