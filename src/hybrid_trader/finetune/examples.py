"""(prompt -> " ACTION") pairs for fine-tuning and evaluating the LLM on hindsight labels.

The states are the advice dataset's flat rows where an entry is legal
(``RUN_DIR/advice/<split>``, issue 14), or, when the split has no advice, every bar of
the split's trading windows that may decide an entry. Each state's prompt is rendered
afresh by the run's :class:`~hybrid_trader.llm.prompt.PromptBuilder` from the bars
(``context_from_market``, a flat account): the exact text scoring mode reads, so a
fine-tuned model is trained on the prompts it will be asked. The answer is the
label's action name after the answer prefix (``"Answer:" + " BUY"``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hybrid_trader.account_state import AccountState
from hybrid_trader.actions import Action
from hybrid_trader.errors import UserError
from hybrid_trader.hindsight.labels import ENTRY_MASK, LabelConfig, OutcomeLabels, Purpose, build_labels
from hybrid_trader.hindsight.retrieval_pool import attach_run_pool
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.context import context_from_market
from hybrid_trader.llm.prompt import PromptBuilder, RenderedQuery
from hybrid_trader.run.advice_dataset import masks_from_bits, read_split
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import Market


@dataclass
class ExampleSet:
    """Labelled prompts of one split."""

    part: str
    """train, val or test."""
    queries: list[RenderedQuery]
    """One rendered prompt per state (prefix + suffix)."""
    labels: OutcomeLabels
    """Hindsight outcomes of the same states, in the same order."""
    source: str
    """Where the states come from: 'advice dataset' or 'every entry bar'."""
    candidates: int
    """States considered before labelling."""
    labelled: int
    """States that could be labelled, before any subsampling (label coverage = labelled / candidates)."""

    def __len__(self) -> int:
        return len(self.queries)

    @property
    def answers(self) -> list[str]:
        """The target answer of each prompt: a space and the label's action name."""
        return [" " + ACTION_WORDS[int(a)] for a in self.labels.label]

    def digest(self) -> str:
        """sha256 of the prompts and labels (names the data an adapter was trained on)."""
        h = hashlib.sha256()
        ident = {"part": self.part, "t": self.labels.t.tolist(), "label": self.labels.label.tolist()}
        h.update(json.dumps(ident).encode())
        for q in self.queries:
            h.update(q.prefix.encode())
            h.update(q.suffix.encode())
        return h.hexdigest()[:16]


def advice_states(run_dir: Path | None, part: str) -> np.ndarray | None:
    """Decision bars of the advice dataset's flat rows where BUY or SELL is legal (None: no advice for ``part``)."""
    if run_dir is None:
        return None
    rows, _ = read_split(Path(run_dir), part, required=False)
    if rows is None:
        return None
    masks = masks_from_bits(rows.mask)
    keep = (rows.position == 0) & (masks[:, Action.BUY] | masks[:, Action.SELL])
    return np.unique(rows.t[keep]).astype(np.int64)


def build_examples(market: Market, run_config: RunConfig, llm_config: LLMConfig, part: str, *,
                   purpose: Purpose, run_dir: Path | None = None, label_config: LabelConfig | None = None,
                   max_states: int | None = None) -> ExampleSet:
    """Labelled prompts of ``part``; ``max_states`` keeps that many, evenly spread over the split's days."""
    if llm_config.prompt.chat_template:
        raise UserError("fine-tuning renders raw prompts; llm.prompt.chat_template is true",
                        fix="set llm.prompt.chat_template: false (base models such as Gemma 3 270M)")
    states = advice_states(run_dir, part)
    source = "advice dataset" if states is not None else "every entry bar"
    labels, ok = build_labels(market, run_config.env, part, t=states, config=label_config, purpose=purpose)
    candidates, labelled = len(ok), len(labels)
    if len(labels) == 0:
        raise UserError(f"no state of the {part} split can be labelled ({candidates} candidates from the {source})",
                        fix="check env.trade_start/last_entry, or collect advice on more states")
    if max_states is not None and len(labels) > max_states:
        pick = np.unique(np.linspace(0, len(labels) - 1, max_states).round().astype(np.int64))
        labels = OutcomeLabels(t=labels.t[pick], session=labels.session[pick], pnl=labels.pnl[pick],
                               exit_index=labels.exit_index[pick], label=labels.label[pick])
    builder = PromptBuilder(llm_config, source="the run's llm config")
    attach_run_pool(builder, market, run_config)  # a retrieving prompt reads the training days' pool
    account = AccountState(balance=50_000.0)
    queries = [builder.query(context_from_market(market.bars, market.features, int(t), account, ENTRY_MASK))
               for t in labels.t.tolist()]
    return ExampleSet(part=part, queries=queries, labels=labels, source=source, candidates=candidates,
                      labelled=labelled)
