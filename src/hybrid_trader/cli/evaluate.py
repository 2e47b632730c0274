"""``hybrid-trader evaluate RUN_DIR``: the agent and its baselines on later, unseen days."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hybrid_trader.cli.options import add_options, llm_key_overrides, overrides_from
from hybrid_trader.llm.backends import TEACHER_NAMES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="evaluate a trained run on the test split against baselines",
        description="Run the deterministic masked policy of RUN_DIR on a split of days it never trained on, with "
        "the same costs and rules, next to baselines (flat, random legal actions at the agent's trade rate over "
        "several seeds, a momentum rule). Writes RUN_DIR/eval/<split>/; with --data, "
        "RUN_DIR/eval/<data-stem>-<hash8>/<split>/ (never over the run's own results). results.json records the "
        "model's and the data's sha256. --ablation OUT: the variants ablation of a phase 2 run and its student.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory made by 'hybrid-trader train'")
    p.add_argument("--data", metavar="FILE", help="evaluate on these bars instead of the run's (same options as train)")
    p.add_argument("--tz", help="time zone of naive timestamps in --data")
    p.add_argument("--time-shift", type=float, metavar="HOURS", help="hours added to every timestamp of --data")
    p.add_argument("--market", metavar="SYMBOL",
                   help="contract the bars are priced with: NQ, MNQ, ES, MES, YM, MYM, RTY, M2K (default: the run's; "
                        "--data whose file name says another market than the run's is refused unless --market says "
                        "which; another market than the run's is an override, noted and recorded in results.json)")
    p.add_argument("--split", choices=("train", "val", "test", "all"), default="test",
                   help="which days (default test; 'all' for every day of --data)")
    p.add_argument("--seeds", type=int, default=3, help="seeds of the random baseline (default 3)")
    add_options(p, ("--llm",))
    p.add_argument("--strategy", choices=("prior", "rules"),
                   help="phase 3: decide with the trained fused distribution (prior) or the four fusion rules "
                        "(agreement, override, HOLD, vote)")
    p.add_argument("--no-ablation", action="store_true", help="phase 3: skip the RL-only ablation run")
    p.add_argument("--verdict", choices=("rolling", "sequential"),
                   help="the prop-firm verdict of the agent and the baselines: a fresh evaluation account started on "
                        "every day (rolling) or after each pass or breach (sequential); pass and breach rates, days "
                        "to pass and to breach, the expected outcome per attempt (docs/EVALUATION.md); phase 3: with "
                        "the distilled student")
    p.add_argument("--evaluation-fee", type=float, default=167.0, metavar="USD",
                   help="--verdict: price of a first attempt (default 167, Apex 50K)")
    p.add_argument("--reset-fee", type=float, default=80.0, metavar="USD",
                   help="--verdict: price of each later attempt (default 80)")
    p.add_argument("--pass-value", type=float, default=0.0, metavar="USD",
                   help="--verdict: what a passed evaluation is worth to you (default 0: fees only)")
    p.add_argument("--max-days", type=int, default=30, metavar="N",
                   help="--verdict: trading days an attempt may take (default 30)")
    p.add_argument("--fresh-days", action="store_true",
                   help="the agent also trades each day from a fresh account: the day-by-day figures free of the "
                        "path (on one account a bad first day can breach it or lock it out for the rest)")
    p.add_argument("--explain", type=int, default=0, metavar="N",
                   help="phase 3: the LLM explains the first N sample decisions in four steps (market, options, "
                        "risks, decision), shown in the report; seconds each on a CPU (default 0)")
    p.add_argument("--explain-llm", metavar="BACKEND", choices=TEACHER_NAMES,
                   help="--explain: the explaining back end (default the run's; a student run: transformers)")
    p.add_argument("--ablation", metavar="OUT",
                   help="RUN_DIR is a phase 2 run with a distilled student: train (or reuse) the variants RL only "
                        "(phase 2 continued), RL only in phase 3 (no advice), constant prior + student and learned "
                        "fusion + student for each seed "
                        "under OUT, evaluate them on --split, write OUT/ablation.json and OUT/ABLATION.md")
    p.add_argument("--ablation-steps", type=int, metavar="N",
                   help="--ablation: training steps of every variant run (default: the phase 2 run's)")
    p.add_argument("--ablation-seeds", type=int, default=3, metavar="K", help="--ablation: seeds 0..K-1 (default 3)")
    p.add_argument("--student", metavar="FILE", help="--ablation: the student.pt (default RUN_DIR/advice/student.pt)")
    p.add_argument("--ablation-teacher", metavar="BACKEND", choices=TEACHER_NAMES,
                   help="--ablation: also evaluate the learned-fusion runs with this LLM back end in the student's "
                        "place, asked when the query policy says so (e.g. transformers: the real Gemma)")
    p.add_argument("--json", action="store_true", help="print one JSON object with everything as the last line")
    p.set_defaults(func=run, trains=True)  # --ablation trains (training/threads.py)


def run(args: argparse.Namespace) -> int:
    # evaluation loads torch, SB3 and the environment (about 2 s): `hybrid-trader --help` must not pay it
    from hybrid_trader.evaluation.evaluate import HEADLINE, EvaluationRequest, evaluate_run, format_table
    from hybrid_trader.evaluation.metrics import jsonable  # same reason
    from hybrid_trader.evaluation.verdict import VERDICT_FIGURES, VerdictConfig  # same reason

    if args.ablation:
        return _ablation(args)
    overrides = {"path": args.data, "tz": args.tz, "time_shift": args.time_shift} if args.data else None
    request = EvaluationRequest(
        split=args.split, seeds=args.seeds, data_overrides=overrides, symbol=args.market, quiet=args.json,
        llm_overrides=llm_key_overrides(overrides_from(args, ("--llm",))) or None, strategy=args.strategy,
        ablation=not args.no_ablation, explain=args.explain, explain_llm=args.explain_llm, fresh_days=args.fresh_days,
        verdict=args.verdict, verdict_config=VerdictConfig(args.evaluation_fee, args.reset_fee, args.pass_value,
                                                           args.max_days) if args.verdict else None)
    out = evaluate_run(Path(args.run_dir), request)
    if not args.json:
        print(format_table(out.metrics, HEADLINE))
        if out.extra.get("llm"):
            print("\nLLM and fusion:")
            for key, value in out.extra["llm"].items():
                print(f"  {key:<28} {value:.2f}" if isinstance(value, float) else f"  {key:<28} {value}")
        if out.extra.get("ablation"):
            print("\nAblation (same bars, split and seeds):")
            print(format_table(out.extra["ablation"], HEADLINE, columns=list(out.extra["ablation"])))
        if out.extra.get("prop_verdict"):
            pv = out.extra["prop_verdict"]
            print(f"\nProp-firm verdict ({pv['mode']} attempts, at most {pv['config']['max_days']} days each; fees "
                  f"${pv['config']['evaluation_fee']:g} then ${pv['config']['reset_fee']:g}):")
            print(format_table(pv["figures"], list(VERDICT_FIGURES), columns=list(pv["figures"])))
            if pv.get("warning"):
                print(f"warning: {pv['warning']}")
        if out.extra.get("fresh_days"):
            from hybrid_trader.study.stats import fresh_day_comparison  # numpy's bootstrap: only with --fresh-days

            print("\nThe agent, each day from a fresh account:")
            for key, value in out.extra["fresh_days"].items():
                print(f"  {key:<28} {value:,.2f}")
            days = out.extra["fresh_day_pnl"]
            print(fresh_day_text(fresh_day_comparison(days["dates"], days["agent"], days["momentum"])))
        if out.extra.get("explained"):
            e = out.extra["explained"]
            print(f"\nExplained {e['explained']} sample decisions (chain of thought): decision parsed "
                  f"{e['decision_parsed_pct']:.0f}%, all four steps {e['all_four_steps_pct']:.0f}%, "
                  f"median {e['median_latency_s']:.1f} s each (in the report's sample decisions)")
        contract = out.extra["contract"]
        print(f"priced as {contract['symbol']} (${contract['point_value']:g} a point"
              + (", an override: see the warning above)" if out.extra.get("contract_note") else ")"))
        print(f"results: {out.out_dir}   (report: hybrid-trader report {args.run_dir})")
    else:
        print(json.dumps(jsonable({"split": out.split, "dates": out.dates, "metrics": out.metrics,
                                    "random_seeds": out.random_seeds, "out_dir": str(out.out_dir), **out.extra})))
    return 0


def _ablation(args: argparse.Namespace) -> int:
    # training and evaluation load torch, SB3 and the environment: `hybrid-trader --help` must not pay it
    from hybrid_trader.errors import UserError
    from hybrid_trader.evaluation.ablation import ablation_markdown, run_ablation  # same reason
    from hybrid_trader.evaluation.ablation_report import write_ablation_report  # same reason
    from hybrid_trader.evaluation.metrics import jsonable  # same reason
    from hybrid_trader.training.runner import load_run_config  # same reason

    if args.data or args.market:
        flag = "--data" if args.data else "--market"
        raise UserError(f"--ablation trains on the phase 2 run's bars; {flag} does not apply", fix=f"drop {flag}")
    if args.ablation_seeds < 1:
        raise UserError(f"--ablation-seeds {args.ablation_seeds}: need at least 1 seed")
    if args.ablation_steps is not None and args.ablation_steps < 1:
        raise UserError(f"--ablation-steps {args.ablation_steps}: give 1 or more training steps",
                        fix="leave --ablation-steps out for the phase 2 run's own number of steps")
    steps = args.ablation_steps or load_run_config(Path(args.run_dir)).ppo.total_timesteps
    say = (lambda s: None) if args.json else (lambda s: print(s, flush=True))
    table = run_ablation(Path(args.run_dir), Path(args.ablation), timesteps=steps,
                         seeds=tuple(range(args.ablation_seeds)), split=args.split, student=args.student,
                         teacher=args.ablation_teacher, say=say)
    report = write_ablation_report(Path(args.ablation))
    if args.json:
        print(json.dumps(jsonable({**table, "report": str(report)})))
    else:
        print(ablation_markdown(table))
        print(f"ablation: {Path(args.ablation) / 'ablation.json'}   {Path(args.ablation) / 'ABLATION.md'}   {report}")
    return 0


def fresh_day_text(comparison: dict) -> str:
    """``study.stats.fresh_day_comparison``'s figures in lines: the mean days and the paired difference, with CIs."""
    lines = [f"  {comparison['days']} days ({comparison['first']} to {comparison['last']}), each from a fresh "
             "account, 95% bootstrap CI over the days:"]
    for key, v in comparison.items():
        if isinstance(v, dict):
            lines.append(f"  {key:<38} {v['mean']:>10,.2f}  [{v['ci_low']:,.2f}, {v['ci_high']:,.2f}]")
    return "\n".join(lines)
