"""A followed file rotated or replaced mid-run: its last bars are drained, and every line not taken has a row."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from hybrid_trader.live.bar_gate import BarGate
from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import Bar, FollowFeed, ReplayFeed
from hybrid_trader.live.journal_read import read_journal

ET = "America/New_York"
HEADER = "Date,Time,Open,High,Low,Close,Volume\n"


def _line(clock: str) -> str:
    return f"2024-01-02,{clock},100,101,99,100.5,10\n"


def _append(path: Path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def test_bars_appended_before_a_rename_are_drained_before_the_new_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(HEADER + _line("09:30") + _line("09:31"))
    feed = FollowFeed(path, 0.01)
    assert len(feed.poll()) == 2
    _append(path, _line("09:32") + _line("09:33"))  # written, not yet read ...
    path.rename(tmp_path / "export.csv.old")  # ... when the platform rotates the file
    path.write_text(HEADER + _line("09:34") + _line("09:35"))
    got = feed.poll()
    assert [b.time.strftime("%H:%M") for b in got if b.time is not None] == ["09:32", "09:33", "09:34", "09:35"]
    assert feed.reopened == 1 and feed.drained == 2


def test_a_rename_seen_before_the_new_file_exists_still_drains_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(HEADER + _line("09:30"))
    feed = FollowFeed(path, 0.01)
    assert len(feed.poll()) == 1
    _append(path, _line("09:31"))
    path.rename(tmp_path / "export.csv.old")
    assert [b.time.strftime("%H:%M") for b in feed.poll() if b.time is not None] == ["09:31"]
    path.write_text(HEADER + _line("09:32"))
    assert [b.time.strftime("%H:%M") for b in feed.poll() if b.time is not None] == ["09:32"]


def test_an_unseen_bar_not_later_than_the_last_after_a_reopen_comes_out_for_the_gate_to_reject(
        tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(HEADER + _line("09:30") + _line("09:32"))
    feed = FollowFeed(path, 0.01)
    gate = BarGate(market="NQ")
    assert [gate.check(b) for b in feed.poll()] == [None, None]
    new = tmp_path / "export.new"
    new.write_text(HEADER + _line("09:30") + _line("09:31") + _line("09:32") + _line("09:33"))
    os.replace(new, path)  # a re-export that holds a bar the old file never had
    got = feed.poll()
    assert [b.time.strftime("%H:%M") for b in got if b.time is not None] == ["09:31", "09:33"]
    assert feed.skipped == 2  # 09:30 and 09:32: already taken from the old file
    verdicts = [gate.check(b) for b in got]
    assert verdicts[0] is not None and verdicts[0].code == "out-of-order" and verdicts[1] is None


# ---- the executor: the rotated run's outcome is the unrotated run's --------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_trained):
    """The session's tiny trained run (tests/conftest.py)."""
    return tiny_trained


def _stepped(feed: FollowFeed, steps: list[Callable[[], None]]) -> Iterator[Bar]:
    """Each file operation, then one poll: a platform writing between the feed's polls, deterministically."""
    for step in steps:
        step()
        yield from feed.poll()
    yield from feed.poll()
    feed.close()


def _follow(run: Path, csv: Path, journal: Path, folder: Path, rotate: bool, earlier: bool = False) -> Executor:
    """Follow ``csv`` written in three steps; ``rotate``: the last step renames the file and starts a new one
    (``earlier``: the new one first holds a bar 30 s after one already taken, which no file had before)."""
    lines = csv.read_text().splitlines(keepends=True)
    header, body = lines[0], lines[1:]
    a = len(body) - len(body) // 10  # inside the test days, where bars are traded
    b = a + 2
    path = folder / "export.csv"
    stamp, rest = body[a - 3].split(",", 1)
    extra = [f"{pd.Timestamp(stamp) + pd.Timedelta(seconds=30)},{rest}"] if earlier else []

    def rotate_now() -> None:  # two bars the feed has not read when the file is renamed, a new one started
        _append(path, "".join(body[a:b]))
        path.rename(folder / "export.csv.old")
        path.write_text(header + "".join(extra + body[b:]))

    steps = [lambda: path.write_text(header + "".join(body[:a]))]
    steps.append(rotate_now if rotate else lambda: _append(path, "".join(body[a:])))
    replay = ReplayFeed(csv)
    ex = Executor(run, journal,
                  ExecutorOptions(trade_dates=split_dates(run, "test"), market=replay.bars.market,
                                  bar_minutes=replay.bars.bar_minutes))
    ex.run_feed(_stepped(FollowFeed(path, 0.01), steps))
    ex.close()
    return ex


def test_a_rotated_followed_file_gives_the_unrotated_runs_bars_trades_and_outcome(tiny, tiny_replayed,
                                                                                  tmp_path: Path) -> None:
    run, csv, _ = tiny
    for name in "bc":
        (tmp_path / name).mkdir()
    # the unrotated run: the session's replay of the same bars (a followed file unrotated gives the replay's trades:
    # tests/live/test_executor_follow.py)
    shutil.copyfile(tiny_replayed[0], tmp_path / "plain.sqlite")
    plain = tiny_replayed[1]
    rotated = _follow(run, csv, tmp_path / "rotated.sqlite", tmp_path / "b", rotate=True)
    earlier = _follow(run, csv, tmp_path / "earlier.sqlite", tmp_path / "c", rotate=True, earlier=True)
    assert plain.summary.bars > 0 and plain.summary.rejected == 0
    want = read_journal(tmp_path / "plain.sqlite")["bars"]
    for ex, name, rejected in ((rotated, "rotated", 0), (earlier, "earlier", 1)):
        assert ex.summary.bars == plain.summary.bars and ex.summary.rejected == rejected, name
        assert ex.summary.net_pnl == plain.summary.net_pnl, name
        assert ex.summary.account_status == plain.summary.account_status, name
        assert ex.trade_log().equals(plain.trade_log()), name
        got = read_journal(tmp_path / f"{name}.sqlite")["bars"]
        taken = got[got["accepted"] == 1]
        assert taken["time_ns"].tolist() == want["time_ns"].tolist(), name
        refused = got[got["accepted"] == 0]
        assert len(refused) == rejected, name
    refused = read_journal(tmp_path / "earlier.sqlite")["bars"].query("accepted == 0").iloc[0]
    assert refused["reason"] == "out-of-order" and "earlier than the last accepted bar" in refused["message"]
    assert refused["raw"] is not None and ":30" in refused["raw"]
