"""``hybrid-trader llm ask|prepare|finetune|eval``: ask the LLM about one bar; prepare, fine-tune, evaluate it.

``llm ask`` prints the prompt the model sees, then the advice (distribution over the legal
actions, confidence, coverage; in generation mode the written answer and its reason;
with ``--cot`` the four reasoning steps), and a JSON line last. ``llm finetune`` trains
a LoRA adapter on the run's training days (docs/FINETUNE.md); ``llm eval`` compares the
base and fine-tuned models on later days. Any failure (missing model, unreachable server, malformed answer,
unknown template field) is one error message with the fix, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from hybrid_trader.cli.options import add_no_calibrate, add_options, llm_key_overrides, overrides_from
from hybrid_trader.errors import UserError
from hybrid_trader.llm.model_cache import resolve_model_dir

LLM_FLAGS = ("--backend", "--model", "--base-url", "--generate")
"""The rows of the options table shared by ``llm ask`` and ``bench llm``."""


def add_llm_config_options(p: argparse.ArgumentParser) -> None:
    """Options shared by ``llm ask`` and ``bench llm``: ``--config`` and :data:`LLM_FLAGS`."""
    p.add_argument("--config", help="LLM config YAML merged over the packaged default (hybrid_trader/configs/llm.yaml)")
    add_options(p, LLM_FLAGS)


def llm_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The LLM options given on the command line, as dotted keys of an LLMConfig."""
    return llm_key_overrides(overrides_from(args, LLM_FLAGS))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("llm", help="the LLM advisor: ask about one bar, prepare the local model")
    lsub = p.add_subparsers(dest="llm_command", metavar="WHAT")
    lsub.required = True

    a = lsub.add_parser("ask", help="print the prompt and the advice for one bar")
    a.add_argument("--data", help="bars file (CSV/Parquet); default: the built-in synthetic market")
    a.add_argument("--bar", type=int, default=-1,
                   help="bar index (0-based; negative counts from the end; default -1, the last bar)")
    a.add_argument("--market", default=None, help="contract root symbol (default: NQ, or guessed from the file name)")
    a.add_argument("--tz", default=None, help="time zone of naive timestamps (default America/New_York)")
    a.add_argument("--time-shift", type=float, default=0.0, help="hours added to every timestamp")
    a.add_argument("--position", choices=("flat", "long", "short"), default="flat",
                   help="pretend account position (default flat); long/short enter 10 bars earlier")
    a.add_argument("--balance", type=float, default=50_000.0, help="account balance [$] (default 50000)")
    a.add_argument("--run", metavar="RUN_DIR", default=None,
                   help="divide the advice by this run's batch calibration (advise calibrate; same model and prompt)")
    a.add_argument("--cot", action="store_true",
                   help="chain of thought: generation mode, four reasoning steps, then ACTION | confidence | reason")
    add_llm_config_options(a)
    a.set_defaults(func=_ask)

    pr = lsub.add_parser("prepare", help="convert the packaged Gemma GGUF into the model cache (once, ~1 min)")
    pr.add_argument("--model", default="gemma-3-270m", help="'gemma-3-270m' (default) or a .gguf file")
    pr.add_argument("--cache-dir", default=None, help="where converted models live")
    pr.set_defaults(func=_prepare)

    f = lsub.add_parser("finetune", help="train a LoRA adapter on the run's training days (hindsight labels)")
    f.add_argument("run_dir", metavar="RUN_DIR", help="run directory (its config.yaml: data, split, env, llm)")
    f.add_argument("--steps", type=int, default=200, help="optimiser steps, the budget (default 200)")
    f.add_argument("--lr", type=float, default=2e-4, help="learning rate (default 2e-4)")
    f.add_argument("--rank", type=int, default=8, help="LoRA rank (default 8)")
    f.add_argument("--batch", type=int, default=8, help="examples per step, class balanced (default 8)")
    f.add_argument("--eval-every", type=int, default=20, help="steps between validation losses (default 20)")
    f.add_argument("--patience", type=int, default=3, help="validations without improvement before stopping (3)")
    f.add_argument("--val-examples", type=int, default=64, help="validation examples from later days (default 64)")
    f.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints (default 20)")
    f.add_argument("--horizon", type=int, default=60, help="label horizon [bars] (default 60; 0: session end)")
    f.add_argument("--margin", type=float, default=0.0, help="net P&L [$] an entry must beat HOLD by (default 0)")
    f.add_argument("--seed", type=int, default=0, help="seed of the adapter and the sampler (default 0)")
    f.add_argument("--device", default="auto", help="torch device (default auto: cuda when a GPU is present, else cpu)")
    f.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    f.set_defaults(func=_finetune)

    e = lsub.add_parser("eval", help="the LLM (raw, calibrated, fine-tuned) and three controls against hindsight "
                                     "labels and returns of later days")
    e.add_argument("run_dir", metavar="RUN_DIR",
                   help="run directory (its llm section; RUN_DIR/llm_calibration.json and llm_adapter when present)")
    e.add_argument("--split", choices=("val", "test"), default="val", help="later days to measure on (default val)")
    e.add_argument("--max-states", type=int, default=200, help="labelled states, evenly spread (default 200)")
    e.add_argument("--batch", type=int, default=16, help="contexts per forward pass (default 16)")
    e.add_argument("--train-states", type=int, default=400,
                   help="labelled training states the majority and logistic controls are fitted on (default 400)")
    e.add_argument("--cot", type=int, default=0, metavar="N",
                   help="also run the chain of thought on N of the states: parse rate, latency, agreement (default 0)")
    e.add_argument("--retrieval", type=int, default=0, metavar="K",
                   help="also score K retrieved training-day examples per state, alone and on the adapter (default 0)")
    e.add_argument("--retrieval-mode", choices=("exact", "clusters"), default="exact",
                   help="exact: each state's nearest; clusters: its group's cached examples (default exact)")
    e.add_argument("--calibration-states", type=int, default=120,
                   help="training states a variant without a run calibration is calibrated on (default 120)")
    e.add_argument("--config", metavar="LLM_YAML",
                   help="measure this LLM config (merged over the packaged default, as llm ask) on the run's states "
                        "instead of the run's llm section: the run's adapter is not used, its calibration only when "
                        "fitted for this advice (else one is fitted on --calibration-states and not stored); "
                        "results in RUN_DIR/llm_eval/<split>-<config name>.json, the run's own left as they are")
    add_no_calibrate(e)
    e.set_defaults(func=_eval)


