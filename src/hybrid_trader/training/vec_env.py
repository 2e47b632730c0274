"""``LeanDummyVecEnv``: SB3's ``DummyVecEnv`` and ``VecMonitor`` in one layer, without the deep copies.

``DummyVecEnv.step_wait`` deep-copies its observation buffer and every ``info`` dict on
every step (so that an environment that reuses its dicts cannot change what the
learner holds). ``TradingEnv`` builds a new ``info`` dict and a new observation array on
every step, so here each step's arrays are new and the dicts are handed over as they
are; everything else (auto-reset, ``terminal_observation``, ``TimeLimit.truncated``,
``reset_infos``, ``env_method``) is ``DummyVecEnv``'s. The episode records that
``VecMonitor`` adds (``info["episode"] = {"r", "l", "t"}`` when an episode ends, read by
SB3's ``ep_info_buffer``) are kept here too, one wrapper layer less a step. Measured in
``bench train --breakdown`` (phase 2, 4 environments): DummyVecEnv about 100 us and
VecMonitor 10 us a vector step before, this layer 65-75 us, most of it the environments.

Where the environments have ``action_masks()`` (MaskablePPO's legal actions), this layer also
keeps the legal actions of the observations it last returned (:attr:`LeanDummyVecEnv.masks`),
read right after each step or reset: the rollout takes them from there
(:func:`rollout_masks`) instead of asking every environment again through
every wrapper's ``env_method`` (``get_action_masks``: 11-12 us a vector step of 4
environments inside training, against about 3 us here). An episode's end also hands over its
terminal state's legal actions (``info["terminal_mask"]``, beside ``terminal_observation``),
which the always-on advisor advises that state on for the value bootstrap.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvStepReturn


class LeanDummyVecEnv(DummyVecEnv):
    """Environments stepped one after the other in this process, monitored; new arrays each step, no deep copy."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        super().__init__(list(env_fns))
        if self.keys != [None]:
            raise ValueError("LeanDummyVecEnv steps environments with one Box observation, not a Dict or Tuple")
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)
        self.t_start = time.time()
        self._mask_readers: list[Callable[[], np.ndarray]] | None = None
        """Each environment's ``action_masks`` (None: the environments have none)."""
        if all(hasattr(env, "action_masks") for env in self.envs):
            self._mask_readers = [env.action_masks for env in self.envs]  # type: ignore[attr-defined]
        self.masks: np.ndarray | None = None
        """``(num_envs, n_actions)`` bool: the legal actions of the observations last returned, as each
        environment's ``action_masks()`` gave them right after its step or reset (a new array each time); None
        when the environments have no ``action_masks`` or when something else was called on them since
        (``env_method`` other than ``action_masks()``, ``set_attr``): then ask them (``get_action_masks``)."""

    def reset(self):
        self.episode_returns[:] = 0
        self.episode_lengths[:] = 0
        obs = super().reset()
        self.masks = self._read_masks()
        return obs

    def _read_masks(self) -> np.ndarray | None:
        readers = self._mask_readers
        if readers is None:
            return None
        return np.array([read() for read in readers], dtype=bool)

    def step_wait(self) -> VecEnvStepReturn:
        space = self.observation_space
        obs_out = np.empty((self.num_envs, *(space.shape or ())), dtype=space.dtype)
        actions = self.actions
        if isinstance(actions, np.ndarray) and actions.ndim == 1:
            actions = actions.tolist()  # Discrete: Python ints, one conversion a step (not a numpy scalar each)
        rewards: list[Any] = []
        dones: list[bool] = []
        infos = []
        any_done = False
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, info = env.step(actions[i])
            done = terminated or truncated
            info["TimeLimit.truncated"] = truncated and not terminated
            if done:
                any_done = True
                info["terminal_observation"] = obs
                if self._mask_readers is not None:  # its legal actions (an always-on advisor advises on it)
                    info["terminal_mask"] = self._mask_readers[i]()
                obs, self.reset_infos[i] = env.reset()
            obs_out[i] = obs
            rewards.append(reward)
            dones.append(done)
            infos.append(info)
        rewards_out = np.array(rewards, dtype=np.float32)  # float to float32: the rounding of an item write
        dones_out = np.array(dones, dtype=bool)
        self.episode_returns += rewards_out
        self.episode_lengths += 1
        if any_done:  # VecMonitor's record of each finished episode
            for k in np.flatnonzero(dones_out).tolist():
                infos[k]["episode"] = {"r": self.episode_returns[k], "l": self.episode_lengths[k],
                                       "t": round(time.time() - self.t_start, 6)}
                self.episode_returns[k] = 0
                self.episode_lengths[k] = 0
        self.buf_infos = infos
        self.masks = self._read_masks()  # each environment stepped (and reset) once: the observations' masks
        return obs_out, rewards_out, dones_out, infos

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """``DummyVecEnv.env_method``; MaskablePPO's ``action_masks()`` of every environment on every step
        without its index resolution."""
        if indices is None and not method_args and not method_kwargs:
            if method_name != "action_masks":
                self.masks = None  # it may change what the environments' masks say
            return [getattr(env, method_name)() for env in self.envs]
        self.masks = None
        return super().env_method(method_name, *method_args, indices=indices, **method_kwargs)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self.masks = None  # it may change what the environments' masks say
        super().set_attr(attr_name, value, indices)


def recorded_masks(env: VecEnv) -> LeanDummyVecEnv | None:
    """The ``LeanDummyVecEnv`` under ``env`` whose :attr:`~LeanDummyVecEnv.masks` are what ``get_action_masks(env)``
    returns: every wrapper above it passes ``env_method`` through unchanged (VecEnvWrapper's own). None otherwise."""
    layer: Any = env
    while isinstance(layer, VecEnvWrapper):
        if type(layer).env_method is not VecEnvWrapper.env_method:
            return None
        layer = layer.venv
    return layer if type(layer).env_method is LeanDummyVecEnv.env_method else None


def rollout_masks(env: VecEnv, recorded: LeanDummyVecEnv | None) -> np.ndarray:
    """``get_action_masks(env)``: the legal actions the environments recorded with their observations (``recorded``,
    from :func:`recorded_masks`) where they did, else asked of every environment."""
    masks = None if recorded is None else recorded.masks
    return masks if masks is not None else get_action_masks(env)
