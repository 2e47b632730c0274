"""A built-in NQ-like futures market, with an optional planted edge whose answer is known.

:func:`generate_market` (and its shortcut :func:`generate_bars`) builds, fully vectorised
in numpy and deterministic for a seed:

- **Sessions** as on CME Globex: Sunday 18:00 to Friday 17:00 ET, one trading day per
  weekday (18:00 ET the evening before to 17:00 ET), the 17:00-18:00 ET daily break,
  no weekends (holidays are not modelled). A trading day of 1-minute bars has 1380 bars.
- **Intraday profile**: U-shaped volume and volatility in the regular session (RTH,
  09:30-16:00 ET: a surge at the open, a lull at midday, a rise into the close), a
  news bump at 08:30, a quiet overnight.
- **Volatility clustering**: a daily GARCH(1,1) (alpha 0.08, beta 0.90) driven by each
  day's own standardised return, times an intraday AR(1) log-volatility (half-life
  60 minutes); Student-t(5) shocks.
- **Prices** on the contract's tick grid (0.25 for NQ), ``open`` = previous ``close``,
  ``low <= open, close <= high``; integer volumes.
- **Planted edge** (the right answer for tests and demos): signal bars at random times
  in RTH, 20 to 60 bars apart. A signal bar has a volume spike (about 4x normal) and a
  body (``close - open``) in its direction ``d`` (+1 or -1). Over the ``horizon``
  (default 15) bars after it, the log price drifts by ``d * edge * sigma_s`` per bar,
  where ``sigma_s`` is the signal bar's volatility (per-bar standard deviation of log
  returns). With ``edge=0`` the same signal bars (spike and body) exist, with no drift
  after them: volume and body alone carry no information. ``edge`` 0.3 is strong
  (expected move over the horizon about 1.2 times its noise); 0.1 is subtle (about 0.4).

The random draws do not depend on ``edge``: for one seed, markets with different edges
differ only by the drift after signal bars.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hybrid_trader.calendar import (
    EASTERN,
    MINUTES_PER_DAY,
    RTH_CLOSE_MINUTE,
    RTH_OPEN_MINUTE,
    SESSION_CLOSE_MINUTE,
    SESSION_MINUTES,
    SESSION_OPEN_MINUTE,
    session_open_times,
)
from hybrid_trader.data.bars import Bars
from hybrid_trader.data.findings import DataFinding
from hybrid_trader.errors import UserError
from hybrid_trader.markets import get_contract

DEFAULT_HORIZON = 15
"""Bars over which a signal's drift acts."""
SIGNAL_GAP_BARS = (20, 60)
"""Signal bars are this many bars apart (uniform, inclusive)."""
SIGNAL_VOLUME_SPIKE = 4.0
"""Volume multiplier of a signal bar."""
SIGMA_1MIN = 0.00045
"""Standard deviation of 1-minute log returns at the RTH midday level (about 7 NQ points at 16000)."""
ALLOWED_BAR_MINUTES = (1, 2, 3, 5, 10, 15, 30, 60)

START_PRICE = {
    "NQ": 16000.0,
    "MNQ": 16000.0,
    "ES": 4750.0,
    "MES": 4750.0,
    "YM": 37500.0,
    "MYM": 37500.0,
    "RTY": 2000.0,
    "M2K": 2000.0,
}
"""Default first price per contract."""
BASE_VOLUME = {
    "NQ": 900.0,
    "MNQ": 2500.0,
    "ES": 2500.0,
    "MES": 3500.0,
    "YM": 250.0,
    "MYM": 400.0,
    "RTY": 250.0,
    "M2K": 600.0,
}
"""Contracts per minute at the RTH midday level."""



