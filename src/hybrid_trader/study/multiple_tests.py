"""Tests that survive many comparisons and statistics one heavy-tailed trial cannot carry.

- :func:`spa_stepm`: Hansen's Superior Predictive Ability test and Romano-Wolf's StepM over
  every variant against a benchmark, on daily P&L (``arch.bootstrap``: stationary bootstrap,
  studentized, seeded);
- :func:`pbo_cscv`: the Probability of Backtest Overfitting by combinatorially symmetric
  cross-validation (Bailey, Borwein, Lopez de Prado and Zhu 2015);
- :func:`wilcoxon_p` (scipy's signed-rank test) and :func:`leave_one_out_range` (the range
  of a mean when any one trial is left out).

:func:`many_comparisons` assembles the first two from a study's trial rows (their daily
P&L as returns on the account, by fold and trading day).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

SPA_REPS = 1000
"""Bootstrap replications of SPA and StepM."""
SPA_SEED = 0
"""Their bootstrap's seed: a study's summary is the same every time it is computed."""
PBO_BLOCKS = (16, 14, 12, 10, 8)
"""CSCV's candidate block counts S (even): the one that drops the fewest days, then the largest."""
MIN_DAYS = 10
"""Fewer common days than this: SPA, StepM and PBO are not computed (the summary says why)."""


def wilcoxon_p(differences: Sequence[float], alternative: str = "two-sided") -> float:
    """p-value of the Wilcoxon signed-rank test of ``differences`` against 0 (scipy, zero differences dropped;
    ``alternative``: two-sided, greater, less). NaN with no pair; 1.0 when every difference is 0."""
    from scipy.stats import wilcoxon

    d = np.asarray([x for x in differences if x == x], dtype=float)
    if len(d) == 0:
        return math.nan
    if not np.any(d != 0):
        return 1.0
    return float(wilcoxon(d, alternative=alternative, zero_method="wilcox").pvalue)


def leave_one_out_range(values: Sequence[float]) -> tuple[float, float]:
    """``(low, high)``: the smallest and largest mean of ``values`` with one of them left out (NaN under 2)."""
    x = np.asarray([v for v in values if v == v], dtype=float)
    if len(x) < 2:
        return math.nan, math.nan
    means = (x.sum() - x) / (len(x) - 1)
    return float(means.min()), float(means.max())


def robust_figures(values: Sequence[float], *, paired: bool = False) -> dict[str, float]:
    """Median, leave-one-out range of the mean and (``paired``: of differences) the two-sided Wilcoxon p."""
    x = [v for v in values if v == v]
    lo, hi = leave_one_out_range(x)
    what = "pair" if paired else "trial"
    out = {"median": float(np.median(x)) if x else math.nan,
           f"leave-one-{what}-out mean low": lo, f"leave-one-{what}-out mean high": hi}
    if paired:
        out["Wilcoxon signed-rank p (two-sided)"] = wilcoxon_p(x)
    return out


def spa_stepm(benchmark: np.ndarray, models: np.ndarray, names: Sequence[str], *, alpha: float = 0.05,
              reps: int = SPA_REPS, seed: int = SPA_SEED) -> dict[str, Any]:
    """Hansen's SPA p-values and StepM's superior models, on daily P&L (higher is better): ``benchmark`` has shape
    ``(T,)``, ``models`` ``(T, k)``. arch tests losses, so both are negated.

    StepM (Romano and Wolf 2005) is stepped down here over arch's SPA, as arch's ``StepM.compute`` does, but stops
    once every model is found superior: arch 8.0's loop compares the count of the last step's finds (not all so
    far) with ``k``, so models all superior over two or more steps ran SPA on no model and raised."""
    from arch.bootstrap import SPA

    bench = -np.asarray(benchmark, dtype=float)
    mods = pd.DataFrame(-np.asarray(models, dtype=float).reshape(len(bench), -1), columns=list(names))
    spa = SPA(bench, mods, reps=reps, bootstrap="stationary", studentize=True, seed=seed)
    spa.compute()
    p = dict(spa.pvalues)
    k = mods.shape[1]
    found: list[int] = []
    better = [int(i) for i in spa.better_models(alpha)]  # indices into all k models, whatever the subset
    while better:
        found += better
        if len(found) == k:
            break
        selector = np.ones(k, dtype=bool)
        selector[found] = False
        spa.subset(selector)  # the same bootstrap draws, on the models not yet found
        spa.compute()
        better = [int(i) for i in spa.better_models(alpha)]
    superior = [str(mods.columns[i]) for i in sorted(found)]
    return {"days": int(len(bench)), "models": list(names), "SPA p-value (consistent)": float(p["consistent"]),
            "SPA p-value (lower)": float(p["lower"]), "SPA p-value (upper)": float(p["upper"]),
            f"StepM superior at {alpha}": superior, "bootstrap": f"stationary, {reps} replications, seed {seed}"}


