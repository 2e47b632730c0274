"""Which of a run's files is its model and normaliser, and the fixes for a damaged one.

Kept apart from :mod:`.models` (which imports Stable-Baselines3 and torch): the executor finds and
checks a run's model without loading it when its numpy policy is cached (``live.policy_cache``).
"""

from __future__ import annotations

from pathlib import Path

from hybrid_trader.errors import UserError
from hybrid_trader.run.rundir import RunDir


def damaged_fix(run: RunDir, path: Path) -> str:
    if path.parent == run.checkpoints_dir:
        return (f"delete {path} (and its _vecnormalize.pkl): --resume then starts from the newest valid checkpoint")
    return (f"restore {path} from a backup, or train again with `hybrid-trader train --resume --out {run.path}` "
            "(it continues from the newest valid checkpoint and writes the file anew)")


def final_model(run: RunDir, normalize: bool) -> tuple[Path, Path | None]:
    """The model to evaluate: model.zip, else the newest checkpoint; with its normaliser.

    A damaged file is an error (never a silent switch to another model); with
    ``normalize`` (the config normalises observations) a missing normaliser is an error
    too, never a silent change of results.
    """
    if run.model_path.exists() or run.manifest.expected(run.model_path) is not None:
        model, vec = run.model_path, run.vecnormalize_path  # a recorded model.zip that is gone is an error below
    else:
        ckpts = run.checkpoints()
        if not ckpts:
            raise UserError(f"{run.path} has no {run.model_path.name} and no checkpoint",
                            fix=restart_fix(run))
        model, vec = ckpts[-1].model, ckpts[-1].vecnormalize
    run.verified(model, fix=damaged_fix(run, model))
    if not normalize:
        return model, None
    if not vec.exists():
        raise UserError(
            "normalisation file missing: this run normalises observations (ppo.normalize_observations), and "
            "evaluating without its statistics would give different, wrong results", file=str(vec),
            fix=f"restore {vec} (it was written with the model); or train again with "
            f"`hybrid-trader train --resume --out {run.path}`")
    run.verified(vec, fix=damaged_fix(run, vec))
    return model, vec


def restart_fix(run: RunDir) -> str:
    """The exact commands that start a run again from its saved configuration."""
    try:
        status = run.read_status()
    except UserError:
        status = {}
    init = f" --init {status['init']}" if status.get("init") else ""
    old = f"{run.path}.failed"
    return (f"start it again from its saved configuration: mv {run.path} {old} && "
            f"hybrid-trader train --config {old}/config.yaml --out {run.path}{init}")
