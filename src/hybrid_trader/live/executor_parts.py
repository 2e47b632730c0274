"""The executor's plain parts: its options, its summary and the dates of a run's split."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_bars_from_config, make_split


@dataclass(frozen=True)
class ExecutorOptions:
    """How :class:`~hybrid_trader.live.executor.Executor` trades its run on a feed (``hybrid-trader run``'s options;
    the defaults: a replay of every day, the paper broker)."""

    trade_dates: Iterable[Any] | None = None
    """The trading dates to trade (None: every day); the other bars only warm the features up."""
    market: str | None = None
    """The feed's market (the run's ``env.market`` wins; without either, the market the run trained on:
    ``run.config.run_market``)."""
    bar_minutes: int = 1
    """The feed's bar size [min]."""
    run_tag: str | None = None
    """What names the orders (None: the run folder's name)."""
    llm: str = "async"
    """A phase 3 run's LLM (not its student): asked asynchronously (``async``) or not at all (``off``)."""
    llm_budget_ms: float = 0.0
    """How long a decision waits at most for its own bar's answer of an asynchronous LLM [ms]."""
    llm_overrides: dict | None = None
    """``llm.*`` keys over the run's."""
    calibrate: bool = True
    """False (``--no-calibrate``): a leaning model's raw answers, journaled as such with every decision's advice."""
    mismatch_bars: int = 2
    """With NinjaTrader: how many bars its position may differ from the paper one (``live.broker_link``)."""
    live_from: Any = None
    """The live point (a tz-aware time or ns): bars ending at or before it are history (None: every bar is live, a
    replay's default)."""
    max_bar_age_s: float | None = None
    """A followed feed's wall-clock rules: late and future bars (None: off)."""


COUNTS = ("bars", "rejected", "decisions", "history_bars", "late_bars")
"""The summary's counts a snapshot keeps (the others are the end's, or the restart's)."""


@dataclass
class ExecutorSummary:
    """What a run of the executor did (the CLI's ``--json`` line)."""

    bars: int = 0
    rejected: int = 0
    decisions: int = 0
    trades: int = 0
    net_pnl: float = 0.0
    balance: float = 0.0
    account_status: str = ""
    recovered_bars: int = 0
    """Bars replayed from the journal's history at start (a restart), nothing sent again."""
    history_bars: int = 0
    """Accepted bars before the live point (``--live-from``): they warmed the features and were never traded."""
    late_bars: int = 0
    """Accepted bars older than ``--max-bar-age`` when they arrived: no decision, no entry on them."""
    interrupted: bool = False
    halted: str = ""
    """``--broker ninjatrader``: the reason code that halted new entries (e.g. ``broker:rejected``); "" if none."""
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def counts(self) -> dict[str, int]:
        """The counts a snapshot keeps (:data:`COUNTS`)."""
        return {k: getattr(self, k) for k in COUNTS}

    def restore_counts(self, counts: dict[str, int]) -> None:
        """Continue from a snapshot's :meth:`counts`: its bars are the restart's recovered bars."""
        for k in COUNTS:
            setattr(self, k, counts[k])
        self.recovered_bars = self.bars


def quiet(*_: Any) -> None:
    """The executor's ``say`` when none is given: nothing said."""


def utc(tns: int) -> pd.Timestamp:
    return pd.Timestamp(tns, tz="UTC")


def run_bar_minutes(run_dir: str | Path) -> int:
    """The bar size [min] of the data the run was trained on (a followed feed must have the same)."""
    config = RunDir(run_dir).require().load_config(RunConfig)
    return int(load_bars_from_config(config.data).bar_minutes)


def split_dates(run_dir: str | Path, split: str) -> list[np.datetime64] | None:
    """The trading dates of the run's ``split`` (``all``: None, every day): the sessions ``load_market`` and
    ``evaluate`` give it, from the bars alone (the features, ~0.4 s of a restart, are not needed for them)."""
    if split == "all":
        return None
    run = RunDir(run_dir).require()
    config = run.load_config(RunConfig)
    bars = load_bars_from_config(config.data)
    sessions = make_split(bars.n_sessions, config.split, bars.session_dates).part(split)
    return [bars.session_dates[s] for s in sessions]
