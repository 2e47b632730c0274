"""A journal belongs to one run and has one writer, never holds a bar twice; restarts replay every journaled event;
a feed that lacks the journal's bars is refused; write failures are errors that say what happened."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.errors import UserError
from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.executor_journal import EXIT_MANUAL
from hybrid_trader.live.feeds import ReplayFeed
from hybrid_trader.live.journal import Journal
from hybrid_trader.live.journal_read import TABLES, read_journal

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + str(REPO)}


@pytest.fixture(scope="module")
def tiny(tiny_trained):
    """``(phase 2 run, its bars as a CSV, a phase 1 run: another run)``: the session's tiny run (tests/conftest.py)."""
    run, csv, _ = tiny_trained
    return run, csv, run.parent / "p1"


def counts(journal: Path) -> dict[str, int]:
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=30.0)
    try:
        return {t: int(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in TABLES}
    except sqlite3.OperationalError:  # no tables yet
        return {}
    finally:
        db.close()


def executor(run: Path, csv: Path, journal: Path) -> tuple[Executor, ReplayFeed]:
    feed = ReplayFeed(csv)
    return Executor(run, journal,
                    ExecutorOptions(trade_dates=split_dates(run, "test"), market=feed.bars.market,
                                    bar_minutes=feed.bars.bar_minutes)), feed


@pytest.fixture(scope="module")
def whole(tiny_replayed) -> Path:
    """A journal of the whole replay of the phase 2 run, the session's (copied by each test that changes it)."""
    return tiny_replayed[0]


def copy(journal: Path, to: Path) -> Path:
    shutil.copyfile(journal, to)
    return to


def head(csv: Path, rows: int, to: Path) -> Path:
    pd.read_csv(csv).iloc[:rows].to_csv(to, index=False)
    return to


# ---- 1. one run --------------------------------------------------------------------------------------------------
def test_another_runs_journal_is_refused_before_any_row_when_run_on_it(tiny, tmp_path, capsys):
    run, csv, other = tiny
    feed = head(csv, 3000, tmp_path / "f.csv")
    journal = tmp_path / "j.sqlite"
    args = ["--feed", f"replay:{feed}", "--journal", str(journal), "--no-status"]
    assert main(["run", str(run), *args]) == 0
    before = counts(journal)
    assert before["bars"] == 3000
    capsys.readouterr()
    assert main(["run", str(other), *args]) == 2
    err = capsys.readouterr().err
    assert f"belongs to the run {run.resolve()}" in err and f"not to {other.resolve()}" in err
    assert "use a new --journal file" in err and "Traceback" not in err
    assert counts(journal) == before, "not a row written"
    with Journal(journal) as j:
        assert j.identity()["run"] == str(run.resolve())


def test_a_journal_of_the_previous_schema_adopts_the_run_with_a_note_when_continued(tiny, tmp_path):
    run, csv, other = tiny
    feed = head(csv, 2000, tmp_path / "f.csv")
    journal = tmp_path / "j.sqlite"
    ex, bars = executor(run, feed, journal)
    ex.run_feed(bars)
    ex.close()
    db = sqlite3.connect(journal)  # as version 3 wrote it: no identity, no unique index of accepted bars
    db.executescript("DROP TABLE identity; DROP INDEX bars_accepted_time; UPDATE schema_version SET version = 3;")
    db.close()
    ex, bars = executor(run, feed, journal)
    assert any("written before journals recorded their run: it now belongs to" in n for n in ex.notes), ex.notes
    ex.run_feed(bars)
    ex.close()
    with pytest.raises(UserError, match="belongs to the run"):
        executor(other, feed, journal)
    with Journal(journal) as j:  # the refused executor let the journal go: it opens again
        assert j.identity()["run_tag"] == run.name


# ---- 2. one writer, one row per bar --------------------------------------------------------------------------------
def test_second_process_on_a_journal_is_refused_at_once_naming_the_first_pid(tiny, tmp_path, capsys):
    run, csv, _ = tiny
    journal = tmp_path / "j.sqlite"
    cmd = [sys.executable, "-m", "hybrid_trader.cli.main", "run", str(run), "--feed", f"replay:{csv}:600",
           "--journal", str(journal), "--no-status"]
    first = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while not (journal.exists() and counts(journal).get("bars", 0) >= 5):
            if first.poll() is not None:
                pytest.fail(f"the first run ended: {first.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            assert time.time() < deadline, "the first run journaled no bar in time"
            time.sleep(0.1)
        capsys.readouterr()
        started = time.monotonic()
        assert main(["run", str(run), "--feed", f"replay:{csv}", "--journal", str(journal), "--no-status"]) == 2
        assert time.monotonic() - started < 10, "refused at once, not after waiting on SQLite's lock"
        err = capsys.readouterr().err
        assert f"{journal} is being written by another process (PID {first.pid}: run {run})" in err
        assert f"kill {first.pid}" in err
        assert first.poll() is None, "the first run goes on"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    db = sqlite3.connect(journal)
    twice = db.execute("SELECT COUNT(*) FROM (SELECT time_ns FROM bars WHERE accepted = 1 GROUP BY time_ns "
                       "HAVING COUNT(*) > 1)").fetchone()[0]
    db.close()
    assert twice == 0


def test_two_accepted_rows_of_one_bar_are_impossible_when_written(tmp_path):
    path = tmp_path / "j.sqlite"
    with Journal(path) as j:
        j.record_bar(1_000, (1.0, 2.0, 0.5, 1.5, 10.0))
        with pytest.raises(ValueError, match="already holds the accepted bar"):
            j.record_bar(1_000, (1.0, 2.0, 0.5, 1.5, 10.0))
        j.record_bar(1_000, (1.0, 2.0, 0.5, 1.5, 10.0), accepted=False, reason="duplicate")  # rejected rows may repeat
        assert j.count("bars") == 2
    db = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError):  # by the schema itself, whoever writes
        db.execute("INSERT INTO bars (time_ns, accepted, recorded_ns) VALUES (1000, 1, 0)")
    db.close()


def test_a_journal_two_writers_spoiled_is_refused_naming_the_bar_when_opened(tmp_path):
    path = tmp_path / "j.sqlite"
    Journal(path).close()
    db = sqlite3.connect(path)  # version 3, two processes at once: the same bar twice
    db.executescript("DROP INDEX bars_accepted_time; UPDATE schema_version SET version = 3; "
                     "INSERT INTO bars (time_ns, accepted, recorded_ns) VALUES (1704207600000000000, 1, 0); "
                     "INSERT INTO bars (time_ns, accepted, recorded_ns) VALUES (1704207600000000000, 1, 0);")
    db.close()
    with pytest.raises(UserError, match="holds 2 accepted rows of the bar at 2024-01-02 15:00:00") as err:
        Journal(path)
    assert "use a new --journal file" in str(err.value)
    assert len(read_journal(path)["bars"]) == 2, "still readable"


# ---- 3. a feed that lacks the journal's bars -----------------------------------------------------------------------
@pytest.mark.parametrize("share", [0.5, 0.97])
def test_a_prefix_of_the_feed_on_a_full_journal_is_refused_when_restarted(tiny, whole, tmp_path, share):
    run, csv, _ = tiny
    journal = copy(whole, tmp_path / "j.sqlite")
    before = counts(journal)
    prefix = head(csv, int(len(pd.read_csv(csv)) * share), tmp_path / "prefix.csv")
    ex, feed = executor(run, prefix, journal)
    with pytest.raises(UserError, match="before the journal's last bar at .*: it does not hold the bars"):
        ex.run_feed(feed)
    ex.close()
    assert counts(journal) == before


def test_the_whole_feed_again_on_a_full_journal_is_checked_and_accepted(tiny, whole, tmp_path):
    run, csv, _ = tiny
    journal = copy(whole, tmp_path / "j.sqlite")
    before = counts(journal)
    ex, feed = executor(run, csv, journal)
    summary = ex.run_feed(feed)
    ex.close()
    with Journal(journal) as j:
        assert summary.balance == pytest.approx(j.last_account().snapshot["balance"])  # type: ignore[union-attr]
    assert counts(journal) == before


# ---- 4. Ctrl-C with --on-exit flatten, then a restart --------------------------------------------------------------
def _stop_in_a_position(run: Path, csv: Path, journal: Path, on_exit: str) -> int:
    """Feed bars until the second trade is open, stop there (as Ctrl-C does); the bars fed."""
    ex, feed = executor(run, csv, journal)
    n = 0
    for bar in feed:
        ex.on_bar(bar)
        n += 1
        if ex.broker.side and len(ex.broker.trades) >= 1:
            break
    assert ex.broker.side, "the tiny run opens a second position"
    ex.stop(on_exit)  # type: ignore[arg-type]
    ex.close()
    return n


def _orders_and_fills(journal: Path) -> tuple[list[tuple], list[tuple]]:
    db = sqlite3.connect(journal)
    try:
        return (db.execute("SELECT order_id, intent, side, qty, state, note FROM orders ORDER BY id").fetchall(),
                db.execute("SELECT fill_id, order_id, qty, price, time_ns FROM fills ORDER BY id").fetchall())
    finally:
        db.close()


@pytest.mark.parametrize("on_exit", ["flatten", "protect"])
def test_restart_after_a_stop_replays_it_and_continues_when_the_journal_is_reused(tiny, tmp_path, on_exit):
    run, csv, _ = tiny
    journal = tmp_path / "j.sqlite"
    _stop_in_a_position(run, csv, journal, on_exit)
    orders, fills = _orders_and_fills(journal)
    manual = [o for o in orders if o[5] == EXIT_MANUAL]
    assert len(manual) == (1 if on_exit == "flatten" else 0)
    with Journal(journal) as j:
        stopped_at = j.position_from_fills().qty
    assert (stopped_at == 0) == (on_exit == "flatten")

    ex, feed = executor(run, csv, journal)
    summary = ex.run_feed(feed)  # before: "holds a position of 0 but the replay of its bars rebuilt 1"
    ex.close()
    again_orders, again_fills = _orders_and_fills(journal)
    assert again_orders[:len(orders)] == orders and again_fills[:len(fills)] == fills, "nothing rewritten"
    assert len({o[0] for o in again_orders}) == len(again_orders)
    assert len({f[0] for f in again_fills}) == len(again_fills), "no fill booked twice"
    assert len(again_fills) > len(fills), "it traded on after the restart"
    with Journal(journal) as j:
        assert j.position_from_fills().qty == 0 and summary.balance == pytest.approx(
            j.last_account().snapshot["balance"])  # type: ignore[union-attr]
        assert list(j.stops().values()) == [on_exit], "the stop is journaled, once"


def test_restart_after_sigint_replays_the_manual_exit_when_run_again(tiny, tmp_path):
    run, csv, _ = tiny
    journal = tmp_path / "j.sqlite"
    cmd = [sys.executable, "-m", "hybrid_trader.cli.main", "run", str(run), "--feed", f"replay:{csv}",
           "--journal", str(journal), "--no-status", "--split", "test"]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 300
    while True:  # Ctrl-C once trades are journaled and a position is open
        db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=30.0) if journal.exists() else None
        try:
            row = db.execute("SELECT COUNT(*), (SELECT snapshot FROM account ORDER BY id DESC LIMIT 1) FROM fills"
                             ).fetchone() if db else (0, None)
        except sqlite3.OperationalError:
            row = (0, None)
        finally:
            if db:
                db.close()
        if row[0] >= 4 and row[1] and '"position": 0' not in row[1]:
            break
        assert proc.poll() is None, proc.stderr.read()[-2000:]  # type: ignore[union-attr]
        assert time.time() < deadline, "no position in time"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    orders, fills = _orders_and_fills(journal)
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    again_orders, again_fills = _orders_and_fills(journal)
    assert again_orders[:len(orders)] == orders and again_fills[:len(fills)] == fills
    assert len({f[0] for f in again_fills}) == len(again_fills)


