"""Per-bar features and shared indicators, checked against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data.bars import EASTERN, Bars
from hybrid_trader.features import BAR_FEATURE_NAMES, compute_features
from hybrid_trader.features.base import bars_for

COL = {name: i for i, name in enumerate(BAR_FEATURE_NAMES)}


def tiny_bars(n: int = 40, start: str = "2024-01-08 09:30") -> Bars:
    """Deterministic zig-zag bars: close rises 1.0, falls 0.5, ...; range 2 points."""
    idx = pd.date_range(pd.Timestamp(start, tz=EASTERN), periods=n, freq="1min")
    steps = np.where(np.arange(n) % 2 == 0, 1.0, -0.5)
    close = 100.0 + np.cumsum(steps)
    open_ = np.r_[100.0, close[:-1]]
    high = np.maximum(open_, close) + 0.5
    low = np.minimum(open_, close) - 0.5
    vol = np.array([100.0, 300.0, 50.0, 800.0, 200.0, 0.0, 120.0])[np.arange(n) % 7]
    frame = pd.DataFrame({"open": open_, "high": high, "low": low, "close": close, "volume": vol}, index=idx)
    return Bars(frame, market="NQ", bar_minutes=1)


def wilder_atr(bars: Bars, period: int = 14) -> np.ndarray:
    h, lo, c = bars.high, bars.low, bars.close
    tr = [h[0] - lo[0]] + [max(h[i] - lo[i], abs(h[i] - c[i - 1]), abs(lo[i] - c[i - 1])) for i in range(1, len(c))]
    atr = [math.nan] * len(c)
    atr[period] = sum(tr[1 : period + 1]) / period
    for i in range(period + 1, len(c)):
        atr[i] = (atr[i - 1] * (period - 1) + tr[i]) / period
    return np.array(atr)


def test_atr_when_computed_matches_wilder_by_hand():
    bars = tiny_bars()
    fs = compute_features(bars)
    atr = wilder_atr(bars)
    np.testing.assert_allclose(fs.atr[14:], atr[14:], rtol=1e-12)
    np.testing.assert_allclose(fs.raw["atr14"][14:], atr[14:], rtol=1e-12)
    # warm-up: expanding mean of true range so far (causal), never 0
    assert fs.atr[0] == pytest.approx(bars.high[0] - bars.low[0])
    assert (fs.atr > 0).all()


def test_log_ret_and_range_atr_when_tiny_series_match_hand_values():
    bars = tiny_bars()
    fs = compute_features(bars)
    atr = wilder_atr(bars)
    c, h, lo, o = bars.close, bars.high, bars.low, bars.open
    for t in (14, 15, 30, 39):
        expected = math.log(c[t] / c[t - 1]) * c[t - 1] / atr[t]
        assert fs.bar[t, COL["log_ret"]] == pytest.approx(expected, rel=1e-6)
        assert fs.bar[t, COL["range_atr"]] == pytest.approx((h[t] - lo[t]) / atr[t], rel=1e-6)
        assert fs.bar[t, COL["body_atr"]] == pytest.approx((c[t] - o[t]) / atr[t], rel=1e-6)
    # before ATR(14) exists: neutral 0
    assert np.all(fs.bar[:14, COL["log_ret"]] == 0)


def test_sma_gaps_when_tiny_series_match_hand_values():
    bars = tiny_bars(60)
    fs = compute_features(bars)
    c, t = bars.close, 55
    sma20, sma50 = c[t - 19 : t + 1].mean(), c[t - 49 : t + 1].mean()
    assert fs.raw["sma20"][t] == pytest.approx(sma20)
    assert fs.bar[t, COL["sma20_gap_atr"]] == pytest.approx((c[t] - sma20) / fs.atr[t], rel=1e-6)
    assert fs.bar[t, COL["sma50_gap_atr"]] == pytest.approx((c[t] - sma50) / fs.atr[t], rel=1e-6)
    assert fs.raw["sma50"][10] == pytest.approx(c[:11].mean())  # warm-up: expanding mean


def test_volume_z_when_tiny_series_matches_rolling_z_by_hand():
    bars = tiny_bars()
    fs = compute_features(bars)
    t = 30
    x = np.log1p(bars.volume[t - 19 : t + 1])
    expected = (x[-1] - x.mean()) / x.std(ddof=1)
    assert x.std(ddof=1) > 0.05
    assert fs.bar[t, COL["volume_z"]] == pytest.approx(expected, rel=1e-5)


def test_volume_z_when_volume_nearly_constant_uses_the_std_floor():
    bars = tiny_bars()
    frame = bars.frame.assign(volume=1000.0)
    frame.iloc[30, 4] = 1010.0
    fs = compute_features(Bars(frame, market="NQ"))
    x = np.log1p(frame["volume"].to_numpy()[11:31])
    assert fs.bar[30, COL["volume_z"]] == pytest.approx((x[-1] - x.mean()) / 0.05, rel=1e-5)
    assert np.all(fs.bar[19:30, COL["volume_z"]] == 0)


def test_mom10_and_returns_when_tiny_series_match_hand_values():
    bars = tiny_bars()
    fs = compute_features(bars)
    c = bars.close
    assert fs.raw["mom10"][25] == pytest.approx(c[25] - c[15])
    assert fs.raw["ret_20"][30] == pytest.approx(math.log(c[30] / c[10]))
    assert fs.raw["ret_60"][30] == pytest.approx(math.log(c[30] / c[0]))  # warm-up: since first bar


@pytest.mark.parametrize(
    "clock, sin, cos, progress",
    [
        ("18:00", -1.0, 0.0, 0.0),
        ("00:00", 0.0, 1.0, 360 / 1380),
        ("09:30", math.sin(2 * math.pi * 570 / 1440), math.cos(2 * math.pi * 570 / 1440), 930 / 1380),
        ("16:59", math.sin(2 * math.pi * 1019 / 1440), math.cos(2 * math.pi * 1019 / 1440), 1379 / 1380),
    ],
)
def test_time_features_when_clock_given_match_hand_values(clock, sin, cos, progress):
    fs = compute_features(tiny_bars(3, start=f"2024-01-09 {clock}"))
    assert fs.bar[0, COL["tod_sin"]] == pytest.approx(sin, abs=1e-6)
    assert fs.bar[0, COL["tod_cos"]] == pytest.approx(cos, abs=1e-6)
    assert fs.bar[0, COL["session_progress"]] == pytest.approx(progress, abs=1e-6)


def test_vwap_when_session_opens_at_18_resets():
    idx = pd.DatetimeIndex(
        ["2024-01-08 16:58", "2024-01-08 16:59", "2024-01-08 18:00", "2024-01-08 18:01", "2024-01-08 18:02"]
    ).tz_localize(EASTERN)
    high = np.array([102.0, 104.0, 110.0, 112.0, 111.0])
    low = np.array([100.0, 101.0, 108.0, 109.0, 108.0])
    close = np.array([101.0, 103.0, 109.0, 110.0, 109.5])
    vol = np.array([10.0, 30.0, 0.0, 20.0, 60.0])
    frame = pd.DataFrame({"open": close, "high": high, "low": low, "close": close, "volume": vol}, index=idx)
    frame["open"] = np.clip(frame["open"], low, high)
    fs = compute_features(Bars(frame, market="NQ"))
    tp = (high + low + close) / 3
    vwap = fs.raw["vwap"]
    assert vwap[0] == pytest.approx(tp[0])
    assert vwap[1] == pytest.approx((tp[0] * 10 + tp[1] * 30) / 40)
    assert vwap[2] == pytest.approx(tp[2])  # new session, no volume yet: its own typical price
    assert vwap[3] == pytest.approx(tp[3])  # the zero-volume bar carries no weight
    assert vwap[4] == pytest.approx((tp[3] * 20 + tp[4] * 60) / 80)


def test_atr_when_bars_are_flat_is_floored_at_one_tick():
    idx = pd.date_range(pd.Timestamp("2024-01-08 10:00", tz=EASTERN), periods=30, freq="1min")
    frame = pd.DataFrame({k: 2000.0 for k in ("open", "high", "low", "close")}, index=idx).assign(volume=0.0)
    fs = compute_features(Bars(frame, market="RTY"))
    assert np.all(fs.atr == pytest.approx(0.10))
    assert np.isfinite(fs.bar).all() and np.isfinite(fs.llm_market).all()


@pytest.mark.parametrize("minutes, bar_minutes, expected", [(60, 1, 60), (60, 5, 12), (15, 60, 1), (20, 15, 1)])
def test_bars_for_when_bar_size_given_counts_bars(minutes, bar_minutes, expected):
    assert bars_for(minutes, bar_minutes) == expected