def _prepare(args: argparse.Namespace) -> int:
    path = resolve_model_dir(args.model, args.cache_dir)
    print(f"model directory: {path}")
    print(json.dumps({"model_dir": str(path)}))
    return 0


def _load_market(args: argparse.Namespace):
    try:
        # the data layer loads pandas and TA-Lib (~1 s); 'hybrid-trader --help' must not pay it
        from hybrid_trader.data import load_bars
        from hybrid_trader.data.synthetic import generate_bars
        from hybrid_trader.features import compute_features
    except ImportError as err:  # pragma: no cover - the data layer ships with the package
        raise UserError(f"the data layer is not available: {err}", fix="reinstall: pip install -e .") from None
    if args.data:
        bars = load_bars(args.data, tz=args.tz or "America/New_York", time_shift=args.time_shift, market=args.market)
    else:
        bars = generate_bars(days=5, seed=0, market=args.market or "NQ")
    return bars, compute_features(bars)


def _ask(args: argparse.Namespace) -> int:
    # the LLM package loads numpy and the back ends; it waits until a command needs it (fast --help)
    from hybrid_trader.llm.backends.transformers_backend import prefer_passive_openmp

    prefer_passive_openmp()
    import numpy as np

    # loaded after prefer_passive_openmp, which must run before torch is imported
    from hybrid_trader.llm import AccountState, build_advisor, context_from_market, load_llm_config
    from hybrid_trader.llm.advice import ACTION_WORDS, LLM_ILLEGAL_ACTION, LLM_PARSE_FAILURE
    from hybrid_trader.llm.config import COT_MAX_NEW_TOKENS
    from hybrid_trader.llm.parsing import parse_cot_steps
    from hybrid_trader.markets import get_contract

    overrides = llm_overrides(args)
    if args.cot:
        overrides.update({"mode": "generate", "prompt.chain_of_thought": True})
        overrides.setdefault("generation.max_new_tokens", COT_MAX_NEW_TOKENS)
    cfg = load_llm_config(args.config, overrides)
    bars, features = _load_market(args)
    n = len(bars)
    t = args.bar if args.bar >= 0 else n + args.bar
    if not 0 <= t < n:
        raise UserError(f"--bar {args.bar} is outside the data", value=args.bar, file=args.data,
                        fix=f"use 0..{n - 1}, or a negative index from the end (-1 = last bar)")
    point_value = get_contract(bars.market).point_value
    pos = {"flat": 0, "long": 1, "short": -1}[args.position]
    if pos:
        entry = float(bars.close[max(t - 10, 0)])
        pnl = (float(bars.close[t]) - entry) * pos * point_value
        mask = np.array([True, False, False, pnl > 0, True, False])
        account = AccountState(position=pos, contracts=1, entry_price=entry, unrealized_pnl=pnl,
                               balance=args.balance, win_rate=math.nan, consecutive_losses=0)
    else:
        mask = np.array([True, True, True, False, False, False])
        account = AccountState(balance=args.balance)
    ctx = context_from_market(bars, features, t, account, mask)
    advisor = build_advisor(cfg, source=args.config or "llm config")
    calibration = None
    try:
        if args.run:
            # the run layer loads pyarrow; only --run needs it
            from hybrid_trader.run.calibration import attach_calibration, load_calibration

            load_calibration(Path(args.run), cfg, required=True)
            calibration = attach_calibration(advisor, cfg, [args.run])
        print(f"# bar {t} of {bars.source} ({bars.market}, {ctx.timestamp:%Y-%m-%d %H:%M} ET), "
              f"back end {advisor.backend.describe()}, mode {cfg.mode}")
        print("# prompt " + "-" * 60)
        print(advisor.prompt_text(ctx))
        print("# advice " + "-" * 60)
        advice = advisor.advise_now([ctx], raise_errors=True)[0]
    finally:
        advisor.close()
    steps = parse_cot_steps(advice.raw) if cfg.prompt.chain_of_thought and advice.raw else {}
    if steps:
        print("# reasoning " + "-" * 57)
        for name, text in steps.items():
            print(f"  {name}: {text}")
    if advice.raw is not None:
        print(f"answer: {advice.raw.strip()!r}")
    if advice.abstained and advice.abstain_reason == LLM_PARSE_FAILURE:
        raise UserError(f"the model's answer names no action ({LLM_PARSE_FAILURE}): {advice.raw!r}",
                        fix="use scoring mode (drop --generate), a stronger model, or adjust llm.prompt")
    for a, word in enumerate(ACTION_WORDS):
        if ctx.legal[a]:
            bar = "#" * int(round(float(advice.probs[a]) * 40))
            print(f"  {word:<14} {float(advice.probs[a]):6.3f} {bar}")
    if advice.abstained and advice.abstain_reason == LLM_ILLEGAL_ACTION:
        print(f"abstained: {LLM_ILLEGAL_ACTION} (the answer names an action that is not legal now; "
              "add {legal_actions} to the template to show the model what is allowed)")
    elif advice.abstained:
        print(f"abstained: {advice.abstain_reason} (coverage of the legal action names {advice.coverage:.3f}; "
              f"below llm.scoring.min_coverage the advisor has no opinion)")
    else:
        print(f"action: {advice.action_name}  confidence: {advice.confidence:.3f}  coverage: {advice.coverage:.3f}"
              + (f"  reason: {advice.reason}" if advice.reason else ""))
    print(f"latency: {advice.latency_ms:.0f} ms"
          + (f"; divided by the batch calibration {calibration}" if calibration else ""))
    print(json.dumps({
        "calibration": str(calibration) if calibration else None,
        "bar": t, "time": ctx.timestamp.isoformat(), "backend": advice.backend, "mode": cfg.mode,
        "action": advice.action_name, "confidence": round(advice.confidence, 4), "coverage": round(advice.coverage, 4),
        "probs": {w: round(float(p), 4) for w, p, ok in zip(ACTION_WORDS, advice.probs, ctx.legal) if ok},
        "abstained": advice.abstained, "abstain_reason": advice.abstain_reason, "reason": advice.reason,
        "latency_ms": round(advice.latency_ms, 1), **({"reasoning": steps} if steps else {}),
    }))
    return 0


