"""A study's summary: per variant mean and 95% CI, paired differences against the baseline, the DSR."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from hybrid_trader.study.spec import StudySpec
from hybrid_trader.study.stats import bootstrap_ci, deflated_sharpe_ratio, paired_difference

SUMMARY_FIGURES = ("Net PnL [$]", "Sharpe (ann.)", "Max drawdown [$]", "Trades", "Pass rate [%]",
                   "Expected outcome per attempt [$]")
"""The agent's figures summarised per variant (mean and 95% bootstrap CI over seeds and folds)."""
PAIRED_FIGURES = ("Net PnL [$]", "Sharpe (ann.)", "Pass rate [%]")
"""Figures compared with the baseline variant pair by pair (same seed, same fold)."""


def summarize(spec: StudySpec, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per variant: trials, failures, mean and CI of each figure, pass count; paired differences; the DSR."""
    ok = [r for r in rows if r.get("status") == "finished"]
    variants: dict[str, Any] = {}
    for v in spec.variants:
        mine = [r for r in ok if r["variant"] == v.name]
        figures = {}
        for f in SUMMARY_FIGURES:
            mean, lo, hi = bootstrap_ci([float(r[f]) for r in mine if r.get(f) is not None])
            figures[f] = {"mean": mean, "ci_low": lo, "ci_high": hi}
        variants[v.name] = {
            "trials": sum(1 for r in rows if r["variant"] == v.name),
            "finished": len(mine),
            "failed": sum(1 for r in rows if r["variant"] == v.name and r.get("status") == "failed"),
            "passed (Apex verdict)": sum(1 for r in mine if r.get("Apex verdict") == "passed"),
            "figures": figures,
        }
    base = {(r["seed"], r["fold"]): r for r in ok if r["variant"] == spec.baseline}
    paired: dict[str, Any] = {}
    for v in spec.variants:
        if v.name == spec.baseline:
            continue
        pairs = [(r, base[(r["seed"], r["fold"])]) for r in ok if r["variant"] == v.name and (r["seed"], r["fold"])
                 in base]
        paired[v.name] = {"pairs": len(pairs)}
        for f in PAIRED_FIGURES:
            if any(a.get(f) is None or b.get(f) is None for a, b in pairs):
                continue
            mean, lo, hi = paired_difference([float(a[f]) for a, _ in pairs], [float(b[f]) for _, b in pairs])
            paired[v.name][f] = {"mean difference": mean, "ci_low": lo, "ci_high": hi}
    return {"study": spec.name, "baseline": spec.baseline, "trials": len(rows), "finished": len(ok),
            "failed": sum(1 for r in rows if r.get("status") == "failed"), "variants": variants,
            "paired vs baseline": paired, "deflated sharpe": deflated_best(ok),
            "errors": [{"trial": r["trial"], "error": r.get("error")} for r in rows if r.get("status") == "failed"]}


def deflated_best(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The best trial by daily Sharpe and its Deflated Sharpe Ratio for the number of trials tried."""
    sharpes = []
    for r in rows:
        x = np.asarray(r.get("daily_returns") or [], dtype=float)
        if len(x) >= 3 and x.std(ddof=1) > 0:
            sharpes.append((float(x.mean() / x.std(ddof=1)), r["trial"], x))
    if not sharpes:
        return {"trials": len(rows), "dsr": math.nan, "best": None}
    variance = float(np.var([s for s, _, _ in sharpes], ddof=1)) if len(sharpes) > 1 else 0.0
    sr, name, x = max(sharpes, key=lambda s: s[0])
    dev = x - x.mean()
    m2 = float(np.mean(dev ** 2))
    skew = float(np.mean(dev ** 3)) / m2 ** 1.5 if m2 > 0 else 0.0
    kurt = float(np.mean(dev ** 4)) / m2 ** 2 if m2 > 0 else 3.0
    return {"trials": len(rows), "best": name, "daily sharpe": sr, "days": int(len(x)),
            "dsr": deflated_sharpe_ratio(sr, len(x), skew, kurt, len(sharpes), variance)}
