"""NinjaTrader's own bars in the follow and replay feeds: its export lines and what BarExporter.cs writes."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.live.bar_gate import BarGate
from hybrid_trader.live.feeds import Bar, FollowFeed, ReplayFeed
from tests.data.test_nt_export import NT_SAMPLE, OURS

EXPORTER = Path(__file__).resolve().parents[2] / "integrations" / "ninjatrader" / "BarExporter.cs"
ET = "America/New_York"

# A recorded sample of what integrations/ninjatrader/BarExporter.cs writes on a 1-minute NQ 03-24 chart: its
# history, then live bars, one CRLF line per closed bar (invariant culture: "16827", not "16827.00" or "16827,00").
EXPORTER_SAMPLE = ("20240102 143100;16825.25;16827;16824.5;16826.75;412\r\n"
                   "20240102 143200;16826.75;16830;16826;16829.5;388\r\n"
                   "20240102 143300;16829.5;16829.75;16822.25;16823;501\r\n"
                   "20240102 143400;16823;16825;16821.5;16824.25;297\r\n")


def _values(bars: list[Bar]) -> list[tuple]:
    return [(b.time, b.open, b.high, b.low, b.close, b.volume) for b in bars]


def _follow_line_by_line(path: Path, text: str, **kw) -> list[Bar]:
    feed = FollowFeed(path, 0.01, **kw)
    out: list[Bar] = []
    path.write_bytes(b"")
    for line in text.splitlines(keepends=True):
        with open(path, "ab") as fh:
            fh.write(line.encode())
        out += feed.poll()
    return out


def test_follow_gives_our_csv_bars_when_fed_nt_export_lines(tmp_path: Path) -> None:
    nt = _follow_line_by_line(tmp_path / "NQ 03-24.txt", NT_SAMPLE, tz="America/Chicago")  # tz: not for this format
    ours = _follow_line_by_line(tmp_path / "ours.csv", OURS)
    replay = list(ReplayFeed(tmp_path / "NQ 03-24.txt", market="NQ"))
    assert len(nt) == 4 and _values(nt) == _values(ours) == _values(replay)
    assert nt[0].time == pd.Timestamp("2024-01-02 09:30", tz=ET) and nt[0].line == 1


def test_follow_moves_stamps_by_the_run_bar_size_when_bars_are_5_minutes(tmp_path: Path) -> None:
    text = "".join(f"20240102 14{m:02d}00;100;101;99;100.5;10\n" for m in (35, 40))
    bars = _follow_line_by_line(tmp_path / "nq5.txt", text, bar_minutes=5)
    assert [b.time for b in bars] == [pd.Timestamp(f"2024-01-02 09:{m}", tz=ET) for m in ("30", "35")]


def test_follow_reads_end_stamped_csv_when_stamps_end(tmp_path: Path) -> None:
    bars = _follow_line_by_line(tmp_path / "ours.csv", OURS, stamps="end")
    assert bars[0].time == pd.Timestamp("2024-01-02 09:29", tz=ET)


def test_follow_reads_what_bar_exporter_writes_when_given_its_recorded_sample(tmp_path: Path) -> None:
    exporter = _follow_line_by_line(tmp_path / "NQ 03-24.txt", EXPORTER_SAMPLE)
    export = _follow_line_by_line(tmp_path / "export.txt", NT_SAMPLE)
    assert _values(exporter) == _values(export)
    gate = BarGate(market="NQ")
    assert all(gate.check(b) is None for b in exporter)
    # the line the indicator documents, its time format and separator are the ones read here
    source = EXPORTER.read_text()
    documented = re.search(r"e\.g\. (\d{8} \d{6};\S+)", source)
    assert documented is not None and documented.group(1) == EXPORTER_SAMPLE.splitlines()[0]
    assert '"yyyyMMdd HHmmss"' in source and "CultureInfo.InvariantCulture" in source
    assert "ConvertTimeToUtc" in source and "Calculate.OnBarClose" in source


def test_follow_bars_are_rejected_when_nt_stamps_go_backwards(tmp_path: Path) -> None:
    lines = NT_SAMPLE.splitlines(keepends=True)
    bars = _follow_line_by_line(tmp_path / "nt.txt", lines[1] + lines[0])
    gate = BarGate(market="NQ")
    assert gate.check(bars[0]) is None
    rejection = gate.check(bars[1])
    assert rejection is not None and rejection.code == "out-of-order"


def test_follow_refuses_a_nt_tick_file_when_followed(tmp_path: Path) -> None:
    path = tmp_path / "ticks.txt"
    path.write_text("20240102 143100 0450000;16825.25;16825.0;16825.5;1\n")
    with pytest.raises(UserError, match="tick data"):
        FollowFeed(path, 0.01).poll()
