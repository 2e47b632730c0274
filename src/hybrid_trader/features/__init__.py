"""Features: the column table (``names``), both paths that compute it, and their containers.

Batch: ``compute_features(bars) -> FeatureSet`` (every bar at once: training, evaluation).
Incremental: ``incremental.IncrementalFeatures.append(...) -> FeatureRow`` (one bar at a time: the
executor), equal bit for bit; ``features_so_far.FeaturesSoFar`` holds its rows. See
``docs/FEATURES.md`` for the table of every entry of the observation.
"""

from hybrid_trader.features.feature_set import FeatureSet, compute_features
from hybrid_trader.features.names import (
    BAR_FEATURE_NAMES,
    BASE_FEATURE_NAMES,
    FEATURE_NAMES,
    FEATURE_TABLE,
    FLAG_FEATURE_NAMES,
    LLM_FEATURE_NAMES,
    MARKET_CONTEXT_NAMES,
    MARKET_FEATURE_NAMES,
    MULTI_TIMEFRAME_NAMES,
    PATTERN_NAMES,
    POSITION_FEATURE_NAMES,
    RISK_FEATURE_NAMES,
    WINDOW,
    feature_table_markdown,
)

__all__ = [
    "BAR_FEATURE_NAMES",
    "BASE_FEATURE_NAMES",
    "FEATURE_NAMES",
    "FEATURE_TABLE",
    "FLAG_FEATURE_NAMES",
    "FeatureSet",
    "LLM_FEATURE_NAMES",
    "MARKET_CONTEXT_NAMES",
    "MARKET_FEATURE_NAMES",
    "MULTI_TIMEFRAME_NAMES",
    "PATTERN_NAMES",
    "POSITION_FEATURE_NAMES",
    "RISK_FEATURE_NAMES",
    "WINDOW",
    "compute_features",
    "feature_table_markdown",
]
