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
    e.add_argument("--time-shift", type=float, default=0.0, help="hours added to every timestamp (the ES sample file needs -5)")
    e.add_argument("--seed", type=int, default=0)
    e.set_defaults(func=_bench_env)
    register_llm(bsub)
    register_train(bsub)


def _bench_env(args: argparse.Namespace) -> int:
    from hybrid_trader.bench.env_bench import run

    return run(args)


def register_llm(bsub: argparse._SubParsersAction) -> None:
    from hybrid_trader.cli.llm import add_llm_config_options

    m = bsub.add_parser("llm", help="LLM advisor decisions per second through submit/poll, and how long callers block")
    add_llm_config_options(m)
    m.add_argument("--batch", type=int, default=16, help="batch size = parallel environments (default 16)")
    m.add_argument("--queries", type=int, default=None,
                   help="model answers to time (default 128; 2000 for the mock back end)")
    m.add_argument("--step-ms", type=float, default=5.0,
                   help="simulated environment time per vectorised step [ms] (default 5: 16 envs at 3200 steps/s)")
    m.add_argument("--max-wait-ms", type=float, default=None, help="llm.batching.max_wait_ms (default: config's)")
    m.add_argument("--seed", type=int, default=0)
    m.set_defaults(func=_bench_llm)


def _bench_llm(args: argparse.Namespace) -> int:
    from hybrid_trader.bench.llm_bench import run

    return run(args)


def register_train(bsub: argparse._SubParsersAction) -> None:
    t = bsub.add_parser("train", help="training steps per second and the share of time spent in the environment; "
                        "--phase 3: the time phase 3 takes against phase 2")
    t.add_argument("--phase", type=int, choices=(1, 2, 3), default=1,
                   help="phase (default 1); 3 also times phase 2 from the same start and reports phase3_over_phase2")
    t.add_argument("--llm", choices=("mock", "transformers", "openai", "llama_cpp"), default="mock",
                   help="phase 3: LLM advisor back end (default mock)")
    t.add_argument("--repeats", type=int, default=1,
                   help="phase 3: timed phase 2 / phase 3 pairs, alternating; medians are compared (default 1)")
    t.add_argument("--n-envs", type=int, default=1, help="parallel environments (default 1)")
    t.add_argument("--vec-env", choices=("dummy", "subproc"), default="dummy",
                   help="environments in the main process (dummy) or one subprocess each (subproc)")
    t.add_argument("--steps", type=int, default=20_480, help="training steps to time (default 20480)")
    t.add_argument("--data", help="bars file; default: the built-in synthetic market")
    t.add_argument("--tz", default=None, help="time zone of naive timestamps")
    t.add_argument("--time-shift", type=float, default=None, help="hours added to every timestamp")
    t.add_argument("--seed", type=int, default=0)
    t.set_defaults(func=_bench_train)


def _bench_train(args: argparse.Namespace) -> int:
    from hybrid_trader.bench.train_bench import run

    return run(args)
