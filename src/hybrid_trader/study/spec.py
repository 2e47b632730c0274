"""The study file: what to vary, over which seeds and folds, and how each trial is evaluated.

Example (``docs/STUDY.md``)::

    name: select-last-vs-best           # optional; the folder's name by default
    base:                               # config keys set in every trial (those of --set)
      data.synthetic_days: 40
      ppo.total_timesteps: 8192
    variants:                           # each a name and the keys it sets over the base
      - {name: rl-only, set: {env.phase: 2}}
      - {name: constant-prior, set: {env.phase: 2, fusion.llm_weight: 0.5}}
    baseline: rl-only                   # paired comparisons are against this variant
    seeds: [0, 1, 2]
    folds: 3                            # walk-forward folds (split.folds / split.fold); 0: one split
    phases: [1, 2]                      # each trial trains these phases in turn (2 from 1, 3 from 2)
    search: grid                        # grid: every variant x seed x fold; random: `samples` of them
    evaluate: {split: test, seeds: 1}
    hypotheses:                         # pre-registered: judged by one rule (study.hypotheses)
      - {name: prior-helps, variant: constant-prior, against: rl-only, metric: "Net PnL [$]",
         direction: greater, alpha: 0.05}             # quote the metric: [ ] is YAML's list in { }
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hybrid_trader.config import check, load_yaml_config, merge_overrides, to_dict
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.verdict import VerdictConfig
from hybrid_trader.run.config import RunConfig
from hybrid_trader.study.hypotheses import FRESH_METRICS, HYPOTHESIS_METRICS, HypothesisSpec, check_hypotheses
from hybrid_trader.study.space import check_search


@dataclass
class VariantSpec:
    """One variant of the study."""

    name: str = ""
    """Its name (letters, digits, - and _): the trials' folders start with it."""
    set: dict[str, Any] = field(default_factory=dict)
    """Config keys it sets over the study's base, as with --set (e.g. fusion.mode: learned)."""

    def __post_init__(self) -> None:
        check(bool(self.name) and all(c.isalnum() or c in "-_" for c in self.name), "name",
              f"{self.name!r} is not a variant name", fix="use letters, digits, - and _, e.g. best-val")


@dataclass
class SelectSpec:
    """How a search selects each fold's configuration: a figure of its evaluation on the validation days."""

    metric: str = "Net PnL [$]"
    """A figure of the trials (``Net PnL [$]``, ``Sharpe (ann.)``, ``Pass rate [%]``, ...), on validation days."""
    mode: Literal["max", "min"] = "max"
    """max: the highest is best; min: the lowest (e.g. ``Max drawdown [$]``)."""

    def __post_init__(self) -> None:
        check(self.metric in HYPOTHESIS_METRICS, "metric", f"{self.metric!r} is not a figure of the study's trials",
              value=self.metric, fix=f"use one of: {', '.join(HYPOTHESIS_METRICS)}")


@dataclass
class EvaluateSpec:
    """How each trial is evaluated (``evaluate_run``)."""

    split: Literal["val", "test"] = "test"
    """Days each trial is evaluated on: later than every day it trained on."""
    seeds: int = 1
    """Seeds of the random baseline."""
    verdict: Literal["sequential", "rolling", "none"] = "sequential"
    """Prop-firm verdict of each trial (evaluate --verdict): attempts one after another, one a day, or none."""
    prop: VerdictConfig = field(default_factory=VerdictConfig)
    """The verdict's fees, pass value and day limit (evaluate --evaluation-fee, --reset-fee, --pass-value,
    --max-days); set ``pass_value`` so the expected outcome per attempt ranks the variants (0: the fees alone)."""
    fresh_days: bool = False
    """The agent also trades each day from a fresh account: the figures ``Net PnL, fresh days [$]``, ``Mean day,
    fresh [$]``, ``Sharpe, fresh days (ann.)`` and ``Breached days, fresh``, which a selection or hypothesis may
    name (the policy free of the path: on one account a pass or a breach on the first days decides the rest)."""


