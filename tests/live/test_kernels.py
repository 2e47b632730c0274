"""Kernels one bar at a time against their batch versions."""

from __future__ import annotations

import numpy as np

from hybrid_trader.features.llm_features import double_top_bottom
from hybrid_trader.live.kernels import double_top_bottom_last


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
