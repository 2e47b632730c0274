"""Saving and loading a run's model and observation normaliser, checked against the manifest.

Kept apart from :mod:`.rundir` because it imports Stable-Baselines3 (and torch, about
1.5 s): ``report`` and ``diagnose`` read a run directory without paying for it.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

from sb3_contrib import MaskablePPO
from stable_baselines3.common.vec_env import VecNormalize

from hybrid_trader.errors import UserError
from hybrid_trader.run.files import atomic_write_bytes
from hybrid_trader.run.model_files import damaged_fix, final_model, restart_fix
from hybrid_trader.run.rundir import Checkpoint, RunDir

__all__ = ["damaged_fix", "final_model", "load_model", "load_normalizer", "model_bytes", "newest_valid_checkpoint",
           "restart_fix", "save_model"]


def model_bytes(model: Any) -> bytes:
    buffer = io.BytesIO()
    model.save(buffer)
    return buffer.getvalue()


def save_model(run: RunDir, model: Any, path: Path, vec: VecNormalize | None = None,
               vec_path: Path | None = None) -> None:
    """Write the model (and its normaliser) atomically and record both in the manifest."""
    written = {path: model_bytes(model)}
    if vec is not None and vec_path is not None:
        written[vec_path] = pickle.dumps(vec)
    for target, data in written.items():
        atomic_write_bytes(target, data)
    run.manifest.record(written)


def load_model(run: RunDir, path: Path, algo: Any = MaskablePPO, **kwargs: Any) -> Any:
    """``algo.load(path)`` (``MaskablePPO`` or a subclass) after checking the file; a damaged file is a UserError
    naming it."""
    run.verified(path, fix=damaged_fix(run, path))
    try:
        return algo.load(path, **kwargs)
    except (zipfile.BadZipFile, EOFError, KeyError, ValueError, RuntimeError, pickle.UnpicklingError, OSError) as err:
        raise UserError(f"model file cannot be read ({type(err).__name__}: {err})", file=str(path),
                        fix=damaged_fix(run, path)) from None


def load_normalizer(run: RunDir, path: Path) -> VecNormalize:
    """The pickled VecNormalize at ``path``, checked; a UserError naming it when damaged."""
    run.verified(path, fix=damaged_fix(run, path))
    try:
        with open(path, "rb") as f:
            vec = pickle.load(f)
    except (EOFError, pickle.UnpicklingError, AttributeError, ValueError, OSError) as err:
        raise UserError(f"normalisation file cannot be read ({type(err).__name__}: {err})", file=str(path),
                        fix=damaged_fix(run, path)) from None
    if not isinstance(vec, VecNormalize):
        raise UserError("normalisation file does not hold a VecNormalize", file=str(path), fix=damaged_fix(run, path))
    return vec


def newest_valid_checkpoint(run: RunDir, normalize: bool) -> tuple[Checkpoint, list[str]]:
    """The newest checkpoint whose files are whole (and loadable), with notes on the ones skipped."""
    skipped: list[str] = []
    for ckpt in reversed(run.checkpoints()):
        problem = run.damage(ckpt.model)
        if problem is None and normalize:
            problem = run.damage(ckpt.vecnormalize)
            if problem is None and not ckpt.vecnormalize.exists():
                problem = "missing"
            problem = problem and f"{ckpt.vecnormalize.name} {problem}"
        if problem is None:
            try:
                with zipfile.ZipFile(ckpt.model) as z:
                    bad = z.testzip()
                problem = f"corrupt member {bad}" if bad else None
            except (zipfile.BadZipFile, OSError) as err:
                problem = f"not a readable zip ({err})"
        if problem is None:
            return ckpt, skipped
        skipped.append(f"{ckpt.model.name}: {problem}")
    raise UserError(
        f"{run.path} has no valid checkpoint to resume from" + (f" ({'; '.join(skipped)})" if skipped else
                                                                 ": training stopped before its first checkpoint"),
        fix=restart_fix(run))

