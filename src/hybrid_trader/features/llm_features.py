"""The 28 market features of the LLM phase (phase 3): context, multi-timeframe, patterns.

The 5 risk-context features of the 33 depend on the account and are filled by the
environment. Horizons given in minutes become bar counts through ``bars.bar_minutes``
(``bars_for``); "15-minute" RSI is the RSI of the closes t, t-k, t-2k, ... (k = bars in
15 minutes), i.e. of completed 15-minute bars ending at t, so it updates every bar and
never uses a later bar. Support, resistance and breakouts use past extrema only.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from hybrid_trader.data.bars import Bars
from hybrid_trader.features.base import (
    RSI_PERIOD,
    bars_for,
    lag,
    ohlcv,
    rolling,
    rsi,
    safe_div,
    session_open_price,
)

ADX_SLOPE_BARS = 5
SMA_SLOPE_BARS = 10
EFFICIENCY_BARS = 20
LONG_MINUTES = 900
"""Reference horizon of the volatility and volume regimes (15 hours)."""
SWING_MINUTES = 15
"""Block length of the higher-high / lower-low comparisons."""
LEVEL_MINUTES = 60
"""Look-back of support, resistance, breakouts and double tops / bottoms."""
RANGE_MINUTES = 240
DOUBLE_TOLERANCE_ATR = 0.5
DOUBLE_DEPTH_ATR = 1.0
MIN_DOUBLE_BARS = 8
_NAN = np.nan


def strided_rsi(close: np.ndarray, k: int, period: int = RSI_PERIOD) -> np.ndarray:
    """RSI of the closes t, t-k, t-2k, ... at every bar t (NaN until 15k - 1 bars exist)."""
    close = np.ascontiguousarray(close, dtype=np.float64)
    if k <= 1:
        return rsi(close, period)
    out = np.full(len(close), _NAN)
    for phase in range(min(k, len(close))):  # k phases, each a vectorised TA-Lib call
        series = np.ascontiguousarray(close[phase::k])
        if len(series) > period:
            out[phase::k] = rsi(series, period)
    return out


def _flag(cond: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
    """1.0 / 0.0 where every input is known, NaN where any is still NaN (warm-up)."""
    known = np.ones(cond.shape, dtype=bool)
    for x in inputs:
        known &= ~np.isnan(x)
    return np.where(known, cond.astype(np.float64), _NAN)


def _log_ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.clip(np.log((a + 1.0) / (b + 1.0)), -5, 5)


def double_top_bottom(
    high: np.ndarray, low: np.ndarray, close: np.ndarray, atr: np.ndarray, m: int
) -> tuple[np.ndarray, np.ndarray]:
    """Double top / bottom flags over the ``m`` bars ending at t (NaN for t < m - 1).

    Top: the highest high of the window's first half and of its second half lie within
    ``DOUBLE_TOLERANCE_ATR`` ATR of each other, the lowest low strictly between them is
    at least ``DOUBLE_DEPTH_ATR`` ATR below the lower peak, and the close is at least
    ``DOUBLE_DEPTH_ATR`` ATR below the lower peak. Bottom mirrors it.
    """
    n = len(high)
    top = np.full(n, _NAN)
    bottom = np.full(n, _NAN)
    if n < m:
        return top, bottom
    half = m // 2
    cols = np.arange(m)
    a = atr[m - 1 :]
    c = close[m - 1 :]
    hw, lw = sliding_window_view(high, m), sliding_window_view(low, m)

    p1 = np.argmax(hw[:, :half], axis=1)
    p2 = half + np.argmax(hw[:, half:], axis=1)
    rows = np.arange(len(hw))
    t1, t2 = hw[rows, p1], hw[rows, p2]
    between = (cols > p1[:, None]) & (cols < p2[:, None])
    trough = np.where(between, lw, np.inf).min(axis=1)
    peak = np.minimum(t1, t2)
    cond = (
        (np.abs(t1 - t2) <= DOUBLE_TOLERANCE_ATR * a)
        & (trough <= peak - DOUBLE_DEPTH_ATR * a)
        & (c <= peak - DOUBLE_DEPTH_ATR * a)
    )
    top[m - 1 :] = _flag(cond, a)

    q1 = np.argmin(lw[:, :half], axis=1)
    q2 = half + np.argmin(lw[:, half:], axis=1)
    b1, b2 = lw[rows, q1], lw[rows, q2]
    between = (cols > q1[:, None]) & (cols < q2[:, None])
    crest = np.where(between, hw, -np.inf).max(axis=1)
    floor = np.maximum(b1, b2)
    cond = (
        (np.abs(b1 - b2) <= DOUBLE_TOLERANCE_ATR * a)
        & (crest >= floor + DOUBLE_DEPTH_ATR * a)
        & (c >= floor + DOUBLE_DEPTH_ATR * a)
    )
    bottom[m - 1 :] = _flag(cond, a)
    return top, bottom


def market_feature_columns(
    bars: Bars, ind: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The 28 market features (float64, NaN during each one's warm-up), by name, and extra
    raw indicators in natural units (``rsi_15m, rsi_60m, support_60m, resistance_60m,
    session_open``)."""
    o, h, lo, c, v = ohlcv(bars)
    bm = bars.bar_minutes
    k5, k15, k20, k60 = (bars_for(m, bm) for m in (5, 15, 20, 60))
    k240, klong = bars_for(RANGE_MINUTES, bm), bars_for(LONG_MINUTES, bm)
    atr, adx = ind["atr14"], ind["adx14"]

    # ---- extended market context ---------------------------------------------------
    vol60 = rolling(v, k60, "mean")
    sopen, since_open = session_open_price(bars)
    abs_diff = np.abs(c - lag(c, 1))
    path = rolling(abs_diff, EFFICIENCY_BARS, "sum")
    net = np.abs(c - lag(c, EFFICIENCY_BARS))
    with np.errstate(divide="ignore", invalid="ignore"):
        volatility_regime = np.clip(np.log(atr / rolling(atr, klong, "mean")), -5, 5)
    trend_sign = np.sign(ind["sma20"] - ind["sma50"])
    context = {
        "adx_slope": np.clip((adx - lag(adx, ADX_SLOPE_BARS)) / ADX_SLOPE_BARS, -10, 10),
        "vwap_dist_pct": np.clip(100.0 * (c - ind["vwap"]) / ind["vwap"], -10, 10),
        "volatility_regime": volatility_regime,
        "volume_regime": _log_ratio(vol60, rolling(v, klong, "mean")),
        "momentum_20m": np.clip((c - lag(c, k20)) / (atr * np.sqrt(k20)), -10, 10),
        "momentum_60m": np.clip((c - lag(c, k60)) / (atr * np.sqrt(k60)), -10, 10),
        "efficiency_ratio": np.clip(safe_div(net, path), 0, 1),
        "spread_ratio": np.clip((h - lo) / c * 1000.0, 0, 10),
        "session_trend": np.clip((c - sopen) / (atr * np.sqrt(since_open + 1.0)), -10, 10),
        "market_regime": trend_sign * np.clip((adx - 20.0) / 20.0, 0, 1),
    }

    # ---- multi-timeframe -----------------------------------------------------------
    rsi15, rsi60 = strided_rsi(c, k15), strided_rsi(c, k60)
    hi240, lo240 = rolling(h, k240, "max"), rolling(lo, k240, "min")
    with np.errstate(divide="ignore", invalid="ignore"):
        change60 = 100.0 * np.log(c / lag(c, k60))
    multi = {
        "sma50_slope_atr": np.clip((ind["sma50"] - lag(ind["sma50"], SMA_SLOPE_BARS)) / atr, -10, 10),
        "sma200_slope_atr": np.clip((ind["sma200"] - lag(ind["sma200"], SMA_SLOPE_BARS)) / atr, -10, 10),
        "rsi_15m": np.clip((rsi15 - 50.0) / 50.0, -1, 1),
        "rsi_60m": np.clip((rsi60 - 50.0) / 50.0, -1, 1),
        "volume_ratio_5m": _log_ratio(rolling(v, k5, "mean"), vol60),
        "volume_ratio_20m": _log_ratio(rolling(v, k20, "mean"), vol60),
        "price_change_60m": np.clip(change60, -10, 10),
        "sr_position_240m": np.clip(safe_div(2.0 * (c - lo240), hi240 - lo240, fill=1.0) - 1.0, -1, 1),
    }

    # ---- patterns --------------------------------------------------------------------
    swing = k15
    hmax, lmin = rolling(h, swing, "max"), rolling(lo, swing, "min")
    hmax_prev, lmin_prev = lag(hmax, swing), lag(lmin, swing)
    support = lag(rolling(lo, k60, "min"), 1)  # previous k60 bars, current bar excluded
    resistance = lag(rolling(h, k60, "max"), 1)
    top, bottom = double_top_bottom(h, lo, c, atr, max(k60, MIN_DOUBLE_BARS))
    patterns = {
        "higher_high": _flag(hmax > hmax_prev, hmax, hmax_prev),
        "higher_low": _flag(lmin > lmin_prev, lmin, lmin_prev),
        "lower_high": _flag(hmax < hmax_prev, hmax, hmax_prev),
        "lower_low": _flag(lmin < lmin_prev, lmin, lmin_prev),
        "double_top": top,
        "double_bottom": bottom,
        "support_dist": np.clip((c - support) / (atr * np.sqrt(k60)), -10, 10),
        "resistance_dist": np.clip((resistance - c) / (atr * np.sqrt(k60)), -10, 10),
        "breakout": _flag(c > resistance, resistance),
        "breakdown": _flag(c < support, support),
    }
    extras = {
        "rsi_15m": rsi15,
        "rsi_60m": rsi60,
        "support_60m": support,
        "resistance_60m": resistance,
        "session_open": sopen,
    }
    return {**context, **multi, **patterns}, extras
