"""``FeatureSet``: every bar's features, computed once, and ``compute_features``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from hybrid_trader.data.bars import Bars
from hybrid_trader.errors import UserError
from hybrid_trader.features.base import (
    bar_feature_columns,
    compute_indicators,
    fill_raw,
)
from hybrid_trader.features.llm_features import market_feature_columns
from hybrid_trader.features.names import BAR_FEATURE_NAMES, MARKET_FEATURE_NAMES, WINDOW

N_BAR = len(BAR_FEATURE_NAMES)
N_MARKET = len(MARKET_FEATURE_NAMES)
WINDOW_SIZE = WINDOW * N_BAR


def make_windows(bar: np.ndarray) -> np.ndarray:
    """Read-only zero-copy ``(N-19, 220)`` view: row ``t-19`` is ``bar[t-19:t+1].ravel()``."""
    if len(bar) < WINDOW:
        return np.zeros((0, WINDOW_SIZE), dtype=bar.dtype)
    return sliding_window_view(bar.reshape(-1), WINDOW_SIZE)[::N_BAR]


@dataclass(eq=False)
class FeatureSet:
    """The features of every bar of one ``Bars``; the hot loop only indexes these arrays.

    All arrays are finite. Rows before ``warmup`` hold neutral values (0 for features,
    causal expanding-past fallbacks in ``raw``) because some look-back is not yet full;
    environments should start trading at ``t >= warmup``.
    """

    bar: np.ndarray
    """``(N, 11)`` float32, C-contiguous: per-bar features, columns ``BAR_FEATURE_NAMES``."""
    llm_market: np.ndarray
    """``(N, 28)`` float32: market context, multi-timeframe, pattern (``MARKET_FEATURE_NAMES``)."""
    atr: np.ndarray
    """``(N,)`` float64 ATR(14) in price points, > 0 (floored at one tick)."""
    raw: dict[str, np.ndarray]
    """Float64 indicators in natural units (for prompts and reports), finite."""
    warmup: int
    """First bar t at which ``bar[t-19:t+1]`` and ``llm_market[t]`` are fully valid."""
    windows: np.ndarray = field(init=False, repr=False)
    """``(N-19, 220)`` float32 read-only view of ``bar``: ``windows[t-19] == window(t)``."""

    def __post_init__(self) -> None:
        self.bar = np.ascontiguousarray(self.bar, dtype=np.float32)
        if self.bar.ndim != 2 or self.bar.shape[1] != N_BAR:
            raise ValueError(f"FeatureSet.bar must be (N, {N_BAR}), got {self.bar.shape}")
        n = len(self.bar)
        if np.shape(self.llm_market) != (n, N_MARKET):
            raise ValueError(f"FeatureSet.llm_market must be ({n}, {N_MARKET}), got {np.shape(self.llm_market)}")
        if np.shape(self.atr) != (n,):
            raise ValueError(f"FeatureSet.atr must be ({n},), got {np.shape(self.atr)}")
        self.windows = make_windows(self.bar)

    def __len__(self) -> int:
        return len(self.bar)

    def window(self, t: int) -> np.ndarray:
        """``(220,)`` float32 read-only view: ``bar[t-19:t+1].ravel()``, oldest bar first."""
        if not WINDOW - 1 <= t < len(self.bar):
            raise IndexError(f"window({t}) needs {WINDOW - 1} <= t < {len(self.bar)}")
        return self.windows[t - (WINDOW - 1)]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("windows", None)  # a view: rebuilt on load instead of pickled as a copy
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.windows = make_windows(self.bar)

    def __repr__(self) -> str:
        return f"FeatureSet(n={len(self)}, warmup={self.warmup}, raw={sorted(self.raw)})"


def _leading_nan(matrix: np.ndarray) -> np.ndarray:
    """Per column: number of leading NaN rows (= the first valid row)."""
    nan = np.isnan(matrix)
    return np.where(nan.all(axis=0), len(matrix), nan.argmin(axis=0))


def _finalise(matrix: np.ndarray) -> np.ndarray:
    out = np.nan_to_num(matrix, nan=0.0, posinf=0.0, neginf=0.0)
    out = np.ascontiguousarray(out, dtype=np.float32)
    out.flags.writeable = False
    return out


def compute_features(bars: Bars) -> FeatureSet:
    """Compute every bar's features once (causal: row t uses bars <= t only).

    Raises :class:`UserError` when ``bars`` is empty.
    """
    if len(bars) == 0:
        raise UserError("no bars to compute features from", file=bars.source, fix="load a file with bars in it")
    ind = compute_indicators(bars)
    bar_cols = bar_feature_columns(bars, ind)
    market_cols, extras = market_feature_columns(bars, ind)

    bar = np.column_stack([bar_cols[k] for k in BAR_FEATURE_NAMES])
    market = np.column_stack([market_cols[k] for k in MARKET_FEATURE_NAMES])
    warmup = int(max(_leading_nan(bar).max() + WINDOW - 1, _leading_nan(market).max(), WINDOW - 1))

    raw = fill_raw(bars, {**ind, **extras})
    atr = raw["atr14"].copy()
    atr.flags.writeable = False
    return FeatureSet(bar=_finalise(bar), llm_market=_finalise(market), atr=atr, raw=raw, warmup=warmup)
