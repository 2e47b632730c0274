"""``run`` on NinjaTrader's own bars (its export format: UTC, end of bar) makes the trades of our CSV."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd

from hybrid_trader.cli.main import main


def to_nt_export(csv: Path, dst: Path, bar_minutes: int = 1) -> Path:
    """Our CSV (ET, bar start) written as NinjaTrader exports it: no header, ';', UTC, the bar's END."""
    frame = pd.read_csv(csv, parse_dates=["timestamp"])
    ends = (frame["timestamp"].dt.tz_localize("America/New_York").dt.tz_convert("UTC")
            + pd.Timedelta(minutes=bar_minutes))
    # full precision: 6 significant digits (":g") would move NQ prices by up to 0.05, and stops across the tick grid
    lines = [f"{t:%Y%m%d %H%M%S};{o:.10g};{h:.10g};{lo:.10g};{c:.10g};{int(v)}\r\n" for t, o, h, lo, c, v in
             zip(ends, frame["open"], frame["high"], frame["low"], frame["close"], frame["volume"])]
    dst.write_text("".join(lines), newline="")
    return dst


def test_run_on_nt_export_makes_the_csv_trades_when_followed_and_replayed(tiny, tmp_path, capsys):
    run, csv, _ = tiny
    nt = to_nt_export(csv, tmp_path / "NQ 03-24.txt")
    common = ["--split", "test", "--json", "--no-status"]
    results = []
    for feed in (f"replay:{csv}", f"follow:{nt}", f"replay:{nt}"):
        # a follow: feed of old bars: live from their start, the wall clock's age rule off (history is not traded)
        extra = ["--idle-exit", "1", "--live-from", "2024-01-01 00:00", "--max-bar-age", "1e9"] \
            if feed.startswith("follow") else []
        assert main(["run", str(run), "--feed", feed, "--journal", str(tmp_path / f"{len(results)}.sqlite"),
                     *common, *extra]) == 0
        results.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    ours, followed, replayed = results
    assert ours["trades"] > 0
    for key in ("bars", "rejected", "decisions", "trades", "net_pnl", "balance", "account_status"):
        assert followed[key] == ours[key] == replayed[key], key


def test_run_on_nt_export_trades_otherwise_when_end_stamps_are_read_as_starts(tiny, tmp_path, capsys):
    run, csv, _ = tiny
    nt = to_nt_export(csv, tmp_path / "NQ 03-24.txt")
    results = []
    for feed, stamps in ((f"replay:{csv}", []), (f"replay:{nt}", ["--stamps", "start"])):
        assert main(["run", str(run), "--feed", feed, "--journal", str(tmp_path / f"{len(results)}.sqlite"),
                     "--split", "test", "--json", "--no-status", *stamps]) == 0
        results.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    ours, late = results
    # every bar one bar late: the bar the journal files under minute t is the one our CSV has at t - 1 minute (the
    # decisions and P&L may or may not differ: a model that trades once can make the same trade a bar later)
    closes = [_closes(tmp_path / f"{i}.sqlite") for i in range(2)]
    minute = 60 * 10**9
    shifted = [t for t in closes[1] if t - minute in closes[0]]
    assert len(shifted) > 0.9 * len(closes[1])
    assert all(closes[1][t] == closes[0][t - minute] for t in shifted), "every bar one bar late"
    assert any(closes[1][t] != closes[0].get(t) for t in shifted)


def _closes(journal: Path) -> dict[int, float]:
    """Each accepted bar's close by the time the journal files it under."""
    with sqlite3.connect(journal) as db:
        return dict(db.execute("SELECT time_ns, close FROM bars WHERE accepted = 1").fetchall())
