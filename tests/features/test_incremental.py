"""IncrementalFeatures: every column of the table (``features.names``) one bar at a time, bit-identical to
compute_features, and causal."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data import Bars, generate_bars, load_bars
from hybrid_trader.features import compute_features
from hybrid_trader.features.base import compute_indicators, raw_fallbacks
from hybrid_trader.features.incremental import IncrementalFeatures
from hybrid_trader.features.llm_features import market_feature_columns
from hybrid_trader.features.names import BAR_FEATURE_NAMES, MARKET_FEATURE_NAMES, RAW_FALLBACKS, RAW_NAMES
from tests.conftest import shared_file as real_file


def _feed(bars: Bars) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray], IncrementalFeatures]:
    inc = IncrementalFeatures(bars.market, bars.bar_minutes)
    n = len(bars)
    bar, mkt, atr = np.empty((n, 11), np.float32), np.empty((n, 28), np.float32), np.empty(n)
    raw = {k: np.empty(n) for k in RAW_NAMES}
    cols = zip(bars.frame.index.asi8, bars.open, bars.high, bars.low, bars.close, bars.volume)
    for i, (ts, o, h, lo, c, v) in enumerate(cols):
        row = inc.append(int(ts), o, h, lo, c, v)
        assert row.index == i
        bar[i], mkt[i], atr[i] = row.bar, row.llm_market, row.atr
        for k in RAW_NAMES:
            raw[k][i] = row.raw[k]
    return bar, mkt, atr, raw, inc


def _columns(bar: np.ndarray, mkt: np.ndarray, atr: np.ndarray, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every column of the table by name: the bar and market features, the ATR, the raw indicators."""
    return {**{name: bar[:, j] for j, name in enumerate(BAR_FEATURE_NAMES)},
            **{name: mkt[:, j] for j, name in enumerate(MARKET_FEATURE_NAMES)},
            "atr": atr, **{f"raw.{k}": v for k, v in raw.items()}}


def _assert_equal_to_batch(bars: Bars) -> None:
    """Every batch column has its incremental twin, equal bit for bit at every bar (NaN nowhere: both finite)."""
    fs = compute_features(bars)
    bar, mkt, atr, raw, inc = _feed(bars)
    assert list(fs.raw) == RAW_NAMES  # the batch gives the table's raw columns, in its order
    batch, incremental = _columns(fs.bar, fs.llm_market, fs.atr, fs.raw), _columns(bar, mkt, atr, raw)
    assert list(batch) == list(incremental)
    for name, column in batch.items():
        np.testing.assert_array_equal(incremental[name], column, err_msg=f"column {name}")
    assert inc.warmup == fs.warmup


def test_batch_computes_exactly_the_tables_raw_columns() -> None:
    bars = generate_bars(1, seed=2)
    ind = compute_indicators(bars)
    _, extras = market_feature_columns(bars, ind)
    assert [*ind, *extras] == RAW_NAMES
    assert sorted(raw_fallbacks(bars, ind["tr"])) == sorted(RAW_FALLBACKS)


@pytest.mark.parametrize(("bar_minutes", "days"), [(1, 3), (5, 12), (60, 25)])
def test_incremental_features_equal_batch_when_synthetic(bar_minutes: int, days: int) -> None:
    # 5-minute bars make the 5-minute volume mean a 1-bar window, 60-minute bars every strided RSI a plain one
    _assert_equal_to_batch(generate_bars(days, seed=7, bar_minutes=bar_minutes))


def test_incremental_features_equal_batch_when_market_unknown() -> None:
    bars = generate_bars(2, seed=1)
    other = Bars(bars.frame, market="CL", bar_minutes=1)  # no contract spec: ATR floored at 1e-6 * close
    _assert_equal_to_batch(other)


def test_incremental_features_equal_batch_when_real_nq_1min() -> None:
    _assert_equal_to_batch(load_bars(real_file("NQ_1min_2023-11_eastern.csv")))


def test_incremental_features_equal_batch_when_real_back_adjusted_5min() -> None:
    _assert_equal_to_batch(load_bars(real_file("NQ_5min_2024Q1_chicago_adjusted.csv"), tz="CT"))


def test_incremental_features_equal_batch_when_vendor_filled_flat_bars() -> None:
    # ES file: every minute present, gaps filled with flat bars (constant runs: the rolling kernels'
    # equal-values rule and the variance recompute); a week of it keeps the test short
    bars = load_bars(real_file("ES_1min_2025-09_11_eastern_plus5h.csv"), time_shift=-5)
    _assert_equal_to_batch(bars.slice_sessions(0, 4))


def test_features_at_t_unchanged_when_later_bars_perturbed() -> None:
    bars = generate_bars(2, seed=11)
    t = 1500
    frame = bars.frame.copy()
    rng = np.random.default_rng(0)
    later = frame.iloc[t + 1 :]
    shock = rng.normal(0, 25.0, size=len(later))
    for col in ("open", "high", "low", "close"):
        frame.iloc[t + 1 :, frame.columns.get_loc(col)] = later[col].to_numpy() + shock
    frame.iloc[t + 1 :, frame.columns.get_loc("volume")] = later["volume"].to_numpy() * 3 + 7
    perturbed = Bars(frame, bars.market, bars.bar_minutes)
    a_bar, a_mkt, a_atr, a_raw, _ = _feed(bars)
    b_bar, b_mkt, b_atr, b_raw, _ = _feed(perturbed)
    np.testing.assert_array_equal(a_bar[: t + 1], b_bar[: t + 1])
    np.testing.assert_array_equal(a_mkt[: t + 1], b_mkt[: t + 1])
    np.testing.assert_array_equal(a_atr[: t + 1], b_atr[: t + 1])
    for k in RAW_NAMES:
        np.testing.assert_array_equal(a_raw[k][: t + 1], b_raw[k][: t + 1])
    assert not np.array_equal(a_bar[t + 1 :], b_bar[t + 1 :])  # the perturbation did change later rows
    # and the rows up to t are the batch's on bars[:t+1] alone
    head = compute_features(Bars(frame.iloc[: t + 1], bars.market, bars.bar_minutes))
    np.testing.assert_array_equal(b_mkt[: t + 1], head.llm_market)


def test_append_refuses_bar_when_time_not_after_previous() -> None:
    inc = IncrementalFeatures("NQ", 1)
    t0 = pd.Timestamp("2024-01-02 09:30", tz="America/New_York")
    inc.append(t0, 100, 101, 99, 100.5, 10)
    with pytest.raises(ValueError, match="not after the previous bar"):
        inc.append(t0, 100, 101, 99, 100.5, 10)
    with pytest.raises(ValueError, match="naive timestamp"):
        inc.append(pd.Timestamp("2024-01-02 09:31"), 100, 101, 99, 100.5, 10)


def test_from_bars_then_append_equals_batch_when_restarting_on_history() -> None:
    bars = generate_bars(2, seed=4)
    fs = compute_features(bars)
    cut = len(bars) - 30
    inc, last = IncrementalFeatures.from_bars(Bars(bars.frame.iloc[:cut], bars.market, bars.bar_minutes))
    assert last is not None and last.index == cut - 1
    np.testing.assert_array_equal(last.llm_market, fs.llm_market[cut - 1])
    for i in range(cut, len(bars)):
        row = inc.append(bars.frame.index[i], bars.open[i], bars.high[i], bars.low[i], bars.close[i], bars.volume[i])
        np.testing.assert_array_equal(row.bar, fs.bar[i])
        np.testing.assert_array_equal(row.llm_market, fs.llm_market[i])
        assert row.atr == fs.atr[i]
