"""Collecting advice: every visited state once, resumable, nothing lost on interruption, identity checked."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from hybrid_trader.advise.collect import CollectRequest, LocalAsker, collect_llm_config, collect_split, rollout_states
from hybrid_trader.errors import UserError
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.run.advice_dataset import part_files, read_split
from hybrid_trader.run.advice_identity import advice_identity


def collect(run_dir, run_parts, config, **kw):
    cfg, market, policy = run_parts
    kw.setdefault("progress", False)
    split = kw.pop("split", "train")
    return collect_split(run_dir, split, config, CollectRequest(market=market, run_config=cfg, policy=policy,
                                                               say=lambda s: None, **kw))


class CountingAsker(LocalAsker):
    """The mock advisor in this process; records every context asked; raises Ctrl-C after ``stop_after`` batches."""

    def __init__(self, config, stop_after=None):
        super().__init__(config)
        self.asked = []
        self.stop_after = stop_after

    def ask(self, batches):
        for i, answers in super().ask(batches):
            if self.stop_after is not None and i >= self.stop_after:
                raise KeyboardInterrupt
            self.asked += [(c.timestamp, c.position, tuple(c.legal)) for c in batches[i]]
            yield i, answers


def test_collect_stores_each_visited_state_once_when_run_with_the_mock(run_dir, run_parts, mock_config):
    r = collect(run_dir, run_parts, mock_config)
    rows, meta = read_split(run_dir, "train")
    assert r.asked == r.visited == len(rows) > 100
    assert len(rows.keys()) == len(rows)  # the key (t, position, mask) is unique
    assert rows.obs.shape == (len(rows), 228) and rows.obs.dtype == np.float32
    masks = rows.masks()
    assert (masks.sum(axis=1) >= 2).all()  # single-legal states are not asked
    assert np.allclose(rows.probs.sum(axis=1), 1.0, atol=1e-5) and (rows.probs[~masks] == 0).all()
    assert meta["advice"] == advice_identity(mock_config) and meta["obs_dim"] == 228
    assert set(np.unique(rows.rollout)) <= {0, 1} and (rows.rollout == 0).any()
    # the stored observation is the raw one the environment gave at that bar (position features included)
    assert np.array_equal(np.sign(rows.obs[:, 220]).astype(int), rows.position.astype(int))
    assert rows.context[0].startswith(PromptBuilder(mock_config).template.split("{")[0][:5])


def test_rerun_asks_nothing_when_every_state_is_stored(run_dir, run_parts, mock_config):
    collect(run_dir, run_parts, mock_config)
    files = part_files(run_dir, "train")
    asker = CountingAsker(mock_config)
    r = collect(run_dir, run_parts, mock_config, asker=asker)
    assert r.visited == 0 and r.stored_before == len(read_split(run_dir, "train")[0])
    assert r.asked == 0 and asker.asked == [] and part_files(run_dir, "train") == files


def test_interrupted_collection_loses_nothing_when_ctrl_c_arrives_mid_way(run_dir, run_parts, mock_config, tmp_path):
    first = CountingAsker(mock_config, stop_after=5)
    with pytest.raises(KeyboardInterrupt):
        collect(run_dir, run_parts, mock_config, asker=first, chunk=1000)  # nothing flushed before the interruption
    kept, _ = read_split(run_dir, "train")
    assert len(kept) == len(first.asked) == 5 * 16  # every answered batch was written on the way out
    second = CountingAsker(mock_config)
    collect(run_dir, run_parts, mock_config, asker=second, chunk=64)
    assert not set(first.asked) & set(second.asked)  # no state asked twice
    final, _ = read_split(run_dir, "train")
    ref_dir = tmp_path / "ref"
    shutil.copytree(run_dir, ref_dir)
    shutil.rmtree(ref_dir / "advice")
    collect(ref_dir, run_parts, mock_config)
    ref, _ = read_split(ref_dir, "train")
    assert final.keys() == ref.keys() and len(final) == len(ref)  # complete, no duplicates
    a, b = np.argsort(final.t * 64 + final.mask), np.argsort(ref.t * 64 + ref.mask)
    assert np.array_equal(final.probs[a], ref.probs[b])


def test_collect_refuses_when_the_dataset_was_built_with_another_prompt(run_dir, run_parts, mock_config):
    collect(run_dir, run_parts, mock_config, max_states=40, sampled=0)
    other = collect_llm_config(run_parts[0], backend="mock", batch=16)
    other.prompt.context_template = "RSI {rsi:.0f}, trend {trend}, position {position_status}"
    with pytest.raises(UserError) as err:
        collect(run_dir, run_parts, other, max_states=80, sampled=0)
    text = str(err.value)
    assert advice_identity(mock_config)["hash"] in text and advice_identity(other)["hash"] in text
    assert "template" in text and "prompt" not in text.split("(")[1].split(";")[0]


def test_collect_stops_when_max_states_are_stored(run_dir, run_parts, mock_config):
    collect(run_dir, run_parts, mock_config, max_states=50, sampled=0)
    collect(run_dir, run_parts, mock_config, max_states=70, sampled=0)
    rows, _ = read_split(run_dir, "train")
    assert len(rows) == 70


def test_max_states_spreads_over_the_whole_split_when_it_cuts(run_dir, run_parts, mock_config):
    full = collect(run_dir, run_parts, mock_config, sampled=0).visited
    shutil.rmtree(run_dir / "advice")
    collect(run_dir, run_parts, mock_config, max_states=full // 4, sampled=0)
    rows, _ = read_split(run_dir, "train")
    assert len(rows) == full // 4
    assert len(np.unique(rows.session)) == len(np.unique(read_all_sessions(run_dir, run_parts, mock_config)))


def read_all_sessions(run_dir, run_parts, config):
    shutil.rmtree(run_dir / "advice")
    collect(run_dir, run_parts, config, sampled=0)
    return read_split(run_dir, "train")[0].session


def test_collect_removes_a_half_written_chunk_when_it_finds_one(run_dir, run_parts, mock_config):
    collect(run_dir, run_parts, mock_config, max_states=32, sampled=0)
    tmp = run_dir / "advice" / "train" / ".part-000002.parquet.tmp"
    tmp.write_bytes(b"PAR1 half a chunk")
    collect(run_dir, run_parts, mock_config, max_states=64, sampled=0)
    assert not tmp.exists()
    assert len(read_split(run_dir, "train")[0]) == 64


def test_rollout_walks_every_day_when_the_account_breaches_on_the_first(run_parts):
    cfg, market, policy = run_parts
    # a $1 trailing drawdown: the first losing trade breaches the account
    fragile = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, rules_overrides={"trailing_drawdown": 1.0}))
    visited = rollout_states(market, fragile, policy, "train", sampled=1, seed=0)
    assert set(visited.session) == set(market.sessions("train"))  # one account would leave later days HOLD-only


def test_adapter_makes_another_model_when_collecting_with_a_finetuned_llm(run_parts, tmp_path):
    cfg = run_parts[0]
    (tmp_path / "llm_adapter").mkdir()
    tuned = collect_llm_config(cfg, backend="transformers", adapter=str(tmp_path / "llm_adapter"))
    assert tuned.transformers.adapter == str((tmp_path / "llm_adapter").resolve())
    base = collect_llm_config(cfg, backend="transformers")
    assert advice_identity(tuned)["model"] != advice_identity(base)["model"]  # a dataset of one refuses the other
    with pytest.raises(UserError, match="transformers"):
        collect_llm_config(cfg, backend="mock", adapter=str(tmp_path / "llm_adapter"))
    with pytest.raises(UserError, match="not found"):
        collect_llm_config(cfg, backend="transformers", adapter=str(tmp_path / "missing"))


def test_rollout_walks_the_usable_days_when_a_session_of_the_split_is_too_short_to_trade(run_parts, monkeypatch):
    from hybrid_trader.env import TradingEnv

    cfg, market, policy = run_parts
    build = TradingEnv._build_windows

    def without_first(self, sessions):  # the split's first session too short to trade (a holiday)
        return build(self, sessions)[1:]

    monkeypatch.setattr(TradingEnv, "_build_windows", without_first)
    visited = rollout_states(market, cfg, policy, "train", sampled=0, seed=0)
    train = list(market.sessions("train"))
    assert set(visited.session) == set(train[1:])


def test_collect_retrieves_examples_from_the_training_days_when_the_prompt_retrieves(run_dir, run_parts, mock_config):
    from hybrid_trader.config import merge_overrides

    retrieving = merge_overrides(mock_config, {"prompt.retrieval.k": 2, "prompt.retrieval.pool_states": 200},
                                 source="test")
    asked = []

    class Recording(LocalAsker):
        def ask(self, batches):
            asked.append(self.advisor.prompts.retrieval)
            yield from super().ask(batches)

    cfg, market, _ = run_parts
    from hybrid_trader.hindsight.retrieval_pool import build_pool

    r = collect(run_dir, run_parts, retrieving, max_states=40,
                asker=Recording(retrieving, build_pool(market, cfg, retrieving)))
    assert r.asked > 0 and asked and asked[0] is not None, "the advisor's prompts read the run's pool"
    _, meta = read_split(run_dir, "train")
    assert meta["advice"]["retrieval"] and meta["advice"] != advice_identity(mock_config)
    assert meta["advice"] == advice_identity(retrieving, retrieval=asked[0].identity())
    other = merge_overrides(retrieving, {"prompt.retrieval.k": 3}, source="test")
    with pytest.raises(UserError, match="retrieval"):  # the dataset was built with other retrieval settings
        collect(run_dir, run_parts, other, max_states=80)


def test_collect_builds_the_run_pool_itself_when_no_asker_is_given(run_dir, run_parts, mock_config):
    from hybrid_trader.config import merge_overrides

    retrieving = merge_overrides(mock_config, {"prompt.retrieval.k": 2, "prompt.retrieval.pool_states": 200},
                                 source="test")
    r = collect(run_dir, run_parts, retrieving, max_states=30)
    _, meta = read_split(run_dir, "train")
    assert r.asked > 0 and meta["advice"]["retrieval"]
