"""``hybrid-trader report RUN_DIR``: the self-contained HTML report of an evaluated run (interactive or static)."""

from __future__ import annotations

import argparse

from hybrid_trader.run import RunDir, is_stale
from hybrid_trader.run.rundir import RESULTS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write report.html (interactive charts, metrics, baselines) for an evaluated run",
        description="Write a self-contained report.html from what `hybrid-trader evaluate` saved under "
        "RUN_DIR/eval/SPLIT/ (a run never evaluated, or evaluated with an older model, is evaluated first). By "
        "default its charts are interactive (Plotly: zoom, pan, hover each trade for its reason code, the "
        "policy's probabilities and the advice); plotly.js is inlined once, so the file opens offline and "
        "fetches nothing. --static writes PNG figures next to it instead and a page without scripts. Prints the "
        "report's path.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR",
                   help="run directory (the --out of `hybrid-trader train`), the OUT folder of "
                        "`hybrid-trader evaluate --ablation OUT` (the variants report, OUT/report.html), or the "
                        "journal of `hybrid-trader run` (JOURNAL.sqlite: its trades, account, decisions and errors; "
                        "written next to it as <stem>.report.html unless --out)")
    p.add_argument("--split", default="test", choices=("train", "val", "test", "all"),
                   help="which evaluated split to report (default: test)")
    p.add_argument("--eval-dir", default=None, metavar="DIR",
                   help="read the evaluation from DIR instead of RUN_DIR/eval/SPLIT")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="where to write the HTML (default: RUN_DIR/eval/SPLIT/report.html); with --static, the "
                        "PNGs go next to it")
    p.add_argument("--static", action="store_true",
                   help="PNG figures (matplotlib, also written next to the HTML) and a page without scripts, for "
                        "the README and papers; default: interactive charts")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    # Evaluation loads torch and SB3 (about 2 s): `hybrid-trader --help` registers this module and must not pay it.
    from hybrid_trader.evaluation.ablation_report import is_ablation_dir, write_ablation_report  # same reason
    from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run  # same reason
    from hybrid_trader.evaluation.report import write_report  # same reason
    from hybrid_trader.live.journal_report import is_journal, write_journal_report  # same reason

    if is_journal(args.run_dir):  # the journal of `hybrid-trader run`
        print(f"report: {write_journal_report(args.run_dir, args.out, static=args.static)}")
        return 0
    if is_ablation_dir(args.run_dir):  # an `evaluate --ablation OUT` folder: the variants report
        print(f"report: {write_ablation_report(args.run_dir, args.out, static=args.static)}")
        return 0
    run = RunDir(args.run_dir)
    trained = run.model_path.exists() or bool(run.checkpoints())
    if args.eval_dir is None and run.exists() and trained:
        results = run.eval_dir(args.split) / RESULTS
        why = ("was never evaluated on the" if not results.is_file() else
               "has an evaluation of an older model on the" if run.eval_dir(args.split) in run.stale_evaluations()
               or is_stale(run.eval_dir(args.split)) else None)
        if why is not None:
            print(f"{run.path} {why} {args.split} split: evaluating it first "
                  f"(hybrid-trader evaluate {run.path} --split {args.split})", flush=True)
            evaluate_run(run.path, EvaluationRequest(split=args.split))
    path = write_report(args.run_dir, args.eval_dir, split=args.split, out=args.out, static=args.static)
    print(f"report: {path}")
    return 0
