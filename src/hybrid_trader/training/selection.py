"""Model selection on validation days: keep the best model, stop early.

Periodic validation (``train.validate_every``, :class:`~hybrid_trader.training.callbacks.ValidationCallback`)
hands each result to a :class:`BestKeeper`:

- ``train.select: best_val``: when the validation net P&L per day (:data:`METRIC`) beats
  every earlier one, the model and its normaliser are written to ``best_model.zip`` and
  ``best_vecnormalize.pkl``; at the end of training they become the run's ``model.zip``
  and ``vecnormalize.pkl`` (the last model stays in ``checkpoints/``);
- ``train.early_stop_patience: N``: training stops after N validations in a row without
  a better one.

``best.json`` records the best validation so far and the count since, so a resumed run
goes on where it stopped. Only validation days are read, never test days. In phase 3
validation runs without advice (``evaluation.runner.validation_fn``), so the selection
reads the RL policy alone.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from hybrid_trader.run import RunDir
from hybrid_trader.run.files import atomic_write_bytes, atomic_write_text
from hybrid_trader.run.models import save_model

METRIC = "val/net_pnl_per_day"
"""What the selection maximises: net P&L per validation day, in dollars after costs."""


@dataclass
class Best:
    """The best validation so far."""

    step: int
    value: float
    since: int = 0
    """Validations since the best one (early stopping counts these)."""
    saved: bool = False
    """Whether best_model.zip holds it (``select: best_val``)."""


class BestKeeper:
    """Tracks the best validation result of a run; saves its model; says when to stop."""

    def __init__(self, run: RunDir, *, select: str, patience: int) -> None:
        self.run = run
        self.select = select
        self.patience = int(patience)
        self.best: Best | None = None
        if run.best_path.exists():
            self.best = Best(**json.loads(run.best_path.read_text()))
        self.stopped_early = False

    def offer(self, step: int, row: dict, model: Any) -> bool:
        """Take one validation result; returns False when training should stop (early stopping)."""
        value = row.get(METRIC)
        if value is None or not math.isfinite(float(value)):
            return True  # no validation days in this result: nothing to compare
        value = float(value)
        if self.best is None or value > self.best.value:
            self.best = Best(step=int(step), value=value)
            if self.select == "best_val":
                vec = model.get_vec_normalize_env()
                save_model(self.run, model, self.run.best_model_path, vec, self.run.best_vecnormalize_path)
                self.best.saved = True
        else:
            self.best.since += 1
        atomic_write_text(self.run.best_path, json.dumps(asdict(self.best)))
        if self.patience and self.best.since >= self.patience:
            self.stopped_early = True
            return False
        return True

    def finish(self) -> dict:
        """After the last model is saved: with ``best_val``, the best one becomes the run's model.

        Returns what the run's status records (empty when nothing was validated).
        """
        out: dict[str, Any] = {"early_stopped": self.stopped_early} if self.patience else {}
        if self.best is None:
            return out
        out["best_val"] = {"step": self.best.step, METRIC: round(self.best.value, 2)}
        if self.select == "best_val" and self.best.saved and self.run.best_model_path.exists():
            pairs = [(self.run.best_model_path, self.run.model_path)]
            if self.run.best_vecnormalize_path.exists():
                pairs.append((self.run.best_vecnormalize_path, self.run.vecnormalize_path))
            written = {dst: src.read_bytes() for src, dst in pairs}
            for dst, data in written.items():
                atomic_write_bytes(dst, data)
            self.run.manifest.record(written)
            out["selected_step"] = self.best.step
        return out
