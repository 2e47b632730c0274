"""Start a phase from the previous one's network.

* Phase 1 -> 2: every layer is copied; the action head keeps the rows of HOLD, BUY
  and SELL, and the three new actions start *neutral*: zero weights and the mean of
  the three learned biases, so that no input makes the policy prefer or avoid them.
* Phase 2 -> 3: the first layer of the policy and value networks is widened with zero
  weights for the new inputs (the 33 LLM features, and the advice unless
  ``fusion.advice_input`` is false), so at step 0 the phase 3 policy computes exactly the
  phase 2 distribution and value.

Observation normalisation statistics are carried over the same way (new inputs start
at mean 0, variance 1). Both carry what the earlier run trained on, so that run must have
trained on days before this run's validation and test days (:func:`check_trained_before`).
"""

from __future__ import annotations

import json

import numpy as np
import torch
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecNormalize

from hybrid_trader.errors import UserError
from hybrid_trader.run.rundir import RunDir


def check_trained_before(init: RunDir, first_day: str | None) -> None:
    """Refuse an ``--init`` run whose training days (its ``split.json``) reach ``first_day``, this run's first
    validation or test day (None: it has none): its weights and normalisation would bring those days, or later
    ones, into this run's evaluation. A run recorded without dates is not judged."""
    try:
        last = json.loads(init.split_path.read_text(encoding="utf-8"))["dates"]["train"][1]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return
    if first_day is not None and str(last) >= first_day:
        raise UserError(f"--init {init.path} trained on days up to {last}, and this run validates or tests from "
                        f"{first_day}: its network and normalisation would carry those days into this run's "
                        "evaluation (look-ahead)", file=str(init.split_path),
                        fix=f"initialise from a run trained before {first_day} (the earlier phase of the same fold "
                            f"or split), or give this run a split whose validation starts after {last}")


def _first_linear(seq: torch.nn.Module) -> torch.nn.Linear:
    for m in seq.modules():
        if isinstance(m, torch.nn.Linear):
            return m
    raise ValueError("no Linear layer")


@torch.no_grad()
def transfer_weights(src_policy: torch.nn.Module, dst_policy: torch.nn.Module) -> list[str]:
    """Copy ``src_policy`` into ``dst_policy`` (wider input and/or more actions). Returns what was adapted."""
    src = src_policy.state_dict()
    dst = dst_policy.state_dict()
    notes: list[str] = []
    first_keys = set()
    for net in ("policy_net", "value_net"):
        lin = _first_linear(getattr(dst_policy.mlp_extractor, net))
        for name, p in dst_policy.named_parameters():
            if p is lin.weight:
                first_keys.add(name)
    for key, target in dst.items():
        if key.startswith("gate.") and key not in src:
            continue  # the learned fusion's gate is new in phase 3: it keeps its constant-prior start
        if key not in src:
            raise UserError(f"cannot initialise from the earlier run: its network has no '{key}'",
                            fix="use --init with a run of the previous phase trained by this version")
        source = src[key]
        if source.shape == target.shape:
            target.copy_(source)
        elif (key.startswith("action_net.") and source.shape[0] < target.shape[0]
              and source.shape[1:] == target.shape[1:]):
            n_old = source.shape[0]
            target[:n_old].copy_(source)
            if key.endswith("weight"):
                target[n_old:].zero_()
            else:
                target[n_old:].fill_(float(source.mean()))
            notes.append(f"{key}: {n_old} -> {target.shape[0]} actions (new ones neutral)")
        elif key in first_keys and source.shape[0] == target.shape[0] and source.shape[1] < target.shape[1]:
            n_old = source.shape[1]
            target[:, :n_old].copy_(source)
            target[:, n_old:].zero_()
            notes.append(f"{key}: {n_old} -> {target.shape[1]} inputs (new ones zero)")
        elif key in first_keys and source.shape[0] == target.shape[0]:
            raise UserError(
                f"cannot initialise from the earlier run: its network reads {source.shape[1]} inputs, this run's "
                f"{target.shape[1]} (fewer inputs: a phase 3 run that reads the advice block cannot start one that "
                "does not)", fix="use the same fusion.advice_input as the run you initialise from")
        else:
            raise UserError(
                f"cannot initialise from the earlier run: '{key}' has shape {tuple(source.shape)}, "
                f"this run needs {tuple(target.shape)}",
                fix="use the same ppo.net_arch as the run you initialise from",
            )
    dst_policy.load_state_dict(dst)
    return notes


def transfer_normalization(src: VecNormalize | None, dst: VecNormalize | None) -> None:
    """Carry observation statistics over to a (possibly wider) VecNormalize."""
    if src is None or dst is None:
        return
    src_rms, dst_rms = src.obs_rms, dst.obs_rms
    if not (isinstance(src_rms, RunningMeanStd) and isinstance(dst_rms, RunningMeanStd)):
        raise TypeError("transfer_normalization needs Box observations (one RunningMeanStd), not a Dict space")
    n = src_rms.mean.shape[0]
    dst_rms.mean[:n] = src_rms.mean
    dst_rms.var[:n] = src_rms.var
    dst_rms.mean[n:] = 0.0
    dst_rms.var[n:] = 1.0
    dst_rms.count = src_rms.count
    dst.clip_obs = src.clip_obs
    dst.epsilon = src.epsilon
    assert np.isfinite(dst_rms.var).all()
