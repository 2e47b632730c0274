"""The retrieval pool: labelled states of training days only; later days' bars change nothing it shows."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.account_state import AccountState
from hybrid_trader.config import merge_overrides
from hybrid_trader.data.bars import Bars
from hybrid_trader.errors import UserError
from hybrid_trader.finetune.examples import ENTRY_MASK
from hybrid_trader.finetune.pipeline import load_run
from hybrid_trader.hindsight.retrieval_pool import attach_run_pool, build_pool
from hybrid_trader.llm.context import context_from_market
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.llm.retrieval import labels_of
from hybrid_trader.run.market import Market, load_market
from hybrid_trader.run.splits import Split
from tests.finetune.conftest import make_run


@pytest.fixture
def run(tmp_path):
    return load_run(make_run(tmp_path / "run", "gemma-3-270m"))


def retrieval(llm, **settings):
    return merge_overrides(llm, {f"prompt.retrieval.{k}": v for k, v in {"k": 4, **settings}.items()}, source="test")


def crashed_later_days(run):
    """The run's market with every validation and test bar crashed (prices down to -20%, volume up)."""
    market = run.market
    first_val = int(np.flatnonzero(market.bars.session_id == min(market.split.part("val")))[0])
    frame = market.bars.frame.copy()
    scale = np.where(np.arange(len(frame)) >= first_val, 1.0, 0.0) * np.linspace(0, 0.2, len(frame))
    for col in ("open", "high", "low", "close"):
        frame[col] = frame[col] * (1.0 - scale)
    frame["volume"] = frame["volume"] * (1.0 + 5 * scale)
    bars = Bars(frame, market=market.bars.market, bar_minutes=market.bars.bar_minutes, source="perturbed")
    return load_market(run.config.data, run.config.split, bars=bars)


def contexts_of(market, t):
    account = AccountState(balance=50_000.0)
    return [context_from_market(market.bars, market.features, int(ti), account, ENTRY_MASK) for ti in t]


def test_pool_when_built_holds_only_training_days_and_labels_that_end_on_them(run):
    pool = build_pool(run.market, run.config, retrieval(run.llm, pool_states=300))
    train = set(run.market.split.train)
    assert 0 < len(pool) <= 300 and set(pool.session.tolist()) <= train
    assert set(run.market.bars.session_id[pool.t].tolist()) <= train
    train_dates = {str(run.market.bars.session_dates[s]) for s in train}
    assert set(pool.dates) <= train_dates
    assert set(pool.label.tolist()) <= {0, 1, 2} and len(set(pool.label.tolist())) > 1


def test_retrieved_examples_when_val_and_test_bars_change_are_unchanged(run):
    cfg = retrieval(run.llm, pool_states=400)
    perturbed = crashed_later_days(run)
    assert not np.allclose(perturbed.bars.close, run.market.bars.close)
    a, b = build_pool(run.market, run.config, cfg), build_pool(perturbed, run.config, cfg)
    assert a.t.tolist() == b.t.tolist() and a.label.tolist() == b.label.tolist() and a.digest() == b.digest()
    np.testing.assert_allclose(a.matrix, b.matrix)
    # the same states asked of both pools (every split's days: the query is the same, the pool must be too)
    sessions = np.asarray(run.market.bars.session_id)
    t = np.concatenate([np.flatnonzero(sessions == s)[40:200:20] for s in range(run.market.bars.n_sessions)])
    train_dates = {str(run.market.bars.session_dates[s]) for s in run.market.split.train}
    for ctx in contexts_of(run.market, t):
        ia, ib = a.nearest(ctx, 4), b.nearest(ctx, 4)
        assert labels_of(a, ia) == labels_of(b, ib)
        assert {d for d, _ in labels_of(a, ia)} <= train_dates  # no example of a val or test day
    builder_a, builder_b = PromptBuilder(cfg), PromptBuilder(cfg)
    builder_a.attach_retrieval(a)
    builder_b.attach_retrieval(b)
    ctx = contexts_of(run.market, t[-1:])[0]
    assert builder_a.query(ctx).text == builder_b.query(ctx).text


def test_pool_when_the_run_has_no_training_day_is_a_clear_error(run):
    split = run.market.split
    market = Market(run.market.bars, run.market.features, Split(train=range(0, 0), val=split.val, test=split.test))
    with pytest.raises(UserError, match="no labelled training state"):
        build_pool(market, run.config, retrieval(run.llm))


def test_attach_when_retrieval_is_off_leaves_the_fixed_examples(run):
    builder = PromptBuilder(run.llm)
    attach_run_pool(builder, run.market, run.config)
    assert builder.retrieval is None
    ctx = contexts_of(run.market, [int(np.flatnonzero(run.market.bars.session_id == 0)[60])])[0]
    assert builder.query(ctx).prefix == builder.prefix(ctx.market)
