"""Shared indicators and the 11 per-bar features of the observation window.

Everything here is causal: the value at bar t uses bars <= t only. TA-Lib functions and
pandas rolling windows run forwards through the series; where an indicator's look-back
is not yet full the arrays returned here hold NaN, which ``compute_features`` turns into
neutral zeros (features) or expanding-past fallbacks (``raw``) and counts into
``FeatureSet.warmup``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import talib

from hybrid_trader.calendar import MINUTES_PER_DAY, SESSION_MINUTES, session_minute
from hybrid_trader.data.bars import Bars
from hybrid_trader.features.names import RAW_INDICATORS, RAW_NAMES
from hybrid_trader.markets import CONTRACTS

ATR_PERIOD = 14
RSI_PERIOD = 14
ADX_PERIOD = 14
MACD_PERIODS = (12, 26, 9)
VOLUME_Z_BARS = 20
VOLUME_Z_STD_FLOOR = 0.05
"""Floor of the rolling std of log(1 + volume), so near-constant volume gives a finite z."""
ATR_FLOOR_TICKS = 1.0
"""ATR is floored at one tick (flat, vendor-filled bars would otherwise drive it to 0)."""

_NAN = np.nan


def bars_for(minutes: float, bar_minutes: int) -> int:
    """Number of bars spanning ``minutes`` at this bar size (at least 1)."""
    return max(1, int(round(minutes / max(1, int(bar_minutes)))))


def rolling(x: np.ndarray, n: int, how: str, min_periods: int | None = None) -> np.ndarray:
    """Trailing rolling statistic over the last ``n`` values (window ends at t)."""
    r = pd.Series(x, copy=False).rolling(int(n), min_periods=int(n if min_periods is None else min_periods))
    return getattr(r, how)().to_numpy(np.float64)


def lag(x: np.ndarray, k: int) -> np.ndarray:
    """``x`` delayed by ``k >= 1`` bars (NaN for the first ``k``): value at t is x[t-k]."""
    out = np.full(len(x), _NAN)
    if k < len(x):
        out[k:] = x[:-k]
    return out


def safe_div(num: np.ndarray, den: np.ndarray, fill: float = 0.0) -> np.ndarray:
    """num / den, ``fill`` where den == 0 (NaN inputs stay NaN)."""
    num = np.asarray(num, dtype=np.float64)
    den = np.broadcast_to(np.asarray(den, dtype=np.float64), num.shape)
    out = np.where(np.isnan(num) | np.isnan(den), _NAN, fill)
    np.divide(num, den, out=out, where=(den != 0) & ~np.isnan(den))
    return out


def expanding_mean(x: np.ndarray) -> np.ndarray:
    """Mean of x[0..t] (causal)."""
    return np.cumsum(x) / np.arange(1, len(x) + 1)


def rsi(close: np.ndarray, period: int = RSI_PERIOD) -> np.ndarray:
    """TA-Lib RSI, but 50 (neutral) instead of TA-Lib's 0 while the price has not moved yet."""
    close = np.ascontiguousarray(close, dtype=np.float64)
    out = talib.RSI(close, period)
    if len(close):
        unmoved = np.cumsum(np.abs(np.diff(close, prepend=close[0]))) == 0
        out[unmoved & ~np.isnan(out)] = 50.0
    return out


def atr_floor(bars: Bars) -> float | np.ndarray:
    """One tick of the market, or 1e-6 * close for an unknown market."""
    spec = CONTRACTS.get(str(bars.market).strip().upper())
    if spec is not None:
        return ATR_FLOOR_TICKS * spec.tick_size
    return 1e-6 * np.asarray(bars.close)


def session_vwap(bars: Bars) -> np.ndarray:
    """Volume-weighted mean of typical price since the bar's Globex session open (18:00 ET).

    Bars of a session with no volume yet get the plain mean of typical price so far.
    """
    h, lo, c, v = ohlcv(bars)[1:]
    tp = (h + lo + c) / 3.0
    sid = bars.session_id
    frame = pd.DataFrame({"pv": tp * v, "v": v, "tp": tp, "one": np.ones_like(v)})
    cum = frame.groupby(sid, sort=False).cumsum()
    cum_v = cum["v"].to_numpy()
    vw = safe_div(cum["pv"].to_numpy(), cum_v, fill=_NAN)
    plain = cum["tp"].to_numpy() / cum["one"].to_numpy()
    return np.where(cum_v > 0, vw, plain)


def session_open_price(bars: Bars) -> tuple[np.ndarray, np.ndarray]:
    """Open of the first bar of each bar's session, and bars since that first bar."""
    starts = bars.session_bounds[:, 0][bars.session_id]
    return np.asarray(bars.open)[starts], np.arange(len(bars)) - starts


def ohlcv(bars: Bars) -> tuple[np.ndarray, ...]:
    """Contiguous float64 open, high, low, close, volume."""
    return tuple(
        np.ascontiguousarray(getattr(bars, k), dtype=np.float64) for k in ("open", "high", "low", "close", "volume")
    )