def _finetune(args: argparse.Namespace) -> int:
    # torch, transformers and peft load ~3 s; only this command pays them
    from hybrid_trader.finetune.lora import FinetuneConfig
    from hybrid_trader.finetune.pipeline import finetune_run
    from hybrid_trader.hindsight.labels import LabelConfig

    config = FinetuneConfig(steps=args.steps, lr=args.lr, rank=args.rank, batch=args.batch, eval_every=args.eval_every,
                            patience=args.patience, val_examples=args.val_examples,
                            checkpoint_every=args.checkpoint_every, seed=args.seed, device=args.device)
    labels = LabelConfig(horizon=args.horizon or None, margin=args.margin)
    result, train, val = finetune_run(args.run_dir, config, labels, resume=args.resume)
    print(f"train: {len(train)} labelled states ({train.source}), labels {train.labels.counts()}")
    print(f"val:   {len(val)} states, labels {val.labels.counts()}")
    state = "interrupted (resume with --resume)" if result.interrupted else (
        "stopped early" if result.stopped_early else "finished")
    print(f"{state} at step {result.step} (started at {result.start_step}); {result.seconds:.0f} s, "
          f"{result.steps_per_s:.3f} steps/s")
    print(f"validation loss: base {result.base_val_loss:.4f}, best {result.best_val_loss:.4f} at step "
          f"{result.best_step}; adapter: {result.adapter_dir}")
    print(json.dumps({"adapter_dir": str(result.adapter_dir), "step": result.step, "start_step": result.start_step,
                      "best_step": result.best_step, "best_val_loss": round(result.best_val_loss, 5),
                      "base_val_loss": round(result.base_val_loss, 5), "seconds": round(result.seconds, 1),
                      "steps_per_s": round(result.steps_per_s, 4), "stopped_early": result.stopped_early,
                      "interrupted": result.interrupted}))
    return 130 if result.interrupted else 0


