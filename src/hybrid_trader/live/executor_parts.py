"""The executor's plain parts: its summary and the dates of a run's split."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_bars_from_config, make_split

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
