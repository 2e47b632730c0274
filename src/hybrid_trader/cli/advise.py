"""``hybrid-trader advise collect|calibrate|distill|shuffle|compare|check``: the LLM's advice on visited states.

``calibrate`` fits the batch calibration collect divides answers by; ``distill`` trains the student on the advice;
``shuffle`` writes the placebo (a teacher's advice permuted across states).

See docs/ADVISE.md. A JSON line is printed last by every command.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hybrid_trader.actions import Action
from hybrid_trader.cli.options import add_no_calibrate
from hybrid_trader.errors import UserError
from hybrid_trader.llm.backends import TEACHER_NAMES

SPLIT_CHOICES = ("train", "val", "test", "all")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("advise", help="collect the LLM's advice on a run's states; distil it into a fast student")
    asub = p.add_subparsers(dest="advise_command", metavar="WHAT")
    asub.required = True

    c = asub.add_parser("collect", help="roll the run's policy over a split and ask the LLM about every state "
                                        "(resumable; RUN_DIR/advice/<split>/)")
    c.add_argument("run_dir", type=Path, help="a phase 2 or 3 run directory")
    c.add_argument("--split", choices=SPLIT_CHOICES, default="train",
                   help="days to roll over (default train; 'all': train, val and test, each kept apart)")
    c.add_argument("--llm", choices=TEACHER_NAMES,
                   help="back end (default: the run's llm section or --config, else transformers)")
    c.add_argument("--config",
                   help="LLM config YAML used instead of the run's llm section (merged over the packaged one)")
    c.add_argument("--adapter", metavar="DIR",
                   help="transformers: ask the base model with this LoRA adapter (llm finetune's RUN_DIR/llm_adapter); "
                        "collect into a copy of the run (cp -r RUN RUN-ft; rm -r RUN-ft/advice): another model's "
                        "dataset is refused in RUN/advice")
    c.add_argument("--batch", type=int, default=None, help="contexts per model call (default: llm batching.max_batch)")
    c.add_argument("--workers", type=int, default=None,
                   help="processes asking the model, each with its own copy and cpu_count/N torch threads "
                        "(default: measured best for the back end, see docs/ADVISE.md)")
    c.add_argument("--max-states", type=int, default=None,
                   help="stop once this many states of a split are stored: a seeded random subset "
                        "spread over all the split's days")
    c.add_argument("--sampled", type=int, default=1,
                   help="sampled policy passes after the deterministic one (default 1; 0: deterministic only)")
    c.add_argument("--chunk", type=int, default=256, help="rows per written chunk (default 256)")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_no_calibrate(c)
    c.set_defaults(func=_collect)

    b = asub.add_parser("calibrate", help="fit the batch calibration (mean answer per market and position) on the "
                                          "training days; collect divides every answer by it")
    b.add_argument("run_dir", type=Path, help="a run directory")
    b.add_argument("--llm", choices=TEACHER_NAMES,
                   help="back end (default: the run's llm section or --config, else transformers; as collect)")
    b.add_argument("--config", help="LLM config YAML used instead of the run's llm section (as collect)")
    b.add_argument("--adapter", metavar="DIR", help="transformers: the base model with this LoRA adapter (as collect)")
    b.add_argument("--max-states", type=int, default=200,
                   help="training bars, evenly spread; each is asked flat, long and short (default 200)")
    b.add_argument("--min-states", type=int, default=20, help="fewest states per market and position (default 20)")
    b.add_argument("--batch", type=int, default=16, help="contexts per model call (default 16)")
    b.add_argument("--force", action="store_true", help="fit again over an existing calibration")
    b.set_defaults(func=_calibrate)

    k = asub.add_parser("check", help="find damaged, lost and unrecorded chunks and states stored twice in a "
                                      "run's advice (exit 1 when any); --repair keeps every good row once")
    k.add_argument("run_dir", type=Path, help="a run directory with RUN_DIR/advice")
    k.add_argument("--split", choices=SPLIT_CHOICES, default="all", help="split to check (default: every one)")
    k.add_argument("--repair", action="store_true",
                   help="rewrite each split with a problem as one chunk holding every readable row once (the "
                        "first of each state); damaged chunks are dropped, so 'advise collect' asks their states "
                        "again")
    k.set_defaults(func=_check)

    d = asub.add_parser("distill",
                        help="train the student network on the collected advice; report its fidelity")
    d.add_argument("run_dir", type=Path, help="a run directory with RUN_DIR/advice/train collected")
    d.add_argument("--epochs", type=int, default=40,
                   help="training epochs (default 40; the best validation epoch is kept)")
    d.add_argument("--hidden", type=str, default="64,64",
                   help="hidden layer sizes, comma separated (default 64,64)")
    d.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    d.add_argument("--allow-raw", action="store_true",
                   help="distil advice a leaning model gave raw (collect --no-calibrate): by default refused, as "
                        "the student would copy the model's constant lean into every decision")
    d.set_defaults(func=_distill)

    s = asub.add_parser("shuffle", help="the shuffled placebo: a teacher's advice permuted across states (same "
                                        "answers, no information), written as a dataset to distil like any other")
    s.add_argument("run_dir", type=Path, help="the teacher: a run directory with its advice collected")
    s.add_argument("--out", type=Path, required=True,
                   help="folder that receives the placebo dataset (OUT/advice; e.g. RUN-shuffled)")
    s.add_argument("--seed", type=int, default=0, help="seed of the permutation (default 0; recorded)")
    s.set_defaults(func=_shuffle)

    m = asub.add_parser("compare",
                        help="teacher (LLM) vs student on a collected split: fidelity and confusion table")
    m.add_argument("run_dir", type=Path, help="a run directory with a distilled student")
    m.add_argument("--split", choices=SPLIT_CHOICES, default="all",
                   help="split to compare (default: every collected one)")
    m.set_defaults(func=_compare)


def _splits(choice: str) -> list[str]:
    return ["train", "val", "test"] if choice == "all" else [choice]


def _collect(args: argparse.Namespace) -> int:
    # collect pulls in torch, sb3 and the features (~3 s); the CLI's --help must not pay it
    from hybrid_trader.advise.collect import CollectRequest, collect_llm_config, collect_split
    from hybrid_trader.run.market import load_market  # same reason as above
    from hybrid_trader.training.runner import load_run_config  # same reason as above

    for name, v in (("--batch", args.batch), ("--workers", args.workers), ("--max-states", args.max_states),
                    ("--chunk", args.chunk)):
        if v is not None and v < 1:
            raise UserError(f"{name} must be 1 or more", value=v)
    if args.sampled < 0:
        raise UserError("--sampled must be 0 or more", value=args.sampled)
    run_config = load_run_config(args.run_dir)
    if run_config.env.phase == 1:
        raise UserError("advice is collected from a phase 2 or 3 run (six actions)", file=str(args.run_dir),
                        fix="train phase 2 from it first: hybrid-trader train --phase 2 --init RUN_DIR")
    llm_config = collect_llm_config(run_config, args.config, args.llm, args.batch, adapter=args.adapter)
    market = load_market(run_config.data, run_config.split)
    results = []
    for split in _splits(args.split):
        request = CollectRequest(market=market, run_config=run_config, workers=args.workers,
                                 max_states=args.max_states, sampled=args.sampled, chunk=args.chunk,
                                 progress=not args.no_progress, calibrate=args.calibrate)
        r = collect_split(args.run_dir, split, llm_config, request)
        if r.asked:
            print(f"{split}: asked {r.asked:,} contexts in {r.seconds:.1f} s: {r.contexts_per_s:.1f} contexts/s "
                  f"({r.steady_contexts_per_s:.1f}/s after the first batch; {r.backend}); "
                  f"{r.abstained:,} abstained; {len(r.chunks)} chunk(s); calibration {r.calibration or 'none needed'}")
        results.append(r.to_dict())
    print(json.dumps({"collect": results}))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    # calibrate loads the back end and the features (~3 s); the CLI's --help must not pay it
    from hybrid_trader.advise.calibrate import CalibrationFit, calibrate_run
    from hybrid_trader.advise.collect import collect_llm_config  # same reason as above
    from hybrid_trader.run.market import load_market  # same reason as above
    from hybrid_trader.training.runner import load_run_config  # same reason as above

    for name, v in (("--max-states", args.max_states), ("--min-states", args.min_states), ("--batch", args.batch)):
        if v < 1:
            raise UserError(f"{name} must be 1 or more", value=v)
    run_config = load_run_config(args.run_dir)
    llm_config = collect_llm_config(run_config, args.config, args.llm, args.batch, adapter=args.adapter)
    market = load_market(run_config.data, run_config.split)
    fit = CalibrationFit(max_states=args.max_states, min_states=args.min_states, batch=args.batch)
    cal, table = calibrate_run(args.run_dir, run_config, llm_config, market, fit, force=args.force)
    print(f"batch calibration of {llm_config.backend} on {len(cal.days)} training day(s): "
          + ", ".join(f"{k} {n} states" for k, n in cal.counts.items()))
    for key, mean in cal.means.items():
        print(f"  mean answer {key:<10} " + " ".join(f"{Action(a).name} {m:.3f}" for a, m in enumerate(mean) if m > 0))
    print(f"{'position':<9}{'trend':<18}{'states':>7}  top action [%] raw -> calibrated")
    for row in table:
        cells = "  ".join(f"{a} {row['raw'][a]:.0f}->{row['calibrated'][a]:.0f}" for a in row["raw"])
        print(f"{row['position']:<9}{row['trend']:<18}{row['states']:>7}  {cells}")
    print(json.dumps({"calibration": cal.to_dict(), "table": table}))
    return 0


def _check(args: argparse.Namespace) -> int:
    # the dataset layer loads pyarrow (~0.3 s); the CLI's --help must not pay it
    from hybrid_trader.run.advice_dataset import advice_dir, advice_lock, check_split, part_files, repair_split

    if not advice_dir(args.run_dir).is_dir():
        raise UserError("no advice in this run", file=str(advice_dir(args.run_dir)),
                        fix=f"run: hybrid-trader advise collect {args.run_dir}")
    splits = [s for s in _splits(args.split) if part_files(args.run_dir, s) or args.split != "all"]
    out, bad = [], 0
    with advice_lock(args.run_dir, "advise check" + (" --repair" if args.repair else "")):
        for split in splits:
            c = check_split(args.run_dir, split)
            if args.repair and not c.ok:
                before = c
                c = repair_split(args.run_dir, split)
                print(f"{split}: repaired: {before.rows:,} rows -> {c.rows:,} ({before.duplicates:,} stored twice "
                      f"dropped, {len(before.problems)} bad chunk(s) left out)")
            print(f"{split}: {c.chunks} chunk(s), {c.rows:,} rows, {c.keys:,} states, {c.duplicates:,} stored twice"
                  + ("" if c.ok else f", {len(c.problems)} problem(s)"))
            for file, why in c.problems:
                print(f"  {file}: {why}")
            bad += not c.ok
            out.append({"split": split, "chunks": c.chunks, "rows": c.rows, "states": c.keys,
                        "duplicates": c.duplicates, "problems": [{"file": f, "problem": w} for f, w in c.problems],
                        "ok": c.ok})
    if bad and not args.repair:
        print(f"fix: hybrid-trader advise check {args.run_dir} --repair")
    print(json.dumps({"check": out}))
    return 1 if bad else 0


def _distill(args: argparse.Namespace) -> int:
    # distill pulls in torch (~1.5 s); the CLI's --help must not pay it
    from hybrid_trader.advise.distill import DistillConfig, distill, fidelity_table

    try:
        hidden = tuple(int(h) for h in args.hidden.split(",") if h.strip())
    except ValueError:
        raise UserError("--hidden must be sizes separated by commas", value=args.hidden,
                        fix="e.g. --hidden 64,64") from None
    if not hidden or min(hidden) < 1 or args.epochs < 1:
        raise UserError("--hidden needs positive sizes and --epochs 1 or more", value=f"{args.hidden} / {args.epochs}")
    out = distill(args.run_dir, DistillConfig(epochs=args.epochs, hidden=hidden, seed=args.seed),
                  allow_raw=args.allow_raw)
    info = out["info"]
    print(f"student: {info['train_rows']:,} training rows, validation on {info['validation']}, "
          f"best epoch {info['best_epoch']}/{info['epochs']}, {info['seconds']} s "
          f"-> {args.run_dir / 'advice' / 'student.pt'}")
    print(fidelity_table(out["metrics"]))
    print(json.dumps(out))
    return 0


def _shuffle(args: argparse.Namespace) -> int:
    # the dataset layer loads pyarrow (~0.3 s); the CLI's --help must not pay it
    from hybrid_trader.advise.placebo import placebo_path, shuffle_advice

    record = shuffle_advice(args.run_dir, args.out, seed=args.seed)
    print(f"placebo {record['advice']['hash']} (teacher {record['teacher_advice']['hash']}, seed {record['seed']}) "
          f"-> {args.out / 'advice'}; record: {placebo_path(args.out)}")
    print(f"next: hybrid-trader advise distill {args.out}")
    print(json.dumps({k: v for k, v in record.items() if k != "permutation"}))
    return 0


def _compare(args: argparse.Namespace) -> int:
    # compare pulls in torch (~1.5 s); the CLI's --help must not pay it
    from hybrid_trader.advise.compare import compare_split, confusion_table
    from hybrid_trader.advise.distill import fidelity_table, load_run_student  # same reason as above
    from hybrid_trader.run.advice_dataset import part_files  # same reason as above

    student = load_run_student(args.run_dir)
    splits = _splits(args.split)
    if args.split == "all":
        splits = [s for s in splits if part_files(args.run_dir, s)]
        if not splits:
            raise UserError("no advice collected in this run", file=str(args.run_dir / "advice"),
                            fix=f"run: hybrid-trader advise collect {args.run_dir}")
    results = []
    for split in splits:
        r = compare_split(args.run_dir, split, student)
        print(f"== {split}: {r['rows']:,} rows, {r['abstained']:,} abstained"
              + (f"; RAW advice ({r['raw']}): the model's constant lean is in the LLM column" if r["raw"] else ""))
        print(fidelity_table({split: r["fidelity"]}))
        if r.get("by_position"):
            print("Top-1 agreement by position [%]: " + ", ".join(f"{k} {v:.1f}" for k, v in r["by_position"].items()))
        print(confusion_table(r["confusion"]))
        results.append(r)
    print(json.dumps({"compare": results}))
    return 0
