"""Replay speed and decision latency of ``hybrid-trader run`` (the executor, paper broker, no LLM).

    python bench/live_replay.py RUN_DIR --data FILE [--split test] [--journal FILE]

Replays FILE through :class:`hybrid_trader.live.executor.Executor` as fast as it goes and
prints the bars per second over the whole replay (gate, features, journal, decisions) and
the latency from a bar's arrival to its decision and order written in the journal (p50,
p99, max, over the decision bars), in milliseconds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from hybrid_trader.live.executor import Executor, split_dates
from hybrid_trader.live.feeds import ReplayFeed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--data", type=Path, required=True, help="the bars to replay (the run's own file)")
    ap.add_argument("--split", default="test", choices=("train", "val", "test", "all"))
    ap.add_argument("--journal", type=Path, help="default: a new file in a temporary folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        journal = args.journal or Path(tmp) / "journal.sqlite"
        feed = ReplayFeed(args.data)
        ex = Executor(args.run_dir, journal, trade_dates=split_dates(args.run_dir, args.split),
                      market=feed.bars.market, bar_minutes=feed.bars.bar_minutes)
        start = time.perf_counter()
        summary = ex.run_feed(feed)
        elapsed = time.perf_counter() - start
        ex.close()
    lat = np.asarray(ex.latencies_ms)
    print(f"bars {summary.bars}  decisions {summary.decisions}  trades {summary.trades}  "
          f"elapsed {elapsed:.2f} s  -> {summary.bars / elapsed:,.0f} bars/s")
    if len(lat):
        print(f"bar arrival -> decision journaled [ms]: p50 {np.percentile(lat, 50):.2f}  "
              f"p99 {np.percentile(lat, 99):.2f}  max {lat.max():.2f}")


if __name__ == "__main__":
    main()
