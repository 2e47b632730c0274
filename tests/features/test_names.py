"""The 261 names, the feature table and docs/FEATURES.md."""

from __future__ import annotations

from pathlib import Path

from hybrid_trader import features as F
from hybrid_trader.features.names import feature_table_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "FEATURES.md"


def test_name_counts_when_imported():
    assert F.WINDOW == 20
    assert len(F.BAR_FEATURE_NAMES) == 11
    assert len(F.POSITION_FEATURE_NAMES) == 5
    assert len(F.FLAG_FEATURE_NAMES) == 3
    assert len(F.BASE_FEATURE_NAMES) == 228
    assert (len(F.MARKET_CONTEXT_NAMES), len(F.MULTI_TIMEFRAME_NAMES), len(F.PATTERN_NAMES)) == (10, 8, 10)
    assert len(F.RISK_FEATURE_NAMES) == 5
    assert len(F.LLM_FEATURE_NAMES) == 33
    assert len(F.FEATURE_NAMES) == 261


def test_contract_names_when_imported():
    assert F.BAR_FEATURE_NAMES == [
        "log_ret", "range_atr", "body_atr", "volume_z", "sma20_gap_atr", "sma50_gap_atr",
        "rsi14", "macd_hist_atr", "tod_sin", "tod_cos", "session_progress",
    ]
    assert F.POSITION_FEATURE_NAMES == [
        "position", "entry_dist_atr", "stop_dist_atr", "target_dist_atr", "time_in_position",
    ]
    assert F.FLAG_FEATURE_NAMES == ["can_enter", "can_manage", "has_position"]
    assert F.RISK_FEATURE_NAMES == [
        "unrealized_pnl", "current_drawdown", "consecutive_losses", "recent_win_rate", "mae_mfe_ratio",
    ]


def test_feature_names_when_laid_out_follow_the_observation_order():
    assert F.BASE_FEATURE_NAMES[0] == "log_ret[t-19]"
    assert F.BASE_FEATURE_NAMES[10] == "session_progress[t-19]"
    assert F.BASE_FEATURE_NAMES[219] == "session_progress[t-0]"
    assert F.BASE_FEATURE_NAMES[220:] == F.POSITION_FEATURE_NAMES + F.FLAG_FEATURE_NAMES
    assert F.LLM_FEATURE_NAMES == (
        F.MARKET_CONTEXT_NAMES + F.MULTI_TIMEFRAME_NAMES + F.PATTERN_NAMES + F.RISK_FEATURE_NAMES
    )
    assert F.FEATURE_NAMES == F.BASE_FEATURE_NAMES + F.LLM_FEATURE_NAMES
    assert F.LLM_FEATURE_NAMES[:28] == F.MARKET_FEATURE_NAMES


def test_feature_names_when_checked_are_unique():
    assert len(set(F.FEATURE_NAMES)) == len(F.FEATURE_NAMES)


def test_feature_table_when_compared_matches_feature_names():
    assert [row["index"] for row in F.FEATURE_TABLE] == list(range(261))
    assert [row["name"] for row in F.FEATURE_TABLE] == F.FEATURE_NAMES
    for row in F.FEATURE_TABLE:
        assert set(row) == {"index", "name", "group", "description", "filled_by"}
        assert row["description"].strip()
        assert row["filled_by"] in {"features", "env"}
    env = [row["name"] for row in F.FEATURE_TABLE if row["filled_by"] == "env"]
    assert env == F.POSITION_FEATURE_NAMES + F.FLAG_FEATURE_NAMES + F.RISK_FEATURE_NAMES
    groups = [row["group"] for row in F.FEATURE_TABLE]
    assert groups.count("bar_window") == 220
    assert groups.count("market_context") == 10 and groups.count("pattern") == 10
    assert groups.count("multi_timeframe") == 8 and groups.count("risk") == 5


def test_feature_table_markdown_when_rendered_has_one_row_per_feature():
    lines = feature_table_markdown().splitlines()
    assert len(lines) == 2 + 261
    assert lines[2].startswith("| 0 | `log_ret[t-19]` |")
    assert lines[-1].startswith("| 260 | `mae_mfe_ratio` |")


def test_features_doc_when_compared_is_up_to_date_with_feature_table():
    text = DOC.read_text(encoding="utf-8")
    begin, end = "<!-- BEGIN FEATURE TABLE -->\n", "<!-- END FEATURE TABLE -->"
    assert begin in text and end in text, "docs/FEATURES.md lost its table markers"
    table = text.split(begin, 1)[1].split(end, 1)[0]
    assert table == feature_table_markdown(), (
        "docs/FEATURES.md is stale: replace the table between the markers with the output of "
        "`python -m hybrid_trader.features.names`"
    )
