"""Each validation: a clear UserError by default, a recorded repair with repair=True."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data.loader import load_bars
from hybrid_trader.data.summary import summarize
from hybrid_trader.data.validate import ROW_NOTE_LIMIT, parse_repair_notes
from hybrid_trader.errors import UserError

HEADER = "timestamp,open,high,low,close,volume"
GOOD = [
    "2023-11-20 09:30:00,15900.00,15905.00,15895.00,15902.00,1000",
    "2023-11-20 09:31:00,15902.00,15906.00,15900.00,15904.00,900",
    "2023-11-20 09:32:00,15904.00,15908.00,15901.00,15903.00,800",
    "2023-11-20 09:33:00,15903.00,15907.00,15902.00,15906.00,700",
    "2023-11-20 09:34:00,15906.00,15910.00,15904.00,15909.00,600",
    "2023-11-20 09:35:00,15909.00,15911.00,15905.00,15907.00,500",
]


def write(tmp_path: Path, rows: list[str], name: str = "NQ_test.csv", header: str = HEADER) -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def with_row(i: int, row: str) -> list[str]:
    """GOOD with data row ``i`` (0-based; file line i + 2) replaced."""
    rows = list(GOOD)
    rows[i] = row
    return rows


def error_of(path: Path, **kw) -> UserError:
    with pytest.raises(UserError) as info:
        load_bars(path, **kw)
    return info.value


def repairs(bars) -> dict[str, dict]:
    return {r["kind"]: r for r in parse_repair_notes(bars.notes)}


def test_clean_file_loads_when_every_row_is_valid(tmp_path):
    bars = load_bars(write(tmp_path, GOOD))
    assert len(bars) == 6
    assert parse_repair_notes(bars.notes) == []
    assert str(bars.frame.index.tz) == "America/New_York"
    assert bars.frame.index[0] == pd.Timestamp("2023-11-20 09:30", tz="America/New_York")


def test_missing_column_error_names_it_and_the_fix_when_volume_is_absent(tmp_path):
    path = write(tmp_path, [r.rsplit(",", 1)[0] for r in GOOD], header="timestamp,open,high,low,close")
    err = error_of(path)
    assert err.column == "volume"
    assert err.file == str(path)
    assert "missing column volume" in err.message
    assert "vol" in err.fix  # the accepted aliases are listed


def test_missing_timestamp_column_error_when_no_date_like_column(tmp_path):
    path = write(tmp_path, [r.split(",", 1)[1] for r in GOOD], header="open,high,low,close,volume")
    err = error_of(path)
    assert err.column == "timestamp"
    assert "date + time" in err.fix


def test_unparseable_timestamp_error_names_line_row_and_value(tmp_path):
    path = write(tmp_path, with_row(2, "2023-11-20 09:3x:00,15904.00,15908.00,15901.00,15903.00,800"))
    err = error_of(path)
    assert err.row == 3 and "line 4" in err.message
    assert err.column == "timestamp" and err.value == "2023-11-20 09:3x:00"
    assert "1 row affected" in err.message
    assert "--repair" in err.fix


def test_unparseable_timestamp_row_dropped_and_reported_when_repair(tmp_path):
    path = write(tmp_path, with_row(2, "not a date,15904.00,15908.00,15901.00,15903.00,800"))
    bars = load_bars(path, repair=True)
    assert len(bars) == 5
    rep = repairs(bars)["bad-timestamp"]
    assert rep["action"] == "dropped" and rep["rows"] == 1
    assert any(n.startswith("  line 4:") and "not a date" in n for n in bars.notes)


@pytest.mark.parametrize(
    "bad, shown", [("nan", "is missing"), ("", "is missing"), ("inf", "is infinite"), ("abc", "is not a number")]
)
def test_bad_price_error_names_column_and_problem_when_nan_inf_or_text(tmp_path, bad, shown):
    path = write(tmp_path, with_row(1, f"2023-11-20 09:31:00,15902.00,{bad},15900.00,15904.00,900"))
    err = error_of(path)
    assert err.column == "high" and err.row == 2 and "line 3" in err.message
    assert shown in err.message


def test_bad_price_row_dropped_when_repair(tmp_path):
    path = write(tmp_path, with_row(1, "2023-11-20 09:31:00,15902.00,inf,15900.00,15904.00,900"))
    bars = load_bars(path, repair=True)
    assert len(bars) == 5
    assert pd.Timestamp("2023-11-20 09:31", tz="America/New_York") not in bars.frame.index
    assert repairs(bars)["bad-price"]["rows"] == 1


def test_bad_volume_error_when_volume_is_text(tmp_path):
    err = error_of(write(tmp_path, with_row(3, "2023-11-20 09:33:00,15903.00,15907.00,15902.00,15906.00,lots")))
    assert err.column == "volume" and err.value == "lots" and err.row == 4


def test_bad_volume_set_to_zero_when_repair(tmp_path):
    bars = load_bars(
        write(tmp_path, with_row(3, "2023-11-20 09:33:00,15903.00,15907.00,15902.00,15906.00,nan")), repair=True
    )
    assert len(bars) == 6 and bars.volume[3] == 0.0
    assert repairs(bars)["bad-volume"]["action"] == "repaired"


def test_non_positive_price_error_when_low_is_zero(tmp_path):
    err = error_of(write(tmp_path, with_row(4, "2023-11-20 09:34:00,15906.00,15910.00,0,15909.00,600")))
    assert err.column == "low" and err.value == 0.0 and err.row == 5 and "line 6" in err.message


def test_non_positive_price_row_dropped_when_repair(tmp_path):
    bars = load_bars(write(tmp_path, with_row(4, "2023-11-20 09:34:00,-1,15910.00,15904.00,15909.00,600")), repair=True)
    assert len(bars) == 5 and (bars.frame[["open", "high", "low", "close"]] > 0).all().all()
    assert repairs(bars)["non-positive-price"]["rows"] == 1


def test_high_below_low_error_when_columns_are_swapped(tmp_path):
    err = error_of(write(tmp_path, with_row(2, "2023-11-20 09:32:00,15904.00,15901.00,15908.00,15903.00,800")))
    assert err.column == "high" and err.value == 15901.0 and "below low" in err.message


def test_high_below_low_swapped_when_repair(tmp_path):
    bars = load_bars(
        write(tmp_path, with_row(2, "2023-11-20 09:32:00,15904.00,15901.00,15908.00,15903.00,800")), repair=True
    )
    assert bars.high[2] == 15908.0 and bars.low[2] == 15901.0
    assert repairs(bars)["high-below-low"]["rows"] == 1


def test_open_outside_range_error_when_open_above_high(tmp_path):
    err = error_of(write(tmp_path, with_row(2, "2023-11-20 09:32:00,15920.00,15908.00,15901.00,15903.00,800")))
    assert err.column == "open" and err.value == 15920.0 and "outside" in err.message


def test_close_outside_range_widens_low_when_repair(tmp_path):
    bars = load_bars(
        write(tmp_path, with_row(2, "2023-11-20 09:32:00,15904.00,15908.00,15901.00,15890.00,800")), repair=True
    )
    assert bars.low[2] == 15890.0 and bars.close[2] == 15890.0 and bars.high[2] == 15908.0
    assert repairs(bars)["open-close-outside"]["rows"] == 1
    assert any("low 15901 -> 15890" in n for n in bars.notes)


def test_duplicate_timestamp_error_names_both_lines(tmp_path):
    rows = with_row(3, GOOD[2].replace("15906.00,700", "15906.00,700"))
    rows[3] = "2023-11-20 09:32:00,15903.00,15907.00,15902.00,15906.00,700"
    err = error_of(write(tmp_path, rows))
    assert err.row == 4 and "line 5" in err.message and "line 4" in err.message


def test_duplicate_timestamp_keeps_first_when_repair(tmp_path):
    rows = list(GOOD)
    rows.insert(3, "2023-11-20 09:32:00,1.0e4,1.1e4,0.9e4,1.0e4,1")  # conflicting duplicate of line 4
    bars = load_bars(write(tmp_path, rows), repair=True)
    assert len(bars) == 6 and bars.open[2] == 15904.0
    assert repairs(bars)["duplicate-timestamp"]["rows"] == 1
    assert any("line 5:" in n and "repeats line 4" in n and "different values" in n for n in bars.notes)


def test_unsorted_error_when_a_row_goes_back_in_time(tmp_path):
    rows = list(GOOD)
    rows[2], rows[3] = rows[3], rows[2]
    err = error_of(write(tmp_path, rows))
    assert err.row == 4 and "earlier than the one on line 4" in err.message


def test_unsorted_rows_sorted_when_repair(tmp_path):
    rows = list(reversed(GOOD))
    bars = load_bars(write(tmp_path, rows), repair=True)
    assert bars.frame.index.is_monotonic_increasing and len(bars) == 6
    assert list(bars.close) == [15902.0, 15904.0, 15903.0, 15906.0, 15909.0, 15907.0]
    assert repairs(bars)["unsorted"]["rows"] == 5


def test_negative_volume_error_when_volume_below_zero(tmp_path):
    err = error_of(write(tmp_path, with_row(5, "2023-11-20 09:35:00,15909.00,15911.00,15905.00,15907.00,-5")))
    assert err.column == "volume" and err.value == -5.0 and err.row == 6


def test_negative_volume_set_to_zero_when_repair(tmp_path):
    bars = load_bars(
        write(tmp_path, with_row(5, "2023-11-20 09:35:00,15909.00,15911.00,15905.00,15907.00,-5")), repair=True
    )
    assert bars.volume[5] == 0.0 and repairs(bars)["negative-volume"]["rows"] == 1


def test_divide_by_100_error_when_a_bar_is_a_hundredth_of_its_neighbours(tmp_path):
    err = error_of(write(tmp_path, with_row(3, "2023-11-20 09:33:00,159.03,159.07,159.02,159.06,700")))
    assert err.row == 4 and err.value == 159.03 and "1/100" in err.message


def test_divide_by_100_multiplied_back_when_repair(tmp_path):
    rows = with_row(3, "2023-11-20 09:33:00,159.03,159.07,159.02,159.0625,700")
    bars = load_bars(write(tmp_path, rows), repair=True)
    assert bars.open[3] == 15903.0 and bars.high[3] == 15907.0 and bars.close[3] == 15906.25
    assert repairs(bars)["divide-by-100"]["rows"] == 1


def test_divide_by_100_repaired_before_ohlc_check_when_only_close_is_divided(tmp_path):
    bars = load_bars(
        write(tmp_path, with_row(3, "2023-11-20 09:33:00,15903.00,15907.00,15902.00,159.06,700")), repair=True
    )
    assert bars.close[3] == 15906.0 and bars.low[3] == 15902.0
    assert "open-close-outside" not in repairs(bars)


def test_error_reports_first_row_and_count_when_several_rows_are_bad(tmp_path):
    rows = list(GOOD)
    rows[1] = "2023-11-20 09:31:00,15902.00,15899.00,15900.00,15904.00,900"  # high < low
    rows[4] = "2023-11-20 09:34:00,15906.00,15903.00,15904.00,15909.00,600"
    err = error_of(write(tmp_path, rows))
    assert "line 3" in err.message and "2 rows affected" in err.message


def test_nothing_dropped_silently_when_repairing_many_problems(tmp_path):
    rows = list(GOOD) + [
        "2023-11-20 09:36:00,15907.00,15912.00,15906.00,15910.00,400",
        "2023-11-20 09:35:00,15909.00,15911.00,15905.00,15907.00,500",  # duplicate, also out of order
        "garbage,1,2,3,4,5",
        "2023-11-20 09:37:00,15910.00,nan,15906.00,15908.00,300",
        "2023-11-20 09:38:00,15908.00,15912.00,15906.00,15910.00,-3",
    ]
    bars = load_bars(write(tmp_path, rows), repair=True)
    s = summarize(bars)
    assert len(bars) + s["dropped_rows"] == len(rows)
    kinds = {r["kind"] for r in s["repairs"]}
    assert {"duplicate-timestamp", "bad-timestamp", "bad-price", "negative-volume"} <= kinds


def test_row_notes_capped_with_a_count_when_many_rows_are_repaired(tmp_path):
    t0 = pd.Timestamp("2023-11-20 09:30")
    rows = [
        f"{t0 + pd.Timedelta(minutes=i):%Y-%m-%d %H:%M:%S},15900,15901,15899,15900,-1"
        for i in range(ROW_NOTE_LIMIT + 20)
    ]
    bars = load_bars(write(tmp_path, rows), repair=True)
    row_notes = [n for n in bars.notes if n.startswith("  line")]
    assert len(row_notes) == ROW_NOTE_LIMIT
    assert any("and 20 rows more" in n for n in bars.notes)


def test_nonexistent_time_error_when_naive_time_falls_in_spring_forward_gap(tmp_path):
    rows = [
        "2024-03-10 01:59:00,18000,18001,17999,18000,10",
        "2024-03-10 02:30:00,18000,18001,17999,18000,10",
        "2024-03-10 03:01:00,18000,18001,17999,18000,10",
    ]
    err = error_of(write(tmp_path, rows))
    assert err.row == 2 and "does not exist" in err.message and "--tz UTC" in err.fix
    bars = load_bars(write(tmp_path, rows), repair=True)
    assert len(bars) == 2 and repairs(bars)["nonexistent-time"]["rows"] == 1


def test_repeated_hour_read_in_order_when_naive_times_cross_fall_back(tmp_path):
    rows = [
        "2024-11-03 01:30:00,18000,18001,17999,18000,10",
        "2024-11-03 01:31:00,18000,18001,17999,18000,10",
        "2024-11-03 01:30:00,18000,18001,17999,18000,10",
        "2024-11-03 01:31:00,18000,18001,17999,18000,10",
    ]
    bars = load_bars(write(tmp_path, rows))
    idx = bars.frame.index
    assert len(bars) == 4 and idx.is_monotonic_increasing
    assert (idx[2] - idx[0]) == pd.Timedelta(hours=1)
    assert any("repeated hour" in n for n in bars.notes)


def test_tick_grid_note_not_error_when_prices_are_off_grid(tmp_path):
    rows = [r.replace("15902.00,1000", "15902.13,1000") for r in GOOD]
    bars = load_bars(write(tmp_path, rows))
    assert any(n.startswith("note [tick-grid]") and "back-adjusted" in n for n in bars.notes)
    assert summarize(bars)["tick_grid"]["off_grid_prices"] == 1


def test_clock_warning_suggests_time_shift_when_rth_open_surge_is_at_1430(tmp_path):
    from hybrid_trader.data.synthetic import generate_bars

    frame = generate_bars(5, seed=3).frame
    shifted = frame.copy()
    shifted.index = frame.index.tz_localize(None) + pd.Timedelta(hours=5)
    path = tmp_path / "ES_shifted.csv"
    shifted.to_csv(path, index_label="timestamp")
    bars = load_bars(path)
    warn = [n for n in bars.notes if n.startswith("warning [clock]")]
    assert len(warn) == 1 and "14:30" in warn[0] and "--time-shift -5" in warn[0]
    fixed = load_bars(path, time_shift=-5)
    assert not [n for n in fixed.notes if n.startswith("warning")]
    assert summarize(fixed)["rth_open"] == "09:30"
    np.testing.assert_array_equal(fixed.close, frame["close"].to_numpy())
