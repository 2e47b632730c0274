"""Restart of ``hybrid-trader run`` after a kill -9: seconds from the new process's start to its first new decision.

    python bench/live_restart.py RUN_DIR [--data FILE] [--tz TZ] [--split test] [--at 0.8] [--repeats N]

Replays FILE (default: the run's own data) through ``hybrid-trader run`` in a child
process, kills it with SIGKILL once the journal holds decisions of a bar past the ``--at``
share of the file, then starts the same command again and times, from that second
process's start, the first decision journaled for a bar the first process had not
decided: imports, loading the run, the replay of the history (features, broker and
account rebuilt through the same code) and the recovery check included. Prints the
seconds, the history replayed (bars) and the medians over ``--repeats``.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig

POLL_S = 0.02


def last_decision(journal: Path) -> tuple[int, int]:
    """(decisions, latest decision's bar time ns) in the journal, read-only; (0, 0) before it exists."""
    if not journal.exists():
        return 0, 0
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=30.0)
    try:
        n, last = db.execute("SELECT COUNT(*), COALESCE(MAX(bar_time_ns), 0) FROM decisions").fetchone()
        return int(n), int(last)
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0, 0
    finally:
        db.close()


def once(cmd: list[str], journal: Path, kill_after: int, timeout_s: float) -> tuple[float, int]:
    """Kill a first replay after ``kill_after`` decisions, restart it: (seconds to the first new decision, bars
    the restart replayed before it)."""
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout_s
    while last_decision(journal)[0] < kill_after:
        if first.poll() is not None or time.time() > deadline:
            first.kill()
            raise SystemExit("the first replay ended (or timed out) before it could be killed: lower --at")
        time.sleep(POLL_S)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before, last_ns = last_decision(journal)
    start = time.perf_counter()
    second = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            n, newest = last_decision(journal)
            if n > before and newest > last_ns:
                elapsed = time.perf_counter() - start
                break
            if second.poll() is not None or time.time() > deadline:
                raise SystemExit("the restart made no new decision")
            time.sleep(POLL_S)
    finally:
        second.kill()
        second.wait()
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    bars = int(db.execute("SELECT COUNT(*) FROM bars WHERE time_ns <= ?", (last_ns,)).fetchone()[0])
    db.close()
    return elapsed, bars


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--data", type=Path, help="the bars to replay (default: the run's own data.path)")
    ap.add_argument("--tz", help="time zone of naive timestamps (default: the run's data.tz, as run reads it)")
    ap.add_argument("--split", default="test", choices=("train", "val", "test", "all"))
    ap.add_argument("--at", type=float, default=0.8, help="kill once this share of the split's decisions is made")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before giving up")
    args = ap.parse_args()
    data_cfg = RunDir(args.run_dir).require().load_config(RunConfig).data
    data = args.data or (Path(data_cfg.path) if data_cfg.path else None)
    if data is None:
        ap.error("the run trained on the synthetic market: give --data FILE")
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.sqlite"
        base = [sys.executable, "-m", "hybrid_trader.cli.main", "run", str(args.run_dir), "--feed", f"replay:{data}",
                "--split", args.split, "--no-status"]
        if args.tz:
            base += ["--tz", args.tz]
        subprocess.run([*base, "--journal", str(probe)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        total = last_decision(probe)[0]
        kill_after = max(1, int(total * args.at))
        times = []
        for i in range(args.repeats):
            journal = Path(tmp) / f"journal{i}.sqlite"
            seconds, bars = once([*base, "--journal", str(journal)], journal, kill_after, args.timeout)
            times.append(seconds)
            print(f"restart -> first new decision: {seconds:.2f} s (the journal held {bars:,} bars, "
                  f"{kill_after:,} of {total:,} decisions)", flush=True)
    if args.repeats > 1:
        print(f"median of {args.repeats}: {statistics.median(times):.2f} s")


if __name__ == "__main__":
    main()
