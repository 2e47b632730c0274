"""``hybrid-trader study STUDY.yaml``: variants x seeds x folds, each trial trained and evaluated, on Ray.

See docs/STUDY.md. A JSON summary is printed last with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hybrid_trader.cli.evaluate import fresh_day_text
from hybrid_trader.errors import UserError

EXIT_SOME_FAILED = 3
"""Exit code of a study in which some trials failed (or are missing); the others' results are written."""
EXIT_ALL_FAILED = 4
"""Exit code of a study in which no trial finished."""


def exit_code(summary: dict) -> int:
    """0 when every trial this run ran finished (trials left for later by ``--only`` are not failures), else
    :data:`EXIT_SOME_FAILED` or :data:`EXIT_ALL_FAILED`."""
    if summary["finished"] + summary.get("not run", 0) + summary.get("stopped", 0) == summary["trials"]:
        return 0
    return EXIT_ALL_FAILED if summary["finished"] == 0 else EXIT_SOME_FAILED


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="a study on Ray: every variant x seed x fold trained and evaluated; means with "
                                     "confidence intervals, paired comparisons, pre-registered hypotheses, SPA / StepM "
                                     "/ PBO, the Deflated Sharpe Ratio",
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
    p.add_argument("--only", nargs="+", metavar="VARIANT",
                   help="run these variants' trials alone (e.g. while another variant's advisor is still being "
                        "built): the study is declared whole, its identity and hypotheses unchanged; the other "
                        "variants' trials are reported 'not run' and hypotheses on them 'pending' until a later "
                        "run without --only")
    p.add_argument("--reuse", type=Path, metavar="STUDY_DIR",
                   help="take the finished trials this study shares with another study's folder instead of running "
                        "them again (e.g. a variant added to a declared study makes a new study): each only when its "
                        "configuration, pinned files, machine and evaluation are this study's; with --replicate, "
                        "the replica's from STUDY_DIR-replicate (docs/STUDY.md, Reusing trials)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON, last")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--confirm", type=Path, metavar="DATA",
                      help="evaluate every finished trial's final model on DATA, a later file of the same market the "
                           "study never touched (no training); results in OUT/confirm-<DATA stem>/")
    what.add_argument("--replicate", action="store_true",
                      help="run (or continue) the study, then the same trials with fresh seeds in OUT-replicate, "
                           "and say whether each verdict survives (OUT-replicate/replication.json)")
    what.add_argument("--replay-schedulers", action="store_true",
                      help="train nothing: replay ASHA and synchronous successive halving (reduction factors 2-4, "
                           "grace periods of 1-5 validations) on the finished search in OUT, run with scheduler: "
                           "none; per setting, the trial-steps it would save and whether each fold keeps its "
                           "selection (OUT/replay.json; docs/STUDY.md, Which early stopping keeps the selection)")
    p.add_argument("--static", action="store_true",
                   help="OUT/report.html with tables only and no scripts; default: with interactive charts (each "
                        "variant's trials, a forest plot of the paired differences), plotly.js inlined once, offline")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # the engine loads torch, SB3 and Ray's client (~3 s): the CLI's --help must not pay it
    from hybrid_trader.evaluation.metrics import jsonable
    from hybrid_trader.study.engine import run_study  # same reason

    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers {args.workers} must be 1 or more")
    out = args.out or Path("studies") / args.study.stem
    say = (lambda s: None) if args.json else print
    replication = None
    if args.reuse and args.confirm:
        raise UserError("--reuse and --confirm: a confirmation runs no trials, it evaluates the study's own",
                        fix="drop --reuse")
    if args.reuse and not args.replicate:
        from hybrid_trader.study.reuse import reuse_into  # loads the engine too

        reuse_into(args.study, out, args.reuse, say=say)
    if args.replay_schedulers:
        from hybrid_trader.study.scheduler_replay import replay_study  # loads the study's readers (and torch)

        record = replay_study(args.study, out, args.workers)
        print(json.dumps(record) if args.json else _replay_text(record, out))
        return 0
    if args.confirm:
        from hybrid_trader.study.confirm import confirm_study  # loads torch, SB3 and Ray's client as the engine

        summary = confirm_study(args.study, out, args.confirm, progress=not args.no_progress, say=say)
    elif args.replicate:
        from hybrid_trader.study.replicate import replicate_study  # loads them too

        replication = replicate_study(args.study, out, workers=args.workers, address=args.address,
                                      progress=not args.no_progress, reuse=args.reuse, say=say)
        summary = replication.pop("summary")
        summary["replication"] = replication
    else:
        summary = run_study(args.study, out, workers=args.workers, address=args.address,
                            progress=not args.no_progress, static=args.static, only=args.only, say=say)
    if args.json:
        print(json.dumps(jsonable(summary)))
    else:
        _print_summary(summary, replication)
    return _failures(summary, out)


