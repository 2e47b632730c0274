"""Pre-registered hypotheses: declared in the study file before it runs, judged by one fixed rule.

A hypothesis (``hypotheses: [{name, variant, against, metric, direction, alpha}]``) says that
``variant``'s ``metric`` is ``greater`` (or ``less``) than ``against``'s, trial by trial on the
same seed and fold. It is part of the study's identity (:meth:`StudySpec.identity`): once trials
ran, a changed hypothesis is refused like any other change.

The rule (:func:`judge`), on the per-pair differences ``d = variant - against``:

- the test: a one-sided Wilcoxon signed-rank test of ``d`` (scipy; exact for small samples),
  in the declared direction, gives the p-value: a rank test that one heavy-tailed pair cannot
  carry;
- the interval: the ``1 - alpha`` percentile bootstrap CI of the mean of ``d``
  (:func:`~hybrid_trader.study.stats.paired_difference`);
- **supported** iff ``p < alpha`` **and** the CI lies wholly on the declared side of 0;
  otherwise **not supported**, with the reason. Fewer than 2 pairs: not supported.

A study run in parts (``study --only VARIANT``, an advisor still being built) leaves a hypothesis
on a variant with trials not run yet **pending**: no verdict until all of them have run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from hybrid_trader.config import check
from hybrid_trader.evaluation.metrics import FRESH_DAY_FIGURES
from hybrid_trader.study.multiple_tests import wilcoxon_p
from hybrid_trader.study.stats import paired_difference

FRESH_METRICS = tuple(k for k in FRESH_DAY_FIGURES if k not in ("Days, fresh", "Trades, fresh"))
"""The figures of each day traded from a fresh account (:data:`~hybrid_trader.evaluation.metrics.FRESH_DAY_FIGURES`,
less its counts of days and trades): a trial has them when the study sets ``evaluate.fresh_days``."""
HYPOTHESIS_METRICS = ("Net PnL [$]", "Sharpe (ann.)", "Max drawdown [$]", "Trades", "Win rate [%]", "PSR [%]",
                      "Return [%]", "Pass rate [%]", "Breach rate [%]", "Expected outcome per attempt [$]",
                      *FRESH_METRICS)
"""The figures a hypothesis may name: labels of a trial's row (``study.trials.FIGURES``, ``VERDICT_KEPT`` and
:data:`FRESH_METRICS`)."""

MIN_PAIRS = 2
"""Fewer pairs than this: the hypothesis is not supported (no interval)."""

PENDING = "pending"
"""The verdict of a hypothesis whose variants have trials not run yet (``study --only``): none yet."""

TEST = ("one-sided Wilcoxon signed-rank test on the per-pair differences (same seed and fold), and the 1 - alpha "
        "bootstrap CI of their mean; supported iff p < alpha and the CI excludes 0 on the declared side")
"""The declared rule, as the summary states it."""


@dataclass
class HypothesisSpec:
    """One pre-registered hypothesis: ``variant``'s ``metric`` is ``direction`` than ``against``'s."""

    name: str = ""
    """Its name, as the summary shows it (e.g. gemma-beats-shuffled)."""
    variant: str = ""
    """The variant the hypothesis is about."""
    against: str = ""
    """The variant it is compared with, pair by pair (same seed and fold)."""
    metric: str = "Net PnL [$]"
    """A trial figure with its unit (:data:`HYPOTHESIS_METRICS`)."""
    direction: Literal["greater", "less"] = "greater"
    """greater: ``variant`` above ``against``; less: below."""
    alpha: float = 0.05
    """The test's level, in (0, 1)."""

    def __post_init__(self) -> None:
        check(bool(self.name), "name", "a hypothesis needs a name", fix="e.g. name: gemma-beats-shuffled")
        check(self.metric in HYPOTHESIS_METRICS, "metric", f"{self.metric!r} is not a figure of the study's trials",
              value=self.metric, fix=f"use one of: {', '.join(HYPOTHESIS_METRICS)}")
        check(isinstance(self.alpha, (int, float)) and 0.0 < float(self.alpha) < 1.0, "alpha",
              f"alpha {self.alpha} is outside (0, 1)", value=self.alpha, fix="e.g. alpha: 0.05")


