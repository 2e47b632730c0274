"""The built-in synthetic market: sessions, tick grid, OHLC, determinism and the planted edge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data.summary import summarize
from hybrid_trader.data.synthetic import (
    SIGNAL_GAP_BARS,
    generate_bars,
    generate_market,
    intraday_profile,
)
from hybrid_trader.errors import UserError


@pytest.fixture(scope="module")
def market():
    return generate_market(20, seed=7, edge=0.3)


def t_stat(x: np.ndarray) -> float:
    return float(x.mean() / x.std(ddof=1) * np.sqrt(len(x)))


def forward_returns(m, horizon: int | None = None) -> np.ndarray:
    h = m.horizon if horizon is None else horizon
    c = m.bars.close
    s = m.signal_index
    return np.log(c[s + h] / c[s]) * m.signal_direction


def test_sessions_follow_globex_when_generated(market):
    bars = market.bars
    idx = bars.frame.index
    assert bars.n_sessions == 20 and len(bars) == 20 * 1380
    first, last = bars.session_bounds[:, 0], bars.session_bounds[:, 1]
    assert (bars.minute_of_day[first] == 18 * 60).all() and (bars.minute_of_day[last] == 16 * 60 + 59).all()
    m = bars.minute_of_day
    assert not ((m >= 17 * 60) & (m < 18 * 60)).any()  # daily break
    dow = idx.day_of_week.to_numpy()
    assert not (dow == 5).any()  # no Saturday
    assert (m[dow == 6] >= 18 * 60).all()  # Sunday only from 18:00
    assert (m[dow == 4] < 17 * 60).all()  # Friday until 17:00
    assert sorted(pd.DatetimeIndex(bars.session_dates).day_of_week.unique()) == [0, 1, 2, 3, 4]
    assert idx.is_monotonic_increasing and idx.is_unique and str(idx.tz) == "America/New_York"


def test_prices_on_tick_grid_and_ohlc_consistent_when_generated(market):
    f = market.bars.frame
    px = f[["open", "high", "low", "close"]].to_numpy()
    assert np.allclose(px / 0.25, np.round(px / 0.25), atol=1e-9, rtol=0)
    assert (f["low"] <= f[["open", "close"]].min(axis=1)).all()
    assert (f["high"] >= f[["open", "close"]].max(axis=1)).all()
    assert (f["low"] > 0).all()
    v = f["volume"].to_numpy()
    assert (v >= 1).all() and np.array_equal(v, np.round(v))
    assert summarize(market.bars)["tick_grid"]["off_grid_prices"] == 0


def test_other_contract_uses_its_tick_and_bar_size_when_asked():
    bars = generate_bars(3, seed=1, market="RTY", bar_minutes=5, start_price=2000)
    assert bars.market == "RTY" and bars.bar_minutes == 5 and len(bars) == 3 * 276
    px = bars.frame[["open", "high", "low", "close"]].to_numpy()
    assert np.allclose(px / 0.1, np.round(px / 0.1), atol=1e-6, rtol=0)
    assert np.unique(np.diff(bars.frame.index.asi8))[0] == 5 * 60 * 10**9


def test_same_seed_gives_identical_bars_and_other_seed_differs_when_regenerated():
    a = generate_market(3, seed=11, edge=0.2)
    b = generate_market(3, seed=11, edge=0.2)
    pd.testing.assert_frame_equal(a.bars.frame, b.bars.frame)
    np.testing.assert_array_equal(a.signal_index, b.signal_index)
    c = generate_bars(3, seed=12, edge=0.2)
    assert not np.array_equal(a.bars.close, c.close)


def test_edge_changes_only_the_drift_when_seed_is_fixed():
    a = generate_market(3, seed=5, edge=0.0)
    b = generate_market(3, seed=5, edge=0.3)
    np.testing.assert_array_equal(a.signal_index, b.signal_index)
    np.testing.assert_array_equal(a.signal_direction, b.signal_direction)
    np.testing.assert_array_equal(a.bars.volume, b.bars.volume)
    np.testing.assert_array_equal(a.bars.close[: a.signal_index[0] + 1], b.bars.close[: b.signal_index[0] + 1])


def test_intraday_profile_is_u_shaped_with_quiet_overnight_when_averaged(market):
    bars = market.bars
    m = bars.minute_of_day
    keep = np.ones(len(bars), bool)
    keep[market.signal_index] = False
    v = bars.volume

    def mean_vol(lo: int, hi: int) -> float:
        return float(v[keep & (m >= lo) & (m < hi)].mean())

    open_, mid, close, night = mean_vol(570, 600), mean_vol(720, 810), mean_vol(930, 960), mean_vol(0, 180)
    assert open_ > 2 * mid and close > 1.3 * mid and mid > 4 * night
    r = np.abs(np.diff(np.log(bars.close)))
    rm = m[1:]
    assert r[(rm >= 570) & (rm < 600)].mean() > 1.5 * r[(rm >= 720) & (rm < 810)].mean() > 1.5 * r[(rm < 180)].mean()
    assert summarize(bars)["rth_open"] == "09:30"
    sig, vol = intraday_profile(np.array([0, 570, 750, 959]))
    assert sig[1] > sig[2] < sig[3] and vol[1] > vol[2] < vol[3] and vol[0] < vol[2]


def test_volatility_clusters_when_profile_is_removed():
    m = generate_market(30, seed=2)
    bars = m.bars
    r = np.diff(np.log(bars.close))
    sig, _ = intraday_profile(bars.minute_of_day[1:])
    a = np.abs(r / sig)
    a = a - a.mean()
    acf = [float(np.dot(a[:-k], a[k:]) / np.dot(a, a)) for k in (1, 10, 30)]
    assert min(acf) > 0.05
    day_vol = np.array([np.std(r[s:e]) for s, e in bars.session_bounds[:, :]])
    assert day_vol.max() / day_vol.min() > 1.5  # daily GARCH regime changes


def test_signal_bars_have_volume_spike_and_body_in_direction_when_generated(market):
    bars, s, d = market.bars, market.signal_index, market.signal_direction
    assert len(s) > 20 * 5 and d.dtype == np.int8 and set(np.unique(d)) == {-1, 1}
    assert (np.sign(bars.close[s] - bars.open[s]) == d).all()
    ratio = bars.volume[s] / np.median(
        np.stack([bars.volume[s - 2], bars.volume[s - 1], bars.volume[s + 1], bars.volume[s + 2]]), axis=0
    )
    assert 2.5 < np.median(ratio) < 6
    m = bars.minute_of_day
    assert ((m[s] >= 570) & (m[s + market.horizon] < 960)).all()  # signal and drift inside RTH
    same_session = bars.session_id[s[1:]] == bars.session_id[s[:-1]]
    assert (np.diff(s)[same_session] >= SIGNAL_GAP_BARS[0]).all()


def test_forward_return_after_signals_has_signal_sign_when_edge_is_positive():
    strong = generate_market(40, seed=3, edge=0.3)
    subtle = generate_market(40, seed=3, edge=0.1)
    assert t_stat(forward_returns(strong)) > 8
    assert t_stat(forward_returns(subtle)) > 3
    drift_in_sigmas = forward_returns(strong) / strong.volatility[strong.signal_index]
    assert 0.3 * 15 * 0.7 < drift_in_sigmas.mean() < 0.3 * 15 * 1.3


def test_forward_return_after_signals_is_zero_when_edge_is_zero():
    null = generate_market(40, seed=3, edge=0.0)
    assert abs(t_stat(forward_returns(null))) < 3
    assert any("edge 0: no drift" in n for n in null.bars.notes)


def test_source_and_notes_describe_the_market_when_generated(market):
    assert market.bars.source == "synthetic:days=20,seed=7,edge=0.3"
    assert any(n.startswith("note [synthetic]") for n in market.bars.notes)
    assert market.horizon == 15 and market.edge == 0.3 and len(market.volatility) == len(market.bars)


def test_start_on_weekend_moves_to_monday_when_generated():
    bars = generate_bars(2, seed=0, start="2024-01-06")  # a Saturday
    assert str(bars.session_dates[0]) == "2024-01-08"
    assert bars.frame.index[0] == pd.Timestamp("2024-01-07 18:00", tz="America/New_York")


@pytest.mark.parametrize(
    "kw", [dict(days=0), dict(bar_minutes=7), dict(edge=-0.1), dict(market="XX"), dict(start="someday")]
)
def test_invalid_arguments_raise_user_error_when_generating(kw):
    args = dict(days=2) | kw
    with pytest.raises(UserError):
        generate_market(**args)
