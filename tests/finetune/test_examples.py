"""Labelled prompts: states from the advice dataset's flat rows (or every entry bar), the prompts scoring reads."""

from __future__ import annotations

import numpy as np

from hybrid_trader.env import TradingEnv
from hybrid_trader.finetune.examples import ENTRY_MASK, build_examples
from hybrid_trader.finetune.pipeline import load_run
from hybrid_trader.hindsight.labels import LabelConfig
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.run.advice_dataset import AdviceRows, mask_bits, write_chunk
from tests.finetune.conftest import make_run

IN_POSITION = np.array([True, False, False, True, True, False])


def advice_rows(t: np.ndarray, position: np.ndarray, masks: np.ndarray) -> AdviceRows:
    n = len(t)
    return AdviceRows(
        t=t.astype(np.int64), time=np.array([""] * n, object), session=np.zeros(n, np.int32),
        position=position.astype(np.int8), unrealized_pnl=np.zeros(n, np.float32),
        mask=mask_bits(masks).astype(np.int16),
        obs=np.zeros((n, 4), np.float32), probs=np.zeros((n, 6), np.float32), confidence=np.zeros(n, np.float32),
        abstained=np.zeros(n, bool), abstain_reason=np.array([""] * n, object), context=np.array([""] * n, object),
        rollout=np.zeros(n, np.int8))


def test_examples_take_the_advice_datasets_flat_entry_states_when_the_split_has_advice(tmp_path):
    run_dir = make_run(tmp_path / "run", "gemma-3-270m")
    run = load_run(run_dir)
    env = TradingEnv(run.market.bars, run.market.features, run.config.env, sessions=list(run.market.split.train))
    w = env.episode_windows[0]
    flat = np.array([w.first + 5, w.first + 9])
    late = np.array([w.last])  # after the last entry time: cannot be labelled
    t = np.concatenate([flat, [w.first + 7], late])
    position = np.array([0, 0, 1, 0])
    masks = np.stack([ENTRY_MASK, ENTRY_MASK, IN_POSITION, ENTRY_MASK])
    write_chunk(run_dir, "train", advice_rows(t, position, masks), {"advice": {"hash": "x"}, "layout_hash": "y"})
    ex = build_examples(run.market, run.config, run.llm, "train", purpose="train", run_dir=run_dir,
                        label_config=LabelConfig(horizon=10))
    assert ex.source == "advice dataset"
    assert ex.labels.t.tolist() == flat.tolist()  # the in-position row is not an entry state
    assert (ex.candidates, ex.labelled) == (3, 2)
    builder = PromptBuilder(run.llm)
    assert ex.queries[0].prefix == builder.prefix(run.market.bars.market)
    assert ex.queries[0].suffix.endswith("\nAnswer:") and "FLAT" in ex.queries[0].suffix
    assert [a.strip() for a in ex.answers] == [("HOLD", "BUY", "SELL")[a] for a in ex.labels.label]


def test_examples_cover_every_entry_bar_of_the_split_when_there_is_no_advice(tmp_path):
    run_dir = make_run(tmp_path / "run", "gemma-3-270m")
    run = load_run(run_dir)
    ex = build_examples(run.market, run.config, run.llm, "train", purpose="train", run_dir=run_dir,
                        max_states=50)
    assert ex.source == "every entry bar" and len(ex) == 50 and ex.labelled == ex.candidates > 50
    assert set(run.market.bars.session_id[ex.labels.t].tolist()) <= set(run.market.split.train)
    assert ex.digest() != build_examples(run.market, run.config, run.llm, "train", purpose="train",
                                         max_states=40).digest()