@dataclass
class StudySpec:
    """A study: variants x seeds x folds, each trial trained then evaluated."""

    name: str = ""
    """The study's name (default: its folder's name)."""
    base: dict[str, Any] = field(default_factory=dict)
    """Config keys set in every trial (those of --set)."""
    variants: list[VariantSpec] = field(default_factory=list)
    """The variants compared (at least one)."""
    baseline: str = ""
    """The variant the others are compared with, pair by pair (default: the first)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """PPO seeds of every variant and fold."""
    folds: int = 0
    """Walk-forward folds (split.folds; each trial one split.fold); 0: the one split of the base config."""
    phases: list[int] = field(default_factory=lambda: [1])
    """Phases each trial trains in turn, each from the previous one (e.g. [1, 2])."""
    search: Literal["grid", "random", "optuna"] = "grid"
    """grid: every variant x seed x fold; random: ``samples`` of them drawn with ``sample_seed``. With a ``space``
    (a search on Ray Tune, :mod:`hybrid_trader.study.search`): grid: every combination of its choices; random:
    ``samples`` points drawn with ``sample_seed``; optuna: ``samples`` points proposed by Optuna's TPE (seeded)."""
    samples: int = 0
    """random search: how many trials; a search with a space: how many configurations per fold."""
    sample_seed: int = 0
    """random search: the draw's seed (Optuna's sampler's too)."""
    space: dict[str, Any] = field(default_factory=dict)
    """The search space: config key -> ``{uniform: [lo, hi]}``, ``{loguniform: [lo, hi]}``, ``{choice: [...]}`` or
    ``{randint: [lo, hi]}`` (:mod:`hybrid_trader.study.space`); empty: the variants x seeds x folds grid."""
    scheduler: Literal["none", "asha"] = "none"
    """A search with a space: ``asha`` stops trials whose periodic validation trails (recorded as stopped)."""
    reduction_factor: int = 3
    """``scheduler: asha``: at each rung a trial goes on when it is in the best 1/reduction_factor of those judged there
    before it; the rungs are at grace_period x reduction_factor^k steps."""
    grace_period: int = 0
    """``scheduler: asha``: the first rung, in steps, a multiple of ``train.validate_every`` (0: one validation)."""
    select: SelectSpec = field(default_factory=SelectSpec)
    """A search with a space: the validation figure each fold's configuration is selected by."""
    evaluate: EvaluateSpec = field(default_factory=EvaluateSpec)
    """How each trial is evaluated."""
    hypotheses: list[HypothesisSpec] = field(default_factory=list)
    """Pre-registered hypotheses, judged on the finished trials by one rule (docs/STUDY.md); part of the identity."""

    def __post_init__(self) -> None:
        check(len(self.variants) >= 1, "variants", "a study needs at least one variant",
              fix="list variants: [{name: a, set: {...}}, ...]")
        names = [v.name for v in self.variants]
        check(len(set(names)) == len(names), "variants", f"variant names repeat: {names}", fix="name each once")
        if not self.baseline:
            self.baseline = names[0]
        check(self.baseline in names, "baseline", f"{self.baseline!r} is not a variant", value=self.baseline,
              fix=f"use one of: {', '.join(names)}")
        check(len(self.seeds) >= 1, "seeds", "a study needs at least one seed", fix="e.g. seeds: [0, 1, 2]")
        check(self.folds >= 0, "folds", f"{self.folds} must be 0 or more", fix="0 (one split) or e.g. 3")
        check(bool(self.phases) and self.phases == sorted(self.phases) and set(self.phases) <= {1, 2, 3}, "phases",
              f"{self.phases} is not a chain of phases", fix="e.g. [1], [1, 2] or [2, 3] (with base init)")
        check(self.search == "grid" or self.samples >= 1, "samples", f"{self.search} search needs samples >= 1",
              fix="e.g. samples: 12")
        if self.space or self.search == "optuna" or self.scheduler != "none":
            check_search(self)  # the Tune path's own rules
        check_hypotheses(self.hypotheses, names)
        fresh = [m for m in (self.select.metric, *(h.metric for h in self.hypotheses)) if m in FRESH_METRICS]
        check(not fresh or self.evaluate.fresh_days, "evaluate.fresh_days", f"{fresh[0] if fresh else ''!r} is a "
              "figure of the days traded from a fresh account, which the trials do not trade",
              fix="set evaluate: {fresh_days: true}, or name another figure")

    def run_config(self, variant: VariantSpec, seed: int, fold: int, phase: int) -> RunConfig:
        """The configuration of one phase of one trial (refused, naming the key, when a key is unknown)."""
        keys: dict[str, Any] = {**self.base, **variant.set, "ppo.seed": int(seed), "env.phase": int(phase)}
        if self.folds:
            keys.update({"split.folds": self.folds, "split.fold": int(fold)})
        return merge_overrides(RunConfig(), keys, source=f"study variant {variant.name}")

    def identity(self) -> str:
        """A hash of everything that decides the trials' results (not the name)."""
        data = to_dict(self)
        data.pop("name", None)
        if not data.get("hypotheses"):  # a study without hypotheses keeps the identity it had before they existed
            data.pop("hypotheses", None)
        if self.evaluate.prop == VerdictConfig():  # likewise a study with the default fees and pass value
            data["evaluate"].pop("prop", None)
        if not self.evaluate.fresh_days:  # and one whose trials do not trade fresh days
            data["evaluate"].pop("fresh_days", None)
        if not self.space:  # and a study without a search space (the Tune path's keys)
            for key in ("space", "scheduler", "select"):
                data.pop(key, None)
        for key, default in (("reduction_factor", 3), ("grace_period", 0)):  # and a search with ASHA's defaults
            if data.get(key) == default:
                data.pop(key, None)
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_study(path: str | Path) -> StudySpec:
    """The study file, validated: unknown keys, variants or values are refused naming the line and the fix."""
    p = Path(path)
    if not p.is_file():
        raise UserError("study file not found", file=str(p), fix="give a YAML study file (docs/STUDY.md)")
    spec = load_yaml_config(p, StudySpec)
    for v in spec.variants:  # every variant's keys checked now, not in a trial an hour later
        for phase in spec.phases:
            spec.run_config(v, spec.seeds[0], 0, phase)
    return spec
