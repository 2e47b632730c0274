"""Splits by time over trading sessions (hybrid_trader.run.splits)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybrid_trader.data.bars import Bars
from hybrid_trader.errors import UserError
from hybrid_trader.run.splits import Split, part_bars, time_split, walk_forward


def _assert_time_ordered(split: Split, n: int) -> None:
    parts = [split.train, split.val, split.test]
    seen = set()
    for r in parts:
        assert not seen & set(r), "parts overlap"
        seen |= set(r)
        assert r.stop <= n
    assert max(split.train) < min(split.test)
    if len(split.val):
        assert max(split.train) < min(split.val) and max(split.val) < min(split.test)


def test_time_split_gives_70_15_15_of_100_sessions_in_time_order():
    s = time_split(100)
    assert (s.train, s.val, s.test) == (range(0, 70), range(70, 85), range(85, 100))


def test_time_split_covers_every_session_once_when_sizes_round():
    s = time_split(21)  # boundaries 14.7 -> 15, 17.85 -> 18
    assert (len(s.train), len(s.val), len(s.test)) == (15, 3, 3)
    assert list(s.train) + list(s.val) + list(s.test) == list(range(21))


@given(n=st.integers(7, 5000), train=st.floats(0.05, 0.9), val=st.floats(0.0, 0.5))
def test_time_split_parts_never_overlap_and_are_ordered_for_any_fractions(n, train, val):
    test = 1.0 - train - val
    if test <= 0.01:
        return
    try:
        s = time_split(n, train, val, test)
    except UserError as err:
        assert "sessions are needed" in str(err) or "too small" in str(err)
        return
    _assert_time_ordered(s, n)
    assert len(s.train) + len(s.val) + len(s.test) == n
    assert len(s.train) > 0 and len(s.test) > 0 and (len(s.val) > 0 or val == 0)


def test_time_split_says_how_many_sessions_are_needed_when_too_few():
    with pytest.raises(UserError, match="at least 6 sessions are needed") as info:
        time_split(3)  # boundaries 2.1 -> 2, 2.55 -> 3: train 2, val 1, test 0
    assert "test 0" in str(info.value)
    with pytest.raises(UserError, match="at least 6"):
        time_split(5)  # 3.5 -> 4, 4.25 -> 4: val 0
    s = time_split(6)  # 4.2 -> 4, 5.1 -> 5: 4 / 1 / 1
    assert all(len(r) >= 1 for r in (s.train, s.val, s.test))


def test_time_split_allows_empty_validation_only_when_asked():
    s = time_split(10, train=0.8, val=0.0, test=0.2)
    assert s.val == range(8, 8) and s.test == range(8, 10)


@pytest.mark.parametrize("fractions", [(0.7, 0.2, 0.2), (0.0, 0.5, 0.5), (0.7, -0.1, 0.4), (0.8, 0.2, 0.0)])
def test_time_split_rejects_bad_fractions(fractions):
    with pytest.raises(UserError):
        time_split(100, *fractions)


def test_split_rejects_overlapping_parts():
    with pytest.raises(ValueError):
        Split(train=range(0, 10), val=range(9, 12), test=range(12, 14))
    with pytest.raises(ValueError):
        Split(train=range(5, 10), val=range(0, 0), test=range(0, 3))


def test_split_round_trips_through_dict_and_describes_dates():
    s = time_split(20)
    assert Split.from_dict(s.to_dict()) == s
    dates = np.arange(np.datetime64("2024-01-01"), np.datetime64("2024-01-21"))
    text = s.describe(dates)
    assert "test  sessions 17-19 (3 days): 2024-01-18 to 2024-01-20" in text


def test_walk_forward_rolling_folds_move_forward_and_end_at_the_data_end():
    folds = walk_forward(30, n_folds=3, train_sessions=10, test_sessions=5, val_sessions=2)
    # need 10 + 2 + 5 + 2 * 5 = 27 sessions; offset 3
    assert [f.train for f in folds] == [range(3, 13), range(8, 18), range(13, 23)]
    assert [f.val for f in folds] == [range(13, 15), range(18, 20), range(23, 25)]
    assert [f.test for f in folds] == [range(15, 20), range(20, 25), range(25, 30)]
    for f in folds:
        _assert_time_ordered(f, 30)
    tests = [i for f in folds for i in f.test]
    assert len(tests) == len(set(tests)), "test windows overlap with the default step"


def test_walk_forward_anchored_training_starts_at_zero_and_grows():
    folds = walk_forward(20, n_folds=3, train_sessions=8, test_sessions=4, anchored=True)
    assert [f.train for f in folds] == [range(0, 8), range(0, 12), range(0, 16)]
    assert [f.test for f in folds] == [range(8, 12), range(12, 16), range(16, 20)]
    assert all(len(f.val) == 0 for f in folds)


def test_walk_forward_with_custom_step_may_overlap_tests_but_never_within_a_fold():
    folds = walk_forward(20, n_folds=4, train_sessions=10, test_sessions=4, step=2)
    assert [f.test.start for f in folds] == [10, 12, 14, 16]  # need 10 + 4 + 3 * 2 = 20, offset 0
    for f in folds:
        _assert_time_ordered(f, 20)


def test_walk_forward_says_how_many_sessions_are_needed():
    with pytest.raises(UserError, match="need 27 trading sessions; the data have 20"):
        walk_forward(20, n_folds=3, train_sessions=10, test_sessions=5, val_sessions=2)
    with pytest.raises(UserError):
        walk_forward(20, n_folds=0, train_sessions=10, test_sessions=5)


def _bars(n_days: int) -> Bars:
    """Three one-minute bars at 09:30 on each of ``n_days`` consecutive calendar days."""
    starts = pd.date_range("2024-01-02 09:30", periods=n_days, freq="D", tz="America/New_York")
    idx = pd.DatetimeIndex([t + pd.Timedelta(minutes=m) for t in starts for m in range(3)])
    frame = pd.DataFrame({c: 1.0 for c in ("open", "high", "low", "close", "volume")}, index=idx)
    return Bars(frame)


def test_part_bars_returns_whole_sessions_of_the_part():
    bars = _bars(10)
    assert bars.n_sessions == 10
    s = time_split(bars.n_sessions)
    test = part_bars(bars, s, "test")
    assert test.n_sessions == len(s.test)
    assert test.frame.index[0] == bars.frame.index[bars.session_bounds[s.test.start, 0]]
    with pytest.raises(UserError, match="unknown split"):
        part_bars(bars, s, "tst")
