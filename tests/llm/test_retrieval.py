"""Retrieved few-shot examples: nearest training states, rendered after the cached system text, in the identity."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm.cache import AdviceCache
from hybrid_trader.llm.config import CacheConfig, load_llm_config
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.llm.retrieval import RetrievalPool, Retriever, kmeans, labels_of
from hybrid_trader.run.advice_identity import advice_identity
from tests.llm import LONG_MASK, make_context

FEATURES = ("trend_score", "adx", "rsi", "momentum", "session_minutes")
"""What the labels prompt shows (trend, RSI, momentum, time)."""


def config(**retrieval):
    return load_llm_config(overrides={"prompt": {"retrieval": {"k": 2, **retrieval}}})


def pool(n: int = 12) -> RetrievalPool:
    """States a day apart (2024-01-04 on), RSI 20, 25, ..., labels cycling HOLD, BUY, SELL."""
    contexts = [make_context(rsi=20.0 + 5 * i, momentum=float(i), timestamp=make_context().timestamp
                             + timedelta(days=1 + i)) for i in range(n)]
    return RetrievalPool(contexts=contexts, label=np.arange(n) % 3, t=np.arange(n) * 10, session=np.arange(n),
                         dates=[c.timestamp.strftime("%Y-%m-%d") for c in contexts], features=FEATURES)


def builder(**retrieval) -> PromptBuilder:
    b = PromptBuilder(config(**retrieval))
    b.attach_retrieval(pool())
    return b


def test_nearest_when_asked_returns_the_closest_states_with_the_nearest_last():
    p = pool()
    idx = p.nearest(make_context(rsi=41.0, momentum=4.0), 3)  # between pool states 4 (RSI 40) and 5 (RSI 45)
    assert idx.tolist() == [3, 5, 4]
    assert labels_of(p, idx)[-1] == (p.dates[4], "BUY")


def test_nearest_when_the_query_is_on_a_pool_day_skips_that_day():
    p = pool()
    own = p.contexts[4]
    assert 4 not in p.nearest(own, 3).tolist()
    assert 4 in p.nearest(make_context(rsi=own.rsi, momentum=own.momentum), 3).tolist()  # another day: allowed


def test_pool_when_empty_is_a_clear_error():
    with pytest.raises(UserError, match="no labelled training state"):
        RetrievalPool(contexts=[], label=np.zeros(0), t=np.zeros(0), session=np.zeros(0), dates=[],
                      features=FEATURES)


def test_query_when_exact_shows_the_neighbours_after_the_cached_system_text():
    b = builder()
    ctx = make_context(rsi=41.0, momentum=4.0)
    q = b.query(ctx)
    assert q.prefix == b.prefix("NQ", -1) and "Answer: SELL |" not in q.prefix  # system text only, cached
    examples = q.suffix.split("\n\n")
    assert len(examples) == 3 and examples[-1] == b.suffix(ctx)
    assert examples[0].endswith("Answer: SELL") and "RSI 45" in examples[0]  # state 5, labelled 5 % 3 = SELL
    assert examples[1].endswith("Answer: BUY") and "RSI 40" in examples[1]  # the nearest last


def test_query_when_in_a_position_keeps_the_fixed_examples():
    b = builder()
    ctx = make_context(position=1, position_status="LONG 1", legal=LONG_MASK)
    assert b.query(ctx).prefix == b.prefix("NQ") and b.examples_key(ctx) == ""


def test_query_when_clusters_reads_its_groups_cached_prefix():
    b = builder(mode="clusters", clusters=3)
    low, also_low, high = make_context(rsi=21.0), make_context(rsi=23.0), make_context(rsi=78.0)
    assert b.query(low).prefix == b.query(also_low).prefix != b.query(high).prefix
    assert b.query(low).suffix == b.suffix(low)
    assert b.query(low).prefix.count("Answer:") == 2 + 1  # the system text's format line, then k = 2 examples


def test_query_when_retrieval_is_on_without_a_pool_is_a_clear_error():
    b = PromptBuilder(config())
    with pytest.raises(UserError, match="no pool of labelled training states"):
        b.query(make_context())


def test_builder_when_the_template_leaves_out_a_retrieval_feature_names_it_at_start():
    cfg = load_llm_config(overrides={"prompt": {"retrieval": {"k": 2, "features": ["rsi", "ret_20"]}}})
    with pytest.raises(UserError, match="'ret_20'") as err:
        PromptBuilder(cfg)
    assert "{ret_20}" in str(err.value) and "context_template" in str(err.value)


def test_pool_when_built_for_other_features_is_refused():
    b = PromptBuilder(config(features=["rsi"]))
    with pytest.raises(UserError, match="compares"):
        b.attach_retrieval(pool())


def test_cache_key_when_the_retrieved_examples_differ_differs():
    b = builder()
    cache = AdviceCache(CacheConfig(), examples_of=b.examples_key)
    a, same_bucket = make_context(rsi=41.0, momentum=4.0), make_context(rsi=42.0, momentum=4.0)
    assert AdviceCache(CacheConfig()).key(a) == AdviceCache(CacheConfig()).key(same_bucket)  # one RSI/5 bucket
    moved = make_context(rsi=41.0, momentum=11.0)  # same rounded RSI, other neighbours
    assert b.examples_key(moved) != b.examples_key(a)
    assert cache.key(a) != cache.key(moved)


def test_advice_identity_when_retrieval_settings_or_pool_change_differs():
    off = load_llm_config()
    assert "retrieval" not in advice_identity(off)  # prompts without retrieval keep their identity
    b = builder()
    r = b.retrieval
    assert isinstance(r, Retriever)
    ident = advice_identity(b.config, retrieval=r.identity())
    assert ident["hash"] != advice_identity(off)["hash"]
    other_k = builder(k=3)
    assert advice_identity(other_k.config, retrieval=other_k.retrieval.identity())["hash"] != ident["hash"]
    smaller = PromptBuilder(config())
    smaller.attach_retrieval(pool(9))  # another training pool
    assert advice_identity(smaller.config, retrieval=smaller.retrieval.identity())["retrieval"] != ident["retrieval"]


def test_kmeans_when_groups_are_apart_finds_them():
    rows = np.concatenate([np.zeros((5, 2)), np.full((5, 2), 10.0)])
    centres = kmeans(rows, 2)
    assert sorted(centres[:, 0].round(6).tolist()) == [0.0, 10.0]


def test_build_advisor_when_retrieval_is_on_without_a_pool_is_refused_at_start():
    from hybrid_trader.llm import build_advisor
    from tests.llm import mock_config

    cfg = mock_config(prompt={"retrieval": {"k": 2}})
    with pytest.raises(UserError, match="no pool of labelled training states"):
        build_advisor(cfg)
    with build_advisor(cfg, retrieval_pool=pool()) as advisor:
        ctx = make_context(rsi=41.0, momentum=4.0)
        [advice] = advisor.advise_now([ctx])
        assert not advice.abstained
        assert advisor.prompts.query(ctx).suffix.count("Answer:") == 3  # two retrieved examples, then the query
