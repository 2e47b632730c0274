"""A study's search space: config keys and the distributions a search draws them from.

``space: {ppo.learning_rate: {loguniform: [1e-5, 1e-3]}, env.target_atr: {choice: [2, 3, 4]}}``:

| distribution | values | drawn |
|---|---|---|
| ``uniform: [lo, hi]`` | numbers, ``lo < hi`` | uniformly in ``[lo, hi]`` |
| ``loguniform: [lo, hi]`` | numbers, ``0 < lo < hi`` | uniformly in ``log``, in ``[lo, hi]`` |
| ``choice: [a, b, ...]`` | one or more values | one of them, each as likely |
| ``randint: [lo, hi]`` | integers, ``lo < hi`` | an integer in ``[lo, hi)`` (``hi`` excluded, as numpy and Tune) |

Every key is checked when the study is loaded as ``--set`` checks it (an unknown key is refused
with a "did you mean"), with each choice and both bounds. A study with more than one variant
searches the variant too (a ``choice`` of their names). ``data.*`` keys must be a ``choice``:
the driver loads each data configuration's bars before the trials start.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid_trader.config import check, merge_overrides
from hybrid_trader.run.config import RunConfig

if TYPE_CHECKING:
    from hybrid_trader.study.spec import StudySpec

DISTRIBUTIONS = ("uniform", "loguniform", "choice", "randint")
VARIANT = "variant"
"""The dimension of the study's variants (a choice of their names) when it has more than one."""
EXAMPLE = "e.g. ppo.learning_rate: {loguniform: [1.0e-5, 1.0e-3]} or env.target_atr: {choice: [2, 3, 4]}"


@dataclass(frozen=True)
class Dimension:
    """One key of the space and its distribution."""

    key: str
    kind: str
    values: tuple[Any, ...]
    """``(lo, hi)`` of uniform, loguniform and randint; the options of a choice."""

    def extremes(self) -> list[Any]:
        """The values the key's check tries: each option, or both bounds (randint's largest, ``hi - 1``)."""
        if self.kind == "choice":
            return list(self.values)
        lo, hi = self.values
        return [lo, hi - 1] if self.kind == "randint" else [lo, hi]


def parse_dimension(key: str, given: Any) -> Dimension:
    """One entry of ``space``, its form checked (the key itself is checked by :func:`check_search`)."""
    where = f"space.{key}"
    check(isinstance(given, Mapping) and len(given) == 1, where, f"{given!r} is not one distribution",
          value=given, fix=f"give one of {', '.join(DISTRIBUTIONS)} with its values: {EXAMPLE}")
    kind, values = next(iter(given.items()))
    check(kind in DISTRIBUTIONS, where, f"{kind!r} is not a distribution", value=kind,
          fix=f"use one of: {', '.join(DISTRIBUTIONS)} ({EXAMPLE})")
    check(isinstance(values, list) and len(values) >= 1, where, f"{kind}: {values!r} is not a list", value=values,
          fix=f"{kind}: [lo, hi]" if kind != "choice" else "choice: [a, b, ...]")
    if kind == "choice":
        return Dimension(key, kind, tuple(values))
    check(len(values) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values), where,
          f"{kind}: {values!r} must be two numbers [lo, hi]", value=values, fix=f"e.g. {kind}: [1, 10]")
    lo, hi = values
    check(lo < hi, where, f"{kind}: [{lo}, {hi}]: the low bound must be below the high one", value=values,
          fix=f"{kind}: [{min(lo, hi)}, {max(lo, hi)}]" if lo != hi else f"use choice: [{lo}] for one value")
    if kind == "loguniform":
        check(lo > 0, where, f"loguniform: [{lo}, {hi}]: the low bound must be above 0 (a logarithm)", value=values,
              fix="e.g. loguniform: [1.0e-5, 1.0e-3], or uniform for a range that holds 0")
    if kind == "randint":
        check(all(float(v).is_integer() for v in values), where, f"randint: {values!r} must be integers",
              value=values, fix="e.g. randint: [1, 5] (1 to 4), or uniform for real numbers")
        lo, hi = int(lo), int(hi)
    return Dimension(key, kind, (lo, hi))


def dimensions(spec: StudySpec) -> list[Dimension]:
    """The study's space (its keys in order), with the variant as a choice when there are several."""
    dims = [parse_dimension(str(k), v) for k, v in spec.space.items()]
    if len(spec.variants) > 1:
        dims.append(Dimension(VARIANT, "choice", tuple(v.name for v in spec.variants)))
    return dims


