"""The executor on a followed CSV: a platform appending bars makes the replay's trades."""

from __future__ import annotations

import json
import threading
import time

import pandas as pd
import pytest

from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import FollowFeed, ReplayFeed
from hybrid_trader.live.journal_read import JournalView


def append_in_chunks(src, dst, chunk: int, pause_s: float) -> threading.Thread:
    """Write ``src`` into ``dst`` a chunk at a time, each cut in the middle of a line (a platform mid-write)."""
    data = src.read_bytes()

    def write() -> None:
        with open(dst, "ab") as f:
            for start in range(0, len(data), chunk):
                f.write(data[start:start + chunk])
                f.flush()
                time.sleep(pause_s)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_following_a_growing_csv_makes_the_replays_trades_when_lines_arrive_cut_in_the_middle(tiny, tiny_replayed,
                                                                                             tmp_path):
    run, csv, _ = tiny
    replay_feed = ReplayFeed(csv)
    dates = split_dates(run, "test")
    expected = tiny_replayed[1]  # the executor of the whole ReplayFeed(csv), once per session

    growing = tmp_path / "export.csv"
    growing.touch()
    writer = append_in_chunks(csv, growing, chunk=64_123, pause_s=0.01)
    followed = Executor(run, tmp_path / "follow.sqlite",
                        ExecutorOptions(trade_dates=dates, market=replay_feed.bars.market,
                                        bar_minutes=replay_feed.bars.bar_minutes))
    summary = followed.run_feed(FollowFeed(growing, poll_s=0.01, timeout_s=3.0))
    writer.join()
    followed.close()
    assert summary.rejected == 0 and summary.bars == expected.summary.bars
    got, want = followed.trade_log(), expected.trade_log()
    assert len(got) == len(want) > 0
    assert got.drop(columns=[]).equals(want)


def test_untraded_bars_are_committed_when_the_followed_file_holds_no_new_line(tiny, tmp_path):
    run, csv, _ = tiny
    lines = csv.read_text().splitlines(keepends=True)
    growing = tmp_path / "export.csv"
    growing.write_text("".join(lines[:51]))  # the header and 50 bars of the first day: not a traded date
    stop = threading.Event()
    executor = Executor(run, tmp_path / "j.sqlite", ExecutorOptions(trade_dates=split_dates(run, "test")))
    worker = threading.Thread(target=executor.run_feed, args=(FollowFeed(growing, poll_s=0.01, stop=stop),))
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while True:  # a reader (hybrid-trader watch) sees every bar that came, not all but the next batch's
            with JournalView(tmp_path / "j.sqlite") as view:
                if view.count("bars") == 50:
                    break
            assert time.monotonic() < deadline, "the bars stayed in an uncommitted batch while the feed waited"
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join()
        executor.close()


def test_run_follow_ends_after_idle_exit_with_the_replays_summary_and_status_lines(tiny, tmp_path, capsys):
    from hybrid_trader.cli.main import main

    run, csv, _ = tiny
    common = ["--split", "test", "--json"]
    assert main(["run", str(run), "--feed", f"replay:{csv}", "--journal", str(tmp_path / "r.sqlite"), *common]) == 0
    replayed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    live = ["--live-from", "2024-01-01 00:00", "--max-bar-age", "1e9"]  # the file's bars traded as if they were new
    assert main(["run", str(run), "--feed", f"follow:{csv}", "--idle-exit", "1", "--journal",
                 str(tmp_path / "f.sqlite"), *common, *live]) == 0
    out = capsys.readouterr()
    followed = json.loads(out.out.strip().splitlines()[-1])
    for key in ("bars", "decisions", "trades", "net_pnl", "balance", "account_status"):
        assert followed[key] == replayed[key], key
    status = [line for line in out.err.splitlines() if " trades  | " in line]
    assert status and f"{followed['trades']:,} trades" in status[-1]


@pytest.mark.parametrize("args, message", [
    (["--idle-exit", "0"], "--idle-exit 0"),
    (["--bar-minutes", "5"], "--bar-minutes 5 but the replayed file holds 1-minute bars"),
])
def test_run_refuses_options_when_they_do_not_fit_the_feed(tiny, tmp_path, capsys, args, message):
    from hybrid_trader.cli.main import main

    run, csv, _ = tiny
    code = main(["run", str(run), "--feed", f"replay:{csv}", "--journal", str(tmp_path / "j.sqlite"), *args])
    assert code == 2
    assert message in capsys.readouterr().err


def test_run_reads_the_feed_in_the_zone_given_when_its_clock_is_not_eastern(tiny, tmp_path, capsys):
    from hybrid_trader.cli.main import main

    run, csv, _ = tiny
    frame = pd.read_csv(csv)
    chicago = tmp_path / "chicago.csv"
    stamps = pd.to_datetime(frame["timestamp"]).dt.tz_localize("America/New_York").dt.tz_convert("America/Chicago")
    frame.assign(timestamp=stamps.dt.tz_localize(None).astype(str)).to_csv(chicago, index=False)
    common = ["--split", "test", "--json", "--no-status"]
    assert main(["run", str(run), "--feed", f"replay:{csv}", "--journal", str(tmp_path / "et.sqlite"), *common]) == 0
    eastern = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["run", str(run), "--feed", f"replay:{chicago}", "--tz", "America/Chicago", "--journal",
                 str(tmp_path / "ct.sqlite"), *common]) == 0
    central = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["run", str(run), "--feed", f"replay:{chicago}", "--time-shift", "1", "--journal",
                 str(tmp_path / "shift.sqlite"), *common]) == 0
    shifted = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("bars", "decisions", "trades", "net_pnl"):
        assert central[key] == eastern[key] == shifted[key], key
