"""FeaturesSoFar: the incremental rows read as a FeatureSet, grown past their capacity, and a snapshot's rows."""

from __future__ import annotations

import pickle

import numpy as np

from hybrid_trader.data import generate_bars
from hybrid_trader.features import compute_features
from hybrid_trader.features.features_so_far import KEPT_ROWS, FeaturesSoFar
from hybrid_trader.features.incremental import IncrementalFeatures


def test_rows_so_far_equal_the_feature_set_when_grown_past_their_capacity() -> None:
    bars = generate_bars(2, seed=9)
    fs = compute_features(bars)
    inc, rows = IncrementalFeatures(bars.market, bars.bar_minutes), FeaturesSoFar(capacity=64, raw_keys=("vwap",))
    grew = []
    cols = (bars.frame.index.asi8.tolist(), bars.open.tolist(), bars.high.tolist(), bars.low.tolist(),
            bars.close.tolist(), bars.volume.tolist())
    for t, (ts, o, h, lo, c, v) in enumerate(zip(*cols)):
        if rows.push(inc.append(ts, o, h, lo, c, v)):
            grew.append(t)
    n = len(bars)
    assert grew == [64 * 2**k for k in range(len(grew))] and len(rows) == n  # doubled each time it was full
    np.testing.assert_array_equal(rows.bar[:n], fs.bar)
    np.testing.assert_array_equal(rows.llm_market[:n], fs.llm_market)
    np.testing.assert_array_equal(rows.windows[: n - 19], fs.windows)
    np.testing.assert_array_equal(rows.atr, fs.atr)
    assert list(rows.raw) == ["vwap"]
    np.testing.assert_array_equal(rows.raw["vwap"], fs.raw["vwap"])

    restored = pickle.loads(pickle.dumps(rows))  # a snapshot: the newest rows only, the windows view rebuilt
    assert len(restored) == n and restored.bar.shape == (n, fs.bar.shape[1])
    np.testing.assert_array_equal(restored.windows[-1], fs.windows[-1])
    np.testing.assert_array_equal(restored.llm_market[-KEPT_ROWS:], fs.llm_market[-KEPT_ROWS:])
    assert not restored.bar[: n - KEPT_ROWS].any() and np.isnan(restored.atr[: n - KEPT_ROWS]).all()
    assert restored.raw["vwap"][-KEPT_ROWS:] == rows.raw["vwap"][-KEPT_ROWS:]
