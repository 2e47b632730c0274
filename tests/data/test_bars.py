"""Bars: the session's running high and low."""

from __future__ import annotations

import numpy as np

from tests.features import change_after, make_bars


def test_session_high_and_low_when_read_are_the_extremes_of_the_session_so_far():
    bars = make_bars(1200, bar_minutes=5, seed=2)
    for first, last in bars.session_bounds[:3]:
        for t in (first, first + 7, last):
            assert bars.session_high[t] == bars.high[first:t + 1].max()
            assert bars.session_low[t] == bars.low[first:t + 1].min()


def test_session_high_and_low_when_later_bars_change_are_unchanged_up_to_t():
    bars = make_bars(1200, bar_minutes=5, seed=4)
    t = int(bars.session_bounds[1, 0]) + 20
    changed = change_after(bars, t, seed=5)
    np.testing.assert_array_equal(changed.session_high[: t + 1], bars.session_high[: t + 1])
    np.testing.assert_array_equal(changed.session_low[: t + 1], bars.session_low[: t + 1])
