"""Answer cache: rounded-context key, time to live in market minutes, confidence decay per reuse."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.llm.advice import LLM_TIMEOUT, abstention, advice_from_mass
from hybrid_trader.llm.cache import AdviceCache
from hybrid_trader.llm.config import CacheConfig
from tests.llm import FLAT_MASK, LONG_MASK, make_context


def advice(conf_mass=0.8):
    return advice_from_mass(np.array([0.1, conf_mass, 0.1, 0, 0, 0]), FLAT_MASK, min_coverage=0.0, backend="t")


def test_nearby_context_when_within_ttl_hits_with_decayed_confidence():
    cache = AdviceCache(CacheConfig(ttl_minutes=5, decay=0.2))
    a = advice()
    cache.put(make_context(rsi=61.0), a)
    hit1 = cache.get(make_context(rsi=62.0, minutes=2, price=16852.0))  # same RSI bucket, other price and time
    hit2 = cache.get(make_context(rsi=61.0, minutes=4))
    assert hit1 is not None and hit2 is not None
    assert hit1.confidence == pytest.approx(a.confidence * 0.8)
    assert hit2.confidence == pytest.approx(a.confidence * 0.64)
    assert hit1.from_cache and cache.hits == 2


def test_entry_when_older_than_ttl_in_market_minutes_misses():
    cache = AdviceCache(CacheConfig(ttl_minutes=5))
    cache.put(make_context(), advice())
    assert cache.get(make_context(minutes=6)) is None
    assert len(cache) == 0  # expired entries are dropped


def test_entry_when_looked_up_from_an_earlier_bar_misses():
    cache = AdviceCache(CacheConfig(ttl_minutes=5))
    cache.put(make_context(minutes=10), advice())
    assert cache.get(make_context(minutes=8)) is None  # never serve an answer computed for a later bar


@pytest.mark.parametrize("change", [dict(rsi=75.0), dict(position=1, position_status="LONG 1"),
                                    dict(legal=LONG_MASK), dict(trend_score=-1), dict(market="ES"),
                                    dict(consecutive_losses=3)])
def test_different_context_when_looked_up_misses(change):
    cache = AdviceCache(CacheConfig())
    cache.put(make_context(), advice())
    assert cache.get(make_context(**change)) is None


def test_abstention_when_stored_is_not_cached():
    cache = AdviceCache(CacheConfig())
    cache.put(make_context(), abstention(FLAT_MASK, LLM_TIMEOUT))
    assert cache.get(make_context()) is None


def test_cache_when_full_drops_least_recently_used():
    cache = AdviceCache(CacheConfig(max_entries=2))
    for rsi in (20.0, 40.0, 60.0):
        cache.put(make_context(rsi=rsi), advice())
    assert len(cache) == 2 and cache.get(make_context(rsi=20.0)) is None


def test_disabled_cache_when_used_never_hits():
    cache = AdviceCache(CacheConfig(enabled=False))
    cache.put(make_context(), advice())
    assert cache.get(make_context()) is None
