"""Per-bar cost of ``features.incremental.IncrementalFeatures`` (the executor's feature step).

    python bench/live_features.py                       # a year of real NQ 1-min bars if present, else synthetic
    python bench/live_features.py --data FILE --tz CT --check

Feeds every bar one at a time, times each ``append`` (wall clock, ``perf_counter``) and
prints p50 / p99 / p99.9 / max in milliseconds; ``--check`` also compares every row with
``compute_features`` on the whole file (bit for bit).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

from hybrid_trader.data import Bars, generate_bars, load_bars
from hybrid_trader.features import compute_features
from hybrid_trader.features.incremental import IncrementalFeatures

ROOT = Path(__file__).resolve().parents[1]
YEAR = Path("shared") / "data" / "NQ_1min_2024_central"
"""Relative to the project root's parent (a checkout) or its grandparent (a worktree under it)."""


def _default_data() -> tuple[Bars, str]:
    for candidate in (ROOT.parent / YEAR, ROOT.parent.parent / YEAR):
        if candidate.is_dir():
            return load_bars(candidate, tz="CT"), str(candidate)
    return generate_bars(250, seed=0), "synthetic: 250 days of 1-min bars"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="bars file or folder (default: the shared 2024 NQ 1-min year, else synthetic)")
    ap.add_argument("--tz", default="ET", help="time zone of naive timestamps (default ET)")
    ap.add_argument("--time-shift", type=float, default=0.0)
    ap.add_argument("--limit", type=int, default=0, help="only the first N bars")
    ap.add_argument("--check", action="store_true", help="compare every row with compute_features")
    args = ap.parse_args(argv)
    if args.data:
        bars, name = load_bars(args.data, tz=args.tz, time_shift=args.time_shift), args.data
    else:
        bars, name = _default_data()
    if args.limit:
        bars = Bars(bars.frame.iloc[: args.limit], bars.market, bars.bar_minutes, bars.source)
    n = len(bars)
    inc = IncrementalFeatures(bars.market, bars.bar_minutes)
    lat = np.empty(n)
    bar = np.empty((n, 11), np.float32) if args.check else None
    mkt = np.empty((n, 28), np.float32) if args.check else None
    cols = zip(bars.frame.index.asi8.tolist(), bars.open.tolist(), bars.high.tolist(), bars.low.tolist(),
               bars.close.tolist(), bars.volume.tolist())
    gc.collect()
    start = time.perf_counter()
    for i, (ts, o, h, lo, c, v) in enumerate(cols):
        t0 = time.perf_counter()
        row = inc.append(ts, o, h, lo, c, v)
        lat[i] = time.perf_counter() - t0
        if bar is not None and mkt is not None:
            bar[i], mkt[i] = row.bar, row.llm_market
    total = time.perf_counter() - start
    ms = lat * 1e3
    print(f"{name}: {n:,} bars of {bars.bar_minutes} min ({bars.market}), {total:.1f} s in all")
    print(f"per bar (ms): mean {ms.mean():.3f}  p50 {np.percentile(ms, 50):.3f}  p99 {np.percentile(ms, 99):.3f}  "
          f"p99.9 {np.percentile(ms, 99.9):.3f}  max {ms.max():.3f}")
    if bar is not None and mkt is not None:
        fs = compute_features(bars)
        same = np.array_equal(bar, fs.bar) and np.array_equal(mkt, fs.llm_market)
        print(f"check: every row equal to compute_features: {same}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
