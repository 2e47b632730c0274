"""Replay speed and decision latency of ``hybrid-trader run`` (the executor, paper broker).

    python bench/live_replay.py RUN_DIR [--data FILE] [--tz TZ] [--split test] [--repeats N]
                                [--journal-dir DIR] [--llm BACKEND] [--llm-budget-ms MS] [--pace-ms MS]
                                [--watch off|on|both]

Replays FILE (default: the run's own ``data.path``, read in its ``data.tz``) through
:class:`hybrid_trader.live.executor.Executor` as fast as it goes and prints the bars per
second over the whole replay (gate, features, journal, decisions) and the latency from a
bar's arrival to its decision and order committed to the journal (p50, p99, max, over the
decision bars), in milliseconds. ``--repeats N`` replays N times (a new journal each) and
adds the medians. The journal is a new file in ``--journal-dir`` (default: a temporary
folder on disk; ``/dev/shm`` takes the disk's fsync out of the figures).

A phase 3 run decides with its advisor: its student (synchronous), or with ``--llm BACKEND``
that back end in the student's place (e.g. ``transformers``: Gemma), asked asynchronously,
each decision waiting at most ``--llm-budget-ms`` for its own answer. ``--pace-ms`` sleeps
that long after each decision bar, so a slow model has time to answer between bars as on a
live feed (the sleep is not counted in the latency); the advisor's own statistics follow.

``--watch on`` replays with ``hybrid-trader watch`` reading each journal (its own process, a page's event stream
open on it: every state it pushes is read); ``both`` alternates replays without and with it (``--repeats`` of each)
and prints the medians of each: what watching costs the executor.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from hybrid_trader.agent.advised import AdvisedPolicy
from hybrid_trader.calendar import EASTERN
from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import ReplayFeed
from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig


def replay(run_dir: Path, data: Path, tz: str, split: str, journal: Path, *, llm: str | None = None,
           budget_ms: float = 0.0, pace_ms: float = 0.0) -> tuple[float, list[float], Executor]:
    """One replay: (bars per second, decision latencies in ms, the executor)."""
    feed = ReplayFeed(data, tz=tz)
    ex = Executor(run_dir, journal,
                  ExecutorOptions(trade_dates=split_dates(run_dir, split), market=feed.bars.market,
                                  bar_minutes=feed.bars.bar_minutes, llm_budget_ms=budget_ms,
                                  llm_overrides={"backend": llm} if llm else None))
    decisions = [0]

    def pace(executor: Executor) -> None:
        if executor.summary.decisions != decisions[0]:
            decisions[0] = executor.summary.decisions
            time.sleep(pace_ms / 1000.0)

    start = time.perf_counter()
    summary = ex.run_feed(feed, on_bar=pace if pace_ms > 0 else None)
    elapsed = time.perf_counter() - start
    advisor = getattr(ex.policy, "advisor", None)
    if isinstance(ex.policy, AdvisedPolicy) and ex.policy.asynchronous:
        stats = advisor.stats() if advisor is not None else {}
        print(f"advisor {ex.advisor_label}: asked {ex.policy.asked}, answered inside the budget {ex.policy.fresh}, "
              f"model latency avg {stats.get('llm/avg_latency_ms', float('nan')):.0f} ms "
              f"p95 {stats.get('llm/p95_latency_ms', float('nan')):.0f} ms")
    ex.close()
    lat = list(ex.latencies_ms)
    print(f"bars {summary.bars}  decisions {summary.decisions}  trades {summary.trades}  "
          f"elapsed {elapsed:.2f} s  -> {summary.bars / elapsed:,.0f} bars/s")
    if lat:
        print(f"bar arrival -> decision journaled [ms]: p50 {np.percentile(lat, 50):.2f}  "
              f"p99 {np.percentile(lat, 99):.2f}  max {max(lat):.2f}", flush=True)
    return summary.bars / elapsed, lat, ex


@contextlib.contextmanager
def watched(journal: Path) -> Iterator[list[int]]:
    """``hybrid-trader watch journal`` in its own process, with a reader of its event stream (the page's part) in a
    thread; yields ``[events read]``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-m", "hybrid_trader.cli.main", "watch", str(journal), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    url = server.stdout.readline().split()[1] if server.stdout else ""
    events = [0]

    def read() -> None:
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "events") as stream:
            for line in stream:
                events[0] += line.startswith(b"data: ")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield events
    finally:
        server.terminate()
        server.wait()
        reader.join(timeout=5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--data", type=Path, help="the bars to replay (default: the run's own data.path)")
    ap.add_argument("--tz", help=f"time zone of naive timestamps (default: the run's data.tz with --data left "
                                 f"out, else {EASTERN})")
    ap.add_argument("--split", default="test", choices=("train", "val", "test", "all"))
    ap.add_argument("--repeats", type=int, default=1, help="replays (medians printed when more than one)")
    ap.add_argument("--journal-dir", type=Path, help="folder of the journal files (default: a temporary folder)")
    ap.add_argument("--llm", metavar="BACKEND", help="phase 3: this LLM back end in the run's advisor's place, asked "
                                                   "asynchronously (e.g. transformers)")
    ap.add_argument("--llm-budget-ms", type=float, default=0.0, help="phase 3 asynchronous LLM: the wait budget")
    ap.add_argument("--pace-ms", type=float, default=0.0, help="sleep after each decision bar (a live feed's pace)")
    ap.add_argument("--watch", choices=("off", "on", "both"), default="off",
                    help="replay with `hybrid-trader watch` on the journal (both: alternate without and with)")
    args = ap.parse_args()
    data_cfg = RunDir(args.run_dir).require().load_config(RunConfig).data
    data, tz = args.data, args.tz
    if data is None:
        if data_cfg.path is None:
            ap.error("the run trained on the synthetic market: give --data FILE")
        data, tz = Path(data_cfg.path), tz or data_cfg.tz
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.watch]
    rates: dict[bool, list[float]] = {m: [] for m in modes}
    p50: dict[bool, list[float]] = {m: [] for m in modes}
    p99: dict[bool, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(dir=args.journal_dir) as tmp:
        for i in range(args.repeats):
            for watch in modes:
                journal = Path(tmp) / f"journal{i}{'-watched' if watch else ''}.sqlite"
                with watched(journal) if watch else contextlib.nullcontext([0]) as events:
                    rate, lat, ex = replay(args.run_dir, data, tz or EASTERN, args.split, journal, llm=args.llm,
                                           budget_ms=args.llm_budget_ms, pace_ms=args.pace_ms)
                if watch:
                    print(f"watched: the page's event stream read {events[0]} states", flush=True)
                rates[watch].append(rate)
                if lat:
                    p50[watch].append(float(np.percentile(lat, 50)))
                    p99[watch].append(float(np.percentile(lat, 99)))
    for watch in modes:
        if args.repeats > 1 or len(modes) > 1:
            print(f"{'watched' if watch else 'not watched'}: median of {args.repeats}: "
                  f"{statistics.median(rates[watch]):,.0f} bars/s"
                  + (f"  latency p50 {statistics.median(p50[watch]):.2f} ms  p99 {statistics.median(p99[watch]):.2f} "
                     "ms" if p50[watch] else ""))
    for note in ex.notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