def check_hypotheses(hypotheses: Sequence[HypothesisSpec], variants: Sequence[str]) -> None:
    """Each hypothesis names two different variants of the study; names are unique."""
    names = [h.name for h in hypotheses]
    check(len(set(names)) == len(names), "hypotheses", f"hypothesis names repeat: {names}", fix="name each once")
    for i, h in enumerate(hypotheses):
        for key in ("variant", "against"):
            value = getattr(h, key)
            check(value in variants, f"hypotheses[{i}].{key}",
                  f"hypothesis {h.name}: {value!r} is not a variant of the study", value=value,
                  fix=f"use one of: {', '.join(variants)}")
        check(h.variant != h.against, f"hypotheses[{i}].against",
              f"hypothesis {h.name} compares {h.variant} with itself", value=h.against,
              fix="name another variant in against")


def paired_values(rows: Sequence[dict[str, Any]], variant: str, against: str, figure: str,
                  ) -> tuple[list[float], list[float]]:
    """``figure`` of ``variant`` and of ``against`` on their finished trials of the same seed and fold (pairs where
    either is missing dropped), in ``rows``' order."""
    ok = [r for r in rows if r.get("status") == "finished"]
    base = {(r["seed"], r["fold"]): r for r in ok if r["variant"] == against}
    a: list[float] = []
    b: list[float] = []
    for r in ok:
        other = base.get((r["seed"], r["fold"]))
        if r["variant"] != variant or other is None or r.get(figure) is None or other.get(figure) is None:
            continue
        x, y = float(r[figure]), float(other[figure])
        if x == x and y == y:
            a.append(x)
            b.append(y)
    return a, b


def judge(h: HypothesisSpec, rows: Sequence[dict[str, Any]], not_run: dict[str, int] | None = None
          ) -> dict[str, Any]:
    """The hypothesis's verdict by the declared rule (module docstring), with its figures and the reason.
    ``not_run``: trials not run yet per variant (``study --only``): a hypothesis on such a variant is **pending**,
    judged only once every trial of both of its variants has run."""
    a, b = paired_values(rows, h.variant, h.against, h.metric)
    d = [x - y for x, y in zip(a, b)]
    mean, lo, hi = paired_difference(a, b, level=1.0 - h.alpha)
    p = wilcoxon_p(d, h.direction)
    waiting = {v: n for v in (h.variant, h.against) if (n := (not_run or {}).get(v, 0))}
    if waiting:
        verdict, reason = None, "not_run_yet: " + ", ".join(f"{n} trial(s) of {v}" for v, n in waiting.items()) + \
            " not run (the study ran with --only); judged when every trial of both variants has run"
    elif len(d) < MIN_PAIRS:
        verdict, reason = False, f"too_few_pairs: {len(d)} pair(s), {MIN_PAIRS} needed"
    elif not p < h.alpha:
        verdict, reason = False, f"p_not_below_alpha: p {p:.4g} >= alpha {h.alpha}"
    elif not (lo > 0 if h.direction == "greater" else hi < 0):
        verdict, reason = False, f"ci_holds_zero: [{lo:.4g}, {hi:.4g}] is not wholly {h.direction} than 0"
    else:
        verdict, reason = True, "p < alpha and the CI excludes 0 on the declared side"
    return {"name": h.name, "claim": f"{h.variant} {h.direction} than {h.against} on {h.metric}",
            "variant": h.variant, "against": h.against, "metric": h.metric, "direction": h.direction,
            "alpha": h.alpha, "pairs": len(d), "test": TEST,
            "p-value": p, "smallest attainable p (exact test)": 0.5 ** int(np.count_nonzero(d)) if d else math.nan,
            "mean difference": mean, "median difference": float(np.median(d)) if d else math.nan,
            "ci_low": lo, "ci_high": hi,
            "CI level [%]": round(100.0 * (1.0 - h.alpha), 6),
            "verdict": PENDING if verdict is None else "supported" if verdict else "not supported", "reason": reason}


def judge_hypotheses(hypotheses: Sequence[HypothesisSpec], rows: Sequence[dict[str, Any]],
                     not_run: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Every hypothesis judged on the trials in ``rows`` (the study's, or a confirmation's); ``not_run``: see
    :func:`judge`."""
    return [judge(h, rows, not_run) for h in hypotheses]