def _replay_text(record: dict, out: Path) -> str:
    """The replay's table, the rungs' rank correlations and the settings that meet the target."""
    from hybrid_trader.study.scheduler_replay import REPLAY, replay_table  # it loads torch and SB3: only when asked

    lines = [f"replayed on {record['trials']} finished trials ({record['workers']} workers, a validation every "
             f"{record['validate_every']:,} steps)", replay_table(record)]
    for fold, rhos in record["rung_spearman"].items():
        lines.append(f"fold {fold}: rank correlation of the validation at each rung with the selection figure: "
                     + ", ".join(f"{int(m):,}: {'-' if r is None else r}" for m, r in rhos.items()))
    meeting = record["meeting_target"]
    lines.append(f"settings saving at least {record['save_target_pct']:.0f}% of the trial-steps with every fold's "
                 f"selection kept: {', '.join(meeting) if meeting else 'none'}")
    lines.append(f"record: {out / REPLAY}")
    return "\n".join(lines)


def _print_summary(summary: dict, replication: dict | None) -> None:
    """The study's results in a few lines: each variant, the pairs, the hypotheses, a search's folds, the DSR."""
    from hybrid_trader.study.search_results import FRESH_TEST, fold_label  # pandas: loaded only after a study ran

    for name, v in summary["variants"].items():
        if v["finished"] == 0 and v.get("not run"):
            print(f"{name:<24} not run yet ({v['not run']} trials; run the study without --only)")
            continue
        f = v["figures"]["Net PnL [$]"]
        print(f"{name:<24} {v['finished']}/{v['trials']} trials  net P&L mean {f['mean']:,.0f} "
              f"[{f['ci_low']:,.0f}, {f['ci_high']:,.0f}]")
    for name, p in summary["paired vs baseline"].items():
        d = p.get("Net PnL [$]")
        if d is None:  # no finished pair (every trial of one side failed)
            print(f"{name} - {summary['baseline']}: {p['pairs']} pairs, no paired difference")
            continue
        print(f"{name} - {summary['baseline']}: {p['pairs']} pairs, net P&L {d['mean difference']:,.0f} "
              f"[{d['ci_low']:,.0f}, {d['ci_high']:,.0f}]")
    for h in summary.get("hypotheses") or []:
        print(f"hypothesis {h['name']} ({h['claim']}): {h['verdict'].upper()}, {h['pairs']} pairs, Wilcoxon p "
              f"{h['p-value']:.4g} (alpha {h['alpha']}), mean difference {h['mean difference']:,.2f} "
              f"[{h['ci_low']:,.2f}, {h['ci_high']:,.2f}]: {h['reason']}")
    for f in summary.get("folds") or []:  # a search (study.search): each fold's selection and its test
        test = (f.get("test") or {}).get("Net PnL [$]")
        fresh = (f.get("test") or {}).get("Mean day, fresh [$]")
        print(f"fold {fold_label(f)}: {f['finished']} finished, {f['stopped']} stopped, {f['failed']} failed; selected "
              f"{f['selected']} {json.dumps(f.get('params'))}: test net P&L {'-' if test is None else f'{test:,.0f}'}"
              + ("" if fresh is None else f", mean day from a fresh account {fresh:,.0f}"))
    if summary.get(FRESH_TEST):
        print(f"{FRESH_TEST}:\n{fresh_day_text(summary[FRESH_TEST])}")
    dsr = summary["deflated sharpe"]
    print(f"Deflated Sharpe Ratio of the best trial ({dsr.get('best')}) over {dsr.get('trials')} trials: "
          f"{dsr.get('dsr')}")
    if (summary.get("fingerprints") or {}).get("warning"):
        print(f"note: {summary['fingerprints']['warning']}")
    for label, rows in (("confirmation", summary.get("vs study")),
                        ("replication", (replication or {}).get("verdicts"))):
        for r in rows or ():
            print(f"{label}: {r['claim']}: {r['result']} ({r['why']})")
    if summary.get("reused"):
        print(f"{summary['reused']} of these trials were reused from another study's folder (their records' "
              "reused_from)")
    print(f"table: {Path(summary['report']).parent / 'trials.parquet'}   report: {summary['report']}")


def _failures(summary: dict, out: Path) -> int:
    """The exit code; the trials that did not finish, with their errors, on stderr (with --replicate: the
    replica's, and 3 too when some of the study's own did not finish)."""
    code = exit_code(summary)
    finished, trials = (summary.get("replication") or {}).get("finished", {}).get("study", (0, 0))
    if finished < trials:
        print(f"error: {trials - finished} of the study's own {trials} trial(s) did not finish (its summary.json "
              "lists them)", file=sys.stderr)
        code = max(code, EXIT_SOME_FAILED)
    if code:
        failed = summary["trials"] - summary["finished"]
        where = Path(summary["report"]).parent if summary.get("report") else out
        print(f"error: {failed} of {summary['trials']} trial(s) did not finish" + "".join(
            f"\n  {e['trial']}: {e['error']}" for e in summary["errors"])
            + f"\n  fix: see each trial's traceback under {where / 'trials'}; a rerun tries failed trials again and "
              "skips finished ones", file=sys.stderr)
    return code