def cscv_blocks(days: int) -> int:
    """CSCV's S for ``days`` rows: from :data:`PBO_BLOCKS` with at least 2 days a block, the one dropping the fewest
    days (then the largest); below 16 days the largest even S with 2 days a block; 0 under 4 days."""
    fits = [s for s in PBO_BLOCKS if days >= 2 * s]
    if fits:
        return min(fits, key=lambda s: (days % s, -s))
    s = (days // 2) // 2 * 2
    return s if s >= 2 else 0


def _sharpe(total: np.ndarray, squares: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per-period Sharpe ratios from sums, sums of squares and counts (``n`` broadcast); 0 with no variance."""
    mean = total / n
    var = np.maximum(squares / n - mean ** 2, 0.0) * n / np.maximum(n - 1, 1)
    sd = np.sqrt(var)
    return np.divide(mean, sd, out=np.zeros_like(mean), where=sd > 1e-9 * np.abs(mean) + 1e-15)  # rounding, not spread


def pbo_cscv(returns: np.ndarray, blocks: int | None = None) -> dict[str, Any]:
    """The Probability of Backtest Overfitting of choosing the best of ``returns``' columns by its Sharpe ratio.

    CSCV (Bailey et al. 2015): the ``T`` rows (days, in time order) are cut into ``S`` (even) blocks
    of equal size, the ``T mod S`` earliest days dropped. For each of the ``C(S, S/2)`` ways to pick
    half the blocks as in-sample (the rest out-of-sample), the column with the best in-sample Sharpe
    is found and its out-of-sample Sharpe ranked among all columns: ``w = rank / (N + 1)`` (rank 1
    the worst, ties averaged), ``logit = ln(w / (1 - w))``. PBO is the share of splits with
    ``logit <= 0``: the in-sample best at or below the out-of-sample median.
    """
    from scipy.stats import rankdata

    m = np.asarray(returns, dtype=float)
    t, n = m.shape
    s = cscv_blocks(t) if blocks is None else int(blocks)
    if n < 2 or s < 2 or s % 2 or t < s:
        return {"pbo": math.nan, "strategies": n, "days": t, "blocks": s,
                "reason": "needs 2 or more strategies and at least 4 days (an even number of blocks)"}
    used = m[t % s:]
    parts = used.reshape(s, -1, n)
    size = parts.shape[1]
    sums, squares = parts.sum(axis=1), (parts ** 2).sum(axis=1)
    combos = np.array(list(combinations(range(s), s // 2)))
    in_sum, in_sq = sums[combos].sum(axis=1), squares[combos].sum(axis=1)
    half = float(size * (s // 2))
    r_in = _sharpe(in_sum, in_sq, np.full((1, 1), half))
    r_out = _sharpe(sums.sum(axis=0) - in_sum, squares.sum(axis=0) - in_sq, np.full((1, 1), half))
    best = np.argmax(r_in, axis=1)
    ranks = rankdata(r_out, axis=1)[np.arange(len(combos)), best]
    w = ranks / (n + 1.0)
    logits = np.log(w / (1.0 - w))
    return {"pbo": float(np.mean(logits <= 0.0)), "strategies": n, "days": int(len(used)),
            "days dropped": int(t % s), "blocks": s, "splits": int(len(combos)),
            "median logit": float(np.median(logits)),
            "out-of-sample Sharpe of the in-sample best, mean (daily)": float(np.mean(r_out[np.arange(len(combos)),
                                                                                          best]))}


Day = tuple[Any, ...]
"""A market day: ``(trading date,)``, or ``(fold, position)`` for a row recorded before dates were kept."""


def daily_by_day(row: dict[str, Any], key: str = "daily_returns") -> dict[Day, float]:
    """A trial's daily series keyed by market day: its trading date, so that the folds of a confirmation, which all
    trade the same later days, count each day once (the day's position in its fold when the row predates dates)."""
    values = row.get(key) or []
    dates = row.get("daily_dates") or []
    if len(dates) != len(values):
        return {(int(row["fold"]), i): float(v) for i, v in enumerate(values)}
    return {(str(d),): float(v) for d, v in zip(dates, values)}


def in_time_order(days: set[Day]) -> list[Day]:
    """The days in time order (dates before positions; never positions as text: 10 after 9)."""
    return sorted(days, key=lambda d: (len(d), d))


def seed_mean_series(rows: Sequence[dict[str, Any]], keys: set[tuple[int, int]], key: str = "daily_returns",
                     ) -> dict[Day, float]:
    """The mean over ``rows`` (trials of one variant, their ``(seed, fold)`` in ``keys``) of each day's value: over
    its seeds, and in a confirmation over the folds' models that traded the day."""
    acc: dict[Day, list[float]] = {}
    for r in rows:
        if (r["seed"], r["fold"]) in keys:
            for day, v in daily_by_day(r, key).items():
                acc.setdefault(day, []).append(v)
    return {day: float(np.mean(v)) for day, v in acc.items()}


def many_comparisons(variants: Sequence[str], baseline: str, rows: Sequence[dict[str, Any]], *,
                     alpha: float = 0.05) -> dict[str, Any]:
    """SPA and StepM against the ``baseline`` variant and, separately, against the momentum baseline (when the
    trials recorded its daily P&L); PBO over every variant x seed. On the seeds and folds every variant finished;
    each variant's daily P&L (return on the account) is its mean over those seeds on each test day."""
    ok = [r for r in rows if r.get("status") == "finished" and r.get("daily_returns")]
    by_variant = {v: [r for r in ok if r["variant"] == v] for v in variants}
    common = set.intersection(*[{(r["seed"], r["fold"]) for r in by_variant[v]} for v in variants])
    series = {v: seed_mean_series(by_variant[v], common) for v in variants}
    days = in_time_order(set.intersection(*[set(s) for s in series.values()])) if common else []
    out: dict[str, Any] = {"trials used": len(common) * len(variants), "days": len(days),
                           "unit": "daily P&L as a return on the account, mean over seeds"}
    if len(days) < MIN_DAYS:
        out["reason"] = f"{len(days)} common test days (seeds and folds every variant finished), {MIN_DAYS} needed"
        return out
    matrix = {v: np.array([series[v][d] for d in days]) for v in variants}
    others = [v for v in variants if v != baseline]
    if others:
        out[f"against {baseline} (baseline variant)"] = spa_stepm(
            matrix[baseline], np.column_stack([matrix[v] for v in others]), others, alpha=alpha)
    mom = seed_mean_series([r for v in variants for r in by_variant[v]], common, "momentum daily_returns")
    if all(d in mom for d in days):
        out["against momentum"] = spa_stepm(np.array([mom[d] for d in days]),
                                            np.column_stack([matrix[v] for v in variants]), list(variants),
                                            alpha=alpha)
    else:
        out["against momentum"] = {"reason": "the trials recorded no momentum daily P&L (evaluated without it, or "
                                             "run before it was recorded)"}
    out["PBO"] = pbo_over_trials(ok, variants)
    return out


def pbo_over_trials(rows: Sequence[dict[str, Any]], variants: Sequence[str]) -> dict[str, Any]:
    """PBO with one strategy per variant x seed (its daily P&L over every fold's test days; in a confirmation, where
    every fold's model trades the same days, their mean on each day), on the days every such strategy has."""
    folds = sorted({r["fold"] for r in rows})
    strategies: dict[str, dict[Day, float]] = {}
    for v in variants:
        for seed in sorted({r["seed"] for r in rows if r["variant"] == v}):
            mine = [r for r in rows if r["variant"] == v and r["seed"] == seed]
            if {r["fold"] for r in mine} == set(folds):
                strategies[f"{v}-s{seed}"] = seed_mean_series(mine, {(seed, f) for f in folds})
    if len(strategies) < 2:
        return {"pbo": math.nan, "strategies": len(strategies), "reason": "fewer than 2 variant x seed strategies "
                                                                          "with every fold finished"}
    days = in_time_order(set.intersection(*[set(s) for s in strategies.values()]))
    m = np.array([[s[d] for s in strategies.values()] for d in days]).reshape(len(days), len(strategies))
    return {**pbo_cscv(m), "performance": "Sharpe ratio of daily P&L",
            "strategy": "one variant x seed over every fold's test days"}
