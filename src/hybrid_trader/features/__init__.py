"""Features: the 261 observation names and ``compute_features(bars) -> FeatureSet``.

See ``docs/FEATURES.md`` for the table of every entry of the observation.
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