def compute_indicators(bars: Bars) -> dict[str, np.ndarray]:
    """Float64 indicators in natural units; NaN while an indicator's look-back is not full.

    Keys: ``tr, atr14, rsi14, adx14, sma20, sma50, sma200, macd, macd_signal, macd_hist,
    vwap, mom10, volume_sma20, ret_20, ret_60``.
    """
    o, h, lo, c, v = ohlcv(bars)
    tr = talib.TRANGE(h, lo, c)
    tr[0] = h[0] - lo[0]
    atr = np.maximum(talib.ATR(h, lo, c, ATR_PERIOD), atr_floor(bars))  # NaN stays NaN
    macd, macd_signal, macd_hist = talib.MACD(c, *MACD_PERIODS)
    with np.errstate(divide="ignore", invalid="ignore"):
        ret_20 = np.log(c / lag(c, 20))
        ret_60 = np.log(c / lag(c, 60))
    return {
        "tr": tr,
        "atr14": atr,
        "rsi14": rsi(c, RSI_PERIOD),
        "adx14": talib.ADX(h, lo, c, ADX_PERIOD),
        "sma20": talib.SMA(c, 20),
        "sma50": talib.SMA(c, 50),
        "sma200": talib.SMA(c, 200),
        "macd": macd,
        "macd_signal": macd_signal,
        "macd_hist": macd_hist,
        "vwap": session_vwap(bars),
        "mom10": c - lag(c, 10),
        "volume_sma20": talib.SMA(v, 20),
        "ret_20": ret_20,
        "ret_60": ret_60,
    }


def raw_fallbacks(bars: Bars, tr: np.ndarray) -> dict[str, np.ndarray]:
    """Every bar's value of each causal fall-back of ``RAW_FALLBACKS`` (by name); ``tr``: the true range."""
    o, h, lo, c, v = ohlcv(bars)
    first = c[0] if len(c) else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        since_first_log = np.log(c / first)
    return {
        "mean_tr": np.maximum(expanding_mean(np.nan_to_num(tr, nan=0.0)), atr_floor(bars)),
        "mean_close": expanding_mean(c),
        "mean_volume": expanding_mean(v),
        "close": c,
        "change_since_first": c - first,
        "log_change_since_first": since_first_log,
        "lowest_low": np.minimum.accumulate(lo) if len(lo) else lo,
        "highest_high": np.maximum.accumulate(h) if len(h) else h,
    }


def fill_raw(bars: Bars, ind: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Finite copies of the indicators, the columns ``RAW_NAMES`` in order: NaN warm-up rows get their
    ``RAW_INDICATORS`` fall-back (a constant, or a causal series of :func:`raw_fallbacks`)."""
    rules = raw_fallbacks(bars, ind["tr"])
    out = {}
    for key in RAW_NAMES:
        x = ind[key]
        rule = RAW_INDICATORS[key][1]
        fb = np.broadcast_to(np.asarray(rules[rule] if isinstance(rule, str) else rule, dtype=np.float64), x.shape)
        filled = np.where(np.isfinite(x), x, fb)
        out[key] = np.ascontiguousarray(np.nan_to_num(filled, nan=0.0, posinf=0.0, neginf=0.0))
    return out


def bar_feature_columns(bars: Bars, ind: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The 11 per-bar features (float64, NaN during each one's warm-up), by name."""
    o, h, lo, c, v = ohlcv(bars)
    atr = ind["atr14"]
    prev = lag(c, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ret = np.log(c / prev) * prev / atr
    logv = np.log1p(np.maximum(v, 0.0))
    vmean = rolling(logv, VOLUME_Z_BARS, "mean")
    vstd = np.maximum(rolling(logv, VOLUME_Z_BARS, "std"), VOLUME_Z_STD_FLOOR)
    minute = np.asarray(bars.minute_of_day, dtype=np.float64)
    angle = 2.0 * np.pi * minute / MINUTES_PER_DAY
    progress = session_minute(minute) / SESSION_MINUTES
    return {
        "log_ret": np.clip(log_ret, -10, 10),
        "range_atr": np.clip((h - lo) / atr, 0, 10),
        "body_atr": np.clip((c - o) / atr, -10, 10),
        "volume_z": np.clip((logv - vmean) / vstd, -10, 10),
        "sma20_gap_atr": np.clip((c - ind["sma20"]) / atr, -10, 10),
        "sma50_gap_atr": np.clip((c - ind["sma50"]) / atr, -10, 10),
        "rsi14": np.clip((ind["rsi14"] - 50.0) / 50.0, -1, 1),
        "macd_hist_atr": np.clip(ind["macd_hist"] / atr, -10, 10),
        "tod_sin": np.sin(angle),
        "tod_cos": np.cos(angle),
        "session_progress": progress,
    }
