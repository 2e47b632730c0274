"""The trading day's window: the executor's bar-by-bar questions give the environment's windows."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.calendar import session_minute
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.env.day_window import DayWindow, EpisodeWindow
from hybrid_trader.errors import UserError

from .helpers import flat_session, make_bars, stub_features


def streamed(window: DayWindow, bars, features) -> list[EpisodeWindow]:
    """The windows found as the executor finds them: one bar at a time, no later bar known (a window whose last bar
    never comes ends at the last bar inside it, decided on as any other)."""
    out: list[EpisodeWindow] = []
    sm = session_minute(bars.minute_of_day.astype(np.int64))
    for s, (lo, hi) in enumerate(bars.session_bounds):
        first = last = last_entry = seen = -1
        end = window.end_on(bars.session_dates[s])
        for t in range(int(lo), int(hi) + 1):
            place = window.at(int(sm[t]), t, features, end)
            if not place.inside or last >= 0:
                continue
            first = t if first < 0 else first
            seen = t
            if place.last:
                last = t
            elif place.may_enter:
                last_entry = t
        if last >= 0:
            out.append(EpisodeWindow(s, first, last, last_entry))
        elif seen > first >= 0:  # the bars stopped before the window's end
            out.append(EpisodeWindow(s, first, seen, last_entry, end_known=False))
    return out


@pytest.mark.parametrize("cfg", [EnvConfig(), EnvConfig(trade_start="08:00", trade_end="17:30", last_entry="16:30"),
                                 EnvConfig(trade_start="09:00", trade_end="09:45", last_entry="09:40"),
                                 EnvConfig(calendar="")])
def test_streamed_windows_are_the_environments_when_every_bar_comes(cfg):
    rows = flat_session("2024-01-03", "07:00", 640) + flat_session("2024-01-04", "07:00", 640)
    bars = make_bars(rows)
    features = stub_features(bars)
    env = TradingEnv(bars, features, cfg)
    assert env.episode_windows == streamed(env.day_window, bars, features)
    assert len(env.episode_windows) == 2


@pytest.mark.parametrize("calendar", ["CMES", ""])
def test_streamed_windows_are_the_environments_on_an_early_close_and_a_day_whose_bars_stop(calendar):
    # 2024-11-29 (the day after Thanksgiving) closes 13:00 ET by the calendar; 2024-12-02's bars stop at 11:29
    rows = (flat_session("2024-11-26", "07:00", 640) + flat_session("2024-11-29", "07:00", 375)
            + flat_session("2024-12-02", "07:00", 270))
    bars = make_bars(rows)
    features = stub_features(bars)
    env = TradingEnv(bars, features, EnvConfig(calendar=calendar))
    wins = env.episode_windows
    assert wins == streamed(env.day_window, bars, features)
    hhmm = [(bars.frame.index[w.last].strftime("%H:%M"), w.end_known) for w in wins]
    if calendar:  # known in advance: the window ends a minute before the close, as the flat-by time before 17:00
        assert hhmm == [("15:59", True), ("12:58", True), ("11:29", False)]
        assert bars.frame.index[wins[1].last_entry].strftime("%H:%M") == "12:57"
    else:  # no calendar: nobody knows 2024-11-29 ends early, so its last bar is decided on and an entry dropped
        assert hhmm == [("15:59", True), ("13:14", False), ("11:29", False)]
        assert wins[1].last_entry == wins[1].last
    assert wins[2].last_entry == wins[2].last, "the last bar of bars that stop early may decide an entry"


def test_window_ends_at_the_flat_by_time_and_entries_stop_at_last_entry_when_trade_end_is_later():
    bars = make_bars(flat_session("2024-01-03", "16:00", 70))
    env = TradingEnv(bars, stub_features(bars), EnvConfig(trade_start="16:00", trade_end="17:30", last_entry="16:50"))
    window = env.day_window
    minute = session_minute(16 * 60 + 58)
    assert window.at(minute, 60, stub_features(bars), window.end).last  # flat-by 16:59: the 16:58 bar ends at it
    assert not window.at(session_minute(16 * 60 + 57), 60, stub_features(bars), window.end).last
    assert window.at(session_minute(16 * 60 + 59), 60, stub_features(bars), window.end).over
    assert window.at(session_minute(16 * 60 + 50), 50, stub_features(bars), window.end).may_enter
    assert not window.at(session_minute(16 * 60 + 51), 51, stub_features(bars), window.end).may_enter
    (w,) = env.episode_windows
    assert bars.frame.index[w.last].strftime("%H:%M") == "16:58"
    assert bars.frame.index[w.last_entry].strftime("%H:%M") == "16:50"


def test_no_bar_is_inside_before_the_feature_warmup_when_the_hours_are():
    bars = make_bars(flat_session("2024-01-03", "09:30", 60))
    features = stub_features(bars)
    features.warmup = 40
    window = DayWindow.of(EnvConfig(), TradingEnv(bars, features, EnvConfig()).account)
    place = window.at(session_minute(9 * 60 + 31), 1, features, window.end)
    assert place.hours and not place.inside
    assert window.at(session_minute(10 * 60 + 10), 40, features, window.end).inside


def test_an_unknown_calendar_is_refused_with_its_name_and_the_fix():
    bars = make_bars(flat_session("2024-01-03", "09:30", 60))
    with pytest.raises(UserError, match="env.calendar: 'NOPE' is not an exchange calendar") as err:
        TradingEnv(bars, stub_features(bars), EnvConfig(calendar="NOPE"))
    assert "'CMES'" in str(err.value) and "'' for none" in str(err.value)
