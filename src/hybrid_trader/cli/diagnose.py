"""``hybrid-trader diagnose RUN_DIR``: name the failure modes a training run shows.

Exit code 0 when healthy, 1 when something was found, 2 when the run directory is
missing or unreadable (a UserError).
"""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diagnose",
        help="read a run's logs and name each failure mode found (exit 0 healthy, 1 found, 2 unreadable)",
        description="Read RUN_DIR/status.json, progress.jsonl, validation.jsonl, config.yaml, eval/*/ and "
        "eval/ablation.json and "
        "report each known failure mode with its evidence and a suggested fix: POLICY_NOT_CHANGING, "
        "WEAK_VALUE_FUNCTION, SHORT_EPISODES, NEVER_TRADES, OVERTRADING, TRAIN_VAL_GAP, NO_FINAL_CHECKPOINT, "
        "NO_TRAINING_LOG, LLM_QUERY_RATE_LOW, LLM_CONFIDENCE_NEAR_ZERO, LLM_AGREEMENT_FROM_ABSTENTION, "
        "LLM_ADVICE_STALE, LLM_ERROR_RATE_HIGH, LLM_AUTH_FAILED, LLM_UNREACHABLE, HYBRID_EQUALS_RL_ONLY. "
        "Thresholds: docs/EVALUATION.md.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory (the --out of `hybrid-trader train`)")
    p.add_argument("--json", action="store_true", help="print one JSON object (the last line) instead of text")
    p.set_defaults(func=_diagnose)


def _diagnose(args: argparse.Namespace) -> int:
    # measured: 1.3 s (torch, gymnasium, TA-Lib) that `hybrid-trader --help` (0.1 s) must not pay
    from hybrid_trader.evaluation.diagnose import diagnose
    from hybrid_trader.evaluation.metrics import jsonable  # same reason (0.4 s alone: pandas, gymnasium)

    dx = diagnose(args.run_dir)
    if args.json:
        print(json.dumps(jsonable(dx.to_dict()), allow_nan=False))
    else:
        print(dx.render())
    return dx.exit_code
