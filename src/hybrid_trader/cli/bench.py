"""``hybrid-trader bench env|train|llm``: throughput benchmarks printing JSON on their last line."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure throughput; the last line of output is JSON")
    bsub = p.add_subparsers(dest="bench", metavar="WHAT")
    bsub.required = True

    e = bsub.add_parser("env", help="step the trading environment with random legal actions")
    e.add_argument("--data", help="bars file (CSV/Parquet); default: the built-in synthetic market")
    e.add_argument("--steps", type=int, default=200_000, help="environment steps to time (default 200000)")
    e.add_argument("--phase", type=int, choices=(1, 2, 3), default=2, help="environment phase (default 2)")
    e.add_argument("--market", default=None, help="contract root symbol (default: NQ, or guessed from the file name)")
    e.add_argument("--tz", default=None, help="time zone of naive timestamps (default America/New_York)")
    e.add_argument("--time-shift", type=float, default=0.0, help="hours to subtract from the file's clock")
    e.add_argument("--seed", type=int, default=0)
    e.set_defaults(func=_bench_env)


def _bench_env(args: argparse.Namespace) -> int:
    from hybrid_trader.bench.env_bench import run

    return run(args)
