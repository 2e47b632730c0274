"""Observation layout: slices come from the named feature groups."""

from __future__ import annotations

from hybrid_trader.env.observation import BASE_DIM, GROUP_SLICES, LLM_DIM, obs_dim
from hybrid_trader.features.names import FEATURE_NAMES, FEATURE_TABLE, FLAG_FEATURE_NAMES, RISK_FEATURE_NAMES


def test_group_slices_match_feature_table_when_laid_out_end_to_end():
    groups = {"window": "bar_window", "position": "position", "flags": "flags", "risk": "risk"}
    for ours, theirs in groups.items():
        idx = [row["index"] for row in FEATURE_TABLE if row["group"] == theirs]
        assert GROUP_SLICES[ours] == slice(idx[0], idx[-1] + 1)
    market = [row["index"] for row in FEATURE_TABLE if row["group"] in ("market_context", "multi_timeframe", "pattern")]
    assert GROUP_SLICES["market"] == slice(market[0], market[-1] + 1)
    assert FEATURE_NAMES[GROUP_SLICES["flags"]] == FLAG_FEATURE_NAMES
    assert FEATURE_NAMES[GROUP_SLICES["risk"]] == RISK_FEATURE_NAMES


def test_obs_dim_is_228_then_261_when_phase_3():
    assert obs_dim(1) == obs_dim(2) == BASE_DIM == 228
    assert obs_dim(3) == BASE_DIM + LLM_DIM == 261
