"""Batch calibration: divide out the model's mean answer over many states (its constant lean).

A small base model answers with a constant lean set by its few-shot order (Gemma 3
270M: BUY on every flat state). The lean is an offset shared by all states of a kind, so
dividing each answer by the mean answer over a sample of states of that kind (market and
position state: flat, long, short), then renormalising over the legal actions, leaves what
varies with the state (batch calibration, Zhou et al. 2023). The means are fitted on
training days only (``advise calibrate``) and stored in the run with the advice identity
they were fitted under; :func:`~hybrid_trader.llm.advice.advice_from_mass` divides by them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hybrid_trader.errors import UserError

POSITION_NAMES: dict[int, str] = {0: "flat", 1: "long", -1: "short"}
"""Position state (sign of the position) -> the name in a calibration key."""
MIN_STATES = 20
"""Fewest states of one kind (market, position) a mean is fitted on."""
EPS = 1e-12


def calibration_key(market: str, position: int) -> str:
    """``"NQ/flat"``: the kind of state one mean belongs to."""
    return f"{market}/{POSITION_NAMES[int(np.sign(position))]}"


def legal_distributions(mass: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Each row's masses renormalised over its legal actions (rows with no legal mass: uniform over legal)."""
    m = np.where(legal, np.clip(np.nan_to_num(np.asarray(mass, dtype=np.float64)), 0.0, None), 0.0)
    total = m.sum(axis=1, keepdims=True)
    uniform = legal / np.maximum(legal.sum(axis=1, keepdims=True), 1)
    return np.where(total > 0, m / np.maximum(total, EPS), uniform)


@dataclass
class BatchCalibration:
    """Mean answer distribution per kind of state, with the advice identity it was fitted under."""

    means: dict[str, list[float]]
    """Calibration key (:func:`calibration_key`) -> mean distribution over the six actions."""
    counts: dict[str, int]
    """Calibration key -> states the mean was fitted on."""
    identity: dict[str, str] = field(default_factory=dict)
    """The advice identity (``run.advice_identity.advice_identity``) of the model and prompt."""
    days: list[int] = field(default_factory=list)
    """Sessions (training days) the states came from."""

    def divisor(self, market: str, position: int) -> np.ndarray | None:
        """The mean answer to divide by for this kind of state (None: not fitted for it)."""
        mean = self.means.get(calibration_key(market, position))
        return None if mean is None else np.asarray(mean, dtype=np.float64)

    def apply(self, probs: np.ndarray, legal: np.ndarray, market: str, position: int) -> np.ndarray:
        """``probs`` divided by the mean for its kind, renormalised over ``legal`` (unchanged when not fitted)."""
        div = self.divisor(market, position)
        legal = np.asarray(legal, dtype=bool)
        p = np.where(legal, np.asarray(probs, dtype=np.float64), 0.0)
        if div is not None:
            p = p / np.where(legal & (div > 0), div, 1.0)
        total = p.sum()
        return p / total if total > 0 else legal / max(legal.sum(), 1)

    def to_dict(self) -> dict:
        return {"method": "batch", "means": self.means, "counts": self.counts, "identity": self.identity,
                "days": self.days}

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)

    @staticmethod
    def load(path: Path) -> BatchCalibration:
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
            return BatchCalibration(means={k: [float(x) for x in v] for k, v in d["means"].items()},
                                    counts={k: int(v) for k, v in d["counts"].items()},
                                    identity=dict(d.get("identity", {})), days=list(d.get("days", [])))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise UserError(f"the batch calibration cannot be read: {err}", file=str(path),
                            fix="fit it again: hybrid-trader advise calibrate RUN_DIR") from None


def fit_batch_calibration(mass: np.ndarray, legal: np.ndarray, markets: Sequence[str], positions: Sequence[int], *,
                          identity: dict[str, str] | None = None, days: Sequence[int] = (),
                          min_states: int = MIN_STATES) -> BatchCalibration:
    """The mean legal-renormalised answer per (market, position state) of the scored states.

    ``mass`` (n, 6): the model's raw name probabilities; ``legal`` (n, 6). A kind with
    fewer than ``min_states`` states is a UserError naming it and the fix.
    """
    mass = np.asarray(mass, dtype=np.float64)
    legal = np.asarray(legal, dtype=bool)
    if mass.shape != legal.shape or mass.ndim != 2 or mass.shape[1] != 6:
        raise ValueError(f"mass {mass.shape} and legal {legal.shape} must both be (n, 6)")
    keys = np.array([calibration_key(m, p) for m, p in zip(markets, positions)], dtype=object)
    if len(keys) != len(mass):
        raise ValueError(f"{len(keys)} market/position pairs for {len(mass)} answers")
    q = legal_distributions(mass, legal)
    means: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for key in sorted(set(keys.tolist())):
        rows = keys == key
        n = int(rows.sum())
        if n < min_states:
            raise UserError(f"too few states to fit the batch calibration of {key}: {n} (at least {min_states})",
                            value=n, fix="give the run more training days (split.train, data), raise --max-states, "
                                         "or use content-free calibration instead (llm.scoring.calibrate: true)")
        means[key] = [round(float(x), 8) for x in q[rows].mean(axis=0)]
        counts[key] = n
    if not means:
        raise UserError("no state to fit the batch calibration on", value=0,
                        fix="give the run training days inside the entry window (env.trade_start, env.last_entry)")
    return BatchCalibration(means=means, counts=counts, identity=dict(identity or {}),
                            days=sorted({int(d) for d in days}))
