"""The Recorder alone: statistics, cache, the answer hook and the journal; circuit-breaker answers not recorded."""

from __future__ import annotations

import sqlite3

from hybrid_trader.llm.advice import abstention, advice_from_mass
from hybrid_trader.llm.cache import AdviceCache
from hybrid_trader.llm.health import LLM_CIRCUIT_OPEN
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.llm.query_journal import QueryJournal
from hybrid_trader.llm.recording import Recorder
from hybrid_trader.llm.stats import AdvisorStats

from . import FLAT_MASK, make_context, mock_config


def recorder(tmp_path, config=None) -> Recorder:
    config = config or mock_config()
    journal = QueryJournal(str(tmp_path / "j.sqlite"), backend="mock", model="mock", mode="score", config={})
    return Recorder(scored=True, cache=AdviceCache(config.cache), stats=AdvisorStats(),
                    prompts=PromptBuilder(config), journal=journal)


def test_record_when_the_model_answered_counts_caches_hands_on_and_journals(tmp_path):
    r = recorder(tmp_path)
    seen = []
    r.on_answer = lambda env, step, adv: seen.append((env, step, adv.action))
    ctx = make_context()
    adv = advice_from_mass([0.1, 0.6, 0.1, 0.1, 0.1, 0.0], FLAT_MASK, backend="mock", min_coverage=0.0)
    assert r.record(2, 7, ctx, adv)
    assert r.cache.get(ctx) is not None
    assert r.stats.snapshot()["llm/total_queries"] >= 1
    assert seen == [(2, 7, adv.action)]
    r.close()
    rows = sqlite3.connect(tmp_path / "j.sqlite").execute("select count(*) from llm_queries").fetchone()[0]
    assert rows == 1


def test_record_when_abstained_is_not_cached_and_circuit_answers_are_not_recorded(tmp_path):
    r = recorder(tmp_path)
    ctx = make_context()
    assert r.record(0, 1, ctx, abstention(FLAT_MASK, "LLM_TIMEOUT", backend="mock"))
    assert r.cache.get(ctx) is None
    before = r.stats.snapshot()
    assert not r.record(0, 2, ctx, abstention(FLAT_MASK, LLM_CIRCUIT_OPEN, backend="mock"))
    assert r.stats.snapshot() == before
    r.close()
