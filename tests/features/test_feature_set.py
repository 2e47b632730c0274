"""FeatureSet: shapes, dtypes, finiteness, the zero-copy window view and warm-up."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data.bars import Bars
from hybrid_trader.errors import UserError
from hybrid_trader.features import (
    BAR_FEATURE_NAMES,
    MARKET_FEATURE_NAMES,
    WINDOW,
    FeatureSet,
    compute_features,
)
from hybrid_trader.features.base import bar_feature_columns, compute_indicators
from hybrid_trader.features.llm_features import market_feature_columns
from tests.conftest import ES_1MIN, NQ_1MIN, NQ_5MIN, shared_file
from tests.features import make_bars

RAW_KEYS = {
    "atr14", "rsi14", "adx14", "vwap", "sma20", "sma50", "sma200", "macd", "macd_signal",
    "macd_hist", "mom10", "volume_sma20", "ret_20", "ret_60",
}


def assert_well_formed(fs: FeatureSet, n: int) -> None:
    assert fs.bar.shape == (n, 11) and fs.bar.dtype == np.float32 and fs.bar.flags.c_contiguous
    assert fs.llm_market.shape == (n, 28) and fs.llm_market.dtype == np.float32
    assert fs.atr.shape == (n,) and fs.atr.dtype == np.float64
    assert np.isfinite(fs.bar).all() and np.isfinite(fs.llm_market).all()
    assert np.isfinite(fs.atr).all() and (fs.atr > 0).all()
    assert set(fs.raw) >= RAW_KEYS
    for key, x in fs.raw.items():
        assert x.shape == (n,) and x.dtype == np.float64, key
        assert np.isfinite(x).all(), key
    # O(1) scale: every feature is clipped to a small range
    assert np.abs(fs.bar).max() <= 10 and np.abs(fs.llm_market).max() <= 10
    assert fs.windows.shape == (max(n - WINDOW + 1, 0), WINDOW * 11)


def load_real(
    name: str, shift_hours: int = 0, tz: str = "America/New_York", bar_minutes: int = 1, market: str = "NQ"
) -> Bars:
    frame = pd.read_csv(shared_file(name), index_col=0, parse_dates=True)
    frame.columns = [c.lower() for c in frame.columns]
    frame.index = frame.index - pd.Timedelta(hours=shift_hours)
    frame = frame.tz_localize(tz, ambiguous="infer")
    return Bars(frame, market=market, bar_minutes=bar_minutes)


@pytest.mark.parametrize("bar_minutes", [1, 5, 15])
def test_compute_features_when_synthetic_bars_is_well_formed(bar_minutes):
    n = 1500
    fs = compute_features(make_bars(n, bar_minutes=bar_minutes, seed=3))
    assert_well_formed(fs, n)
    assert WINDOW - 1 <= fs.warmup < n
    # after warm-up the market features are live (not stuck at the neutral 0)
    assert (np.abs(fs.llm_market[fs.warmup :]).max(axis=0) > 0).all()


def test_compute_features_when_flat_bars_and_zero_volume_stays_finite():
    bars = make_bars(1200, seed=4, flat_run=(300, 700))
    fs = compute_features(bars)
    assert_well_formed(fs, 1200)
    assert fs.atr.min() >= 0.25  # floored at one NQ tick


def test_compute_features_when_every_bar_is_flat_is_neutral_and_finite():
    bars = make_bars(300, seed=5, flat_run=(0, 300))
    fs = compute_features(bars)
    assert_well_formed(fs, 300)
    assert np.allclose(fs.atr, 0.25)
    assert np.all(fs.bar[:, BAR_FEATURE_NAMES.index("range_atr")] == 0)
    assert np.all(fs.bar[:, BAR_FEATURE_NAMES.index("volume_z")] == 0)
    # TA-Lib says RSI 0 for an unmoved market; the features say neutral
    assert np.all(fs.bar[:, BAR_FEATURE_NAMES.index("rsi14")] == 0)
    assert np.all(fs.raw["rsi14"] == 50)


@pytest.mark.parametrize("n", [1, 5, 19, 20, 21])
def test_compute_features_when_fewer_bars_than_any_lookback_is_well_formed(n):
    fs = compute_features(make_bars(n, seed=6))
    assert_well_formed(fs, n)
    assert fs.warmup >= n  # nothing is fully valid yet


def test_compute_features_when_no_bars_raises_user_error():
    bars = make_bars(10).frame.iloc[:0]
    with pytest.raises(UserError, match="no bars"):
        compute_features(Bars(bars))


def test_windows_when_indexed_is_zero_copy_view_equal_to_window():
    fs = compute_features(make_bars(400, seed=7))
    assert np.shares_memory(fs.windows, fs.bar)
    assert fs.windows.base is not None and not fs.windows.flags.writeable
    for t in (WINDOW - 1, 20, 137, 399):
        expected = fs.bar[t - WINDOW + 1 : t + 1].ravel()
        w = fs.window(t)
        assert w.shape == (220,) and w.dtype == np.float32
        np.testing.assert_array_equal(w, expected)
        np.testing.assert_array_equal(fs.windows[t - WINDOW + 1], expected)
    # oldest bar first: the last 11 values are bar t itself
    np.testing.assert_array_equal(fs.window(137)[-11:], fs.bar[137])


@pytest.mark.parametrize("t", [-1, 0, WINDOW - 2, 400])
def test_window_when_t_out_of_range_raises_index_error(t):
    fs = compute_features(make_bars(400, seed=7))
    with pytest.raises(IndexError):
        fs.window(t)


def test_feature_set_when_pickled_rebuilds_the_window_view():
    fs = compute_features(make_bars(300, seed=8))
    back = pickle.loads(pickle.dumps(fs))
    assert len(pickle.dumps(fs)) < fs.windows.size * 4  # the view itself is not pickled
    np.testing.assert_array_equal(back.windows, fs.windows)
    assert np.shares_memory(back.windows, back.bar)
    assert back.warmup == fs.warmup and set(back.raw) == set(fs.raw)


def test_feature_set_when_bar_has_wrong_width_raises():
    with pytest.raises(ValueError, match=r"\(N, 11\)"):
        FeatureSet(np.zeros((30, 10)), np.zeros((30, 28)), np.ones(30), {}, 0)


@pytest.mark.parametrize("bar_minutes, expected", [(1, 913), (5, 209)])
def test_warmup_when_bar_size_given_matches_documented_value(bar_minutes, expected):
    assert compute_features(make_bars(2000, bar_minutes=bar_minutes, seed=9)).warmup == expected


def test_features_before_their_lookback_when_computed_are_neutral_zero():
    fs = compute_features(make_bars(1200, seed=10))
    vr = MARKET_FEATURE_NAMES.index("volatility_regime")
    assert np.all(fs.llm_market[:913, vr] == 0) and np.any(fs.llm_market[913:, vr] != 0)
    sma50 = BAR_FEATURE_NAMES.index("sma50_gap_atr")
    assert np.all(fs.bar[:49, sma50] == 0) and np.all(fs.bar[49:60, sma50] != 0)


def nan_only_leading(x: np.ndarray) -> bool:
    nan = np.isnan(x)
    first = len(x) if nan.all() else int(nan.argmin())
    return not nan[first:].any() and not np.isinf(x).any()


@pytest.mark.parametrize(
    "name, kwargs",
    [
        (NQ_1MIN, {}),
        (ES_1MIN, {"shift_hours": 5, "market": "ES"}),
        (NQ_5MIN, {"tz": "America/Chicago", "bar_minutes": 5}),
    ],
)
def test_compute_features_when_real_bars_is_well_formed(name, kwargs):
    bars = load_real(name, **kwargs)
    fs = compute_features(bars)
    assert_well_formed(fs, len(bars))
    # before filling, a feature is NaN only during its leading warm-up, never later
    ind = compute_indicators(bars)
    columns = {**bar_feature_columns(bars, ind), **market_feature_columns(bars, ind)[0]}
    assert [k for k, x in columns.items() if not nan_only_leading(x)] == []
    # session VWAP stays inside the session's price range
    assert (fs.raw["vwap"] <= bars.frame["high"].max()).all() and (fs.raw["vwap"] >= bars.frame["low"].min()).all()
