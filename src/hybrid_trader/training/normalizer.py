"""``LeanVecNormalize``: VecNormalize's observation normalisation, without its overheads.

SB3's ``VecNormalize`` costs about a tenth of a phase 2 training step: it deep-copies
every observation, keeps a running variance of the (unused) discounted returns and
converts through float64 twice. ``LeanVecNormalize`` keeps its semantics and its pickle
(it *is* a ``VecNormalize``: runs save, load, evaluate and resume as before):

- **frozen** (``ppo.normalizer: frozen``, the default; always at evaluation): the
  statistics never move while training runs. They come from the run it starts from
  (``--init``) for the inputs both share, and are fitted once, before training, for the
  others (all of them without ``--init``), on the **training days only**
  (:func:`warmup_statistics`: random legal actions, so no look-ahead). A step then costs
  one subtraction, one division and one clip: the normaliser went from about 10% of a
  phase 2 training step to about 1% (``bench train --breakdown``), and the policy's
  inputs mean the same thing from the first update to the last;
- **running** (``ppo.normalizer: running``): updated on every step with SB3's own update
  (``RunningMeanStd.update``, same arithmetic, so the same numbers as ``VecNormalize``).

Only the first ``n_normalized`` values are normalised (phase 3: the 261 features; the
advice block stays probabilities). Rewards are never normalised (the project never did).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numba
import numpy as np
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from hybrid_trader.training.vec_env import LeanDummyVecEnv

CLIP_OBS = 10.0
"""Normalised observations are clipped to [-CLIP_OBS, CLIP_OBS] (as with VecNormalize before)."""
CONSTANT_VAR = 1e-6
"""An input whose variance is below this never varied where its statistics were gathered."""


@numba.njit(cache=True, nogil=True, error_model="numpy")
def normalize_into(obs: np.ndarray, mean: np.ndarray, std: np.ndarray, clip: float,
                   out: np.ndarray) -> None:  # pragma: no cover (compiled)
    """``out[:, :n] = float32(clip((obs[:, :n] - mean) / std, -clip, clip))`` in float64 (``n = len(mean)``), the
    rest of each row copied: numpy's expression value for value (IEEE subtraction, division and comparisons, NaN
    kept), without its temporaries (four calls and a float64 array a step: ``normalize_obs`` took 5.5 us for four
    rows, 2.4 now)."""
    n = mean.shape[0]
    low, high = -clip, clip
    for i in range(obs.shape[0]):
        for j in range(n):
            v = (np.float64(obs[i, j]) - mean[j]) / std[j]
            if v < low:
                v = low
            elif v > high:
                v = high
            out[i, j] = np.float32(v)
        for j in range(n, obs.shape[1]):
            out[i, j] = obs[i, j]


def rms_of(vec: VecNormalize) -> RunningMeanStd:
    """The statistics of a normaliser of Box observations (SB3 types them as a dict too)."""
    return cast(RunningMeanStd, vec.obs_rms)


class LeanVecNormalize(VecNormalize):
    """Observation normalisation of a prefix, with running (``frozen=False``) or frozen statistics."""

    def __init__(self, venv: VecEnv, n_normalized: int | None = None, *, frozen: bool = False,
                 clip_obs: float = CLIP_OBS, epsilon: float = 1e-8) -> None:
        super().__init__(venv, training=not frozen, norm_obs=True, norm_reward=False, clip_obs=clip_obs,
                         epsilon=epsilon)
        dim = int(np.prod(self.observation_space.shape or (0,)))
        self.n_normalized = dim if n_normalized is None else int(n_normalized)
        """Observation values normalised (a prefix); the rest pass through unchanged."""
        self._std: np.ndarray | None = None
        self._mean: np.ndarray | None = None
        self._stats_of: Any = None
        """The statistics ``_std`` and ``_mean`` were taken from (a replaced ``obs_rms`` is noticed)."""

    # ------------------------------------------------------------------ statistics
    @property
    def frozen(self) -> bool:
        """True when the statistics never move (``training`` False)."""
        return not self.training

    def freeze(self) -> None:
        """Stop updating the statistics (for good: a frozen phase 3 normaliser, an evaluation)."""
        self.training = False

    def set_statistics(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        """Set the statistics of the normalised prefix (``count``: samples behind them)."""
        n = self.n_normalized
        mean, var = np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)
        if mean.shape != (n,) or var.shape != (n,):
            raise ValueError(f"statistics of shape {mean.shape}/{var.shape} for {n} normalised values")
        if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all()):
            raise ValueError("normalisation statistics must be finite, with variances >= 0")
        rms = RunningMeanStd(shape=rms_of(self).mean.shape)
        rms.mean[:n], rms.var[:n], rms.count = mean, var, float(count)
        self.obs_rms = cast(Any, rms)  # SB3 types it as a dict too
        self._std = self._mean = None

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation (``sqrt(var + epsilon)``) of the normalised prefix, float64 copies."""
        n = self.n_normalized
        rms = rms_of(self)
        return np.array(rms.mean[:n]), np.sqrt(rms.var[:n] + self.epsilon)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__.setdefault("n_normalized", int(rms_of(self).mean.shape[0]))
        self._std = self._mean = self._stats_of = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_std", None)
        state.pop("_mean", None)
        state.pop("_stats_of", None)
        return state

    # ------------------------------------------------------------------ normalisation
    def normalize_obs(self, obs: Any) -> Any:
        """``obs`` with its prefix normalised and clipped (a new float32 array; the input is not changed).

        float64 arithmetic as ``VecNormalize`` does it (``clip((x - mean) / std)``), then float32, in one compiled
        call (:func:`normalize_into`): the same bits as the numpy expression.
        """
        n = self.n_normalized
        rms = rms_of(self)
        if self.training or self._mean is None or rms is not self._stats_of:  # statistics moved or replaced
            self._stats_of = rms
            self._std = np.ascontiguousarray(np.sqrt(rms.var[:n] + self.epsilon), dtype=np.float64)
            self._mean = np.ascontiguousarray(rms.mean[:n], dtype=np.float64)
        obs = np.asarray(obs, dtype=np.float32)
        out = np.empty(obs.shape, dtype=np.float32)
        width = obs.shape[-1]
        mean, std = self._mean, self._std
        assert mean is not None and std is not None  # set just above
        normalize_into(obs.reshape(-1, width), mean, std, float(self.clip_obs), out.reshape(-1, width))
        return out

    def unnormalize_obs(self, obs: Any) -> Any:
        n = self.n_normalized
        out = np.array(obs, dtype=np.float32, copy=True)
        rms = rms_of(self)
        out[..., :n] = out[..., :n] * np.sqrt(rms.var[:n] + self.epsilon) + rms.mean[:n]
        return out

    def _normalize_obs(self, obs: np.ndarray, obs_rms: RunningMeanStd) -> np.ndarray:
        return self.normalize_obs(obs)

    def _unnormalize_obs(self, obs: np.ndarray, obs_rms: RunningMeanStd) -> np.ndarray:
        return self.unnormalize_obs(obs)

    def _update(self, obs: np.ndarray) -> None:
        n = self.n_normalized
        rms = rms_of(self)
        if n == rms.mean.shape[0]:
            rms.update(obs)
            return
        part = RunningMeanStd(shape=(n,))
        part.mean, part.var, part.count = rms.mean[:n], rms.var[:n], rms.count
        part.update(obs[:, :n])
        rms.mean[:n], rms.var[:n], rms.count = part.mean, part.var, part.count

    # ------------------------------------------------------------------ VecEnv API
    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        assert isinstance(obs, np.ndarray)  # a Box observation space
        self.old_obs, self.old_reward = obs, rewards
        if self.training:
            self._update(obs)
        if dones.any():
            for i in np.flatnonzero(dones):
                terminal = infos[i].get("terminal_observation")
                if terminal is not None:
                    infos[i]["terminal_observation"] = self.normalize_obs(terminal)
            self.returns[dones] = 0
        return self.normalize_obs(obs), rewards, dones, infos

    def reset(self):
        obs = self.venv.reset()
        assert isinstance(obs, np.ndarray)  # a Box observation space
        self.old_obs = obs
        self.returns = np.zeros(self.num_envs)
        if self.training:
            self._update(obs)
        return self.normalize_obs(obs)


