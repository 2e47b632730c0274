"""The executor's plain parts: its summary, the bar arrays it grows, and the dates of a run's split."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.features.feature_set import N_BAR, N_MARKET, make_windows
from hybrid_trader.features.names import WINDOW
from hybrid_trader.live.feeds import Bar
from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_bars_from_config, make_split


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


KEPT_ROWS = 2 * WINDOW
"""Bars a snapshot keeps (the newest observation's window needs ``WINDOW``)."""
_SERIES = ("open", "high", "low", "close", "atr", "time_ns")


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
        self.missing = 0
        """Leading bars whose prices a restored snapshot left to :meth:`fill`."""

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for ``live.snapshot`` with the last :data:`KEPT_ROWS` bars only: the core and the observation read
        the newest bars, never older ones; :meth:`fill` takes the older prices and times back from the journal
        (the older feature rows and ATRs come back as zeros and NaN), and the windows view is rebuilt."""
        n = len(self.close)
        k = max(0, n - KEPT_ROWS)
        state = {name: getattr(self, name)[k:n] for name in _SERIES}
        return {**state, "bar": self.bar[k:n].copy(), "market": self.market[k:n].copy(), "n": n, "start": k}

    def __setstate__(self, state: dict[str, Any]) -> None:
        n, k = state["n"], state["start"]
        for name in _SERIES:
            setattr(self, name, [0 if name == "time_ns" else math.nan] * k + list(state[name]))
        for name in ("bar", "market"):
            rows = np.zeros((n, state[name].shape[1]), dtype=np.float32)
            rows[k:] = state[name]
            setattr(self, name, rows)
        self.missing = k
        self.windows = make_windows(self.bar)

    def fill(self, prices: dict[str, np.ndarray]) -> None:
        """Put back the prices and times a snapshot left out (``prices``: every bar's, as ``Journal.bar_history``
        gives them); a ValueError if they are not the bars pushed."""
        k, n = self.missing, len(self.close)
        for name, key in (("open", "o"), ("high", "h"), ("low", "lo"), ("close", "c"), ("time_ns", "time_ns")):
            values = prices[key].tolist()
            if len(values) != n or values[k:] != getattr(self, name)[k:]:
                raise ValueError(f"the journal's {len(values)} bars are not the {n} the snapshot was taken after")
            getattr(self, name)[:k] = values[:k]
        self.missing = 0

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
