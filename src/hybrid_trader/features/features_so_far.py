"""``FeaturesSoFar``: the incremental features' rows so far, read as a :class:`~hybrid_trader.features.FeatureSet`.

The executor appends each bar's :class:`~hybrid_trader.features.incremental.FeatureRow`; the observation builder
indexes ``windows``, ``llm_market`` and ``atr`` by bar, and the asynchronous advisor's contexts read ``raw`` (the
keys it was asked to keep), as they read a ``FeatureSet``'s. The feature matrices grow by doubling (the observation
builder is rebound to the new ones: :meth:`FeaturesSoFar.push` says when).

A snapshot (``live.snapshot``) pickles the newest :data:`KEPT_ROWS` rows only: the core and the observation read
the newest bar's window, never older rows (those come back as zeros, their ATR as NaN).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from hybrid_trader.data.bars_so_far import KEPT_BARS
from hybrid_trader.features.feature_set import N_BAR, N_MARKET, make_windows
from hybrid_trader.features.incremental import FeatureRow

KEPT_ROWS = KEPT_BARS
"""Rows a snapshot keeps, as many as its bars (the newest observation's window needs ``WINDOW`` of them)."""


class FeaturesSoFar:
    """Every bar's features so far: ``bar`` ``(capacity, 11)`` and ``llm_market`` ``(capacity, 28)`` float32 (rows
    ``len(self)`` on are zeros), their ``windows`` view, ``atr`` and ``raw`` (only ``raw_keys``) per bar."""

    def __init__(self, capacity: int = 1 << 14, raw_keys: Iterable[str] = ()) -> None:
        self.bar = np.zeros((capacity, N_BAR), dtype=np.float32)
        self.llm_market = np.zeros((capacity, N_MARKET), dtype=np.float32)
        self.windows = make_windows(self.bar)
        self.atr: list[float] = []
        self.raw: dict[str, list[float]] = {k: [] for k in raw_keys}

    def __len__(self) -> int:
        return len(self.atr)

    def push(self, row: FeatureRow) -> bool:
        """Append the next bar's row; True when the matrices were reallocated (rebind the observation builder)."""
        t = len(self.atr)
        grown = False
        if t >= len(self.bar):
            self.bar = np.concatenate([self.bar, np.zeros_like(self.bar)])
            self.llm_market = np.concatenate([self.llm_market, np.zeros_like(self.llm_market)])
            self.windows = make_windows(self.bar)
            grown = True
        self.bar[t] = row.bar
        self.llm_market[t] = row.llm_market
        self.atr.append(row.atr)
        for key, values in self.raw.items():
            values.append(row.raw[key])
        return grown

    def __getstate__(self) -> dict[str, Any]:
        n = len(self)
        k = max(0, n - KEPT_ROWS)
        return {"n": n, "start": k, "bar": self.bar[k:n].copy(), "llm_market": self.llm_market[k:n].copy(),
                "atr": self.atr[k:], "raw": {key: v[k:] for key, v in self.raw.items()}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        n, k = state["n"], state["start"]
        for name in ("bar", "llm_market"):
            rows = np.zeros((n, state[name].shape[1]), dtype=np.float32)
            rows[k:] = state[name]
            setattr(self, name, rows)
        self.windows = make_windows(self.bar)
        self.atr = [math.nan] * k + list(state["atr"])
        self.raw = {key: [math.nan] * k + list(v) for key, v in state["raw"].items()}
