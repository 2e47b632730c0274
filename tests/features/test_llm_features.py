"""The 28 market features: hand-built patterns, past-only levels, higher-timeframe RSI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import talib

from hybrid_trader.data.bars import EASTERN, Bars
from hybrid_trader.features import MARKET_FEATURE_NAMES, compute_features
from hybrid_trader.features.llm_features import strided_rsi
from tests.features import bar_index, make_bars

COL = {name: i for i, name in enumerate(MARKET_FEATURE_NAMES)}


def path_bars(close: np.ndarray, half_range: float = 0.25, start: str = "2024-01-08 09:30") -> Bars:
    """Bars whose open is the previous close and whose range is the body +- ``half_range``."""
    idx = pd.date_range(pd.Timestamp(start, tz=EASTERN), periods=len(close), freq="1min")
    open_ = np.r_[close[0], close[:-1]]
    frame = pd.DataFrame(
        {
            "open": open_,
            "high": np.maximum(open_, close) + half_range,
            "low": np.minimum(open_, close) - half_range,
            "close": close,
            "volume": 100.0,
        },
        index=idx,
    )
    return Bars(frame, market="NQ", bar_minutes=1)


def piecewise(points: list[tuple[int, float]]) -> np.ndarray:
    xs, ys = zip(*points)
    return np.interp(np.arange(xs[-1] + 1), xs, ys)


def double_top_path() -> np.ndarray:
    # noisy base at 97.5, then inside the last 60 bars: peak 100 at 150, trough 95 at 170,
    # peak 100 at 185, then down to 97.5 at 199 (an M, not a W: the lows differ by 2.5)
    rng = np.random.default_rng(0)
    base = 97.5 + np.round(rng.normal(0, 0.25, 140) * 4) / 4
    tail = piecewise([(140, 97.5), (150, 100.0), (170, 95.0), (185, 100.0), (199, 97.5)])[140:]
    return np.r_[base, tail]


def test_double_top_when_two_equal_peaks_and_price_falls_is_flagged():
    fs = compute_features(path_bars(double_top_path()))
    assert fs.atr[199] < 1.5  # the pattern is several ATRs tall
    assert fs.llm_market[199, COL["double_top"]] == 1
    assert fs.llm_market[199, COL["double_bottom"]] == 0
    # just after the second peak the close is still near it: no signal yet
    assert fs.llm_market[186, COL["double_top"]] == 0


def test_double_bottom_when_path_is_mirrored_is_flagged():
    fs = compute_features(path_bars(200.0 - double_top_path()))
    assert fs.llm_market[199, COL["double_bottom"]] == 1
    assert fs.llm_market[199, COL["double_top"]] == 0


def test_double_top_when_market_trends_up_is_not_flagged():
    fs = compute_features(path_bars(100 + 0.5 * np.arange(300)))
    assert np.all(fs.llm_market[:, COL["double_top"]] == 0)
    assert np.all(fs.llm_market[:, COL["double_bottom"]] == 0)


def test_swing_patterns_when_market_trends_up_show_higher_highs_and_lows():
    fs = compute_features(path_bars(100 + 0.5 * np.arange(300)))
    after = slice(29, None)  # two 15-bar blocks
    assert np.all(fs.llm_market[after, COL["higher_high"]] == 1)
    assert np.all(fs.llm_market[after, COL["higher_low"]] == 1)
    assert np.all(fs.llm_market[:, COL["lower_high"]] == 0)
    assert np.all(fs.llm_market[:, COL["lower_low"]] == 0)
    assert np.all(fs.llm_market[:29, COL["higher_high"]] == 0)  # warm-up: neutral


def test_levels_when_computed_use_previous_bars_only():
    bars = make_bars(400, seed=11)
    fs = compute_features(bars)
    h, lo, c = bars.high, bars.low, bars.close
    for t in (60, 61, 200, 399):
        support, resistance = lo[t - 60 : t].min(), h[t - 60 : t].max()
        assert fs.raw["support_60m"][t] == support and fs.raw["resistance_60m"][t] == resistance
        assert fs.llm_market[t, COL["breakout"]] == float(c[t] > resistance)
        assert fs.llm_market[t, COL["breakdown"]] == float(c[t] < support)
        scale = fs.atr[t] * np.sqrt(60)
        assert fs.llm_market[t, COL["support_dist"]] == pytest.approx(
            np.clip((c[t] - support) / scale, -10, 10), rel=1e-5
        )


def test_breakout_when_close_clears_previous_highs_is_flagged_and_not_before():
    close = np.r_[np.full(100, 100.0), 100.0, 103.0]  # bar 101 closes above the 60-bar high
    fs = compute_features(path_bars(close))
    assert fs.llm_market[100, COL["breakout"]] == 0
    assert fs.llm_market[101, COL["breakout"]] == 1
    assert fs.llm_market[101, COL["resistance_dist"]] < 0


def test_strided_rsi_when_computed_equals_rsi_of_higher_timeframe_closes():
    close = make_bars(2000, seed=12).close
    for k in (5, 15, 60):
        rsi = strided_rsi(close, k)
        assert np.isnan(rsi[: 14 * k]).all() and np.isfinite(rsi[14 * k :]).all()
        for t in (14 * k, 14 * k + 7, 1999):
            closes = close[t % k : t + 1 : k]  # completed k-bar closes ending at t
            assert rsi[t] == pytest.approx(talib.RSI(closes, 14)[-1], rel=1e-12)
    np.testing.assert_array_equal(strided_rsi(close, 1), talib.RSI(close, 14))


def test_rsi_timeframes_when_bar_size_is_5_minutes_use_fewer_bars():
    bars = make_bars(600, bar_minutes=5, seed=13)
    fs = compute_features(bars)
    np.testing.assert_allclose(fs.raw["rsi_15m"], np.nan_to_num(strided_rsi(bars.close, 3), nan=50.0))
    np.testing.assert_allclose(fs.raw["rsi_60m"], np.nan_to_num(strided_rsi(bars.close, 12), nan=50.0))
    expected = (fs.raw["rsi_60m"][400] - 50) / 50
    assert fs.llm_market[400, COL["rsi_60m"]] == pytest.approx(expected, rel=1e-6)


def test_trend_features_when_market_rises_are_positive():
    fs = compute_features(path_bars(100 + 0.25 * np.arange(1000)))
    t = 999
    for name in ("momentum_20m", "momentum_60m", "price_change_60m", "session_trend", "vwap_dist_pct",
                 "sma50_slope_atr", "sma200_slope_atr", "rsi_15m", "rsi_60m"):
        assert fs.llm_market[t, COL[name]] > 0, name
    assert fs.llm_market[t, COL["efficiency_ratio"]] == pytest.approx(1.0)
    assert fs.llm_market[t, COL["sr_position_240m"]] == pytest.approx(1.0, abs=0.02)
    assert fs.llm_market[t, COL["market_regime"]] == pytest.approx(1.0)  # strong up-trend: ADX >= 40


def test_session_trend_and_price_change_when_hand_computed_match():
    bars = make_bars(800, seed=14)
    fs = compute_features(bars)
    sid, starts = bars.session_id, bars.session_bounds[:, 0]
    t = 700
    first = starts[sid[t]]
    expected = (bars.close[t] - bars.open[first]) / (fs.atr[t] * np.sqrt(t - first + 1))
    assert fs.llm_market[t, COL["session_trend"]] == pytest.approx(np.clip(expected, -10, 10), rel=1e-5)
    change = 100 * np.log(bars.close[t] / bars.close[t - 60])
    assert fs.llm_market[t, COL["price_change_60m"]] == pytest.approx(change, rel=1e-5)
    spread = (bars.high[t] - bars.low[t]) / bars.close[t] * 1000
    assert fs.llm_market[t, COL["spread_ratio"]] == pytest.approx(spread, rel=1e-5)


def test_volume_ratios_when_hand_computed_match():
    bars = make_bars(300, seed=15)
    fs = compute_features(bars)
    v, t = bars.volume, 250
    m5, m20, m60 = v[t - 4 : t + 1].mean(), v[t - 19 : t + 1].mean(), v[t - 59 : t + 1].mean()
    assert fs.llm_market[t, COL["volume_ratio_5m"]] == pytest.approx(np.log((m5 + 1) / (m60 + 1)), rel=1e-5)
    assert fs.llm_market[t, COL["volume_ratio_20m"]] == pytest.approx(np.log((m20 + 1) / (m60 + 1)), rel=1e-5)


def test_bar_index_helper_when_building_skips_the_daily_break():
    idx = bar_index(2000)
    assert not (idx.hour == 17).any()
