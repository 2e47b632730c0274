"""BarsSoFar: the bars grown one at a time read as Bars, and a snapshot's round trip through the journal's prices."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from hybrid_trader.data import Bars, generate_bars, load_bars
from hybrid_trader.data.bars_so_far import KEPT_BARS, BarsSoFar
from hybrid_trader.features.names import WINDOW
from tests.conftest import shared_file

ATTRIBUTES = ("open", "high", "low", "close", "volume", "minute_of_day", "trading_date", "session_high",
              "session_low")


def grown(bars: Bars) -> BarsSoFar:
    so_far = BarsSoFar(bars.market, bars.bar_minutes)
    cols = (bars.frame.index.asi8.tolist(), bars.open.tolist(), bars.high.tolist(), bars.low.tolist(),
            bars.close.tolist(), bars.volume.tolist())
    for ts, o, h, lo, c, v in zip(*cols):
        so_far.push(ts, o, h, lo, c, v)
    return so_far


def assert_same_as(so_far: BarsSoFar, bars: Bars) -> None:
    assert len(so_far) == len(bars)
    assert (so_far.market, so_far.bar_minutes) == (bars.market, bars.bar_minutes)
    for name in ATTRIBUTES:
        np.testing.assert_array_equal(np.asarray(getattr(so_far, name)), getattr(bars, name), err_msg=name)
    assert so_far.time_ns == bars.frame.index.asi8.tolist()
    for t in (0, len(bars) // 2, len(bars) - 1):
        assert so_far.py_times[t] == bars.py_times[t]
        assert so_far.py_times[t].utcoffset() == bars.py_times[t].utcoffset()


@pytest.mark.parametrize("bar_minutes", [1, 5])
def test_bars_so_far_equal_bars_when_grown_bar_by_bar(bar_minutes: int) -> None:
    bars = generate_bars(4, seed=3, bar_minutes=bar_minutes)
    assert_same_as(grown(bars), bars)


def test_bars_so_far_equal_bars_when_real_nq_crosses_sessions_and_a_dst_change() -> None:
    bars = load_bars(shared_file("NQ_1min_2023-11_eastern.csv"))  # 2023-11-05: the end of daylight-saving time
    assert_same_as(grown(bars), bars)


def test_snapshot_keeps_the_newest_bars_and_fill_restores_every_attribute_from_the_journals_prices() -> None:
    bars = generate_bars(3, seed=5)
    so_far = grown(bars)
    restored = pickle.loads(pickle.dumps(so_far))
    assert KEPT_BARS >= WINDOW  # the newest observation's window is among the bars kept
    assert restored.missing == len(bars) - KEPT_BARS and np.isnan(restored.close[0])
    assert restored.close[-KEPT_BARS:] == so_far.close[-KEPT_BARS:]
    prices = {"o": bars.open, "h": bars.high, "lo": bars.low, "c": bars.close, "v": bars.volume,
              "time_ns": bars.frame.index.asi8}
    restored.fill(prices)
    assert restored.missing == 0
    assert_same_as(restored, bars)
    restored.push(int(bars.frame.index.asi8[-1]) + 60 * 10**9, 1.0, 2.0, 0.5, 1.5, 3.0)  # it grows on as before
    assert len(restored) == len(bars) + 1


def test_fill_refuses_prices_when_they_are_not_the_bars_pushed() -> None:
    bars = generate_bars(2, seed=6)
    restored = pickle.loads(pickle.dumps(grown(bars)))
    other = bars.close.copy()
    other[-1] += 0.25
    prices = {"o": bars.open, "h": bars.high, "lo": bars.low, "c": other, "v": bars.volume,
              "time_ns": bars.frame.index.asi8}
    with pytest.raises(ValueError, match="not the .* the snapshot was taken after"):
        restored.fill(prices)
