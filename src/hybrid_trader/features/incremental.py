"""Features of the newest bar, one bar at a time, bit-identical to ``compute_features``.

The executor gets one bar at a time and must see exactly the features the model was
trained and evaluated on. Which look-backs are bounded and which carry memory:

* **bounded**: lags and differences (returns, momentum, slopes), rolling max / min
  (support, resistance, 240-minute range, swings), double top / bottom (a window of
  ``max(k60, 8)`` bars): recomputed from the kept history in O(window);
* **unbounded, state from the first bar**: TA-Lib's Wilder / EMA recursions (ATR, RSI,
  ADX, MACD) and its running-sum SMA; pandas' rolling mean / sum / std, whose Kahan
  compensation and running sums make the rounding of every value depend on every
  earlier value; the session VWAP (a Kahan cumulative sum per session); the strided
  15- and 60-minute RSIs, whose phase is the bar's index mod k; the expanding means and
  extrema of the ``raw`` fall-backs.

So an :class:`IncrementalFeatures` must see the same bars from the same first bar as
the batch (``compute_features`` on the run's data), and carries each recursion's state
(:mod:`hybrid_trader.features.kernels`): TA-Lib's own streaming handles (``talib.stream``:
bit-identical to its function API by contract) and replicas of pandas' fixed-window
kernels (Kahan sums, the consecutive-equal-values rule, the sign clamp, Welford's
variance with its recompute on cancellation). The per-bar arithmetic repeats the batch formulas of
``features.base`` and ``features.llm_features`` with the same operations in the same
order (numpy ufuncs for log / sqrt / sin / cos), so every value is equal, not close;
``tests/features/test_incremental.py`` checks every column (``features.names``) at every bar of
synthetic and real files.

Cost: O(1) per bar for the recursions, O(240 bars) for the longest window; see
``bench/live_features.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hybrid_trader.calendar import (
    DAY_NS,
    EASTERN,
    MINUTES_PER_DAY,
    ROLL_NS,
    SESSION_MINUTES,
    EasternClock,
    session_minute,
)
from hybrid_trader.data.bars import Bars
from hybrid_trader.features.base import (
    ADX_PERIOD,
    ATR_FLOOR_TICKS,
    ATR_PERIOD,
    MACD_PERIODS,
    VOLUME_Z_BARS,
    VOLUME_Z_STD_FLOOR,
    bars_for,
)
from hybrid_trader.features.feature_set import N_BAR, N_MARKET
from hybrid_trader.features.kernels import (
    Buffer,
    PhasedRSI,
    RollingMoments,
    RollingVar,
    TalibStream,
    clip,
    div,
    double_top_bottom_last,
    finite,
    flag,
    log,
    log_ratio,
    opt,
    safe_div_one,
    zero_nonfinite,
)
from hybrid_trader.features.llm_features import (
    ADX_SLOPE_BARS,
    EFFICIENCY_BARS,
    LEVEL_MINUTES,
    LONG_MINUTES,
    MIN_DOUBLE_BARS,
    RANGE_MINUTES,
    SMA_SLOPE_BARS,
    SWING_MINUTES,
)
from hybrid_trader.features.names import BAR_FEATURE_NAMES, MARKET_FEATURE_NAMES, RAW_INDICATORS, WINDOW
from hybrid_trader.markets import CONTRACTS

NAN = math.nan
PRICE_SERIES = ("o", "h", "lo", "c", "v")
"""The price histories (open, high, low, close, volume): a snapshot leaves them to the journal."""
_RAW_FALLBACK = [(k, fallback) for k, (_, fallback) in RAW_INDICATORS.items()]


# ---- the per-bar computation ---------------------------------------------------------------------


@dataclass(frozen=True)
class FeatureRow:
    """The newest bar's features, equal to row ``index`` of ``compute_features`` on the same bars."""

    index: int
    """0-based position of the bar since the first one fed."""
    time_ns: int
    bar: np.ndarray
    """``(11,)`` float32, ``BAR_FEATURE_NAMES``."""
    llm_market: np.ndarray
    """``(28,)`` float32, ``MARKET_FEATURE_NAMES``."""
    atr: float
    """ATR(14) in points, > 0 (the ``raw`` fall-back during warm-up), as ``FeatureSet.atr``."""
    raw: dict[str, float]
    """Finite indicators in natural units, as ``FeatureSet.raw`` (keys ``RAW_NAMES``)."""


