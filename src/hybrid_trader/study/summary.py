"""A study's summary: per variant mean and 95% CI, paired differences against the baseline, the DSR.

Beside the means: medians, leave-one-out ranges and the Wilcoxon test (one trial cannot carry
them), the pre-registered hypotheses' verdicts (:mod:`~hybrid_trader.study.hypotheses`), SPA,
StepM and PBO (:mod:`~hybrid_trader.study.multiple_tests`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from hybrid_trader.study.hypotheses import judge_hypotheses, paired_values
from hybrid_trader.study.multiple_tests import many_comparisons, robust_figures
from hybrid_trader.study.spec import StudySpec
from hybrid_trader.study.stats import bootstrap_ci, deflated_sharpe_ratio, paired_difference

SUMMARY_FIGURES = ("Net PnL [$]", "Sharpe (ann.)", "Max drawdown [$]", "Trades", "Pass rate [%]",
                   "Expected outcome per attempt [$]")
"""The agent's figures summarised per variant (mean and 95% bootstrap CI over seeds and folds)."""
PAIRED_FIGURES = ("Net PnL [$]", "Sharpe (ann.)", "Pass rate [%]")
"""Figures compared with the baseline variant pair by pair (same seed, same fold)."""
NOT_RUN = "not run"
"""A trial's status when the study ran without it (``study --only`` other variants): not a failure."""


def summarize_study(spec: StudySpec, rows: Sequence[dict[str, Any]], attempts: dict[str, int] | None = None,
              ) -> dict[str, Any]:
    """Per variant: trials, failures, mean, CI, median and leave-one-out range of each figure, pass count; paired
    differences (with the Wilcoxon test); the hypotheses; SPA, StepM, PBO; the DSR over ``attempts["attempts"]``
    trials (every trial the folder ran: ``study.attempts``; default: the rows of trials run)."""
    ok = [r for r in rows if r.get("status") == "finished"]
    not_run = {v.name: n for v in spec.variants
               if (n := sum(1 for r in rows if r["variant"] == v.name and r.get("status") == NOT_RUN))}
    ran = [v.name for v in spec.variants if v.name not in not_run]
    variants: dict[str, Any] = {}
    for v in spec.variants:
        mine = [r for r in ok if r["variant"] == v.name]
        figures = {}
        for f in SUMMARY_FIGURES:
            values = [float(r[f]) for r in mine if r.get(f) is not None]
            mean, lo, hi = bootstrap_ci(values)
            figures[f] = {"mean": mean, "ci_low": lo, "ci_high": hi, **robust_figures(values)}
        variants[v.name] = {
            "trials": sum(1 for r in rows if r["variant"] == v.name),
            "finished": len(mine),
            "failed": sum(1 for r in rows if r["variant"] == v.name and r.get("status") == "failed"),
            "not run": not_run.get(v.name, 0),
            "passed (Apex verdict)": sum(1 for r in mine if r.get("Apex verdict") == "passed"),
            "figures": figures,
        }
    base = {(r["seed"], r["fold"]) for r in ok if r["variant"] == spec.baseline}
    paired: dict[str, Any] = {}
    for v in spec.variants:
        if v.name == spec.baseline:
            continue
        paired[v.name] = {"pairs": sum(1 for r in ok if r["variant"] == v.name and (r["seed"], r["fold"]) in base)}
        for f in PAIRED_FIGURES:
            a, b = paired_values(ok, v.name, spec.baseline, f)
            if not a:  # a figure the pairs lack (phase 3: no verdict)
                continue
            mean, lo, hi = paired_difference(a, b)
            paired[v.name][f] = {"mean difference": mean, "ci_low": lo, "ci_high": hi,
                                 **robust_figures([x - y for x, y in zip(a, b)], paired=True)}
    run = sum(1 for r in rows if r.get("status") != NOT_RUN)
    tried = (attempts or {}).get("attempts", run)
    many = many_comparisons(ran, spec.baseline, ok) if spec.baseline in ran else {
        "reason": f"the baseline {spec.baseline} has trials not run yet"}
    if not_run:
        many["provisional"] = (f"over {len(ran)} of the {len(spec.variants)} variants: "
                               f"{', '.join(not_run)} not run yet (study --only); final when every variant has run")
    return {"study": spec.name, "baseline": spec.baseline, "trials": len(rows), "finished": len(ok),
            "failed": sum(1 for r in rows if r.get("status") == "failed"),
            "not run": sum(not_run.values()), "variants not run": sorted(not_run), "variants": variants,
            "paired vs baseline": paired,
            "hypotheses": judge_hypotheses(spec.hypotheses, ok, not_run),
            "many comparisons": many,
            "trials run by the folder": attempts or {"attempts": run},
            "deflated sharpe": deflated_best(ok, tried),
            "errors": [{"trial": r["trial"], "error": r.get("error")} for r in rows if r.get("status") == "failed"]}


def daily_sharpe(values: Sequence[float] | np.ndarray) -> float | None:
    """Mean over standard deviation (ddof 1) of daily returns; None under 3 days or without spread."""
    x = np.asarray(values, dtype=float)
    return float(x.mean() / x.std(ddof=1)) if len(x) >= 3 and x.std(ddof=1) > 0 else None


def deflated_best(rows: Sequence[dict[str, Any]], tried: int | None = None, variance: float | None = None
                  ) -> dict[str, Any]:
    """The best trial by daily Sharpe and its Deflated Sharpe Ratio for the number of trials tried: ``tried`` (every
    trial the study folder ran, failed and re-run ones included), at least the trials with a Sharpe. ``variance``:
    the variance of the trials' Sharpe ratios when ``rows`` are not all of them (a search's selection), else
    theirs."""
    sharpes = []
    for r in rows:
        x = np.asarray(r.get("daily_returns") or [], dtype=float)
        if (sr := daily_sharpe(x)) is not None:
            sharpes.append((sr, r["trial"], x))
    if not sharpes:
        return {"trials": max(tried or 0, len(rows)), "dsr": math.nan, "best": None}
    if variance is None:
        variance = float(np.var([s for s, _, _ in sharpes], ddof=1)) if len(sharpes) > 1 else 0.0
    sr, name, x = max(sharpes, key=lambda s: s[0])
    dev = x - x.mean()
    m2 = float(np.mean(dev ** 2))
    skew = float(np.mean(dev ** 3)) / m2 ** 1.5 if m2 > 0 else 0.0
    kurt = float(np.mean(dev ** 4)) / m2 ** 2 if m2 > 0 else 3.0
    n = max(tried or 0, len(sharpes))
    return {"trials": n, "best": name, "daily sharpe": sr, "days": int(len(x)),
            "dsr": deflated_sharpe_ratio(sr, len(x), skew, kurt, n, variance)}
