"""AdvisorContext and its builder from bars, raw features and the account."""

from __future__ import annotations

import math
import pickle
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data.bars import EASTERN, Bars
from hybrid_trader.llm.context import AccountState, context_from_market, normalise_mask, trend_score


def tiny_market(n: int = 60):
    idx = pd.date_range(pd.Timestamp("2024-01-03 09:30", tz=EASTERN), periods=n, freq="1min")
    close = 16800.0 + np.arange(n) * 0.5
    frame = pd.DataFrame({"open": close, "high": close + 1, "low": close - 1, "close": close,
                          "volume": np.full(n, 100.0)}, index=idx)
    bars = Bars(frame, market="NQ")
    raw = {
        "atr14": np.full(n, 12.0), "rsi14": np.linspace(40, 70, n), "adx14": np.full(n, 30.0),
        "vwap": close - 8.0, "sma20": close - 2.0, "sma50": close - 5.0, "mom10": np.full(n, 5.0),
        "macd_hist": np.zeros(n), "ret_20": np.full(n, 0.001), "ret_60": np.full(n, 0.002),
    }
    return bars, SimpleNamespace(raw=raw)


def test_context_when_built_reads_bar_t_and_the_account():
    bars, feats = tiny_market()
    acc = AccountState(position=1, contracts=2, entry_price=16810.0, unrealized_pnl=250.0, balance=50_250.0,
                       win_rate=0.6, consecutive_losses=1)
    ctx = context_from_market(bars, feats, 40, acc, [True, False, False, True, True, False])
    assert ctx.price == bars.close[40] and ctx.timestamp == bars.frame.index[40]
    assert ctx.rsi == pytest.approx(feats.raw["rsi14"][40])
    assert ctx.vwap_distance == pytest.approx(8.0 / bars.close[40])
    assert ctx.trend_score == 2 and ctx.trend == "strong uptrend"
    assert ctx.position == 1 and ctx.position_status == "LONG 2" and ctx.entry_price == 16810.0
    assert ctx.legal.tolist() == [True, False, False, True, True, False]


def test_missing_raw_key_when_built_gives_nan():
    bars, feats = tiny_market()
    del feats.raw["adx14"]
    ctx = context_from_market(bars, feats, 10, AccountState(), [True, True, True])
    assert math.isnan(ctx.adx) and ctx.trend_score == 1  # aligned but not strong without ADX


def test_phase1_mask_when_normalised_is_padded_to_six():
    assert normalise_mask([True, True, False]).tolist() == [True, True, False, False, False, False]
    with pytest.raises(ValueError):
        normalise_mask([True] * 7)


@pytest.mark.parametrize("close, s20, s50, adx, expected", [
    (105, 104, 100, 30, 2), (105, 104, 100, 10, 1), (95, 96, 100, 30, -2), (99, 101, 100, 30, 0),
    (100, float("nan"), 100, 30, 0),
])
def test_trend_score_when_smas_align_follows_sign_and_adx(close, s20, s50, adx, expected):
    assert trend_score(close, s20, s50, adx) == expected


def test_context_when_pickled_round_trips_for_subprocess_environments():
    bars, feats = tiny_market()
    ctx = context_from_market(bars, feats, 5, AccountState(), [True, True, True, False, False, False])
    again = pickle.loads(pickle.dumps(ctx))
    assert again.timestamp == ctx.timestamp and again.legal.tolist() == ctx.legal.tolist()


# --------------------------------------------------------------- session numbers (issue 21 item 3)
def test_session_numbers_when_built_measure_the_session_so_far():
    from tests.features import make_bars

    bars = make_bars(900, bar_minutes=5, seed=3)
    feats = SimpleNamespace(raw={"atr14": np.full(len(bars), 10.0)})
    start = int(bars.session_bounds[1, 0])
    t = start + 30
    ctx = context_from_market(bars, feats, t, AccountState(), [True, True, True])
    price = bars.close[t]
    assert ctx.session_high_atr == pytest.approx((bars.high[start:t + 1].max() - price) / 10.0)
    assert ctx.session_low_atr == pytest.approx((price - bars.low[start:t + 1].min()) / 10.0)
    assert ctx.session_high_atr >= 0 and ctx.session_low_atr >= 0
    assert ctx.ret_5 == pytest.approx(math.log(price / bars.close[t - 5]))
    assert ctx.session_minutes == 30 * 5  # the synthetic sessions open at 18:00 ET
    first = context_from_market(bars, feats, 2, AccountState(), [True, True, True])
    assert math.isnan(first.ret_5)


def test_context_at_t_when_later_bars_change_is_unchanged():
    from hybrid_trader.features import compute_features
    from tests.features import change_after, make_bars

    bars = make_bars(1500, bar_minutes=5, seed=7)
    feats = compute_features(bars)
    starts = bars.session_bounds[:, 0]
    for i, t in enumerate([3, int(starts[1]) - 1, int(starts[1]), int(starts[2]) + 40, len(bars) - 2]):
        changed = change_after(bars, t, seed=i)
        assert not np.allclose(changed.close[t + 1:], bars.close[t + 1:])  # the future did change
        acc = AccountState(position=1, contracts=1, entry_price=16000.0, unrealized_pnl=50.0, balance=50_050.0)
        a = context_from_market(bars, feats, t, acc, [True] * 6)
        b = context_from_market(changed, compute_features(changed), t, acc, [True] * 6)
        for name in ("price", "ret_5", "ret_20", "ret_60", "atr", "vwap_distance", "session_high_atr",
                     "session_low_atr", "session_minutes", "rsi", "adx", "momentum", "macd_hist"):
            x, y = getattr(a, name), getattr(b, name)
            assert (math.isnan(x) and math.isnan(y)) or x == y, (name, t, x, y)
        assert a.trend == b.trend and a.timestamp == b.timestamp
