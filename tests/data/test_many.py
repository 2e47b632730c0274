"""--data as a folder or a glob of one market's files: joined in time order, each file checked on its own."""

from __future__ import annotations

import pandas as pd
import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.data import load_bars
from hybrid_trader.data.many import bars_files
from hybrid_trader.errors import UserError
from hybrid_trader.run.config import DataConfig
from hybrid_trader.run.rundir import data_identity
from tests.conftest import shared_file


def write(path, start: str, minutes: int, fmt: str = "%m/%d/%Y", price: float = 15000.0) -> None:
    idx = pd.date_range(start, periods=minutes, freq="1min")
    rows = [f"{t.strftime(fmt)},{t.strftime('%H:%M:%S')},{price},{price + 1},{price - 1},{price + 0.25},10"
            for t in idx]
    path.write_text("Date,Time,Open,High,Low,Close,Volume\n" + "\n".join(rows) + "\n")


def test_folder_of_monthly_files_is_one_series_in_time_order_when_given_as_data(tmp_path):
    write(tmp_path / "nq-b.csv", "2024-01-03 09:30", 60)
    write(tmp_path / "nq-a.csv", "2024-01-02 09:30", 60)
    (tmp_path / "README.md").write_text("not bars")
    bars = load_bars(tmp_path, tz="America/New_York")
    assert len(bars.frame) == 120 and bars.frame.index.is_monotonic_increasing
    assert bars.market == "NQ" and bars.source == str(tmp_path)
    assert any("2 files concatenated" in n for n in bars.notes)
    assert any("nq-a.csv .. nq-b.csv (2 files): timestamps read as MM/DD/YYYY" in n for n in bars.notes)


def test_overlapping_files_keep_one_bar_per_time_and_warn_when_they_differ(tmp_path):
    write(tmp_path / "nq-1.csv", "2024-01-02 09:30", 60)
    write(tmp_path / "nq-2.csv", "2024-01-02 10:00", 60, price=15010.0)  # 30 minutes overlap, other prices
    bars = load_bars(str(tmp_path / "nq-*.csv"), tz="America/New_York")
    assert len(bars.frame) == 90
    assert bars.frame.loc["2024-01-02 10:10"]["open"].item() == 15000.0  # the first file's bar
    assert any("30 bars appear in two files" in n for n in bars.notes)
    assert any(w.code == "overlap" for w in bars.warnings)


def test_a_vendor_switching_date_format_is_named_when_files_differ(tmp_path):
    write(tmp_path / "nq-2024-12.csv", "2024-12-30 09:30", 60)
    write(tmp_path / "nq-2025-01.csv", "2025-01-14 09:30", 60, fmt="%d/%m/%Y")
    bars = load_bars(tmp_path, tz="America/New_York")
    warning = next(w for w in bars.warnings if w.code == "date-format")
    assert "MM/DD/YYYY hh:mm:ss in nq-2024-12.csv" in warning.message
    assert "DD/MM/YYYY hh:mm:ss in nq-2025-01.csv" in warning.message
    assert str(bars.frame.index[-1].date()) == "2025-01-14"


def test_files_of_two_markets_are_refused_naming_each(tmp_path):
    write(tmp_path / "nq-1.csv", "2024-01-02 09:30", 30)
    write(tmp_path / "es-1.csv", "2024-01-03 09:30", 30)
    with pytest.raises(UserError, match="more than one market .*es-1.csv: ES.*nq-1.csv: NQ"):
        load_bars(tmp_path)


@pytest.mark.parametrize("pattern, message", [("*.csv", "no bars file matches"), ("", "holds no bars file")])
def test_an_empty_folder_or_a_glob_matching_nothing_is_named_with_the_fix(tmp_path, pattern, message):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=message):
        bars_files(tmp_path / "empty" / pattern if pattern else tmp_path / "empty")


def test_identity_of_a_folder_changes_when_a_file_changes(tmp_path):
    write(tmp_path / "nq-1.csv", "2024-01-02 09:30", 30)
    write(tmp_path / "nq-2.csv", "2024-01-03 09:30", 30)
    before = data_identity(DataConfig(path=str(tmp_path)))["sha256"]
    write(tmp_path / "nq-2.csv", "2024-01-03 09:30", 31)
    assert before and data_identity(DataConfig(path=str(tmp_path)))["sha256"] != before


def test_data_check_reads_the_shared_year_of_nq_when_given_its_folder(capsys):
    folder = shared_file("NQ_1min_2024_central/nq-2024-01.csv").parent
    assert main(["data", "check", str(folder), "--tz", "America/Chicago"]) == 0
    out = capsys.readouterr().out
    assert "354,663" in out and "12 files concatenated" in out
