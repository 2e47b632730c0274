"""Where training's time goes: wall time per part of PPO's loop (``bench train --breakdown``).

:class:`SegmentTimer` is a callback that wraps, for the length of one ``learn``, the
methods through which every training step passes, and adds up the time spent in each:

==========================  ===================================================================
segment                     time spent in
==========================  ===================================================================
``rollout``                 collecting the rollouts (``collect_rollouts``: the rows down to
                            ``rollout loop``)
``policy forward``          the policy's rollout decisions (``rollout_forward``, else
                            ``policy.forward``)
``action distribution``     the action distribution (the LLM prior's operations in phase 3,
                            the masking, sampling, log-probabilities, entropy), in the rollout
                            and the update (inside ``policy forward`` and ``update forward``)
``obs to tensor``           the observations as a tensor (``obs_as_tensor``)
``action masks``            the legal actions of every environment: as ``LeanDummyVecEnv``
                            recorded them with the observations (``rollout_masks``), else
                            ``action_masks()`` through the VecEnv layers (``get_action_masks``)
``<VecEnv class>``          each layer's ``step``, *without* the layers it wraps
                            (``DummyVecEnv``: the environments themselves; ``AdvisorVecEnv``:
                            the advice wrapper, without the student's forward; ``VecNormalize``:
                            every ``LeanVecNormalize``)
``student forward``         phase 3 always-on: the student's batched advice, written into the
                            observations (with the copy of their features)
``callbacks``               every callback's ``on_step``, ``update_locals`` and rollout start
                            and end (the trading statistics, checkpoints, these timers)
``episode records``         SB3's episode bookkeeping (``_update_info_buffer``)
``rollout buffer``          storing the steps (``rollout_buffer.add``)
``GAE``                     the returns and advantages (``compute_returns_and_advantage``)
``rollout loop``            the rest of the rollout: the loop's own Python
``update``                  PPO's update (``train``: the rows down to ``update loop``)
``minibatches``             sampling the minibatches from the buffer (as tensors)
``update forward``          the policy on each minibatch (``evaluate_actions``, or
                            ``update_forward`` with ``ppo.fast_math``)
``backward``                the gradients (``Tensor.backward``)
``loss and gradients``      ``ppo.fast_math``'s plain tanh MLP: the minibatch's forward, loss
                            and gradients by hand (``lean_backward.loss_and_grads``: the rows
                            update forward and backward have no time then)
``gradient clipping``       ``clip_grad_norm_``
``optimizer``               Adam's ``zero_grad`` and ``step``
``update loop``             the rest of the update: losses, clipping, ``.item()`` of the
                            statistics, the loop's own Python
``logging``                 the logger's records written (JSONL, TensorBoard), once a rollout
``other``                   the rest of ``learn``
==========================  ===================================================================

Times are inclusive of what is called inside unless said otherwise; each is reported in
seconds and in microseconds per vector step (one step of every environment). Each
timed call costs about a microsecond more, in every phase alike.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import torch
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper, VecNormalize

from hybrid_trader.training.callbacks import TimingCallback

ROLLOUT = "rollout"
UPDATE = "update"
POLICY_FORWARD = "policy forward"
DISTRIBUTION = "action distribution"
OBS_TENSOR = "obs to tensor"
MASKS = "action masks"
STUDENT = "student forward"
CALLBACKS = "callbacks"
EPISODES = "episode records"
BUFFER = "rollout buffer"
GAE = "GAE"
ROLLOUT_LOOP = "rollout loop"
MINIBATCHES = "minibatches"
UPDATE_FORWARD = "update forward"
BACKWARD = "backward"
LOSS_GRADS = "loss and gradients"
CLIPPING = "gradient clipping"
OPTIMIZER = "optimizer"
UPDATE_LOOP = "update loop"
LOGGING = "logging"
ROLLOUT_PARTS = (POLICY_FORWARD, OBS_TENSOR, MASKS, CALLBACKS, EPISODES, BUFFER, GAE)
"""Disjoint parts of the rollout besides the VecEnv layers (the student is inside its wrapper's step)."""
UPDATE_PARTS = (MINIBATCHES, UPDATE_FORWARD, BACKWARD, LOSS_GRADS, CLIPPING, OPTIMIZER)
"""Disjoint parts of the update."""


class SegmentTimer(TimingCallback):
    """Adds up the wall time of each segment of training (see the module's table)."""

    def __init__(self) -> None:
        super().__init__()
        self.vector_steps = 0
        self.learn_seconds = 0.0
        self._layers: list[str] = []
        self._started = 0.0

    def _on_training_start(self) -> None:
        model: Any = self.model  # an on-policy algorithm (MaskablePPO): it has a rollout buffer
        policy = model.policy
        buffer = model.rollout_buffer
        self._wrap(model, "collect_rollouts", ROLLOUT)
        self._wrap(model, "train", UPDATE)
        if hasattr(model, "rollout_forward"):  # LeanMaskablePPO's rollout decisions (the policy's forward inside)
            self._wrap(model, "rollout_forward", POLICY_FORWARD)
        else:
            self._wrap(policy, "forward", POLICY_FORWARD)
        if type(policy)._get_action_dist_from_latent is not MaskableActorCriticPolicy._get_action_dist_from_latent:
            self._wrap(policy, "_get_action_dist_from_latent", DISTRIBUTION)  # phase 3's prior is in it
        for attr in ("proba_distribution", "apply_masking", "sample", "mode", "log_prob", "entropy"):
            self._wrap(policy.action_dist, attr, DISTRIBUTION)
        self._wrap(model, "_update_info_buffer", EPISODES)
        self._wrap(buffer, "add", BUFFER)
        self._wrap(buffer, "compute_returns_and_advantage", GAE)
        self._wrap(buffer, "_get_samples", MINIBATCHES)
        self._wrap(buffer, "swap_and_flatten", MINIBATCHES)
        self._wrap(policy, "evaluate_actions", UPDATE_FORWARD)
        if hasattr(model, "update_forward"):  # LeanMaskablePPO's fast_math update (the lean forward, no policy call)
            self._wrap(model, "update_forward", UPDATE_FORWARD)
        self._wrap(policy.optimizer, "zero_grad", OPTIMIZER)
        self._wrap(policy.optimizer, "step", OPTIMIZER)
        self._wrap(model.logger, "dump", LOGGING)
        rollouts: Any = sys.modules[type(model).collect_rollouts.__module__]  # the functions as it calls them
        self._patch(rollouts, "obs_as_tensor", OBS_TENSOR)
        # LeanMaskablePPO reads the masks recorded with the observations (rollout_masks), else asks the environments
        self._patch(rollouts, "rollout_masks" if hasattr(rollouts, "rollout_masks") else "get_action_masks", MASKS)
        self._patch(torch.Tensor, "backward", BACKWARD)
        if hasattr(rollouts, "loss_and_grads"):  # LeanMaskablePPO's fast_math update by hand
            self._patch(rollouts, "loss_and_grads", LOSS_GRADS)
        self._patch(torch.nn.utils, "clip_grad_norm_", CLIPPING)
        for attr in ("on_step", "on_rollout_start", "on_rollout_end"):
            self._patch(CallbackList, attr, CALLBACKS)
        if hasattr(rollouts, "locals_updater"):  # LeanMaskablePPO: the step's update of the callbacks' locals, timed
            updater = rollouts.locals_updater
            timed = self._timed  # resolved on the callbacks as they are (the class untouched), then timed
            rollouts.locals_updater = lambda callback: timed(updater(callback), CALLBACKS)
            self._restore.append(lambda: setattr(rollouts, "locals_updater", updater))
        else:
            self._patch(CallbackList, "update_locals", CALLBACKS)
        venv: VecEnv | None = self.training_env
        self._layers = []
        while venv is not None:
            # both phases' normalisers under one name (phase 3's normalises the features only), and
            # the in-process environments under DummyVecEnv's (LeanDummyVecEnv is one)
            name = "VecNormalize" if isinstance(venv, VecNormalize) else \
                "DummyVecEnv" if isinstance(venv, DummyVecEnv) else type(venv).__name__
            for attr in ("step_async", "step_wait"):
                self._wrap(venv, attr, name)
            if callable(getattr(venv, "advise_into", None)):
                self._wrap(venv, "advise_into", STUDENT)
            self._layers.append(name)
            venv = venv.venv if isinstance(venv, VecEnvWrapper) else None
        self._started = time.perf_counter()

    def _on_step(self) -> bool:
        self.vector_steps += 1
        return True

    def _on_training_end(self) -> None:
        self.learn_seconds += time.perf_counter() - self._started
        super()._on_training_end()

    def table(self) -> dict[str, dict[str, float]]:
        """``{segment: {"seconds", "us_per_step"}}``; VecEnv layers exclusive of the layers they wrap."""
        own = dict(self.seconds)
        for outer, inner in zip(self._layers, self._layers[1:]):
            own[outer] = self.seconds[outer] - self.seconds[inner]
        if STUDENT in own and "AdvisorVecEnv" in own:
            own["AdvisorVecEnv"] -= own[STUDENT]
        layers = self.seconds.get(self._layers[0], 0.0) if self._layers else 0.0
        own[ROLLOUT_LOOP] = own.get(ROLLOUT, 0.0) - layers - sum(own.get(k, 0.0) for k in ROLLOUT_PARTS)
        own[UPDATE_LOOP] = own.get(UPDATE, 0.0) - sum(own.get(k, 0.0) for k in UPDATE_PARTS)
        own["other"] = self.learn_seconds - own.get(ROLLOUT, 0.0) - own.get(UPDATE, 0.0)
        order = [ROLLOUT, POLICY_FORWARD, DISTRIBUTION, OBS_TENSOR, MASKS, *self._layers, STUDENT, CALLBACKS,
                 EPISODES, BUFFER, GAE, ROLLOUT_LOOP, UPDATE, MINIBATCHES, UPDATE_FORWARD, BACKWARD, LOSS_GRADS,
                 CLIPPING, OPTIMIZER, UPDATE_LOOP, LOGGING, "other"]
        steps = max(self.vector_steps, 1)
        return {name: {"seconds": round(own[name], 6), "us_per_step": round(1e6 * own[name] / steps, 1)}
                for name in dict.fromkeys([*order, *own]) if name in own}


def compare(phase2: list[dict], phase3: list[dict]) -> dict[str, dict[str, float]]:
    """Per segment: the median microseconds per vector step of both phases and phase 3's extra."""
    import numpy as np

    out: dict[str, dict[str, float]] = {}
    names = list(dict.fromkeys([*(k for t in phase3 for k in t), *(k for t in phase2 for k in t)]))
    for name in names:
        a = float(np.median([t.get(name, {}).get("us_per_step", 0.0) for t in phase2]))
        b = float(np.median([t.get(name, {}).get("us_per_step", 0.0) for t in phase3]))
        out[name] = {"phase2_us": round(a, 1), "phase3_us": round(b, 1), "extra_us": round(b - a, 1)}
    return out


NESTING = ("rollout = the rows from policy forward to rollout loop, action distribution aside (it is inside "
           "policy forward and update forward); update = the rows from minibatches to update loop")
"""How the segments nest (printed under the tables)."""


def format_comparison(rows: dict[str, dict[str, float]]) -> str:
    """The comparison as an aligned text table (microseconds per vector step)."""
    width = max(len(name) for name in rows) if rows else 10
    lines = [f"{'segment':<{width}}  phase 2 [us/step]  phase 3 [us/step]  extra [us/step]"]
    for name, row in rows.items():
        lines.append(f"{name:<{width}}  {row['phase2_us']:>17,.1f}  {row['phase3_us']:>17,.1f}  "
                     f"{row['extra_us']:>+15,.1f}")
    return "\n".join([*lines, f"({NESTING})"])


def segments_table(table: dict[str, float]) -> str:
    """One run's microseconds per vector step as an aligned text table."""
    width = max(len(name) for name in table) if table else 10
    return "\n".join([*(f"{name:<{width}}  {us:>10,.1f} us/step" for name, us in table.items()), f"({NESTING})"])
