"""``hybrid-trader study STUDY.yaml``: variants x seeds x folds, each trial trained and evaluated, on Ray.

See docs/STUDY.md. A JSON summary is printed last with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hybrid_trader.errors import UserError

EXIT_SOME_FAILED = 3
"""Exit code of a study in which some trials failed (or are missing); the others' results are written."""
EXIT_ALL_FAILED = 4
"""Exit code of a study in which no trial finished."""


def exit_code(summary: dict) -> int:
    """0 when every trial finished, else :data:`EXIT_SOME_FAILED` or :data:`EXIT_ALL_FAILED`."""
    if summary["finished"] == summary["trials"]:
        return 0
    return EXIT_ALL_FAILED if summary["finished"] == 0 else EXIT_SOME_FAILED


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="a study on Ray: every variant x seed x fold trained and evaluated; means with "
                                     "confidence intervals, paired comparisons, the Deflated Sharpe Ratio",
                       description="Every variant's configuration (keys, data and split, one environment) is checked "
                                   "before Ray starts. Exit codes: 0 every trial finished; 2 the study was refused "
                                   f"(a message says why); {EXIT_SOME_FAILED} some trials failed (their errors are "
                                   f"printed and in summary.json, the others' results written); {EXIT_ALL_FAILED} "
                                   "every trial failed; 130 interrupted (a rerun continues).")
    p.add_argument("study", type=Path, help="the study file (YAML, docs/STUDY.md)")
    p.add_argument("--out", type=Path, help="study folder (default: studies/<study file's stem>); a rerun skips "
                                            "finished trials")
    p.add_argument("--workers", type=int, default=None,
                   help="Ray workers on this machine, one trial each (default: the cores; capped at them)")
    p.add_argument("--address", help="join an existing Ray cluster (e.g. 10.0.0.5:6379, or auto on its head) "
                                     "instead of starting one; a token-authenticated one with the token in "
                                     "RAY_AUTH_TOKEN or ~/.ray/auth_token (docs/STUDY.md, On a cluster)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON, last")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # the engine loads torch, SB3 and Ray's client (~3 s): the CLI's --help must not pay it
    from hybrid_trader.evaluation.metrics import jsonable
    from hybrid_trader.study.engine import run_study  # same reason

    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers {args.workers} must be 1 or more")
    out = args.out or Path("studies") / args.study.stem
    summary = run_study(args.study, out, workers=args.workers, address=args.address,
                        progress=not args.no_progress, say=(lambda s: None) if args.json else print)
    if args.json:
        print(json.dumps(jsonable(summary)))
        return _failures(summary, out)
    for name, v in summary["variants"].items():
        f = v["figures"]["Net PnL [$]"]
        print(f"{name:<24} {v['finished']}/{v['trials']} trials  net P&L mean {f['mean']:,.0f} "
              f"[{f['ci_low']:,.0f}, {f['ci_high']:,.0f}]")
    for name, p in summary["paired vs baseline"].items():
        d = p["Net PnL [$]"]
        print(f"{name} - {summary['baseline']}: {p['pairs']} pairs, net P&L {d['mean difference']:,.0f} "
              f"[{d['ci_low']:,.0f}, {d['ci_high']:,.0f}]")
    dsr = summary["deflated sharpe"]
    print(f"Deflated Sharpe Ratio of the best trial ({dsr.get('best')}) over {dsr.get('trials')} trials: "
          f"{dsr.get('dsr')}")
    print(f"table: {Path(out) / 'trials.parquet'}   report: {summary['report']}")
    return _failures(summary, out)


def _failures(summary: dict, out: Path) -> int:
    """The exit code; the trials that did not finish, with their errors, on stderr."""
    code = exit_code(summary)
    if code:
        failed = summary["trials"] - summary["finished"]
        print(f"error: {failed} of {summary['trials']} trial(s) did not finish" + "".join(
            f"\n  {e['trial']}: {e['error']}" for e in summary["errors"])
            + f"\n  fix: see each trial's traceback.txt under {Path(out) / 'trials'}; a rerun tries failed trials "
              "again and skips finished ones", file=sys.stderr)
    return code
