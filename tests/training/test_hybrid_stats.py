"""HybridStatsCallback: phase 3's statistics read the rollout's observations from the rollout buffer."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch as th

from hybrid_trader.training.hybrid_stats import HybridStatsCallback


def _callback(observations: np.ndarray, pos: int, steps: int) -> HybridStatsCallback:
    cb = HybridStatsCallback(SimpleNamespace(submitted=0), SimpleNamespace(batching=SimpleNamespace(max_age_steps=5)))
    cb.model = SimpleNamespace(rollout_buffer=SimpleNamespace(observations=observations, pos=pos))  # type: ignore[assignment]
    cb._rl_logits = [th.zeros(observations.shape[1], 6)] * steps
    return cb


def test_rollout_obs_is_the_buffer_in_step_order_when_it_holds_every_recorded_step():
    observations = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)  # (steps, envs, values)
    obs = _callback(observations, pos=2, steps=2)._rollout_obs()
    assert obs is not None
    np.testing.assert_array_equal(obs, np.concatenate([observations[0], observations[1]]))


def test_rollout_obs_is_none_when_the_buffer_holds_other_steps_than_recorded():
    assert _callback(np.zeros((2, 3, 4), np.float32), pos=1, steps=2)._rollout_obs() is None
