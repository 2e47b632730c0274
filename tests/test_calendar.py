"""The one calendar: US/Eastern, the 18:00 ET session roll (DST days, Sunday open), trading windows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid_trader import calendar as cal
from hybrid_trader.data.bars import Bars
from hybrid_trader.errors import UserError


def et(*stamps: str) -> pd.DatetimeIndex:
    return pd.DatetimeIndex([pd.Timestamp(s, tz=cal.EASTERN) for s in stamps])


def test_trading_date_rolls_at_1800_et_when_a_bar_starts_at_the_open():
    idx = et("2023-11-20 16:59", "2023-11-20 17:59", "2023-11-20 18:00", "2023-11-20 23:59", "2023-11-21 00:00")
    dates = cal.trading_date(idx).astype(str).tolist()
    assert dates == ["2023-11-20", "2023-11-20", "2023-11-21", "2023-11-21", "2023-11-21"]


def test_sunday_open_belongs_to_mondays_session_when_after_a_friday_close():
    idx = et("2024-01-05 16:58", "2024-01-05 16:59", "2024-01-07 18:00", "2024-01-07 18:01", "2024-01-08 09:30")
    td = cal.trading_date(idx)
    assert td.astype(str).tolist() == ["2024-01-05", "2024-01-05", "2024-01-08", "2024-01-08", "2024-01-08"]
    sid = cal.session_ids(td)
    assert sid.tolist() == [0, 0, 1, 1, 1] and sid.dtype == np.int32
    assert cal.session_bounds(sid).tolist() == [[0, 1], [2, 4]]


def test_session_keeps_its_1800_open_when_dst_starts_on_sunday():
    # 2024-03-10: clocks go 02:00 EST -> 03:00 EDT; Friday is EST, Sunday evening EDT.
    idx = et("2024-03-08 16:59", "2024-03-10 18:00", "2024-03-11 09:30")
    assert cal.utc_offset_labels(idx).tolist() == ["EST", "EDT", "EDT"]
    mod = cal.minute_of_day(idx)
    assert mod.tolist() == [16 * 60 + 59, 18 * 60, 9 * 60 + 30]
    assert cal.session_minute(mod).tolist() == [22 * 60 + 59, 0, 15 * 60 + 30]
    assert cal.trading_date(idx).astype(str).tolist() == ["2024-03-08", "2024-03-11", "2024-03-11"]


def test_repeated_hour_maps_to_one_wall_clock_minute_when_dst_ends():
    # 2024-11-03 01:30 happens twice (EDT, then EST): one wall-clock minute, one trading date.
    first = pd.Timestamp("2024-11-03 05:30", tz="UTC").tz_convert(cal.EASTERN)
    second = pd.Timestamp("2024-11-03 06:30", tz="UTC").tz_convert(cal.EASTERN)
    idx = pd.DatetimeIndex([first, second])
    assert cal.utc_offset_labels(idx).tolist() == ["EDT", "EST"]
    assert cal.minute_of_day(idx).tolist() == [90, 90]
    assert cal.trading_date(idx).astype(str).tolist() == ["2024-11-03", "2024-11-03"]


def test_to_eastern_converts_utc_and_refuses_naive_timestamps():
    idx = pd.DatetimeIndex(["2024-03-08 14:30", "2024-03-11 13:30"]).tz_localize("UTC")
    east = cal.to_eastern(idx)
    assert str(east.tz) == cal.EASTERN and cal.minute_of_day(east).tolist() == [570, 570]
    with pytest.raises(ValueError):
        cal.to_eastern(pd.DatetimeIndex(["2024-03-08 14:30"]))


def test_eastern_from_utc_and_fmt_eastern_when_values_are_naive_utc():
    naive = np.array(["2023-11-20T14:31:00", "2024-07-01T13:30:00"], dtype="datetime64[ns]")
    idx = cal.eastern_from_utc(naive)
    assert [t.strftime("%H:%M %Z") for t in idx] == ["09:31 EST", "09:30 EDT"]
    assert cal.fmt_eastern(naive[0]) == "2023-11-20 09:31:00 EST"
    assert cal.fmt_eastern(np.datetime64("NaT")) == "NaT"


def test_trading_date_reads_a_naive_index_as_eastern_wall_clock():
    naive = pd.DatetimeIndex(["2023-11-20 18:00", "2023-11-20 17:00"])
    assert cal.trading_date(naive).astype(str).tolist() == ["2023-11-21", "2023-11-20"]


def test_bars_sessions_come_from_the_calendar_when_built_from_a_frame():
    idx = et("2024-03-08 16:58", "2024-03-08 16:59", "2024-03-10 18:00", "2024-03-10 18:01")
    frame = pd.DataFrame({c: np.full(4, 100.0) for c in ("open", "high", "low", "close", "volume")}, index=idx)
    bars = Bars(frame)
    np.testing.assert_array_equal(bars.trading_date, cal.trading_date(idx))
    assert bars.session_id.tolist() == [0, 0, 1, 1] and bars.n_sessions == 2
    assert bars.session_dates.astype(str).tolist() == ["2024-03-08", "2024-03-11"]


def test_session_open_times_are_1800_the_evening_before_each_trading_date():
    opens = cal.session_open_times(pd.DatetimeIndex(["2024-01-08", "2024-01-09"]))
    assert opens.astype(str).tolist() == ["2024-01-07T18:00", "2024-01-08T18:00"]


@pytest.mark.parametrize(
    "text, minutes", [("09:30", 570), ("00:00", 0), ("16:59", 1019), ("24:00", 1440), ("9:05", 545)]
)
def test_parse_hhmm_returns_minutes_when_the_time_is_valid(text, minutes):
    assert cal.parse_hhmm(text, "trade_start") == minutes


@pytest.mark.parametrize("text", ["9.30", "25:00", "12:60", "24:01", "noon", "", "-1:00"])
def test_parse_hhmm_error_names_the_key_value_and_fix_when_malformed(text):
    with pytest.raises(UserError) as info:
        cal.parse_hhmm(text, "trade_start")
    err = info.value
    assert "env.trade_start" in err.message and f"'{text}'" in err.message
    assert "HH:MM" in err.fix


def test_parse_hhmm_names_another_section_when_given():
    with pytest.raises(UserError) as info:
        cal.parse_hhmm("7pm", "flat_by", section="rules")
    assert info.value.message.startswith("rules.flat_by:")


def test_trading_window_in_session_minutes_when_end_is_the_session_open():
    assert cal.trading_window("09:30", "16:00") == (930, 1320)
    assert cal.trading_window("18:00", "18:00") == (0, 1440)  # the whole session
    assert cal.trading_window("20:00", "02:00") == (120, 480)  # across midnight
    sm = cal.session_minute(np.array([9 * 60 + 29, 9 * 60 + 30, 15 * 60 + 59, 16 * 60]))
    assert cal.in_window(sm, (930, 1320)).tolist() == [False, True, True, False]


def test_trading_window_error_when_start_is_not_before_end():
    with pytest.raises(UserError) as info:
        cal.trading_window("16:00", "09:30")
    assert "env.trade_start '16:00'" in info.value.message and "18:00" in info.value.message
    with pytest.raises(UserError):
        cal.trading_window("09:30", "9h")


def test_fmt_minute_pads_hours_and_keeps_none():
    assert cal.fmt_minute(570) == "09:30" and cal.fmt_minute(0) == "00:00" and cal.fmt_minute(None) is None


def test_wall_clock_equals_pandas_when_crossing_dst_changes() -> None:
    clock = cal.EasternClock()
    # every 7 minutes (and a second off) through 2024's two changes, and odd nanoseconds
    start, stop = pd.Timestamp("2024-03-09", tz="UTC").value, pd.Timestamp("2024-11-05", tz="UTC").value
    times = list(range(start, stop, 7 * 60 * 10**9 + 10**9)) + [pd.Timestamp("2024-03-10 07:00", tz="UTC").value - 1,
                                                                 pd.Timestamp("2024-11-03 06:00", tz="UTC").value - 1]
    for ns in times:
        et = pd.Timestamp(ns, tz="UTC").tz_convert(cal.EASTERN)
        wall = clock.wall_ns(ns)
        assert wall == et.tz_localize(None).value
        assert cal.EasternClock.minute_of_day(wall) == et.hour * 60 + et.minute
        assert clock.trading_date(wall) == np.datetime64((et.tz_localize(None) + cal.SESSION_ROLL).date(), "D")
