"""No look-ahead: changing every bar after t changes nothing at or before t."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid_trader.data.bars import Bars
from hybrid_trader.features import FeatureSet, compute_features
from tests.conftest import NQ_1MIN, shared_file
from tests.features import change_after, make_bars


def assert_same_up_to(a: FeatureSet, b: FeatureSet, t: int) -> None:
    s = slice(0, t + 1)
    np.testing.assert_array_equal(a.bar[s], b.bar[s], err_msg=f"bar changed at or before t={t}")
    np.testing.assert_array_equal(a.llm_market[s], b.llm_market[s], err_msg=f"llm_market changed, t={t}")
    np.testing.assert_array_equal(a.atr[s], b.atr[s], err_msg=f"atr changed, t={t}")
    assert set(a.raw) == set(b.raw)
    for key in a.raw:
        np.testing.assert_array_equal(a.raw[key][s], b.raw[key][s], err_msg=f"raw[{key!r}] changed, t={t}")
    if t >= 19:
        np.testing.assert_array_equal(a.window(t), b.window(t))
    assert a.warmup == b.warmup


@pytest.fixture(scope="module")
def nq_bars() -> Bars:
    frame = pd.read_csv(shared_file(NQ_1MIN), index_col="timestamp", parse_dates=True)
    return Bars(frame.tz_localize("America/New_York"), market="NQ", bar_minutes=1)


@pytest.fixture(scope="module")
def nq_features(nq_bars) -> FeatureSet:
    return compute_features(nq_bars)


def _cut_points(bars: Bars, warmup: int) -> list[int]:
    starts = bars.session_bounds[:, 0]
    s2, s5 = int(starts[2]), int(starts[5])
    return [
        25,  # inside every warm-up
        warmup - 1,
        warmup,
        s2 - 1,  # last bar of a session (16:59 ET)
        s2,  # first bar of the next session (18:00 ET): VWAP resets here
        s2 + 1,
        s5 + 3,
        len(bars) // 2 + 17,
        len(bars) - 2,
    ]


def test_features_at_t_when_later_real_bars_change_are_unchanged(nq_bars, nq_features):
    ts = _cut_points(nq_bars, nq_features.warmup)
    assert nq_bars.frame.index[ts[4]].strftime("%H:%M") == "18:00"
    for i, t in enumerate(ts):
        changed = change_after(nq_bars, t, seed=i)
        later = slice(t + 1, None)
        assert not np.allclose(changed.close[later], nq_bars.close[later])  # the future did change
        assert_same_up_to(nq_features, compute_features(changed), t)


def test_features_after_t_when_later_real_bars_change_do_change(nq_bars, nq_features):
    """Guards the test above against comparing two identical computations."""
    t = nq_features.warmup + 500
    other = compute_features(change_after(nq_bars, t, seed=99))
    assert not np.array_equal(other.bar[t + 1 :], nq_features.bar[t + 1 :])
    assert not np.array_equal(other.llm_market[t + 1 :], nq_features.llm_market[t + 1 :])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(min_value=2, max_value=900),
    bar_minutes=st.sampled_from([1, 5, 15]),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    frac=st.floats(min_value=0.0, max_value=1.0),
    flat=st.booleans(),
)
def test_features_at_t_when_later_random_bars_change_are_unchanged(n, bar_minutes, seed, frac, flat):
    flat_run = (n // 3, n // 2) if flat else None
    bars = make_bars(n, bar_minutes=bar_minutes, seed=seed % 10_000, flat_run=flat_run)
    t = min(int(frac * (n - 1)), n - 2)
    assert_same_up_to(compute_features(bars), compute_features(change_after(bars, t, seed)), t)
