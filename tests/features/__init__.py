"""Helpers for the feature tests: synthetic bars built with numpy, and "change the future"."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid_trader.data.bars import EASTERN, Bars


def ohlc_frame(index: pd.DatetimeIndex, close: np.ndarray, rng: np.random.Generator, volume=None) -> pd.DataFrame:
    """Consistent OHLCV on the 0.25 tick grid around a close path."""
    n = len(close)
    close = np.round(np.asarray(close, dtype=float) * 4) / 4
    open_ = np.round((np.r_[close[0], close[:-1]] + rng.normal(0, 0.5, n)) * 4) / 4
    high = np.maximum(np.maximum(open_, close), np.round((np.maximum(open_, close) + rng.exponential(1.0, n)) * 4) / 4)
    low = np.minimum(np.minimum(open_, close), np.round((np.minimum(open_, close) - rng.exponential(1.0, n)) * 4) / 4)
    if volume is None:
        volume = rng.integers(0, 800, n).astype(float)
    return pd.DataFrame({"open": open_, "high": high, "low": low, "close": close, "volume": volume}, index=index)


def bar_index(n: int, bar_minutes: int = 1, start: str = "2024-01-07 18:00") -> pd.DatetimeIndex:
    """``n`` bar starts every ``bar_minutes`` from ``start`` (ET), skipping the 17:00 ET hour."""
    idx = pd.date_range(pd.Timestamp(start, tz=EASTERN), periods=int(n * 1.2) + 200, freq=f"{bar_minutes}min")
    return idx[idx.hour != 17][:n]


def make_bars(
    n: int,
    bar_minutes: int = 1,
    seed: int = 0,
    market: str = "NQ",
    flat_run: tuple[int, int] | None = None,
) -> Bars:
    """A random-walk NQ-like market; ``flat_run=(a, b)`` makes bars a..b-1 flat with no volume."""
    rng = np.random.default_rng(seed)
    close = 16000 + np.cumsum(rng.normal(0, 3 * np.sqrt(bar_minutes), n))
    frame = ohlc_frame(bar_index(n, bar_minutes), close, rng)
    if flat_run is not None:
        a, b = flat_run
        level = frame["close"].iloc[max(a - 1, 0)]
        frame.iloc[a:b, :4] = level
        frame.iloc[a:b, 4] = 0.0
    return Bars(frame, market=market, bar_minutes=bar_minutes, source="synthetic:test")


def change_after(bars: Bars, t: int, seed: int) -> Bars:
    """The same bars up to t; every later bar replaced by a different, consistent one."""
    rng = np.random.default_rng(seed)
    frame = bars.frame.copy()
    m = len(frame) - t - 1
    if m <= 0:
        return Bars(frame, bars.market, bars.bar_minutes, bars.source)
    scale = rng.choice([0.7, 1.3])
    new_close = frame["close"].to_numpy()[t + 1 :] * scale + np.cumsum(rng.normal(0, 20, m))
    new_close = np.maximum(new_close, 100.0)
    later = ohlc_frame(frame.index[t + 1 :], new_close, rng, volume=rng.integers(0, 5000, m).astype(float))
    frame.iloc[t + 1 :] = later.to_numpy()
    return Bars(frame, bars.market, bars.bar_minutes, bars.source)
