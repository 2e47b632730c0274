"""``hybrid-trader demo``: the whole pipeline once, end to end, in minutes.

Trains phase 1 then phase 2 on the built-in synthetic market (or your bars), evaluates
on the test split against the baselines, writes the HTML report and prints the
headline figures and where everything is.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from hybrid_trader.config import merge_overrides


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="train phase 1 and 2, evaluate on the test split and write the report",
        description="The whole pipeline once: phase 1, phase 2 (from phase 1), evaluation on the later test days "
        "against baselines, HTML report. Default: the built-in synthetic market with a planted edge; under 10 "
        "minutes on a 2-core CPU (--fast: about 2 minutes).",
    )
    p.add_argument("--data", metavar="FILE", help="your bars (CSV or Parquet) instead of the synthetic market")
    p.add_argument("--market", help="contract root symbol (default: from the file name, else NQ)")
    p.add_argument("--tz", help="time zone of naive timestamps in --data (default America/New_York)")
    p.add_argument("--time-shift", type=float, metavar="HOURS", help="hours added to every timestamp of --data")
    p.add_argument("--out", metavar="DIR", help="where the two runs go (default runs/demo-<time>)")
    p.add_argument("--fast", action="store_true", help="a much shorter run (smoke test of the pipeline)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.set_defaults(func=run, trains=True)  # main() prepares OpenMP for the update (training/threads.py)


# Training budgets [steps]: (phase 1, phase 2).
BUDGET = {"default": (300_000, 150_000), "fast": (20_000, 8_000)}
SYNTHETIC = {"data.synthetic_edge": 0.5, "data.synthetic_days": 100, "data.market": "NQ", "env.market": "MNQ"}
"""The built-in market of the demo: NQ-like bars with a strong planted edge, traded with the micro
contract so that one unlucky first week cannot end the Apex 50K evaluation (the learning test's set-up)."""


def headline_line(metrics: dict, dates: tuple[str, str]) -> str:
    """The agent's net P&L against the best baseline (by net P&L), then the others, over the test days."""
    net = "Net PnL [$]"
    baselines = {name: m[net] for name, m in metrics.items() if name != "agent" and net in m}
    best = max(baselines, key=lambda k: baselines[k])
    others = ", ".join(f"{name} ${v:,.0f}" for name, v in baselines.items() if name != best)
    agent = metrics["agent"][net]
    verdict = "beats" if agent > baselines[best] else "does not beat"
    return (f"agent net PnL ${agent:,.0f} {verdict} the best baseline, {best} ${baselines[best]:,.0f} "
            f"({others}; random is the mean of its seeds) over {dates[0]} to {dates[1]}, net of costs")


def run(args: argparse.Namespace) -> int:
    # Training and evaluation load torch, gymnasium and TA-Lib: 1.9 s (measured) that
    # `hybrid-trader --help` (0.1 s) must not pay; the same holds for each line below.
    from hybrid_trader.evaluation.evaluate import HEADLINE, EvaluationRequest, evaluate_run, format_table  # torch
    from hybrid_trader.evaluation.report import write_report  # torch
    from hybrid_trader.evaluation.runner import validation_fn  # torch
    from hybrid_trader.run.config import RunConfig  # torch (via the agent's fusion)
    from hybrid_trader.run.market import load_market  # gymnasium, TA-Lib
    from hybrid_trader.training.runner import TrainHooks, train_run  # torch, stable-baselines3

    started = time.perf_counter()
    out = Path(args.out) if args.out else Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    steps1, steps2 = BUDGET["fast" if args.fast else "default"]
    base = {"ppo.seed": args.seed, "train.checkpoint_every": 50_000, "train.validate_every": 50_000}
    if not args.data:
        base.update(SYNTHETIC)
    if args.data:
        base.update({"data.path": args.data})
        if args.tz:
            base["data.tz"] = args.tz
        if args.time_shift is not None:
            base["data.time_shift"] = args.time_shift
    if args.market:
        base.update({"data.market": args.market, "env.market": args.market})
    if args.fast:
        base.update({"ppo.n_steps": 512, "ppo.n_epochs": 5, "train.validate_every": 0})
        if not args.data:
            base["data.synthetic_days"] = 30
    cfg1 = merge_overrides(RunConfig(), {**base, "env.phase": 1, "ppo.total_timesteps": steps1})
    cfg2 = merge_overrides(RunConfig(), {**base, "env.phase": 2, "ppo.total_timesteps": steps2,
                                         "ppo.learning_rate": 1e-4})
    market = load_market(cfg1.data, cfg1.split)
    print(f"== demo: {market.bars.source}")
    print("== phase 1: entries (HOLD/BUY/SELL, fixed ATR stop and target)")
    train_run(cfg1, out / "phase1", market=market, hooks=TrainHooks(validation=validation_fn))
    print("== phase 2: position management (6 actions), initialised from phase 1")
    train_run(cfg2, out / "phase2", init=out / "phase1", market=market, hooks=TrainHooks(validation=validation_fn))
    print("== evaluation on the test split (days neither phase trained on)")
    result = evaluate_run(out / "phase2", EvaluationRequest(split="test", seeds=3, market=market))
    report = write_report(out / "phase2")
    print(format_table(result.metrics, HEADLINE))
    assert result.dates is not None  # evaluate_run always sets the split's first and last day
    print("\n" + headline_line(result.metrics, result.dates))
    print(f"demo finished in {time.perf_counter() - started:.0f} s")
    print(f"runs:   {out / 'phase1'}  {out / 'phase2'}")
    print(f"report: {report}")
    return 0
