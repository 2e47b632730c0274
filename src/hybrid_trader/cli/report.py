"""``hybrid-trader report RUN_DIR``: the self-contained HTML report of an evaluated run."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write report.html (figures, metrics, baselines) for an evaluated run",
        description="Write a self-contained report.html with PNG figures next to it, from what "
        "`hybrid-trader evaluate` saved under RUN_DIR/eval/SPLIT/. Prints the report's path.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory (the --out of `hybrid-trader train`)")
    p.add_argument("--split", default="test", choices=("train", "val", "test"),
                   help="which evaluated split to report (default: test)")
    p.add_argument("--eval-dir", default=None, metavar="DIR",
                   help="read the evaluation from DIR instead of RUN_DIR/eval/SPLIT")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="where to write the HTML (default: RUN_DIR/eval/SPLIT/report.html); PNGs go next to it")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from hybrid_trader.evaluation.report import write_report

    path = write_report(args.run_dir, args.eval_dir, split=args.split, out=args.out)
    print(f"report: {path}")
    return 0