def _eval(args: argparse.Namespace) -> int:
    # torch and transformers load ~3 s; only this command pays them
    from hybrid_trader.finetune.evaluate import LlmEvalRequest
    from hybrid_trader.finetune.pipeline import evaluate_llm
    from hybrid_trader.llm import load_llm_config

    other = load_llm_config(args.config) if args.config else None
    result = evaluate_llm(args.run_dir, args.split, LlmEvalRequest(
        max_states=args.max_states, batch=args.batch, cot=args.cot, train_states=args.train_states,
        retrieval=args.retrieval, retrieval_mode=args.retrieval_mode, calibration_states=args.calibration_states,
        calibrate=args.calibrate, llm=other, name=Path(args.config).stem if args.config else None))
    adapter = result["adapter"]
    print(f"# {result['split']} split, {result['states']} labelled states ({result['source']}); "
          + (f"LLM config {args.config}; " if args.config else "")
          + (f"adapter best step {adapter['best_step']}" if adapter else "no adapter")
          + f"; calibration {result['calibration_label']}")
    print(result["table"])
    print("labels: " + ", ".join(f"{k} {v:.1f}" for k, v in result["baselines"].items()))
    print(f"# informativeness, 95% bootstrap intervals; IC: P(BUY)-P(SELL) vs the next {result['horizon']} bars' "
          f"return; controls fitted on {result['train_states']} training states")
    print(result["info_table"])
    for name, dep in result["label_dependence"].items():
        print(f"  {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in dep.items()))
    for name, diffs in result["ic_difference"].items():
        print(f"  {name}: IC minus " + "; ".join(f"{c}'s {v:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                                                for c, (v, lo, hi) in diffs.items()) + " (paired bootstrap)")
    cot = result.get("cot")
    if cot:
        print(f"# chain of thought (base model), {cot['decisions']} decisions one at a time")
        for key, value in cot.items():
            if key not in ("rows", "decisions") and value is not None:
                print(f"  {key:<42}{value:>10.1f}")
    print(f"written: {result['path']}")
    print(json.dumps({"split": result["split"], "states": result["states"], "metrics": result["metrics"],
                      "baselines": result["baselines"], "informativeness": result["informativeness"],
                      "ic_difference": result["ic_difference"], "label_dependence": result["label_dependence"],
                      "calibration": result["calibration"], "variants": result["variants"]}))
    return 0
