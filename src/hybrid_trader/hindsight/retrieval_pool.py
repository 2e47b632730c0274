"""The retrieval pool of a run: labelled flat states of its training days only (``llm.prompt.retrieval``).

States: up to ``retrieval.pool_states`` bars of the training split's trading windows that
may decide an entry, evenly spread. Labels: the hindsight labeller of fine-tuning
(:func:`hybrid_trader.hindsight.labels.build_labels` with ``purpose="train"``, which refuses
any bar of a validation or test day), horizon ``retrieval.horizon`` bars clipped at the
session's window end, so no label reads a bar of another day. Contexts are rendered as
the advisor sees a flat account (:func:`~hybrid_trader.llm.context.context_from_market`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hybrid_trader.account_state import AccountState
from hybrid_trader.errors import UserError
from hybrid_trader.hindsight.labels import ENTRY_MASK, LabelConfig, build_labels
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.context import context_from_market
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.llm.retrieval import RetrievalPool, template_features
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import Market


def build_pool(market: Market, run_config: RunConfig, llm_config: LLMConfig, *, source: str = "") -> RetrievalPool:
    """The pool of ``llm_config.prompt.retrieval`` on ``market``'s training days (a UserError when none labels)."""
    r = llm_config.prompt.retrieval
    features = template_features(llm_config.prompt.context_template.strip("\n"), r, source or "llm config")
    sessions = list(market.split.train)
    if not sessions:
        raise UserError("retrieval has no labelled training state to show: the run has no training day",
                        fix="give the run training days (split.train), or set llm.prompt.retrieval.k: 0")
    labels, _ = build_labels(market, run_config.env, "train", config=LabelConfig(horizon=r.horizon),
                             purpose="train")
    if len(labels) == 0:
        raise UserError("retrieval has no labelled training state to show: no training bar can decide an entry",
                        fix="check env.trade_start and env.last_entry, or set llm.prompt.retrieval.k: 0")
    pick = np.unique(np.linspace(0, len(labels) - 1, min(r.pool_states, len(labels))).round().astype(np.int64))
    t = labels.t[pick]
    account = AccountState(balance=50_000.0)
    contexts = [context_from_market(market.bars, market.features, int(ti), account, ENTRY_MASK) for ti in t.tolist()]
    session = labels.session[pick]
    dates = [str(market.bars.session_dates[int(s)]) for s in session.tolist()]
    return RetrievalPool(contexts=contexts, label=labels.label[pick], t=t, session=session, dates=dates,
                         features=features, source=f"training days {dates[0]} to {dates[-1]}, horizon {r.horizon}")


def attach_run_pool(builder: PromptBuilder, market: Market, run_config: RunConfig, source: str | Path = "") -> None:
    """Give ``builder`` the run's pool when its prompt retrieves examples (nothing otherwise)."""
    if builder.config.prompt.retrieval.enabled:
        builder.attach_retrieval(build_pool(market, run_config, builder.config, source=str(source)))
