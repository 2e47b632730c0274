"""Where training's time goes: wall time per part of PPO's loop (``bench train --breakdown``).

:class:`SegmentTimer` is a callback that wraps, for the length of one ``learn``, the
methods through which every training step passes, and adds up the time spent in each:

==========================  ===================================================================
segment                     time spent in
==========================  ===================================================================
``rollout``                 collecting the rollouts (``collect_rollouts``, all of the below but
                            ``update``)
``update``                  PPO's update (``train``: epochs of minibatch gradient steps)
``policy forward``          the policy's rollout decisions (``policy.forward``)
``action distribution``     building the action distribution from the latent (the LLM prior's
                            operations in phase 3), in the rollout and the update
``rollout buffer``          storing the steps (``rollout_buffer.add``)
``student forward``         phase 3 always-on: the student's batched advice, written into the
                            observations (with the copy of their features)
``<VecEnv class>``          each layer of the vectorised environment, *without* the layers
                            it wraps (``DummyVecEnv``: the environments themselves;
                            ``AdvisorVecEnv``: the advice wrapper, without the student's forward;
                            ``VecNormalize``: every ``LeanVecNormalize``)
==========================  ===================================================================

Times are inclusive of what is called inside unless said otherwise; each is reported in
seconds and in microseconds per vector step (one step of every environment). Each
wrapper costs about a microsecond per call, in every phase alike.
"""

from __future__ import annotations

import time
from typing import Any

from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper, VecNormalize

from hybrid_trader.training.callbacks import TimingCallback

ROLLOUT = "rollout"
UPDATE = "update"
POLICY_FORWARD = "policy forward"
DISTRIBUTION = "action distribution"
BUFFER = "rollout buffer"
STUDENT = "student forward"


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
        self._wrap(model, "collect_rollouts", ROLLOUT)
        self._wrap(model, "train", UPDATE)
        self._wrap(model.policy, "forward", POLICY_FORWARD)
        self._wrap(model.policy, "_get_action_dist_from_latent", DISTRIBUTION)
        self._wrap(model.rollout_buffer, "add", BUFFER)
        venv: VecEnv | None = self.training_env
        self._layers = []
        while venv is not None:
            # both phases' normalisers under one name (phase 3's normalises the features only), and
            # the in-process environments under DummyVecEnv's (LeanDummyVecEnv is one)
            name = "VecNormalize" if isinstance(venv, VecNormalize) else \
                "DummyVecEnv" if isinstance(venv, DummyVecEnv) else type(venv).__name__
            for attr in ("step_async", "step_wait", "env_method"):  # env_method: action_masks() every step
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
        own["other"] = self.learn_seconds - own.get(ROLLOUT, 0.0) - own.get(UPDATE, 0.0)
        steps = max(self.vector_steps, 1)
        return {name: {"seconds": round(s, 4), "us_per_step": round(1e6 * s / steps, 1)} for name, s in own.items()}


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


NESTING = ("rollout holds the policy forward, the rollout buffer and the VecEnv layers; the policy forward "
           "holds the rollout's action distribution")
"""How the segments nest (printed under the tables)."""


def format_comparison(rows: dict[str, dict[str, float]]) -> str:
    """The comparison as an aligned text table (microseconds per vector step)."""
    width = max(len(name) for name in rows) if rows else 10
    lines = [f"{'segment':<{width}}  phase 2 [us/step]  phase 3 [us/step]  extra [us/step]"]
    for name, row in rows.items():
        lines.append(f"{name:<{width}}  {row['phase2_us']:>17,.1f}  {row['phase3_us']:>17,.1f}  "
                     f"{row['extra_us']:>+15,.1f}")
    return "\n".join([*lines, f"({NESTING})"])


def format_table(table: dict[str, float]) -> str:
    """One run's microseconds per vector step as an aligned text table."""
    width = max(len(name) for name in table) if table else 10
    return "\n".join([*(f"{name:<{width}}  {us:>10,.1f} us/step" for name, us in table.items()), f"({NESTING})"])
