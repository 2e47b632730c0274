"""SIGTERM flattens: ``hybrid-trader run --broker ninjatrader`` holding a position on a followed feed is sent SIGTERM
(a service manager's stop) with ``--on-exit protect``; it closes the position (CLOSEPOSITION, waited for until
NinjaTrader's position file reads FLAT) and exits 143."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import ReplayFeed
from tests.live.fake_ninjatrader import FakeBar, FakeNinjaTrader
from tests.live.test_executor_ninjatrader import ACCOUNT, INSTRUMENT

REPO = Path(__file__).resolve().parents[2]
CLOSE_LINE = f"CLOSEPOSITION;{ACCOUNT};{INSTRUMENT};;;;;;;;;;"


@pytest.fixture(scope="module")
def tiny(tiny_trained):
    """The session's tiny trained run (tests/conftest.py)."""
    return tiny_trained


def holding_cut(run: Path, csv: Path, journal: Path) -> tuple[int, float]:
    """The bar (ns) after which the paper run has held a position for two bars, and its close."""
    ex = Executor(run, journal, ExecutorOptions(trade_dates=split_dates(run, "test"), market="NQ", bar_minutes=1))
    held = 0
    try:
        for bar in ReplayFeed(csv):
            ex.on_bar(bar)
            held = held + 1 if ex.broker.side else 0
            if held >= 2:
                return bar.time_ns, bar.close
    finally:
        ex.close()
    raise AssertionError("the tiny run never held a position")


def last_bar(journal: Path) -> int | None:
    if not journal.exists():
        return None
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=30.0)
    try:
        return db.execute("SELECT MAX(time_ns) FROM bars").fetchone()[0]
    except sqlite3.OperationalError:
        return None
    finally:
        db.close()


def test_sigterm_flattens_the_ninjatrader_position_and_exits_143(tiny, tmp_path):
    run, csv, _ = tiny
    cut, price = holding_cut(run, csv, tmp_path / "paper.sqlite")
    frame = pd.read_csv(csv)
    stamps = pd.to_datetime(frame["timestamp"]).dt.tz_localize("America/New_York").dt.as_unit("ns")
    followed = tmp_path / "export.csv"
    frame[stamps.dt.tz_convert("UTC").astype("int64") <= cut].to_csv(followed, index=False)
    nt = FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)
    running = threading.Event()
    running.set()

    def ninjatrader() -> None:  # NinjaTrader on its own: it reads incoming\ every 50 ms
        while running.is_set():
            nt.process(FakeBar(price, price, price, price))
            time.sleep(0.05)
    reader = threading.Thread(target=ninjatrader, daemon=True)
    reader.start()
    journal = tmp_path / "j.sqlite"
    # the wall clock of the guard: a minute after the last bar (before its flat-by time), not 2026's
    now = pd.Timestamp(cut, tz="UTC").timestamp() + 60.0
    args = ["run", str(run), "--feed", f"follow:{followed}", "--split", "test", "--journal", str(journal),
            "--live-from", "2024-01-01 00:00", "--max-bar-age", "1e9", "--broker", "ninjatrader", "--nt-dir",
            str(nt.nt_dir), "--nt-account", ACCOUNT, "--nt-instrument", INSTRUMENT, "--nt-mismatch-bars", "100000",
            "--on-exit", "protect", "--flat-retry-s", "0.2", "--no-status"]
    code = ("import hybrid_trader.live.deadline as d, sys\n"
            f"d.FlatGuard.__init__.__kwdefaults__['clock'] = lambda: {now!r}\n"
            "from hybrid_trader.cli.main import main\n"
            f"sys.exit(main({args!r}))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        until = time.time() + 240
        while time.time() < until and (last_bar(journal) or 0) < cut and proc.poll() is None:
            time.sleep(0.2)
        assert last_bar(journal) == cut, proc.stderr.read() if proc.poll() is not None else "the run is too slow"
        time.sleep(1.0)  # the bar's orders written; the run waits for the next line
        assert nt.position != 0, "NinjaTrader holds the position when SIGTERM comes"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        running.clear()
        reader.join()
    assert proc.returncode == 143, err[-2000:]
    assert nt.position == 0
    commands = [line.split(";")[0] for line in nt.received]
    last_place = max(i for i, c in enumerate(commands) if c == "PLACE")
    assert nt.received[last_place + 1] == CLOSE_LINE and nt.received.count(CLOSE_LINE) == \
        1 + sum(1 for c in commands[:last_place] if c == "CLOSEPOSITION"), "one CLOSEPOSITION for the SIGTERM"
    db = sqlite3.connect(journal)
    try:
        stops = db.execute("SELECT code FROM errors WHERE location = 'stop'").fetchall()
        exits = db.execute("SELECT note FROM orders WHERE intent = 'exit' ORDER BY id DESC LIMIT 1").fetchall()
        closes = db.execute("SELECT state FROM orders WHERE intent = 'close' ORDER BY id DESC LIMIT 1").fetchall()
    finally:
        db.close()
    assert stops == [("stop:flatten",)], "SIGTERM flattens whatever --on-exit says"
    assert exits == [("MANUAL_EXIT",)] and closes == [("filled",)]
