"""The executor's plain parts: its summary, the bar arrays it grows, and the dates of a run's split."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.features.feature_set import N_BAR, N_MARKET, make_windows
from hybrid_trader.features.names import WINDOW
from hybrid_trader.live.feeds import Bar
from hybrid_trader.run import RunDir
from hybrid_trader.training.config import RunConfig
from hybrid_trader.training.market import load_bars_from_config, make_split


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
    interrupted: bool = False
    halted: str = ""
    """``--broker ninjatrader``: the reason code that halted new entries (e.g. ``broker:rejected``); "" if none."""
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


KEPT_ROWS = 2 * WINDOW
"""Feature rows a snapshot keeps (the newest observation's window needs ``WINDOW``)."""


class LiveArrays:
    """The bars and features seen so far, in arrays the observation builder indexes by bar."""

    def __init__(self, capacity: int = 1 << 14) -> None:
        self.open: list[float] = []
        self.high: list[float] = []
        self.low: list[float] = []
        self.close: list[float] = []
        self.atr: list[float] = []
        self.time_ns: list[int] = []
        self.bar = np.zeros((capacity, N_BAR), dtype=np.float32)
        self.market = np.zeros((capacity, N_MARKET), dtype=np.float32)
        self.windows = make_windows(self.bar)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for ``live.snapshot`` with the feature rows of the last :data:`KEPT_ROWS` bars only: the observation
        reads the newest bar's window, never an older row (restored as zeros), and the windows view is rebuilt."""
        n = len(self.close)
        k = max(0, n - KEPT_ROWS)
        return {**self.__dict__, "bar": self.bar[k:n].copy(), "market": self.market[k:n].copy(), "windows": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        n = len(self.close)
        for name in ("bar", "market"):
            tail = state[name]
            rows = np.zeros((n, tail.shape[1]), dtype=tail.dtype)
            rows[n - len(tail):] = tail
            setattr(self, name, rows)
        self.windows = make_windows(self.bar)

    def push(self, bar: Bar, row_bar: np.ndarray, row_market: np.ndarray, atr: float) -> bool:
        """Append one bar; True when the feature buffers were reallocated (rebind the observer)."""
        t = len(self.close)
        grown = False
        if t >= len(self.bar):
            self.bar = np.concatenate([self.bar, np.zeros_like(self.bar)])
            self.market = np.concatenate([self.market, np.zeros_like(self.market)])
            self.windows = make_windows(self.bar)
            grown = True
        self.bar[t] = row_bar
        self.market[t] = row_market
        self.open.append(bar.open)
        self.high.append(bar.high)
        self.low.append(bar.low)
        self.close.append(bar.close)
        self.atr.append(atr)
        self.time_ns.append(int(bar.time_ns or 0))
        return grown


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
