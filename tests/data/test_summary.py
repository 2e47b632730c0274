"""Summaries: the three real files in ../shared/data load with the options their README implies."""

from __future__ import annotations

import pytest

from hybrid_trader.data.bars import Bars
from hybrid_trader.data.loader import load_bars
from hybrid_trader.data.summary import format_summary, summarize
from hybrid_trader.data.synthetic import generate_bars
from tests.conftest import ES_1MIN, NQ_1MIN, NQ_5MIN, shared_file


@pytest.fixture(scope="module")
def nq1(shared_data):
    return load_bars(shared_file(NQ_1MIN))


@pytest.fixture(scope="module")
def es1(shared_data):
    return load_bars(shared_file(ES_1MIN), time_shift=-5)


@pytest.fixture(scope="module")
def nq5(shared_data):
    return load_bars(shared_file(NQ_5MIN), tz="America/Chicago")


def test_nq_1min_summary_when_loaded_as_naive_eastern(nq1):
    s = summarize(nq1)
    assert s["market"] == "NQ" and s["rows"] == 14714 and s["bar_minutes"] == 1
    assert s["first"] == "2023-11-19 18:00 EST" and s["last"] == "2023-12-04 16:59 EST"
    assert s["sessions"] == 11 and s["first_session"] == "2023-11-20" and s["last_session"] == "2023-12-04"
    assert s["rth_open"] == "09:30"
    # minutes without volume are omitted by the vendor: one real hole inside a session
    assert s["gaps"]["count"] == 1 and s["gaps"]["missing_bars"] == 1 and s["gaps"]["largest_minutes"] == 2
    assert s["repairs"] == [] and s["dropped_rows"] == 0
    assert s["tick_grid"]["off_grid_prices"] == 0
    assert s["warnings"] == [] and s["break_bars"] == 0


def test_es_1min_rth_opens_at_0930_on_both_sides_of_dst_when_shifted_minus_5(es1):
    s = summarize(es1)
    assert s["market"] == "ES" and s["rows"] == 61929 and s["bar_minutes"] == 1
    assert s["first"] == "2025-09-14 19:00 EDT" and s["last"] == "2025-11-14 17:00 EST"
    assert s["sessions"] == 45 and s["first_session"] == "2025-09-15" and s["last_session"] == "2025-11-14"
    assert s["rth_open"] == "09:30"
    assert s["rth_open_by_period"] == {"EDT": "09:30", "EST": "09:30"}
    assert s["warnings"] == [] and s["repairs"] == []
    # every minute present except two one-hour holes (2025-11-10/11, 22:00-23:00 EST)
    assert s["gaps"]["count"] == 2 and s["gaps"]["missing_bars"] == 120
    assert s["break_bars"] == 9  # Friday bars stamped 17:00 ET
    assert s["tick_grid"]["off_grid_prices"] == 0


def test_es_1min_clock_warning_suggests_minus_5_when_loaded_without_shift(shared_data):
    bars = load_bars(shared_file(ES_1MIN))
    s = summarize(bars)
    assert s["rth_open"] == "14:30"
    assert len(s["warnings"]) == 1 and "--time-shift -5" in s["warnings"][0]


def test_nq_5min_summary_notes_off_grid_prices_when_read_as_chicago(nq5):
    s = summarize(nq5)
    assert s["market"] == "NQ" and s["rows"] == 17286 and s["bar_minutes"] == 5
    assert s["first"] == "2024-01-01 18:00 EST" and s["last"] == "2024-03-28 16:55 EDT"
    assert s["sessions"] == 63
    assert s["rth_open"] == "09:30" and s["rth_open_by_period"] == {"EDT": "09:30", "EST": "09:30"}
    assert s["tick_grid"]["off_grid_fraction"] > 0.9
    assert any(n.startswith("note [tick-grid]") and "back-adjusted" in n for n in s["notes"])
    assert any("Datetime -> timestamp" in n for n in s["notes"])  # capitalised columns matched
    assert s["gaps"]["count"] == 2 and s["gaps"]["missing_bars"] == 6 and s["gaps"]["largest_minutes"] == 30
    assert s["warnings"] == [] and s["repairs"] == []


def test_nq_5min_clock_warning_points_to_chicago_when_read_as_eastern(shared_data):
    s = summarize(load_bars(shared_file(NQ_5MIN)))
    assert s["rth_open"] == "08:30"
    assert "--tz America/Chicago" in s["warnings"][0]


def test_gaps_counted_inside_sessions_only_when_bars_are_missing():
    frame = generate_bars(3, seed=1).frame
    holed = frame.drop(frame.index[[100, 101, 102, 500]])
    s = summarize(Bars(holed, "NQ", 1, "test"))
    assert s["gaps"]["count"] == 2 and s["gaps"]["missing_bars"] == 4 and s["gaps"]["largest_minutes"] == 4
    assert summarize(Bars(frame, "NQ", 1, "test"))["gaps"]["count"] == 0  # the daily break is no gap


def test_format_summary_lists_rows_period_sessions_and_repairs_when_printed(nq5):
    text = format_summary(summarize(nq5))
    for part in (
        "rows          17,286",
        "bar size      5 min",
        "63 Globex trading days",
        "RTH open      09:30",
        "off the 0.25 grid",
    ):
        assert part in text


def test_summary_is_json_serialisable_when_dumped(nq1):
    import json

    back = json.loads(json.dumps(summarize(nq1)))
    assert back["rows"] == 14714


def test_clock_has_no_dst_warning_when_a_file_ends_a_day_after_the_dst_change(shared_data):
    # 2025-01-01 .. 2025-03-11 00:00 Chicago: one trading day (03-10) and two partial evenings in daylight time
    bars = load_bars(shared_file("NQ_1min_2025-01_03_central_ddmm.csv"), tz="America/Chicago")
    s = summarize(bars)
    assert s["rth_open"] == "09:30" and s["rth_open_by_period"] == {"EST": "09:30"}
    assert not any("daylight time" in w for w in s["warnings"]), s["warnings"]


def test_short_days_split_into_the_calendars_early_closes_and_the_rest_when_the_file_ends_midday():
    # 2024-11-26..12-03: the day after Thanksgiving closes early by the CME calendar; 12-02 loses its afternoon;
    # the first (11-26) and last (12-03) sessions of a file are not judged (a file starts and stops mid-session)
    frame = generate_bars(days=6, seed=1, start="2024-11-26").frame
    local = frame.index.tz_convert("America/New_York")
    hhmm = local.strftime("%H:%M")
    day = local.strftime("%Y-%m-%d")
    cut = ((day == "2024-11-29") & (hhmm >= "13:15") & (hhmm < "17:00")) \
        | ((day == "2024-12-02") & (hhmm >= "11:00") & (hhmm < "17:00")) \
        | ((day == "2024-12-03") & (hhmm >= "10:00") & (hhmm < "17:00"))
    s = summarize(Bars(frame[~cut], "NQ", 1, "test"))["short_days"]
    assert s["usual_end"] == "17:00"
    assert s["early_closes"] == [["2024-11-29", "13:15"]]
    assert s["unexplained"] == [["2024-12-02", "11:00"]]
    text = format_summary(summarize(Bars(frame[~cut], "NQ", 1, "test")))
    assert "short days    ending before the usual 17:00 ET: 1 early close(s) of the CME calendar (2024-11-29 13:15); " \
           "1 it does not list (2024-12-02 11:00)" in text
