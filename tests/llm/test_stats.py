"""The catalogue of LLM statistics: each key defined once, with meaning, unit and label."""

from __future__ import annotations

from hybrid_trader.llm.stats import ADVISOR_STATISTICS, DECISION_STATISTICS, STAT_NAMES, label


def test_each_key_is_defined_once_per_family_when_listed():
    for family in (ADVISOR_STATISTICS, DECISION_STATISTICS):
        keys = [s.key for s in family]
        assert len(keys) == len(set(keys))
        assert all(s.meaning and s.unit for s in family)


def test_query_rate_is_a_decision_statistic_only_when_both_families_are_read():
    assert "llm/query_rate_pct" in {s.key for s in DECISION_STATISTICS}
    assert "llm/query_rate_pct" not in STAT_NAMES and "llm/accepted_pct" in STAT_NAMES


def test_label_when_statistic_has_one_or_not():
    assert label("llm/queries") == "LLM queries" and label("llm/advised_pct") == "Advised decisions [%]"
    assert label("llm/calls") == "llm/calls" and label("no/such") == "no/such"
