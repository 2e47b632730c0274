"""``hybrid-trader bench env|train|llm``: throughput benchmarks printing JSON on their last line.

Each benchmark takes one typed argument object (``hybrid_trader.bench.args``); its flags,
defaults and help are generated from that dataclass's fields.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Literal, Union

from hybrid_trader.bench.args import EnvBenchArgs, LiveLatencyArgs, LLMBenchArgs, TrainBenchArgs
from hybrid_trader.cli.llm import add_llm_config_options, llm_overrides
from hybrid_trader.config import field_docs
from hybrid_trader.llm.backends import BACKEND_NAMES


def _flag_type(hint: Any) -> tuple[Any, tuple | None]:
    """(argparse type, choices) of a field's hint."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        return type(choices[0]), choices
    return hint, None


def add_dataclass_flags(p: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = (),
                        choices: dict[str, tuple] | None = None) -> None:
    """One ``--field-name`` flag per field of ``cls`` (type, choices, default and help from the field)."""
    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        tp, ch = _flag_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else None
        if tp is bool:  # a switch: --name turns it on
            p.add_argument("--" + f.name.replace("_", "-"), dest=f.name, action="store_true", default=None,
                           help=docs.get(f.name))
            continue
        p.add_argument("--" + f.name.replace("_", "-"), dest=f.name, type=tp, default=None,
                       choices=(choices or {}).get(f.name, ch),
                       help=f"{docs.get(f.name, '')} (default {default})" if default is not None else docs.get(f.name))


def args_of(cls: type, ns: argparse.Namespace, **extra: Any) -> Any:
    """The ``cls`` instance of the flags given (the others keep the field defaults)."""
    given = {f.name: getattr(ns, f.name) for f in dataclasses.fields(cls) if getattr(ns, f.name, None) is not None}
    return cls(**given, **extra)


CONSOLE_SCRIPT = ["-c", "import sys; from hybrid_trader.cli.main import main; sys.exit(main())"]
"""What the ``hybrid-trader`` console script runs, as interpreter arguments: ``bench train --against`` starts each
timed run so, on the copy of the code its ``PYTHONPATH`` names."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure throughput; the last line of output is JSON")
    bsub = p.add_subparsers(dest="bench", metavar="WHAT")
    bsub.required = True

    e = bsub.add_parser("env", help="step the trading environment with random legal actions")
    add_dataclass_flags(e, EnvBenchArgs)
    e.set_defaults(func=_bench_env)
    register_llm(bsub)
    register_train(bsub)
    lat = bsub.add_parser("live-latency", help="bar appended to a followed file -> NinjaTrader order file visible, "
                          "p50/p90/p99 ms, with the follow feed and the bridge at their default polling")
    add_dataclass_flags(lat, LiveLatencyArgs)
    lat.set_defaults(func=_bench_live_latency)


# The benchmark modules import numpy, the environment and the LLM package (torch when they
# run): loaded only when one runs, so that `hybrid-trader --help` stays at 0.1 s (measured).
def _bench_env(args: argparse.Namespace) -> int:
    # measured: 0.6 s (pandas, TA-Lib, gymnasium) on top of the parsers
    from hybrid_trader.bench.env_bench import run

    return run(args_of(EnvBenchArgs, args))


def _bench_live_latency(args: argparse.Namespace) -> int:
    # the executor loads torch and the environment: only when it runs
    from hybrid_trader.bench.live_latency import run

    return run(args_of(LiveLatencyArgs, args))


def register_llm(bsub: argparse._SubParsersAction) -> None:
    m = bsub.add_parser("llm", help="LLM advisor decisions per second through submit/poll, and how long callers block")
    add_llm_config_options(m)
    add_dataclass_flags(m, LLMBenchArgs, skip=("config", "llm_overrides"))
    m.set_defaults(func=_bench_llm)


def _bench_llm(args: argparse.Namespace) -> int:
    # measured: 0.18 s (numpy, the advisor) on top of the parsers; --help must not pay it
    from hybrid_trader.bench.llm_bench import run

    return run(args_of(LLMBenchArgs, args, llm_overrides=llm_overrides(args)))


def register_train(bsub: argparse._SubParsersAction) -> None:
    t = bsub.add_parser("train", help="training steps per second and the share of time spent in the environment; "
                        "--phase 3: the time phase 3 takes against phase 2")
    add_dataclass_flags(t, TrainBenchArgs, skip=("market",), choices={"llm": BACKEND_NAMES})
    t.set_defaults(func=_bench_train, trains=True)


def _bench_train(args: argparse.Namespace) -> int:
    bench = args_of(TrainBenchArgs, args)
    if bench.against is not None:
        # loads the standard library only: the timed runs are subprocesses
        from hybrid_trader.bench.paired import run as run_paired

        return run_paired(bench, CONSOLE_SCRIPT + ["bench", "train"])
    # measured: 0.09 s (numpy) on top of the parsers, then torch (1.5 s) when it runs
    from hybrid_trader.bench.train_bench import run

    return run(bench)
