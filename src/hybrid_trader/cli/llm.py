"""``hybrid-trader llm ask|prepare``: ask the LLM advisor about one bar; prepare the local model.

``llm ask`` prints the prompt the model sees, then the advice (distribution over the legal
actions, confidence, coverage; in generation mode the written answer and its reason),
and a JSON line last. Any failure (missing model, unreachable server, malformed answer,
unknown template field) is one error message with the fix, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from hybrid_trader.cli.options import add_options, llm_key_overrides, overrides_from
from hybrid_trader.errors import UserError

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
    add_llm_config_options(a)
    a.set_defaults(func=_ask)

    pr = lsub.add_parser("prepare", help="convert the packaged Gemma GGUF into the model cache (once, ~1 min)")
    pr.add_argument("--model", default="gemma-3-270m", help="'gemma-3-270m' (default) or a .gguf file")
    pr.add_argument("--cache-dir", default=None, help="where converted models live")
    pr.set_defaults(func=_prepare)


def _prepare(args: argparse.Namespace) -> int:
    from hybrid_trader.llm.model_cache import resolve_model_dir

    path = resolve_model_dir(args.model, args.cache_dir)
    print(f"model directory: {path}")
    print(json.dumps({"model_dir": str(path)}))
    return 0


def _load_market(args: argparse.Namespace):
    try:
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
    from hybrid_trader.llm.backends.transformers_backend import prefer_passive_openmp

    prefer_passive_openmp()
    import numpy as np

    from hybrid_trader.llm import AccountState, build_advisor, context_from_market, load_llm_config
    from hybrid_trader.llm.advice import ACTION_WORDS, LLM_ILLEGAL_ACTION, LLM_PARSE_FAILURE
    from hybrid_trader.markets import get_contract

    cfg = load_llm_config(args.config, llm_overrides(args))
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
    try:
        print(f"# bar {t} of {bars.source} ({bars.market}, {ctx.timestamp:%Y-%m-%d %H:%M} ET), "
              f"back end {advisor.backend.describe()}, mode {cfg.mode}")
        print("# prompt " + "-" * 60)
        print(advisor.prompt_text(ctx))
        print("# advice " + "-" * 60)
        advice = advisor.advise_now([ctx], raise_errors=True)[0]
    finally:
        advisor.close()
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
    print(f"latency: {advice.latency_ms:.0f} ms")
    print(json.dumps({
        "bar": t, "time": ctx.timestamp.isoformat(), "backend": advice.backend, "mode": cfg.mode,
        "action": advice.action_name, "confidence": round(advice.confidence, 4), "coverage": round(advice.coverage, 4),
        "probs": {w: round(float(p), 4) for w, p, ok in zip(ACTION_WORDS, advice.probs, ctx.legal) if ok},
        "abstained": advice.abstained, "abstain_reason": advice.abstain_reason, "reason": advice.reason,
        "latency_ms": round(advice.latency_ms, 1),
    }))
    return 0
