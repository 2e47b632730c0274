"""Kernels one bar at a time against their batch versions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.features.kernels import RollingMoments, RollingVar, double_top_bottom_last
from hybrid_trader.features.llm_features import double_top_bottom


def test_double_top_bottom_last_equals_batch_when_prices_tie_and_atr_warms_up() -> None:
    rng = np.random.default_rng(3)
    n, m = 3000, 60
    close = 100.0 + np.round(np.cumsum(rng.normal(0, 0.6, n)) * 4) / 4  # on a 0.25 grid: equal highs and lows
    high = close + np.round(rng.exponential(0.4, n) * 4) / 4
    low = close - np.round(rng.exponential(0.4, n) * 4) / 4
    atr = np.abs(rng.normal(1.0, 0.5, n))
    atr[:70] = np.nan
    for mm in (m, 8, 9):
        top, bottom = double_top_bottom(high, low, close, atr, mm)
        got = [double_top_bottom_last(high[t + 1 - mm : t + 1], low[t + 1 - mm : t + 1], close[t], atr[t], mm)
               for t in range(mm - 1, n)]
        np.testing.assert_array_equal(np.array(got), np.stack([top, bottom], axis=1)[mm - 1 :])
        assert np.nansum(top) > 0 and np.nansum(bottom) > 0


@pytest.mark.parametrize("n", [1, 2, 20, 60])
def test_rolling_kernels_equal_pandas_when_nan_constant_runs_and_large_offsets(n: int) -> None:
    rng = np.random.default_rng(n)
    x = np.round(rng.normal(size=600) * 3, 2) + 18_000.0  # a large level: Welford's cancellation recompute
    x[:17] = np.nan  # warm-up NaN, as ATR has
    x[100:180] = x[100]  # a flat run longer than the window
    x[300] = np.nan
    x[400:420] = -np.abs(x[400:420])  # signs: the mean's clamp counts negatives
    mean, var = RollingMoments(n), RollingVar(n)
    got_mean, got_sum, got_std = [], [], []
    for v in x:
        mean.push(v)
        var.push(v)
        got_mean.append(mean.mean())
        got_sum.append(mean.sum())
        got_std.append(var.std())
    r = pd.Series(x).rolling(n)
    np.testing.assert_array_equal(got_mean, r.mean().to_numpy())
    np.testing.assert_array_equal(got_sum, r.sum().to_numpy())
    np.testing.assert_array_equal(got_std, r.std().to_numpy())