# ---- 5. write failures ---------------------------------------------------------------------------------------------
def _file_size_limit(limit: int):
    """A child's file size limit: its writes past ``limit`` bytes fail as on a full disk (EFBIG, SIGXFSZ ignored)."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_journal_that_cannot_grow_is_an_error_naming_it_when_written_mid_run(tiny, tmp_path):
    run, csv, _ = tiny
    journal = tmp_path / "j.sqlite"
    cmd = [sys.executable, "-m", "hybrid_trader.cli.main", "run", str(run), "--feed", f"replay:{csv}",
           "--journal", str(journal), "--no-status"]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300,
                          preexec_fn=_file_size_limit(400_000 + 123))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"error: {journal}: cannot write the journal: " in done.stderr and "df -h" in done.stderr
    with Journal(journal) as j:  # what was committed is there, whole
        assert j.integrity_check() == "ok" and j.count("bars") > 0


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_device_given_as_the_journal_is_refused_naming_it(tiny, capsys):
    run, csv, _ = tiny
    before = Path("/dev/full-journal").exists()
    assert main(["run", str(run), "--feed", f"replay:{csv}", "--journal", "/dev/full", "--no-status"]) == 2
    err = capsys.readouterr().err
    assert "error: /dev/full: the journal path is a device or pipe, not a file" in err and "fix: give a file" in err
    assert not Path("/dev/full.lock").exists() and Path("/dev/full-journal").exists() == before, "nothing left beside"


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` made read-only for this process: ``chmod 444``, or as root (who writes such files) immutable."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        yield
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)]).returncode != 0:
        pytest.skip("running as root without chattr +i: a file root cannot write is not available")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_read_only_and_truncated_journals_get_different_errors_when_opened(tmp_path):
    path = tmp_path / "j.sqlite"
    with Journal(path) as j:
        for i in range(2000):
            j.record_bar(i, (1.0, 2.0, 0.5, 1.5, 10.0))
    with read_only(path), pytest.raises(UserError) as err, Journal(path) as j:
        j.record_bar(5_000, (1.0, 2.0, 0.5, 1.5, 10.0))
    said = str(err.value)
    assert f"{path}: cannot" in said and "the journal: it is read-only" in said and "chmod u+w" in said
    assert len(read_journal(path)["bars"]) == 2000, "nothing lost"
    path.write_bytes(path.read_bytes()[:20_000])  # cut short
    for opener in (Journal, read_journal):
        with pytest.raises(UserError, match="the file is damaged or not a journal") as err:
            opener(path)
        assert str(path) in str(err.value) and "read-only" not in str(err.value)


def test_report_on_an_empty_sqlite_file_says_it_is_empty(tmp_path, capsys):
    empty = tmp_path / "j.sqlite"
    empty.touch()
    assert main(["report", str(empty)]) == 2
    err = capsys.readouterr().err
    assert f"{empty}: an empty file (0 bytes), not a journal" in err and "run directory not found" not in err