def check_search(spec: StudySpec) -> None:
    """A search's rules, when the study is loaded: a space where the search needs one, its entries' form, each key
    and value as ``--set`` checks them, one seed, choices alone for ``grid`` and for ``data.*`` keys, and periodic
    validation for ``asha``."""
    check(bool(spec.space), "space", f"search: {spec.search} and scheduler: {spec.scheduler} need a search space",
          fix=f"declare space: {{...}} ({EXAMPLE}), or use search: grid with scheduler: none")
    check(VARIANT not in spec.space, f"space.{VARIANT}", "the variant is not a key of the space",
          fix="list the variants under variants: (a study with several searches them as a choice)")
    check(not spec.hypotheses, "hypotheses", "a search judges no hypotheses: its configurations are not known before "
          "it runs", fix="drop hypotheses: (the summary reports the selections against momentum, their DSR and PBO), "
          "or compare fixed variants in a study without a space")
    check(len(spec.seeds) == 1, "seeds", f"{spec.seeds}: a search trains each configuration once, with one seed",
          value=spec.seeds, fix="seeds: [0] (put ppo.seed in the space to search seeds as well)")
    dims = dimensions(spec)
    base = merge_overrides(RunConfig(), spec.base, source="study base")
    for d in dims:
        if d.key == VARIANT:
            continue
        check(spec.search != "grid" or d.kind == "choice", f"space.{d.key}",
              f"search: grid takes choices only, not {d.kind}", value=d.kind,
              fix=f"{d.key}: {{choice: [...]}}, or search: random / optuna with samples: N")
        check(not d.key.startswith("data.") or d.kind == "choice", f"space.{d.key}",
              f"a data key takes a choice, not {d.kind} (each data configuration's bars are loaded before the trials)",
              value=d.kind, fix=f"{d.key}: {{choice: [...]}}")
        for value in d.extremes():  # an unknown key (with "did you mean"), a value its section refuses
            merge_overrides(base, {d.key: value}, source=f"study space ({d.key}: {value!r})")
    every = base.train.validate_every
    if spec.scheduler == "asha":
        check(every > 0, "scheduler", "asha stops trials by their periodic validation, and "
              "train.validate_every is 0", fix="set base: {train.validate_every: N} (a few validations a trial)")
        check(spec.reduction_factor >= 2, "reduction_factor", f"{spec.reduction_factor}: ASHA keeps 1/reduction_factor "
              "of the trials at each rung", value=spec.reduction_factor, fix="2 or more (3 by default)")
        check(spec.grace_period >= 0 and spec.grace_period % every == 0, "grace_period",
              f"{spec.grace_period}: the first rung is judged at a validation, every {every:,} steps",
              value=spec.grace_period, fix=f"0 (one validation) or a multiple of train.validate_every ({every})")
    else:
        for key, default in (("reduction_factor", 3), ("grace_period", 0)):
            check(getattr(spec, key) == default, key, f"{key} sets ASHA's rungs, and the scheduler is "
                  f"{spec.scheduler}", value=getattr(spec, key), fix=f"scheduler: asha, or drop {key}")


def points(spec: StudySpec, fold: int) -> list[dict[str, Any]]:
    """The configurations of a ``grid`` (every combination of the choices) or ``random`` search (``samples`` draws,
    seeded by ``sample_seed`` and the fold), in order; the i-th is sample i of the fold."""
    dims = dimensions(spec)
    if spec.search == "grid":
        return [dict(zip([d.key for d in dims], combo)) for combo in itertools.product(*[d.values for d in dims])]
    rng = np.random.default_rng([spec.sample_seed, fold])
    return [{d.key: draw(d, rng) for d in dims} for _ in range(spec.samples)]


def draw(d: Dimension, rng: np.random.Generator) -> Any:
    """One value of a dimension."""
    if d.kind == "choice":
        return d.values[int(rng.integers(len(d.values)))]
    lo, hi = d.values
    if d.kind == "randint":
        return int(rng.integers(lo, hi))
    if d.kind == "loguniform":
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    return float(rng.uniform(lo, hi))


def tune_space(spec: StudySpec) -> dict[str, Any]:
    """The space as Ray Tune's distributions (Optuna's search reads them); a choice as the index of its option
    (Optuna's categories are plain scalars, an option may be a list: ``ppo.net_arch``), :func:`decode` undoes it."""
    from ray import tune

    make = {"uniform": tune.uniform, "loguniform": tune.loguniform, "randint": tune.randint}
    return {d.key: tune.choice(list(range(len(d.values)))) if d.kind == "choice" else make[d.kind](*d.values)
            for d in dimensions(spec)}


def decode(spec: StudySpec, config: Mapping[str, Any]) -> dict[str, Any]:
    """A point of :func:`tune_space` (a choice by its index) as the space's values."""
    return {d.key: d.values[int(config[d.key])] if d.kind == "choice" else config[d.key] for d in dimensions(spec)}


def encode(spec: StudySpec, point: Mapping[str, Any]) -> dict[str, Any]:
    """A point of the space as :func:`tune_space` names it (the reverse of :func:`decode`)."""
    return {d.key: list(d.values).index(point[d.key]) if d.kind == "choice" else point[d.key]
            for d in dimensions(spec)}


def trial_keys(spec: StudySpec, point: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A point's variant (the first when the space has none) and the config keys it sets (numpy scalars made
    plain)."""
    variant = str(point.get(VARIANT, spec.variants[0].name))
    keys = {k: v.item() if isinstance(v, np.generic) else v for k, v in point.items() if k != VARIANT}
    return variant, keys
