"""data.bar_minutes: minute bars resampled within their session (golden values), no look-ahead, bad sizes refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data.bars import Bars
from hybrid_trader.data.resample import resample_bars
from hybrid_trader.data.synthetic import generate_bars
from hybrid_trader.errors import UserError
from hybrid_trader.run.config import DataConfig
from hybrid_trader.run.market import load_bars_from_config

ROWS = [  # ET stamp (bar start), open, high, low, close, volume; 09:37 missing (a gap), a session break after 16:59
    ("2024-01-02 09:30", 100, 102, 99, 101, 1), ("2024-01-02 09:31", 101, 103, 100, 102, 2),
    ("2024-01-02 09:32", 102, 104, 101, 103, 3), ("2024-01-02 09:33", 103, 105, 102, 104, 4),
    ("2024-01-02 09:34", 104, 106, 103, 105, 5), ("2024-01-02 09:35", 105, 107, 104, 106, 6),
    ("2024-01-02 09:36", 106, 108, 105, 107, 7), ("2024-01-02 09:38", 107, 115, 106, 108, 8),
    ("2024-01-02 09:39", 108, 110, 90, 109, 9), ("2024-01-02 16:58", 109, 111, 108, 110, 10),
    ("2024-01-02 16:59", 110, 112, 109, 111, 11), ("2024-01-02 18:00", 111, 113, 110, 112, 12),
    ("2024-01-02 18:01", 112, 114, 111, 113, 13),
]


def small(rows=ROWS, minutes: int = 1) -> Bars:
    index = pd.DatetimeIndex([r[0] for r in rows]).tz_localize("America/New_York")
    frame = pd.DataFrame([r[1:] for r in rows], index=index, columns=["open", "high", "low", "close", "volume"])
    return Bars(frame.astype(float), market="NQ", bar_minutes=minutes, source="small.csv")


def table(bars: Bars) -> list[tuple]:
    return [(t.strftime("%m-%d %H:%M"), *map(float, row)) for t, row in zip(bars.frame.index,
                                                                            bars.frame.to_numpy(), strict=True)]


@pytest.mark.parametrize("minutes, expected", [
    (5, [("01-02 09:30", 100, 106, 99, 105, 15), ("01-02 09:35", 105, 115, 90, 109, 30),
         ("01-02 16:55", 109, 112, 108, 111, 21), ("01-02 18:00", 111, 114, 110, 113, 25)]),
    (3, [("01-02 09:30", 100, 104, 99, 103, 6), ("01-02 09:33", 103, 107, 102, 106, 15),
         ("01-02 09:36", 106, 115, 105, 108, 15), ("01-02 09:39", 108, 110, 90, 109, 9),
         ("01-02 16:57", 109, 112, 108, 111, 21), ("01-02 18:00", 111, 114, 110, 113, 25)]),
    (15, [("01-02 09:30", 100, 115, 90, 109, 45), ("01-02 16:45", 109, 112, 108, 111, 21),
          ("01-02 18:00", 111, 114, 110, 113, 25)]),
])
def test_minute_bars_resample_to_golden_ohlcv_within_each_session(minutes, expected):
    out = resample_bars(small(), minutes)
    assert table(out) == [tuple(map(lambda x: float(x) if not isinstance(x, str) else x, r)) for r in expected]
    assert out.bar_minutes == minutes and out.market == "NQ" and out.n_sessions == 2  # 18:00 opens 01-03's session
    assert list(out.session_dates.astype(str)) == ["2024-01-02", "2024-01-03"]
    assert str(out.frame.index.tz) == "America/New_York" and out.frame.index.name == small().frame.index.name
    assert any(f.code == "resampled" for f in out.findings)
    assert resample_bars(small(), 1) is not None and table(resample_bars(small(), 1)) == table(small())


def test_a_resampled_bar_uses_no_minute_from_after_its_end():
    """Every minute from ``t`` on changed: each 5-minute bar that ends by ``t`` is unchanged; the one holding
    ``t`` changes (the check can fail)."""
    bars = generate_bars(days=3, seed=1)
    before = resample_bars(bars, 5).frame
    cut = 1003  # mid-interval
    t = bars.frame.index[cut]
    changed = bars.frame.copy()
    changed.iloc[cut:, :4] *= 1.01
    changed.iloc[cut:, 4] += 7
    after = resample_bars(Bars(changed, bars.market, 1, bars.source), 5).frame
    ends = before.index + pd.Timedelta(minutes=5)
    done = ends <= t
    assert done.sum() > 100
    pd.testing.assert_frame_equal(before[done], after[done])
    assert not np.allclose(before[~done].iloc[0].to_numpy(), after[~done].iloc[0].to_numpy())


def test_bar_minutes_from_the_config_resamples_the_synthetic_and_file_bars():
    one = load_bars_from_config(DataConfig(synthetic_days=3))
    five = load_bars_from_config(DataConfig(synthetic_days=3, bar_minutes=5))
    assert five.bar_minutes == 5 and len(five) == len(one) // 5 and five.n_sessions == one.n_sessions
    assert five.frame["volume"].sum() == one.frame["volume"].sum()


@pytest.mark.parametrize("bars, minutes, message", [
    (small(), 7, "does not divide the 1380-minute Globex session"),
    (small(), 0, "does not divide"),
    (small(ROWS[::5], minutes=5), 1, "finer than the data"),
    (small(ROWS[::5], minutes=10), 15, "not a multiple of 10"),
    (small([(t.replace("09:3", "09:4"), *r) for t, *r in ROWS[:1]] + [("2024-01-02 09:47", 1, 2, 0, 1, 1)], 5), 15,
     "off the 5-minute grid"),
])
def test_a_bar_size_the_data_or_the_session_cannot_give_is_refused(bars, minutes, message):
    with pytest.raises(UserError, match=message) as err:
        resample_bars(bars, minutes)
    assert err.value.fix


def test_the_config_refuses_a_bar_size_that_does_not_divide_the_session():
    with pytest.raises(UserError, match="data.bar_minutes: 7 minutes does not divide"):
        DataConfig(bar_minutes=7)


def test_real_minute_bars_keep_their_sessions_and_volume_and_no_bar_crosses_the_close():
    from hybrid_trader.data import load_bars
    from tests.conftest import NQ_1MIN, shared_file

    one = load_bars(shared_file(NQ_1MIN))
    for minutes in (5, 15):
        out = resample_bars(one, minutes)
        ends = (out.minute_of_day.astype(int) - 18 * 60) % 1440 + minutes  # the bar's end, minutes after 18:00 ET
        assert (ends <= 23 * 60).all() and out.n_sessions == one.n_sessions
        assert out.frame["volume"].sum() == one.frame["volume"].sum()
        assert len(one) / minutes <= len(out) < len(one)
        # each bar is the aggregate of the minutes stamped inside it (a few checked against the 1-minute bars)
        for t in out.frame.index[:: max(1, len(out) // 7)]:
            inside = one.frame[(one.frame.index >= t) & (one.frame.index < t + pd.Timedelta(minutes=minutes))]
            got = out.frame.loc[t]
            assert (got["open"], got["high"], got["low"], got["close"], got["volume"]) == (
                inside["open"].iloc[0], inside["high"].max(), inside["low"].min(), inside["close"].iloc[-1],
                inside["volume"].sum())
