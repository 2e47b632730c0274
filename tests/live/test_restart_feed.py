"""A restart's replay against the feed it is given: the bars after the journal's last accepted one are new (a bar
refused from the future does not move that mark), and a feed that is not the journal's (bars missing or revised
while the run was down) is refused, naming the bar, instead of rebuilding another history than the one traded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest

import hybrid_trader.live.snapshot as snapshot_mod
from hybrid_trader.errors import UserError
from hybrid_trader.live.executor import Executor, ExecutorOptions
from hybrid_trader.live.feeds import FollowFeed

ET = "America/New_York"
LIVE_FROM = pd.Timestamp("2024-01-16 08:00", tz=ET)


def et_ns(text: str) -> int:
    return int(pd.Timestamp(text, tz=ET).value)


def lines(csv: Path, lo: str = "", hi: str = "~") -> tuple[str, list[str]]:
    """The header and the lines whose timestamp text is in [lo, hi]."""
    header, *rows = csv.read_text().splitlines(keepends=True)
    return header, [r for r in rows if lo <= r[:19] <= hi]


def query(journal: Path, sql: str, *args) -> list[tuple]:
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def follow(run: Path, path: Path, journal: Path, now: float):
    """The executor following ``path`` until it has been idle half a second, the wall clock at ``now``."""
    ex = Executor(run, journal, ExecutorOptions(market="NQ", bar_minutes=1, max_bar_age_s=1e9, live_from=LIVE_FROM),
                  clock=lambda: now)
    try:
        return ex.run_feed(FollowFeed(path, poll_s=0.01, timeout_s=0.5))
    finally:
        ex.close()


def test_bars_after_a_bar_refused_from_the_future_are_new_after_a_restart(tiny, tmp_path):
    """A stray line stamped 13:00 refused as from the future at 12:30; the run restarted at 13:10 with the bars of
    11:01-13:05 appended. Before: the refused line's time was the journal's "replayed up to" mark, so those bars were
    taken for a replay (never journaled, their orders never sent) and the real 13:00 bar was refused as the stray
    one. Now they are new, the stray line is refused again without a second row, and the real 13:00 bar trades."""
    run, csv, _ = tiny
    header, first = lines(csv, hi="2024-01-16 11:00:00")
    _, later = lines(csv, lo="2024-01-16 11:01:00", hi="2024-01-16 13:05:00")
    _, (real,) = lines(csv, lo="2024-01-16 13:00:00", hi="2024-01-16 13:00:00")
    stamp, *prices, volume = real.strip().split(",")
    stray = ",".join([stamp, *(str(float(x) + 1000) for x in prices), volume]) + "\n"
    path, journal = tmp_path / "export.csv", tmp_path / "j.sqlite"
    path.write_text(header + "".join(first) + stray)
    follow(run, path, journal, pd.Timestamp("2024-01-16 12:30", tz=ET).timestamp())
    assert query(journal, "SELECT reason FROM bars WHERE time_ns = ?", et_ns("2024-01-16 13:00")) == [("future",)]
    with open(path, "a") as f:
        f.write("".join(later))
    summary = follow(run, path, journal, pd.Timestamp("2024-01-16 13:10", tz=ET).timestamp())
    assert summary.recovered_bars == len(first)
    new = query(journal, "SELECT COUNT(*) FROM bars WHERE accepted = 1 AND time_ns > ?", et_ns("2024-01-16 11:00"))
    assert new == [(len(later),)]
    at_13 = query(journal, "SELECT accepted, reason, open FROM bars WHERE time_ns = ? ORDER BY id",
                  et_ns("2024-01-16 13:00"))
    assert at_13 == [(0, "future", float(prices[0]) + 1000), (1, None, float(prices[0]))]
    decided = query(journal, "SELECT COUNT(*) FROM decisions WHERE bar_time_ns > ?", et_ns("2024-01-16 11:00"))
    assert decided[0][0] > 0


def test_a_restart_on_a_feed_without_the_journals_first_bars_is_refused(tiny, tmp_path, monkeypatch):
    """Killed at 09:00; while it was down the platform rotated its export at midnight, and the restart cannot use
    its snapshot (a newer program): the replay would rebuild the features from midnight and trade another history
    (before: 0 decisions where the uninterrupted run made 151, and no word). Now refused, naming the missing bar."""
    run, csv, _ = tiny
    header, first = lines(csv, hi="2024-01-16 09:00:00")
    _, today = lines(csv, lo="2024-01-16 00:00:00", hi="2024-01-16 12:00:00")
    path, journal = tmp_path / "export.csv", tmp_path / "j.sqlite"
    path.write_text(header + "".join(first))
    now = pd.Timestamp("2024-01-16 12:30", tz=ET).timestamp()
    follow(run, path, journal, now)
    path.write_text(header + "".join(today))
    monkeypatch.setattr(snapshot_mod, "SNAPSHOT_FORMAT", snapshot_mod.SNAPSHOT_FORMAT + 1)
    with pytest.raises(UserError, match="is missing from the feed"):
        follow(run, path, journal, now)


def test_a_restart_on_a_feed_whose_bar_was_revised_is_refused(tiny, tmp_path, monkeypatch):
    """The same file, one journaled bar's close revised by the vendor while the run was down: refused, naming it."""
    run, csv, _ = tiny
    header, first = lines(csv, hi="2024-01-16 09:00:00")
    path, journal = tmp_path / "export.csv", tmp_path / "j.sqlite"
    path.write_text(header + "".join(first))
    now = pd.Timestamp("2024-01-16 12:30", tz=ET).timestamp()
    follow(run, path, journal, now)
    stamp, o, h, lo, c, v = first[-10].strip().split(",")
    revised = lo if float(c) != float(lo) else h  # still inside the bar's range
    first[-10] = ",".join([stamp, o, h, lo, revised, v]) + "\n"
    path.write_text(header + "".join(first))
    monkeypatch.setattr(snapshot_mod, "SNAPSHOT_FORMAT", snapshot_mod.SNAPSHOT_FORMAT + 1)
    with pytest.raises(UserError, match="is not the journal's"):
        follow(run, path, journal, now)
