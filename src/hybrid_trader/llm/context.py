"""What the advisor is told about one market moment: :class:`AdvisorContext` and its builder.

The context is a small picklable dataclass, so an environment running in a subprocess can
build it (``context_from_market``) and hand it to the main process in ``info``; the
advisor never touches bars or features itself. Every number is in natural units
(price points, dollars, RSI 0-100); missing values are NaN and print as ``n/a``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from hybrid_trader.account_state import AccountState
from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.calendar import session_minute

TREND_LABELS = {2: "strong uptrend", 1: "uptrend", 0: "sideways", -1: "downtrend", -2: "strong downtrend"}
STRONG_ADX = 25.0
"""ADX at or above which an aligned trend is called strong."""


def normalise_mask(mask: Any) -> np.ndarray:
    """Legal-action mask of length 6 (a phase-1 mask of length 3 is padded with False)."""
    if isinstance(mask, np.ndarray) and mask.dtype == np.bool_ and mask.shape == (N_ACTIONS,):
        return mask  # already normal (the common case, checked cheaply)
    m = np.asarray(mask, dtype=bool).ravel()
    if m.size > N_ACTIONS or m.size == 0:
        raise ValueError(f"legal-action mask must have 1-{N_ACTIONS} entries, got {m.size}")
    if m.size < N_ACTIONS:
        m = np.concatenate([m, np.zeros(N_ACTIONS - m.size, dtype=bool)])
    return m


@dataclass
class AdvisorContext:
    """One market moment as the LLM sees it (the fields of the prompt's context template and a few more)."""

    market: str
    """Root symbol, e.g. NQ."""
    timestamp: datetime
    """Start of the decision bar, tz-aware US/Eastern."""
    price: float
    """Close of the decision bar [points]."""
    adx: float = math.nan
    """ADX(14): trend strength [0-100]."""
    vwap_distance: float = math.nan
    """(price - session VWAP) / price [fraction]."""
    rsi: float = math.nan
    """RSI(14) [0-100]."""
    momentum: float = math.nan
    """10-bar price change [points]."""
    atr: float = math.nan
    """ATR(14) [points]."""
    macd_hist: float = math.nan
    """MACD histogram [points]."""
    ret_20: float = math.nan
    """20-bar return [fraction]."""
    ret_60: float = math.nan
    """60-bar return [fraction]."""
    ret_5: float = math.nan
    """5-bar log return [fraction]; NaN in the first 5 bars."""
    session_high_atr: float = math.nan
    """(highest high of the session so far - price) / ATR(14) [ATR, >= 0]; session: Globex, from 18:00 ET."""
    session_low_atr: float = math.nan
    """(price - lowest low of the session so far) / ATR(14) [ATR, >= 0]."""
    session_minutes: float = math.nan
    """Minutes since the Globex session open (18:00 ET) at the bar's start [min]."""
    trend_score: int = 0
    """-2 strong down .. +2 strong up, from SMA20/SMA50 alignment and ADX."""
    trend: str = "sideways"
    """Trend label: strong uptrend, uptrend, sideways, downtrend, strong downtrend."""
    position: int = 0
    """-1 short, 0 flat, +1 long."""
    position_status: str = "FLAT"
    """Position text: 'FLAT', 'LONG 2', 'SHORT 1' (short: tokens cost time)."""
    entry_price: float = math.nan
    """Entry price of the open position [points]; NaN when flat."""
    unrealized_pnl: float = 0.0
    """Open profit or loss [$]."""
    win_rate: float = math.nan
    """Recent win rate [0-1]; NaN before the first trade."""
    consecutive_losses: int = 0
    """Losing trades in a row."""
    balance: float = 0.0
    """Account balance [$]."""
    legal: np.ndarray = field(default_factory=lambda: np.ones(N_ACTIONS, dtype=bool))
    """Legal-action mask, length 6 (HOLD, BUY, SELL, MOVE_SL_TO_BE, ENABLE_TRAIL, DISABLE_TRAIL)."""
    observation: np.ndarray | None = None
    """The raw (unnormalised) observation at this bar, for the student back end; not part of any prompt."""

    def __post_init__(self) -> None:
        self.legal = normalise_mask(self.legal)

    @property
    def minute(self) -> float:
        """Market time in minutes since the Unix epoch (for cache time-to-live)."""
        return self.timestamp.timestamp() / 60.0


def trend_score(close: float, sma20: float, sma50: float, adx: float) -> int:
    """-2..+2: sign from SMA20 vs SMA50 with the close on the same side of SMA50; 2 if ADX >= 25."""
    if not (math.isfinite(close) and math.isfinite(sma20) and math.isfinite(sma50)):
        return 0
    if sma20 > sma50 and close > sma50:
        sign = 1
    elif sma20 < sma50 and close < sma50:
        sign = -1
    else:
        return 0
    return sign * (2 if math.isfinite(adx) and adx >= STRONG_ADX else 1)


def position_text(account: AccountState) -> str:
    if account.position == 0:
        return "FLAT"
    side = "LONG" if account.position > 0 else "SHORT"
    return f"{side} {max(int(account.contracts), 1)}"


def _at(raw: Mapping[str, np.ndarray], key: str, t: int) -> float:
    arr = raw.get(key)
    if arr is None:
        return math.nan
    return float(arr[t])


def session_numbers(bars: Any, t: int, atr: float) -> dict[str, float]:
    """Causal numbers of bar ``t``'s session and recent bars: ``ret_5``, ``session_high_atr``,
    ``session_low_atr``, ``session_minutes`` (bars <= t only; NaN where unknown)."""
    close = bars.close
    price = float(close[t])
    out = {"ret_5": math.log(price / float(close[t - 5])) if t >= 5 and close[t - 5] > 0 and price > 0 else math.nan,
           "session_high_atr": math.nan, "session_low_atr": math.nan, "session_minutes": math.nan}
    high, low = getattr(bars, "session_high", None), getattr(bars, "session_low", None)
    if high is not None and low is not None and math.isfinite(atr) and atr > 0:
        out["session_high_atr"] = (float(high[t]) - price) / atr
        out["session_low_atr"] = (price - float(low[t])) / atr
    minute = getattr(bars, "minute_of_day", None)
    if minute is not None:
        out["session_minutes"] = float(session_minute(int(minute[t])))
    return out


def context_from_market(bars: Any, features: Any, t: int, account: AccountState, mask: Any) -> AdvisorContext:
    """Build the context of bar ``t`` from bars <= t only (causal features) and the account.

    ``bars`` is a :class:`hybrid_trader.data.bars.Bars`; ``features`` anything with a
    ``raw`` dict of float64 arrays (``atr14, rsi14, adx14, vwap, sma20, sma50, mom10,
    macd_hist, ret_20, ret_60``; missing keys become NaN). ``mask`` has 6 (or 3) entries.
    The session numbers (:func:`session_numbers`) come from the bars themselves.
    """
    raw = features.raw
    price = float(bars.close[t])
    adx = _at(raw, "adx14", t)
    vwap = _at(raw, "vwap", t)
    sma20 = _at(raw, "sma20", t)
    sma50 = _at(raw, "sma50", t)
    score = trend_score(price, sma20, sma50, adx)
    atr = _at(raw, "atr14", t)
    nums = session_numbers(bars, t, atr)
    times = getattr(bars, "py_times", None)
    ts = times[t] if times is not None else bars.frame.index[t].to_pydatetime()
    return AdvisorContext(
        market=str(bars.market),
        timestamp=ts,
        price=price,
        adx=adx,
        vwap_distance=(price - vwap) / price if math.isfinite(vwap) and price else math.nan,
        rsi=_at(raw, "rsi14", t),
        momentum=_at(raw, "mom10", t),
        atr=atr,
        macd_hist=_at(raw, "macd_hist", t),
        ret_20=_at(raw, "ret_20", t),
        ret_60=_at(raw, "ret_60", t),
        ret_5=nums["ret_5"],
        session_high_atr=nums["session_high_atr"],
        session_low_atr=nums["session_low_atr"],
        session_minutes=nums["session_minutes"],
        trend_score=score,
        trend=TREND_LABELS[score],
        position=int(np.sign(account.position)),
        position_status=position_text(account),
        entry_price=float(account.entry_price) if account.position else math.nan,
        unrealized_pnl=float(account.unrealized_pnl),
        win_rate=float(account.win_rate),
        consecutive_losses=int(account.consecutive_losses),
        balance=float(account.balance),
        legal=normalise_mask(mask),
    )
