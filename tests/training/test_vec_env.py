"""The lean in-process environments (``training.vec_env``): DummyVecEnv + VecMonitor's numbers, the legal actions
recorded with the observations."""

from __future__ import annotations

from typing import Any

import numpy as np
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnvWrapper, VecMonitor

from hybrid_trader.training.normalizer import LeanVecNormalize
from hybrid_trader.training.vec_env import LeanDummyVecEnv, recorded_masks, rollout_masks
from tests.training.conftest import env_fns, legal_actions, student_cfg


def test_lean_environments_step_exactly_as_monitored_dummy_vec_env_when_episodes_end(student_market):
    config = student_cfg(2)
    lean = LeanDummyVecEnv(env_fns(student_market, config))
    plain = VecMonitor(DummyVecEnv(env_fns(student_market, config)))
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(lean.reset(), plain.reset())
    ends = 0
    for _ in range(1500):
        actions = legal_actions(plain, rng)
        a, b = lean.step(actions), plain.step(actions)
        for x, y in zip(a[:3], b[:3], strict=True):
            np.testing.assert_array_equal(x, y)
        assert a[0].dtype == b[0].dtype == np.float32
        for info_a, info_b in zip(a[3], b[3], strict=True):
            assert info_a.keys() - {"terminal_mask"} == info_b.keys()  # the terminal state's legal actions: added
            if "terminal_observation" in info_b:
                np.testing.assert_array_equal(info_a["terminal_observation"], info_b["terminal_observation"])
                assert info_a["episode"]["r"] == info_b["episode"]["r"]
                assert info_a["episode"]["l"] == info_b["episode"]["l"]
        ends += int(b[2].sum())
    assert ends >= 2  # the auto-reset path ran


def test_lean_environments_hand_out_new_arrays_when_stepped_again(student_market):
    """The learner keeps the last observation while stepping: a reused buffer would change it under it."""
    venv = LeanDummyVecEnv(env_fns(student_market, student_cfg(2)))
    venv.reset()
    rng = np.random.default_rng(1)
    first = venv.step(legal_actions(venv, rng))[0]
    kept = first.copy()
    second = venv.step(legal_actions(venv, rng))[0]
    assert second is not first
    np.testing.assert_array_equal(first, kept)


def test_lean_environments_answer_env_method_as_dummy_vec_env_when_asked(student_market):
    config = student_cfg(2)
    lean, plain = LeanDummyVecEnv(env_fns(student_market, config)), DummyVecEnv(env_fns(student_market, config))
    lean.reset(), plain.reset()
    for args, kwargs in [((), {}), ((), {"indices": [1]})]:
        for a, b in zip(lean.env_method("action_masks", *args, **kwargs),
                        plain.env_method("action_masks", *args, **kwargs), strict=True):
            np.testing.assert_array_equal(a, b)
    assert lean.env_method("reset", seed=9)[0][0].tobytes() == plain.env_method("reset", seed=9)[0][0].tobytes()


def test_masks_recorded_with_the_observations_are_what_every_environment_says_after_each_step(student_market):
    """Through episode ends (the reset's masks) and the manage actions, as ``get_action_masks`` asks for them."""
    venv = LeanDummyVecEnv(env_fns(student_market, student_cfg(2), n=3))
    venv.reset()
    rng = np.random.default_rng(4)
    ends, managed, before = 0, 0, None
    for _ in range(1500):
        recorded = venv.masks
        assert recorded is not None and recorded is not before  # a new array each step: the learner keeps them
        before = recorded
        asked = np.stack([env.action_masks() for env in venv.envs])
        np.testing.assert_array_equal(recorded, asked)
        assert recorded.dtype == np.bool_ and recorded.shape == (3, venv.action_space.n)
        managed += int(recorded[:, 3:].any())
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in recorded])
        ends += int(venv.step(actions)[2].sum())
    assert ends >= 2 and managed > 0  # the auto-reset path ran, and positions were open


def test_recorded_masks_are_dropped_when_something_else_is_called_on_the_environments(student_market):
    venv = LeanDummyVecEnv(env_fns(student_market, student_cfg(2)))
    venv.reset()
    assert venv.masks is not None
    venv.env_method("action_masks")  # reading them keeps them
    assert venv.masks is not None
    venv.env_method("equity")
    assert venv.masks is None
    venv.step(np.zeros(2, dtype=np.int64))
    assert venv.masks is not None
    venv.set_attr("reward_scale", 1.0)
    assert venv.masks is None
    np.testing.assert_array_equal(rollout_masks(venv, venv), get_action_masks(venv))  # asked again


class _OwnMasks(VecEnvWrapper):
    """A wrapper that answers ``env_method`` itself: what it says of the masks may differ from the layer below."""

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        return self.venv.step_wait()

    def env_method(self, method_name: str, *args: Any, indices=None, **kwargs: Any) -> list[Any]:
        return [np.ones(6, dtype=bool)] * self.num_envs


def test_rollout_reads_the_recorded_masks_only_through_wrappers_that_pass_env_method_through(student_market):
    config = student_cfg(2)
    base = LeanDummyVecEnv(env_fns(student_market, config))
    stack = LeanVecNormalize(base)
    assert recorded_masks(stack) is base and recorded_masks(base) is base
    stack.reset()
    assert rollout_masks(stack, recorded_masks(stack)) is base.masks
    np.testing.assert_array_equal(rollout_masks(stack, base), get_action_masks(stack))
    own = _OwnMasks(LeanDummyVecEnv(env_fns(student_market, config)))
    assert recorded_masks(own) is None
    own.reset()
    assert rollout_masks(own, recorded_masks(own)).all()  # the wrapper's answer, not the layer's record
    assert recorded_masks(VecMonitor(DummyVecEnv(env_fns(student_market, config)))) is None  # SB3's own: asked