def fit_statistics(env_fns: Sequence[Callable[[], Any]], steps: int, seed: int) -> RunningMeanStd:
    """Mean and variance of the observations of ``env_fns``' environments under random legal actions.

    ``steps``: environment steps over all environments together (rounded up to whole
    vector steps); the reset observations count too. The environments are closed after.
    """
    venv = LeanDummyVecEnv(list(env_fns))
    rng = np.random.default_rng(seed)
    rms = RunningMeanStd(shape=venv.observation_space.shape or ())
    try:
        first = venv.reset()
        assert isinstance(first, np.ndarray)  # a Box observation space
        rows = [first]
        for _ in range(-(-int(steps) // venv.num_envs)):
            masks = np.stack(venv.env_method("action_masks"))
            choice = (rng.random(len(masks)) * masks.sum(axis=1)).astype(np.int64)
            actions = np.array([np.flatnonzero(m)[c] for m, c in zip(masks, choice, strict=True)])
            obs, _, _, _ = venv.step(actions)
            rows.append(cast(np.ndarray, obs))
        rms.update(np.concatenate(rows).astype(np.float64))
    finally:
        venv.close()
    return rms


def normalized_count(vec: VecNormalize) -> int:
    """Observation values ``vec`` normalises: its prefix (``n_normalized``), else all of its statistics."""
    return int(getattr(vec, "n_normalized", rms_of(vec).mean.shape[0]))


def freeze_statistics(vec: LeanVecNormalize, src: VecNormalize | None,
                      fit: Callable[[], RunningMeanStd] | None) -> list[int]:
    """Freeze ``vec`` at ``src``'s statistics (an earlier run's) for the inputs both share, ``fit()``'s for the rest.

    A shared input that never varied in the earlier run (variance below
    :data:`CONSTANT_VAR`: phase 1 never manages a position, so ``can_manage`` is always 0
    there) keeps its mean (where the earlier policy saw 0) and takes the fitted spread
    about it, else it would reach the network clipped at ``clip_obs`` whenever it moves.
    ``fit`` is called only when needed; None where inputs are left to fit is an error
    (statistics are never silently left at mean 0, variance 1). Returns the shared inputs
    that were fitted anew.
    """
    n = vec.n_normalized
    shared = 0 if src is None else min(normalized_count(src), n)
    mean, var, count = np.zeros(n), np.ones(n), 0.0
    refit: list[int] = []
    if src is not None:
        rms = rms_of(src)
        mean[:shared], var[:shared], count = rms.mean[:shared], rms.var[:shared], float(rms.count)
        vec.clip_obs, vec.epsilon = src.clip_obs, src.epsilon
        refit = np.flatnonzero(var[:shared] < CONSTANT_VAR).tolist() if fit is not None else []
    if shared < n or refit:
        if fit is None:
            raise ValueError(f"the normaliser needs its statistics fitted for inputs {shared}..{n - 1}")
        fitted = fit()
        mean[shared:], var[shared:] = fitted.mean[shared:n], fitted.var[shared:n]
        varies = [i for i in refit if fitted.var[i] >= CONSTANT_VAR]
        var[varies] = fitted.var[varies] + (fitted.mean[varies] - mean[varies]) ** 2
        refit = varies
        count = count or float(fitted.count)
    vec.set_statistics(mean, var, count)
    vec.freeze()
    return refit


def warmup_statistics(market: Any, config: Any) -> RunningMeanStd:
    """The warm-up fit of a run (``config``: a RunConfig) on its training days only (module docstring)."""
    from hybrid_trader.run.market import env_factory, training_markets  # only when fitting: loads the env

    ppo = config.ppo
    risk = config.risk if config.env.phase == 3 else None
    # seeds apart from the training environments' (seed + i): the warm-up is not a replay of their episodes
    fns = [env_factory(m, config.env, m.sessions("train"), ppo.seed + 10_007 + i, risk=risk)
           for i, m in enumerate(training_markets(market, ppo.n_envs))]
    return fit_statistics(fns, ppo.normalizer_warmup_steps, ppo.seed)
