"""Reading files: formats, column aliases, time zones, time shift, Parquet, file-level errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data.loader import guess_market, load_bars
from hybrid_trader.errors import UserError

ET = "America/New_York"


def write(tmp_path: Path, text: str, name: str = "NQ_test.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def ts(s: str) -> pd.Timestamp:
    return pd.Timestamp(s, tz=ET)


def test_columns_matched_case_insensitively_with_aliases_when_order_is_shuffled(tmp_path):
    text = (
        "VOL,Adj Close,Last,L,H,O,DateTime,Open Interest\n"
        "100,1.0,15902.00,15895.00,15905.00,15900.00,2023-11-20 09:30:00,5\n"
        "200,2.0,15904.00,15900.00,15906.00,15902.00,2023-11-20 09:31:00,6\n"
    )
    bars = load_bars(write(tmp_path, text))
    assert list(bars.close) == [15902.0, 15904.0]  # Last, not Adj Close
    assert list(bars.open) == [15900.0, 15902.0]
    assert list(bars.volume) == [100.0, 200.0]
    assert bars.frame.index[0] == ts("2023-11-20 09:30")
    note = next(n for n in bars.notes if n.startswith("note [columns]"))
    assert "ignored: Adj Close, Open Interest" in note


def test_adj_close_ignored_when_it_comes_before_close(tmp_path):
    text = ("Date,Open,High,Low,Adj Close,Close,Volume\n"
            "2023-11-20 09:30,10,12,9,1,11,5\n2023-11-20 09:31,11,12,10,1,10.5,6\n")
    bars = load_bars(write(tmp_path, text))
    assert list(bars.close) == [11.0, 10.5]


def test_date_and_time_columns_combined_when_separate(tmp_path):
    text = "Date;Time;Open;High;Low;Close;Volume\n11/20/2023;09:30;10;12;9;11;5\n11/20/2023;09:31;11;12;10;10.5;6\n"
    bars = load_bars(write(tmp_path, text))
    assert list(bars.frame.index) == [ts("2023-11-20 09:30"), ts("2023-11-20 09:31")]


def test_numeric_date_and_time_columns_read_when_ninjatrader_style(tmp_path):
    text = "date,time,open,high,low,close,volume\n20231120,93000,10,12,9,11,5\n20231120,93100,11,12,10,10.5,6\n"
    bars = load_bars(write(tmp_path, text))
    assert bars.frame.index[1] == ts("2023-11-20 09:31")


def test_offset_timestamps_converted_when_they_carry_utc_offsets(tmp_path):
    text = (
        "timestamp,open,high,low,close,volume\n"
        "2023-11-20T14:30:00Z,10,12,9,11,5\n"
        "2023-11-20T09:31:00-05:00,11,12,10,10.5,6\n"
        "2023-11-20T15:32:00+01:00,11,12,10,10.5,6\n"
    )
    bars = load_bars(write(tmp_path, text), tz="Asia/Tokyo")  # tz ignored for offset stamps
    assert list(bars.frame.index) == [ts("2023-11-20 09:30"), ts("2023-11-20 09:31"), ts("2023-11-20 09:32")]


def test_mixed_offset_and_naive_timestamps_error_when_some_lack_offsets(tmp_path):
    text = (
        "timestamp,open,high,low,close,volume\n2023-11-20T14:30:00Z,10,12,9,11,5\n2023-11-20 09:31:00,11,12,10,10.5,6\n"
    )
    with pytest.raises(UserError) as info:
        load_bars(write(tmp_path, text))
    assert info.value.row == 2 and "line 3" in info.value.message


def test_naive_timestamps_read_in_tz_when_chicago(tmp_path):
    text = "timestamp,open,high,low,close,volume\n2024-07-01 08:30:00,10,12,9,11,5\n2024-01-02 08:30:00,10,12,9,11,5\n"
    bars = load_bars(write(tmp_path, text), tz="America/Chicago", repair=True)
    assert list(bars.frame.index) == [ts("2024-01-02 09:30"), ts("2024-07-01 09:30")]


def test_time_shift_added_to_wall_clock_when_negative(tmp_path):
    text = (
        "timestamp,open,high,low,close,volume\n2025-09-15 14:30:00,10,12,9,11,5\n2025-11-03 14:31:00,11,12,10,10.5,6\n"
    )
    bars = load_bars(write(tmp_path, text), time_shift=-5)
    # 09:30 ET on both sides of the DST change: the shift applies to the file's wall clock
    assert list(bars.frame.index) == [ts("2025-09-15 09:30"), ts("2025-11-03 09:31")]
    assert any(n.startswith("note [time-shift] -5 h") for n in bars.notes)


def test_time_shift_applies_to_instant_when_timestamps_have_offsets(tmp_path):
    text = "timestamp,open,high,low,close,volume\n2023-11-20T10:00:00-05:00,10,12,9,11,5\n"
    bars = load_bars(write(tmp_path, text), time_shift=-0.5)
    assert bars.frame.index[0] == ts("2023-11-20 09:30")


def test_epoch_seconds_read_as_utc_when_timestamp_is_numeric(tmp_path):
    t = int(pd.Timestamp("2023-11-20 14:30", tz="UTC").timestamp())
    text = f"timestamp,open,high,low,close,volume\n{t},10,12,9,11,5\n{t + 60},11,12,10,10.5,6\n"
    bars = load_bars(write(tmp_path, text))
    assert bars.frame.index[0] == ts("2023-11-20 09:30")


def test_parquet_loaded_when_timestamp_is_the_index(tmp_path):
    idx = pd.date_range("2023-11-20 14:30", periods=3, freq="5min", tz="UTC", name="Datetime")
    df = pd.DataFrame(
        {"Open": [1.0, 2, 3], "High": [2.0, 3, 4], "Low": [0.5, 1, 2], "Close": [1.5, 2.5, 3.5], "Volume": [1, 2, 3]},
        index=idx,
    )
    path = tmp_path / "ES_sample.parquet"
    df.to_parquet(path)
    bars = load_bars(path)
    assert bars.market == "ES" and bars.bar_minutes == 5
    assert bars.frame.index[0] == ts("2023-11-20 09:30")
    np.testing.assert_array_equal(bars.close, [1.5, 2.5, 3.5])


def test_parquet_errors_name_rows_when_values_are_bad(tmp_path):
    df = pd.DataFrame(
        {
            "timestamp": pd.date_range("2023-11-20 09:30", periods=3, freq="1min"),
            "open": [1.0, 2, 3],
            "high": [2.0, 1.0, 4],
            "low": [0.5, 1.5, 2],
            "close": [1.5, 1.6, 3.5],
            "volume": [1, 2, 3],
        }
    )
    path = tmp_path / "NQ_bad.parquet"
    df.to_parquet(path, index=False)
    with pytest.raises(UserError) as info:
        load_bars(path)
    assert info.value.row == 2 and "row 2" in info.value.message and info.value.column == "high"


def test_unreadable_parquet_error_when_file_is_not_parquet(tmp_path):
    path = write(tmp_path, "this is not parquet", name="x.parquet")
    with pytest.raises(UserError, match="cannot read the Parquet file"):
        load_bars(path)


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "empty"),
        ("timestamp,open,high,low,close,volume\n", "no bars"),
        ("2023-11-20 09:30:00,10,12,9,11,5\n", "not column names"),
        ("timestamp,open,high,low,close,volume\n2023-11-20 09:30,1,2\n", "line 2, the price is missing"),
    ],
)
def test_file_level_error_when_csv_is_empty_headerless_or_short(tmp_path, text, match):
    with pytest.raises(UserError, match=match):
        load_bars(write(tmp_path, text))


def test_file_not_found_error_when_path_is_wrong(tmp_path):
    with pytest.raises(UserError, match="file not found") as info:
        load_bars(tmp_path / "nope.csv")
    assert info.value.file.endswith("nope.csv")


def test_directory_error_when_path_is_a_folder(tmp_path):
    with pytest.raises(UserError, match="directory"):
        load_bars(tmp_path)


def test_option_errors_when_tz_market_or_shift_are_invalid(tmp_path):
    path = write(tmp_path, "timestamp,open,high,low,close,volume\n2023-11-20 09:30,10,12,9,11,5\n")
    with pytest.raises(UserError, match="unknown time zone"):
        load_bars(path, tz="Mars/Base")
    with pytest.raises(UserError, match="unknown market"):
        load_bars(path, market="XYZ")
    with pytest.raises(UserError, match="out of range"):
        load_bars(path, time_shift=float("nan"))


def test_line_numbers_stay_true_when_file_has_blank_lines(tmp_path):
    text = "timestamp,open,high,low,close,volume\n2023-11-20 09:30,10,12,9,11,5\n\n2023-11-20 09:31,11,10,12,10.5,6\n"
    with pytest.raises(UserError) as info:
        load_bars(write(tmp_path, text))
    assert "line 4" in info.value.message
    bars = load_bars(write(tmp_path, text), repair=True)
    assert any(n.startswith("note [blank-lines] 1 empty line") for n in bars.notes)


def test_bar_size_is_most_common_difference_when_some_bars_are_missing(tmp_path):
    times = pd.date_range("2023-11-20 09:30", periods=12, freq="5min").delete([3, 7, 8])
    rows = "".join(f"{t:%Y-%m-%d %H:%M},10,12,9,11,5\n" for t in times)
    bars = load_bars(write(tmp_path, "timestamp,open,high,low,close,volume\n" + rows))
    assert bars.bar_minutes == 5


def test_seconds_bars_error_when_bars_are_under_a_minute(tmp_path):
    times = pd.date_range("2023-11-20 09:30", periods=5, freq="15s")
    rows = "".join(f"{t:%Y-%m-%d %H:%M:%S},10,12,9,11,5\n" for t in times)
    with pytest.raises(UserError, match="15 seconds"):
        load_bars(write(tmp_path, "timestamp,open,high,low,close,volume\n" + rows))


@pytest.mark.parametrize(
    "name, expected",
    [
        ("NQ_1min.csv", "NQ"),
        ("ES_1min_2025.csv", "ES"),
        ("MNQ.csv", "MNQ"),
        ("MNQZ24_1m.csv", "MNQ"),
        ("esh5-data.csv", "ES"),
        ("bars.csv", None),
        ("MESSY.csv", None),
    ],
)
def test_market_guessed_from_file_name_prefix_when_not_given(name, expected):
    assert guess_market(Path(name)) == expected


def test_market_defaults_to_nq_with_a_note_when_name_says_nothing(tmp_path):
    bars = load_bars(
        write(tmp_path, "timestamp,open,high,low,close,volume\n2023-11-20 09:30,10,12,9,11,5\n", name="bars.csv")
    )
    assert bars.market == "NQ"
    assert any("assuming NQ" in n for n in bars.notes)
    explicit = load_bars(tmp_path / "bars.csv", market="mes")
    assert explicit.market == "MES" and not any(n.startswith("note [market]") for n in explicit.notes)


def test_bars_frame_has_float64_ohlcv_and_ns_eastern_index_when_loaded(tmp_path):
    bars = load_bars(
        write(
            tmp_path,
            "timestamp,open,high,low,close,volume\n2023-11-20 09:30,10,12,9,11,5\n2023-11-20 09:31,11,12,10,10.5,6\n",
        )
    )
    assert list(bars.frame.columns) == ["open", "high", "low", "close", "volume"]
    assert (bars.frame.dtypes == "float64").all()
    assert str(bars.frame.index.tz) == ET and bars.frame.index.unit == "ns"
    assert bars.source.endswith("NQ_test.csv")


@pytest.mark.parametrize("order", ["day-first", "month-first"])
def test_dates_whose_days_are_all_12_or_less_are_read_in_the_order_that_keeps_the_days_together(tmp_path, order):
    """``02/01/2025`` after ``01/01/2025``: both MM/DD and DD/MM read every date, and the first format that did
    (MM/DD) was taken, so a DD/MM file's first twelve days of a month became twelve months (a followed file starting
    on the 1st: its bars from the future). The reading whose consecutive bars lie a day apart, not a month, wins."""
    date = "{d:02d}/01/2025" if order == "day-first" else "01/{d:02d}/2025"
    rows = [f"{date.format(d=day)},10:0{m}:00,100,101,99,100.5,10" for day in (2, 3, 6) for m in range(3)]
    path = tmp_path / "NQ_bars.csv"
    path.write_text("Date,Time,Open,High,Low,Close,Volume\n" + "\n".join(rows) + "\n")
    bars = load_bars(path)
    assert [str(t.date()) for t in bars.frame.index[::3]] == ["2025-01-02", "2025-01-03", "2025-01-06"]
    shown = "DD/MM/YYYY" if order == "day-first" else "MM/DD/YYYY"
    assert any(f"timestamps read as {shown}" in str(n) for n in bars.notes)