class IncrementalFeatures:
    """Append bars one at a time; get the newest bar's features, equal to the batch's.

    ``market`` and ``bar_minutes`` must be the ones the batch ``Bars`` has (they set the
    ATR floor and the bar counts of the minute horizons), and the bars must be the same
    from the same first bar: the recursions carry state from it (see the module doc).
    """

    def __init__(self, market: str = "NQ", bar_minutes: int = 1) -> None:
        self.market = str(market).strip().upper()
        self.bar_minutes = int(bar_minutes)
        spec = CONTRACTS.get(self.market)
        self._tick_floor = ATR_FLOOR_TICKS * spec.tick_size if spec is not None else None
        bm = self.bar_minutes
        self.k5, self.k15, self.k20, self.k60 = (bars_for(m, bm) for m in (5, 15, 20, LEVEL_MINUTES))
        self.k240, self.klong = bars_for(RANGE_MINUTES, bm), bars_for(LONG_MINUTES, bm)
        self.kswing = bars_for(SWING_MINUTES, bm)
        self.m_double = max(self.k60, MIN_DOUBLE_BARS)
        self.n = 0
        self.last_time_ns: int | None = None
        self.o, self.h, self.lo, self.c, self.v = (Buffer() for _ in range(5))
        self.atr_hist, self.adx_hist, self.sma50_hist, self.sma200_hist = (Buffer() for _ in range(4))
        self.hmax_hist, self.lmin_hist = Buffer(), Buffer()
        self._atr = TalibStream("ATR", timeperiod=ATR_PERIOD)
        self._adx = TalibStream("ADX", timeperiod=ADX_PERIOD)
        self._sma = {n: TalibStream("SMA", timeperiod=n) for n in (20, 50, 200)}
        self._vsma = TalibStream("SMA", timeperiod=20)
        self._macd = TalibStream("MACD", fastperiod=MACD_PERIODS[0], slowperiod=MACD_PERIODS[1],
                            signalperiod=MACD_PERIODS[2])
        self._rsi = PhasedRSI(1)
        self._rsi15, self._rsi60 = PhasedRSI(self.k15), PhasedRSI(self.k60)
        self._vmean, self._vstd = RollingMoments(VOLUME_Z_BARS), RollingVar(VOLUME_Z_BARS)
        self._atr_long = RollingMoments(self.klong)
        self._vol60, self._vol_long = RollingMoments(self.k60), RollingMoments(self.klong)
        self._vol5, self._vol20 = RollingMoments(self.k5), RollingMoments(self.k20)
        self._path = RollingMoments(EFFICIENCY_BARS)
        self._session_day: int | None = None
        self._session_start = 0
        self._vwap_sums = [0.0] * 4  # pv, v, tp, one (Kahan, as groupby().cumsum())
        self._vwap_comp = [0.0] * 4
        self._cum = {"tr": 0.0, "c": 0.0, "v": 0.0}
        self._first_close = NAN
        self._lo_min = math.inf
        self._hi_max = -math.inf
        self._first_valid_bar = [-1] * N_BAR
        self._first_valid_market = [-1] * N_MARKET
        self._clock = EasternClock()
        self._warm = False
        self._sqrt20, self._sqrt60 = float(np.sqrt(np.float64(self.k20))), float(np.sqrt(np.float64(self.k60)))

    @classmethod
    def from_bars(cls, bars: Bars) -> tuple[IncrementalFeatures, FeatureRow | None]:
        """Fed every bar of ``bars`` (the history a restart replays; ~0.08 ms a bar), and the last row."""
        inc = cls(bars.market, bars.bar_minutes)
        row = None
        cols = (bars.frame.index.asi8.tolist(), bars.open.tolist(), bars.high.tolist(), bars.low.tolist(),
                bars.close.tolist(), bars.volume.tolist())
        for ts, o, h, lo, c, v in zip(*cols):
            row = inc.append(ts, o, h, lo, c, v)
        return inc, row

    def keep_for_snapshot(self) -> None:
        """Pickle (``live.snapshot``) the derived series' last look-back only and the prices not at all: the journal
        holds them, :meth:`reopen` takes them back."""
        lookback = max(self.k240, self.klong, self.kswing, self.m_double, ADX_SLOPE_BARS, SMA_SLOPE_BARS,
                       EFFICIENCY_BARS) + 1
        for name in PRICE_SERIES:
            getattr(self, name).keep = 0
        for buf in (self.atr_hist, self.adx_hist, self.sma50_hist, self.sma200_hist, self.hmax_hist, self.lmin_hist):
            buf.keep = lookback

    def reopen(self, prices: dict[str, np.ndarray] | None = None) -> None:
        """After unpickling: the prices a snapshot left out (``prices``: every bar's, keys :data:`PRICE_SERIES`;
        a ValueError if they are not the ones fed), then the strided RSIs' TA-Lib handles opened again on the
        closes (the other handles open themselves at their next step, on the whole history)."""
        for name in PRICE_SERIES:
            buf = getattr(self, name)
            if buf.missing:
                if prices is None:
                    raise ValueError("the snapshot holds no prices: give them")
                buf.fill(prices[name])
        for rsi in (self._rsi, self._rsi15, self._rsi60):
            rsi.reopen(self.c.view())

    # ---- time and sessions -----------------------------------------------------------------
    @staticmethod
    def _eastern(time: pd.Timestamp | int) -> pd.Timestamp:
        ts = pd.Timestamp(time, tz="UTC") if not isinstance(time, pd.Timestamp) else time
        if ts.tzinfo is None:
            raise ValueError(f"naive timestamp {ts}: give a tz-aware Timestamp or int64 ns (UTC)")
        return ts.tz_convert(EASTERN)

    def _session(self, wall_ns: int) -> None:
        day = (wall_ns + ROLL_NS) // DAY_NS
        if day != self._session_day:
            self._session_day = day
            self._session_start = self.n
            self._vwap_sums = [0.0] * 4
            self._vwap_comp = [0.0] * 4

    def _vwap(self, h: float, lo: float, c: float, v: float) -> float:
        tp = (h + lo + c) / 3.0
        for j, x in enumerate((tp * v, v, tp, 1.0)):
            y = x - self._vwap_comp[j]
            t = self._vwap_sums[j] + y
            self._vwap_comp[j] = t - self._vwap_sums[j] - y
            self._vwap_sums[j] = t
        pv, cv, ctp, one = self._vwap_sums
        return (pv / cv if cv != 0 else NAN) if cv > 0 else ctp / one

    # ---- the public step --------------------------------------------------------------------
    def append(self, time: pd.Timestamp | int, open: float, high: float, low: float, close: float,
               volume: float) -> FeatureRow:
        """Add the next bar (strictly later than the last) and return its features."""
        time_ns = int(self._eastern(time).value) if isinstance(time, pd.Timestamp) else int(time)
        if self.last_time_ns is not None and time_ns <= self.last_time_ns:
            raise ValueError(f"bar at {self._eastern(time_ns)} is not after the previous bar "
                             f"({pd.Timestamp(self.last_time_ns, tz='UTC')}): "
                             "pass bars through live.bar_gate.BarGate first")
        self.last_time_ns = time_ns
        wall = self._clock.wall_ns(time_ns)
        self._session(wall)
        o, h, lo, c, v = float(open), float(high), float(low), float(close), float(volume)
        t = self.n
        for buf, x in ((self.o, o), (self.h, h), (self.lo, lo), (self.c, c), (self.v, v)):
            buf.append(x)
        self.n += 1
        ind = self._indicators(t, o, h, lo, c, v)
        minute = EasternClock.minute_of_day(wall)
        bar = self._bar_features(t, o, h, lo, c, v, ind, minute)
        market, extras = self._market_features(t, h, lo, c, ind)
        raw = self._raw(t, h, lo, c, v, {**ind, **extras})
        self._track_warmup(t, bar, market)
        bar_arr = np.array([zero_nonfinite(x) for x in bar], dtype=np.float32)
        mkt_arr = np.array([zero_nonfinite(x) for x in market], dtype=np.float32)
        return FeatureRow(t, time_ns, bar_arr, mkt_arr, raw["atr14"], raw)

    # ---- indicators (features.base.compute_indicators) -----------------------------------------
    def _indicators(self, t: int, o: float, h: float, lo: float, c: float, v: float) -> dict[str, float]:
        hv, lv, cv, vv = self.h.view(), self.lo.view(), self.c.view(), self.v.view()
        if t == 0:
            tr = h - lo
        else:
            pc = self.c.at(t - 1)
            tr = max(h - lo, abs(pc - h), abs(lo - pc))
        floor = self._tick_floor if self._tick_floor is not None else 1e-6 * c
        atr_v = self._atr.step((hv, lv, cv), (h, lo, c))
        atr = NAN if atr_v is None else max(float(atr_v), floor)
        adx_v = self._adx.step((hv, lv, cv), (h, lo, c))
        sma = {n: self._sma[n].step((cv,), (c,)) for n in (20, 50, 200)}
        vsma = self._vsma.step((vv,), (v,))
        macd = self._macd.step((cv,), (c,))
        m, ms, mh = (NAN, NAN, NAN) if macd is None else macd
        c20, c60 = self.c.at(t - 20), self.c.at(t - 60)
        ind = {
            "tr": tr,
            "atr14": atr,
            "rsi14": self._rsi.step(t, c),
            "adx14": NAN if adx_v is None else float(adx_v),
            "sma20": opt(sma[20]),
            "sma50": opt(sma[50]),
            "sma200": opt(sma[200]),
            "macd": float(m),
            "macd_signal": float(ms),
            "macd_hist": float(mh),
            "vwap": self._vwap(h, lo, c, v),
            "mom10": c - self.c.at(t - 10),
            "volume_sma20": opt(vsma),
            "ret_20": log(div(c, c20)),
            "ret_60": log(div(c, c60)),
        }
        self.atr_hist.append(atr)
        self.adx_hist.append(ind["adx14"])
        self.sma50_hist.append(ind["sma50"])
        self.sma200_hist.append(ind["sma200"])
        return ind

    # ---- the 11 bar features (features.base.bar_feature_columns) -------------------------------
    def _bar_features(self, t: int, o: float, h: float, lo: float, c: float, v: float, ind: dict[str, float],
                      minute: int) -> list[float]:
        atr = ind["atr14"]
        prev = self.c.at(t - 1)
        log_ret = div(log(div(c, prev)) * prev, atr)
        logv = float(np.log1p(np.float64(max(v, 0.0))))
        self._vmean.push(logv)
        self._vstd.push(logv)
        vstd = self._vstd.std()
        vstd = max(vstd, VOLUME_Z_STD_FLOOR) if vstd == vstd else NAN
        angle = 2.0 * np.pi * np.float64(minute) / MINUTES_PER_DAY
        cols = {
            "log_ret": clip(log_ret, -10, 10),
            "range_atr": clip(div(h - lo, atr), 0, 10),
            "body_atr": clip(div(c - o, atr), -10, 10),
            "volume_z": clip(div(logv - self._vmean.mean(), vstd), -10, 10),
            "sma20_gap_atr": clip(div(c - ind["sma20"], atr), -10, 10),
            "sma50_gap_atr": clip(div(c - ind["sma50"], atr), -10, 10),
            "rsi14": clip((ind["rsi14"] - 50.0) / 50.0, -1, 1),
            "macd_hist_atr": clip(div(ind["macd_hist"], atr), -10, 10),
            "tod_sin": float(np.sin(angle)),
            "tod_cos": float(np.cos(angle)),
            "session_progress": session_minute(minute) / SESSION_MINUTES,
        }
        return [cols[k] for k in BAR_FEATURE_NAMES]

    # ---- the 28 market features (features.llm_features.market_feature_columns) ---------------
    def _market_features(self, t: int, h: float, lo: float, c: float,
                         ind: dict[str, float]) -> tuple[list[float], dict[str, float]]:
        atr, adx = ind["atr14"], ind["adx14"]
        v = self.v.at(t)
        for roll in (self._vol60, self._vol_long, self._vol5, self._vol20):
            roll.push(v)
        vol60 = self._vol60.mean()
        self._atr_long.push(atr)
        self._path.push(abs(c - self.c.at(t - 1)))
        sopen = self.o.at(self._session_start)
        since_open = t - self._session_start
        net = abs(c - self.c.at(t - EFFICIENCY_BARS))
        sqrt20, sqrt60 = self._sqrt20, self._sqrt60
        trend_sign = float(np.sign(np.float64(ind["sma20"] - ind["sma50"])))
        context = {
            "adx_slope": clip((adx - self.adx_hist.at(t - ADX_SLOPE_BARS)) / ADX_SLOPE_BARS, -10, 10),
            "vwap_dist_pct": clip(div(100.0 * (c - ind["vwap"]), ind["vwap"]), -10, 10),
            "volatility_regime": clip(log(div(atr, self._atr_long.mean())), -5, 5),
            "volume_regime": log_ratio(vol60, self._vol_long.mean()),
            "momentum_20m": clip(div(c - self.c.at(t - self.k20), atr * sqrt20), -10, 10),
            "momentum_60m": clip(div(c - self.c.at(t - self.k60), atr * sqrt60), -10, 10),
            "efficiency_ratio": clip(safe_div_one(net, self._path.sum()), 0, 1),
            "spread_ratio": clip(div(h - lo, c) * 1000.0, 0, 10),
            "session_trend": clip(div(c - sopen, atr * float(np.sqrt(np.float64(since_open + 1.0)))), -10, 10),
            "market_regime": trend_sign * clip((adx - 20.0) / 20.0, 0, 1),
        }

        rsi15, rsi60 = self._rsi15.step(t, c), self._rsi60.step(t, c)
        hi240, lo240 = self._rolling_max(self.h, self.k240), self._rolling_min(self.lo, self.k240)
        change60 = 100.0 * log(div(c, self.c.at(t - self.k60)))
        sma50, sma200 = ind["sma50"], ind["sma200"]
        multi = {
            "sma50_slope_atr": clip(div(sma50 - self.sma50_hist.at(t - SMA_SLOPE_BARS), atr), -10, 10),
            "sma200_slope_atr": clip(div(sma200 - self.sma200_hist.at(t - SMA_SLOPE_BARS), atr), -10, 10),
            "rsi_15m": clip((rsi15 - 50.0) / 50.0, -1, 1),
            "rsi_60m": clip((rsi60 - 50.0) / 50.0, -1, 1),
            "volume_ratio_5m": log_ratio(self._vol5.mean(), vol60),
            "volume_ratio_20m": log_ratio(self._vol20.mean(), vol60),
            "price_change_60m": clip(change60, -10, 10),
            "sr_position_240m": clip(safe_div_one(2.0 * (c - lo240), hi240 - lo240, fill=1.0) - 1.0, -1, 1),
        }

        hmax, lmin = self._rolling_max(self.h, self.kswing), self._rolling_min(self.lo, self.kswing)
        self.hmax_hist.append(hmax)
        self.lmin_hist.append(lmin)
        hmax_prev, lmin_prev = self.hmax_hist.at(t - self.kswing), self.lmin_hist.at(t - self.kswing)
        support = self._rolling_min(self.lo, self.k60, end=t)
        resistance = self._rolling_max(self.h, self.k60, end=t)
        top, bottom = self._double(t)
        patterns = {
            "higher_high": flag(hmax > hmax_prev, hmax, hmax_prev),
            "higher_low": flag(lmin > lmin_prev, lmin, lmin_prev),
            "lower_high": flag(hmax < hmax_prev, hmax, hmax_prev),
            "lower_low": flag(lmin < lmin_prev, lmin, lmin_prev),
            "double_top": top,
            "double_bottom": bottom,
            "support_dist": clip(div(c - support, atr * sqrt60), -10, 10),
            "resistance_dist": clip(div(resistance - c, atr * sqrt60), -10, 10),
            "breakout": flag(c > resistance, resistance),
            "breakdown": flag(c < support, support),
        }
        cols = {**context, **multi, **patterns}
        extras = {"rsi_15m": rsi15, "rsi_60m": rsi60, "support_60m": support, "resistance_60m": resistance,
                  "session_open": sopen}
        return [cols[k] for k in MARKET_FEATURE_NAMES], extras

    def _rolling_max(self, buf: Buffer, k: int, end: int | None = None) -> float:
        """``rolling(x, k, "max")`` at bar ``end - 1`` (default: the newest bar); NaN before k bars."""
        stop = buf.n if end is None else end
        return float(buf.data[stop - k : stop].max()) if stop >= k else NAN

    def _rolling_min(self, buf: Buffer, k: int, end: int | None = None) -> float:
        stop = buf.n if end is None else end
        return float(buf.data[stop - k : stop].min()) if stop >= k else NAN

    def _double(self, t: int) -> tuple[float, float]:
        m = self.m_double
        if t + 1 < m:
            return NAN, NAN
        return double_top_bottom_last(self.h.tail(m), self.lo.tail(m), float(self.c.data[t]),
                                      float(self.atr_hist.data[t]), m)

    # ---- raw (features.base.fill_raw) ---------------------------------------------------------
    def _raw(self, t: int, h: float, lo: float, c: float, v: float, ind: dict[str, float]) -> dict[str, float]:
        if t == 0:
            self._first_close = c
        tr = ind["tr"] if ind["tr"] == ind["tr"] else 0.0
        cum = self._cum
        cum["tr"] += tr
        cum["c"] += c
        cum["v"] += v
        count = float(t + 1)
        self._lo_min = min(self._lo_min, lo)
        self._hi_max = max(self._hi_max, h)
        since_first = log(div(c, self._first_close))
        floor = self._tick_floor if self._tick_floor is not None else 1e-6 * c
        rules = {"mean_tr": max(cum["tr"] / count, floor), "mean_close": cum["c"] / count,
                 "mean_volume": cum["v"] / count, "close": c, "change_since_first": c - self._first_close,
                 "log_change_since_first": since_first, "lowest_low": self._lo_min, "highest_high": self._hi_max}
        return {k: finite(ind[k], rules[fb] if isinstance(fb, str) else fb) for k, fb in _RAW_FALLBACK}

    # ---- warm-up (FeatureSet.warmup) -------------------------------------------------------------
    def _track_warmup(self, t: int, bar: list[float], market: list[float]) -> None:
        if self._warm:  # every column has had its first valid value: nothing can change
            return
        for first, row in ((self._first_valid_bar, bar), (self._first_valid_market, market)):
            for j, x in enumerate(row):
                if first[j] < 0 and x == x:
                    first[j] = t
        self._warm = min(self._first_valid_bar) >= 0 and min(self._first_valid_market) >= 0

    @property
    def warmup(self) -> int:
        """``FeatureSet.warmup`` of the bars fed so far: the first bar whose window and market row are valid."""
        def lead(first: list[int]) -> int:
            return max(self.n if f < 0 else f for f in first) if first else 0
        return int(max(lead(self._first_valid_bar) + WINDOW - 1, lead(self._first_valid_market), WINDOW - 1))