@dataclass
class SyntheticMarket:
    """A generated market and the answer to its planted edge."""

    bars: Bars
    """The bars (source ``synthetic:days=..,seed=..,edge=..``)."""
    signal_index: np.ndarray
    """Bar index of each signal bar (int64, increasing); signals exist for any ``edge``."""
    signal_direction: np.ndarray
    """Direction of each signal (int8, +1 up, -1 down): its body's sign and its drift's."""
    edge: float
    """Drift per bar after a signal, in units of the signal bar's volatility."""
    horizon: int
    """Bars after a signal bar over which the drift acts."""
    volatility: np.ndarray
    """Per-bar standard deviation of log returns used to generate each bar (float64)."""
    seed: int = 0
    """Seed the market was generated from."""


def intraday_profile(minute_of_day: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Volatility and volume multipliers per minute of day (ET); 1.0 = RTH midday level."""
    m = np.asarray(minute_of_day, dtype=np.float64)
    sig = np.full(m.shape, 0.35)
    vol = np.full(m.shape, 0.10)
    europe = (m >= 3 * 60) & (m < 8 * 60 + 30)
    sig[europe], vol[europe] = 0.45, 0.16
    pre = (m >= 8 * 60 + 30) & (m < RTH_OPEN_MINUTE)
    news = np.exp(-(m - 510.0) / 5.0)
    sig[pre] = 0.5 + 0.8 * news[pre]
    vol[pre] = 0.25 + 0.9 * news[pre]
    rth = (m >= RTH_OPEN_MINUTE) & (m < RTH_CLOSE_MINUTE)
    t = m - RTH_OPEN_MINUTE
    sig[rth] = (0.85 + 1.6 * np.exp(-t / 20.0) + 0.5 * np.exp(-(389.0 - t) / 25.0))[rth]
    vol[rth] = (1.0 + 3.0 * np.exp(-t / 15.0) + 1.5 * np.exp(-(389.0 - t) / 12.0))[rth]
    post = (m >= RTH_CLOSE_MINUTE) & (m < SESSION_CLOSE_MINUTE)
    tp = m - RTH_CLOSE_MINUTE
    sig[post] = (0.45 + 0.3 * np.exp(-tp / 10.0))[post]
    vol[post] = (0.2 + 0.6 * np.exp(-tp / 10.0))[post]
    return sig, vol


def _ar1(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    """Stationary AR(1) series of length ``n`` by FFT convolution (no Python loop over bars)."""
    length = int(np.ceil(np.log(1e-6) / np.log(phi))) if phi > 0 else 1
    e = rng.standard_normal(n + length) * sd * np.sqrt(1.0 - phi * phi)
    kernel = phi ** np.arange(length)
    size = 1 << int(np.ceil(np.log2(len(e) + length)))
    x = np.fft.irfft(np.fft.rfft(e, size) * np.fft.rfft(kernel, size), size)[: len(e)]
    return x[length:]


def _trading_dates(start: str, days: int) -> pd.DatetimeIndex:
    try:
        first = pd.Timestamp(start).normalize()
    except (ValueError, TypeError):
        raise UserError(f"start date '{start}' cannot be read.", fix="give a date like 2024-01-02") from None
    if first.tz is not None:
        first = first.tz_localize(None)
    return pd.bdate_range(first, periods=days)


def generate_market(
    days: int = 60,
    *,
    seed: int = 0,
    edge: float = 0.0,
    market: str = "NQ",
    start: str = "2024-01-02",
    bar_minutes: int = 1,
    start_price: float | None = None,
    horizon: int = DEFAULT_HORIZON,
) -> SyntheticMarket:
    """Generate ``days`` Globex trading days (weekdays from ``start``) of synthetic bars.

    ``edge`` is the drift per bar after a signal in units of the signal bar's
    volatility (0 = no edge; 0.1 subtle; 0.3 strong). See the module docstring.
    """
    days = int(days)
    if days < 1:
        raise UserError(f"days must be at least 1 (got {days}).", fix="e.g. days=60")
    if bar_minutes not in ALLOWED_BAR_MINUTES:
        raise UserError(
            f"bar size {bar_minutes} min is not supported by the synthetic market.",
            fix=f"use one of {', '.join(map(str, ALLOWED_BAR_MINUTES))}",
        )
    edge = float(edge)
    if not np.isfinite(edge) or edge < 0 or edge > 5:
        raise UserError(
            f"edge {edge} is out of range.", fix="give an edge between 0 (none) and about 0.5 (0.3 is strong)"
        )
    horizon = int(horizon)
    if horizon < 1 or horizon >= SIGNAL_GAP_BARS[0]:
        raise UserError(f"horizon {horizon} bars is out of range.", fix=f"give 1 to {SIGNAL_GAP_BARS[0] - 1} bars")
    contract = get_contract(market)
    sym = contract.symbol
    tick = contract.tick_size
    p0 = float(start_price) if start_price is not None else START_PRICE[sym]
    if not np.isfinite(p0) or p0 <= 0:
        raise UserError(f"start price {start_price} must be a positive number.", fix="e.g. start_price=16000")
    rng = np.random.default_rng(seed)
    b = int(bar_minutes)

    # ---- calendar -------------------------------------------------------------------
    dates = _trading_dates(start, days)
    per = SESSION_MINUTES // b
    offsets = np.arange(per, dtype=np.int64) * b  # minutes since 18:00 the evening before
    sess_open = session_open_times(dates)
    naive = (sess_open[:, None] + offsets[None, :].astype("timedelta64[m]")).ravel()
    index = pd.DatetimeIndex(naive.astype("datetime64[ns]")).tz_localize(
        EASTERN, ambiguous="raise", nonexistent="raise"
    )
    n = days * per
    day_of_bar = np.repeat(np.arange(days), per)
    minute = (SESSION_OPEN_MINUTE + offsets + (b - 1) / 2.0) % MINUTES_PER_DAY  # mid-bar minute of day
    sig_prof, vol_prof = intraday_profile(np.tile(minute, days))

    # ---- random draws (never depend on edge) ------------------------------------------
    z = rng.standard_t(5, n) / np.sqrt(5.0 / 3.0)
    x_intraday = _ar1(rng, n, 0.5 ** (b / 60.0), 0.30)
    vol_noise = rng.normal(-0.5 * 0.35**2, 0.35, n)
    wick_up = np.abs(rng.standard_normal(n))
    wick_dn = np.abs(rng.standard_normal(n))
    open_gap = rng.standard_normal(days)
    n_rth = (RTH_CLOSE_MINUTE - RTH_OPEN_MINUTE) // b
    k_max = n_rth // SIGNAL_GAP_BARS[0] + 2
    first_off = rng.integers(2, SIGNAL_GAP_BARS[0] + 1, size=(days, 1))
    gaps = rng.integers(SIGNAL_GAP_BARS[0], SIGNAL_GAP_BARS[1] + 1, size=(days, k_max - 1))
    dirs_all = np.where(rng.random((days, k_max)) < 0.5, -1, 1).astype(np.int8)
    body_extra = np.abs(rng.standard_normal((days, k_max)))

    # ---- volatility: daily GARCH(1,1) x intraday AR(1) log-vol ------------------------
    w = sig_prof * np.sqrt(b)
    day_z = np.bincount(day_of_bar, weights=w * z, minlength=days) / np.sqrt(
        np.bincount(day_of_bar, weights=w * w, minlength=days)
    )
    alpha, beta = 0.08, 0.90
    h = np.empty(days)
    h[0] = 1.0
    for d in range(1, days):  # one scalar step per day, not per bar
        h[d] = (1 - alpha - beta) + alpha * h[d - 1] * day_z[d - 1] ** 2 + beta * h[d - 1]
    sigma = SIGMA_1MIN * w * np.sqrt(h)[day_of_bar] * np.exp(x_intraday - 0.5 * 0.30**2)
    r = sigma * z
    sess_first = np.arange(days) * per
    r[sess_first[1:]] += SIGMA_1MIN * 0.35 * np.sqrt(60.0) * open_gap[1:]  # across the daily break

    # ---- signals ------------------------------------------------------------------------
    rth_first = (RTH_OPEN_MINUTE - SESSION_OPEN_MINUTE + MINUTES_PER_DAY) % MINUTES_PER_DAY // b
    pos = np.cumsum(np.concatenate([first_off, gaps], axis=1), axis=1)
    ok = pos <= n_rth - horizon - 1
    sig_idx = (sess_first[:, None] + rth_first + pos)[ok].astype(np.int64)
    sig_dir = dirs_all[ok]
    s_sigma = sigma[sig_idx]
    r[sig_idx] = sig_dir * (np.abs(z[sig_idx]) + 0.5 + 0.5 * body_extra[ok]) * s_sigma
    if edge > 0:
        drift_at = (sig_idx[:, None] + np.arange(1, horizon + 1)[None, :]).ravel()
        np.add.at(r, drift_at, np.repeat(sig_dir * edge * s_sigma, horizon))

    # ---- prices on the tick grid -------------------------------------------------------
    close_t = np.round(p0 * np.exp(np.cumsum(r)) / tick).astype(np.int64)
    open_t = np.empty_like(close_t)
    open_t[0] = int(round(p0 / tick))
    open_t[1:] = close_t[:-1]
    body = close_t[sig_idx] - open_t[sig_idx]
    wrong = np.sign(body) != sig_dir
    close_t[sig_idx[wrong]] = open_t[sig_idx[wrong]] + sig_dir[wrong]  # at least one tick in d
    open_t[1:] = close_t[:-1]
    pts = sigma * np.exp(np.cumsum(r)) * p0 / tick  # volatility in ticks
    up = np.round(0.6 * wick_up * pts).astype(np.int64)
    dn = np.round(0.6 * wick_dn * pts).astype(np.int64)
    high_t = np.maximum(open_t, close_t) + up
    low_t = np.maximum(np.minimum(open_t, close_t) - dn, 1)
    decimals = max(0, int(np.ceil(-np.log10(tick))) + 2)

    def px(ticks: np.ndarray) -> np.ndarray:
        return np.round(ticks * tick, decimals)

    # ---- volume ------------------------------------------------------------------------
    lam = BASE_VOLUME[sym] * b * vol_prof * np.sqrt(h)[day_of_bar] * np.exp(0.8 * x_intraday + vol_noise)
    lam[sig_idx] *= SIGNAL_VOLUME_SPIKE
    volume = np.maximum(1.0, np.round(lam))

    frame = pd.DataFrame(
        {"open": px(open_t), "high": px(high_t), "low": px(low_t), "close": px(close_t), "volume": volume},
        index=index.as_unit("ns"),
    )
    frame.index.name = "timestamp"
    source = f"synthetic:days={days},seed={seed},edge={edge:g}"
    findings = [
        DataFinding(
            "note",
            "synthetic",
            f"built-in {sym}-like market: {days} Globex trading days from {dates[0]:%Y-%m-%d}, "
            f"{b}-min bars, seed {seed}, tick {tick:g}",
        ),
        DataFinding(
            "note",
            "synthetic",
            f"{len(sig_idx)} signal bars (volume spike x{SIGNAL_VOLUME_SPIKE:g}, body in the signal's "
            f"direction); planted edge {edge:g} x the signal bar's volatility per bar over the next {horizon} bars"
            + (" (edge 0: no drift after signals)" if edge == 0 else ""),
        ),
    ]
    bars = Bars(frame, market=sym, bar_minutes=b, source=source, findings=list(findings))
    return SyntheticMarket(
        bars=bars,
        signal_index=sig_idx,
        signal_direction=sig_dir.astype(np.int8),
        edge=edge,
        horizon=horizon,
        volatility=sigma,
        seed=seed,
    )


def generate_bars(
    days: int = 60,
    *,
    seed: int = 0,
    edge: float = 0.0,
    market: str = "NQ",
    start: str = "2024-01-02",
    bar_minutes: int = 1,
    start_price: float | None = None,
) -> Bars:
    """Bars of :func:`generate_market` (the built-in default market of demos and tests)."""
    return generate_market(
        days, seed=seed, edge=edge, market=market, start=start, bar_minutes=bar_minutes, start_price=start_price
    ).bars
