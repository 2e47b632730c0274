"""``LeanMaskablePPO``: sb3-contrib's MaskablePPO, the same numbers with fewer Python and torch calls a step.

Same algorithm, hyper-parameters, random draws and arithmetic: each cut below performs
the same floating-point operations, in the same order, on the same values as the code it
replaces, so the sampled actions, log-probabilities, values, advantages, losses and
trained parameters are bit for bit those of ``MaskablePPO`` (``tests/training/test_lean_ppo.py``
trains both on fixed seeds and compares every parameter and rollout array exactly).

* :class:`LeanMaskableCategoricalDistribution` replaces the policy's action distribution.
  ``MaskableCategorical`` builds a torch ``Categorical`` three times per decision (three
  ``logsumexp``, each a chain of small kernels, and argument plumbing); this one keeps the
  two normalisations whose results are used and none of the plumbing.
* :meth:`LeanMaskablePPO.collect_rollouts` runs the plain MLP policy's rollout forward as
  direct ``linear``/activation calls on the cached weights (no ``nn.Module`` dispatch; phase
  3's :class:`~hybrid_trader.training.policy.HybridMaskablePolicy` keeps its prior and its
  records around each decision), skips the per-environment timeout and episode
  bookkeeping on steps where no episode ended, and updates the callbacks' shared locals once
  a step (:func:`locals_updater`). Other policies keep their own ``forward``.
* :class:`LeanMaskableRolloutBuffer` stores a step without SB3's defensive copies, makes a
  minibatch's tensors without a second copy, and computes GAE with the non-recursive terms
  vectorised over the rollout.

``fast_math`` (``ppo.fast_math``) adds cuts that are exact only to float tolerance: in the
update, the MLP's tanh computed by numpy (:func:`fast_tanh`: within 6e-8 of torch's, about
nine times faster on this CPU for 512-row minibatches), Adam's fused CPU kernel, the
forward as direct calls (:meth:`LeanForward.evaluate`) and the statistics kept as tensors,
read once an update; for a tanh MLP (phases 1-2's plain policy, phase 3's with its prior or
learned gate), the loss and its gradients written out by hand
(:func:`~hybrid_trader.training.lean_backward.loss_and_grads`, no autograd graph); in the
rollout, a plain tanh policy's decisions in numpy (:meth:`LeanForward._numpy_decide`, the distribution and the
draw in one compiled call, sampled as ``torch.multinomial`` samples: the same draws).
``tests/training/test_fast_math.py`` compares one update on fixed data with
``MaskablePPO``'s (losses, gradients, parameters, Adam's moments to float tolerance).

``update_threads`` (``ppo.update_threads``, :mod:`~hybrid_trader.training.threads`): the loss and gradients by
hand run on that many torch threads, the rest of the loop on ``ppo.torch_threads``; OpenMP's idle threads are
handed back after each update.

Saved models are unchanged (``MaskablePPO.save``'s format; the algorithm class is not
stored, nor ``fast_math``, nor Adam's ``fused`` flag): ``MaskablePPO.load`` reads them, and
:meth:`LeanMaskablePPO.load` reads theirs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.buffers import MaskableRolloutBuffer, MaskableRolloutBufferSamples
from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution
from sb3_contrib.common.maskable.utils import is_masking_supported
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.utils import explained_variance, obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv
from torch.nn import functional as F

from hybrid_trader.training.lean_backward import LossSettings, LossTerms, loss_and_grads, supports
from hybrid_trader.training.lean_forward import LeanForward, LeanMaskableCategoricalDistribution
from hybrid_trader.training.threads import ThreadChooser, release_idle_threads
from hybrid_trader.training.vec_env import recorded_masks, rollout_masks


def locals_updater(callback: BaseCallback) -> Callable[[dict[str, Any]], None]:
    """``callback.update_locals``, or one ``dict.update`` where it would update the same dict several times.

    SB3's ``CallbackList`` hands its own ``locals`` dict to each of its callbacks when training starts, and then
    updates that one dict once for itself and once for every callback on each step (3.5 us for six callbacks,
    against 0.4 for one update). Where every callback in the tree shares the root's dict and none changes how it
    is updated, one update is the same; anything else gets the callback's own ``update_locals``.
    """
    shared = callback.locals
    todo = [callback]
    while todo:
        cb = todo.pop()
        if cb.locals is not shared or type(cb).update_locals is not BaseCallback.update_locals:
            return callback.update_locals
        if type(cb).update_child_locals is CallbackList.update_child_locals:
            todo.extend(cast(CallbackList, cb).callbacks)
        elif type(cb).update_child_locals is not BaseCallback.update_child_locals:  # a child of its own
            return callback.update_locals
    return shared.update


class LeanMaskableRolloutBuffer(MaskableRolloutBuffer):
    """``MaskableRolloutBuffer`` (Box observations, Discrete actions) without per-step copies; GAE vectorised.

    ``compute_returns_and_advantage`` evaluates SB3's expressions elementwise in the same
    order (``delta = r + gamma * v' * nonterminal - v``, then the backward recursion
    ``A = delta + (gamma * lambda) * nonterminal * A'``), the non-recursive terms for the
    whole rollout at once: the same float32 results.
    """

    def add(self, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, episode_start: np.ndarray,  # type: ignore[override]
            value: th.Tensor, log_prob: th.Tensor, action_masks: np.ndarray | None = None) -> None:
        pos = self.pos
        if action_masks is not None:
            self.action_masks[pos] = action_masks.reshape((self.n_envs, self.mask_dims))
        self.observations[pos] = obs
        self.actions[pos] = action.reshape((self.n_envs, self.action_dim))
        self.rewards[pos] = reward
        self.episode_starts[pos] = episode_start
        self.values[pos] = value.cpu().numpy().reshape(-1)  # written into the buffer: a copy
        self.log_probs[pos] = log_prob.cpu().numpy()
        self.pos = pos + 1
        if self.pos == self.buffer_size:
            self.full = True

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> MaskableRolloutBufferSamples:  # type: ignore[override]
        # SB3 copies each fancy-indexed (already new) array once more into its tensor
        data = (self.observations[batch_inds], self.actions[batch_inds], self.values[batch_inds].flatten(),
                self.log_probs[batch_inds].flatten(), self.advantages[batch_inds].flatten(),
                self.returns[batch_inds].flatten(), self.action_masks[batch_inds].reshape(-1, self.mask_dims))
        return MaskableRolloutBufferSamples(*(th.as_tensor(a, device=self.device) for a in data))

    def compute_returns_and_advantage(self, last_values: th.Tensor, dones: np.ndarray) -> None:
        last = last_values.clone().cpu().numpy().flatten()
        next_non_terminal = np.empty_like(self.episode_starts)
        next_non_terminal[:-1] = 1.0 - self.episode_starts[1:]
        next_non_terminal[-1] = 1.0 - dones.astype(np.float32)
        next_values = np.empty_like(self.values)
        next_values[:-1] = self.values[1:]
        next_values[-1] = last
        delta = self.rewards + self.gamma * next_values * next_non_terminal - self.values
        coef = self.gamma * self.gae_lambda * next_non_terminal
        gae: Any = 0
        advantages = self.advantages
        for step in range(self.buffer_size - 1, -1, -1):
            gae = delta[step] + coef[step] * gae
            advantages[step] = gae
        self.returns = self.advantages + self.values


class LeanMaskablePPO(MaskablePPO):
    """MaskablePPO with :mod:`this module <hybrid_trader.training.lean_ppo>`'s cuts (the same numbers).

    ``fast_math``: also the cuts exact only to float tolerance (the module's docstring), in the
    rollout and the update. ``update_threads``: torch's threads while the loss and gradients are computed by hand
    (``fast_math``), the process's own setting restored after each minibatch's. Neither is saved with the model:
    the runner sets them from ``ppo.fast_math`` and ``ppo.update_threads``.
    """

    fast_math: bool = False
    update_threads: int = 1
    _threads: ThreadChooser | None = None

    def __init__(self, *args: Any, fast_math: bool = False, update_threads: int = 1, **kwargs: Any) -> None:
        self.fast_math = fast_math
        self.update_threads = update_threads
        super().__init__(*args, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        policy: Any = self.policy
        dist = policy.action_dist
        if type(dist) is MaskableCategoricalDistribution:
            policy.action_dist = LeanMaskableCategoricalDistribution(dist.action_dim)
        if type(self.rollout_buffer) is MaskableRolloutBuffer and isinstance(self.action_space, spaces.Discrete) \
                and isinstance(self.observation_space, spaces.Box):
            self.rollout_buffer = LeanMaskableRolloutBuffer(
                self.n_steps, self.observation_space, self.action_space, self.device, gamma=self.gamma,
                gae_lambda=self.gae_lambda, n_envs=self.n_envs, **self.rollout_buffer_kwargs)

    _lean_forward: LeanForward | None = None

    def _excluded_save_params(self) -> list[str]:
        # the lean forward is rebuilt each rollout and holds the policy; fast_math and update_threads are the run's
        return [*super()._excluded_save_params(), "_lean_forward", "fast_math", "update_threads", "_threads"]

    def get_parameters(self) -> dict[str, dict]:
        """SB3's, with Adam's ``fused`` flag as ``Adam()`` leaves it (None): the saved optimizer is MaskablePPO's."""
        params = super().get_parameters()
        for group in params.get("policy.optimizer", {}).get("param_groups", []):
            if group.get("fused"):
                group["fused"] = None  # state_dict's groups are copies: the live optimizer keeps its flag
        return params

    def rollout_forward(self, obs: th.Tensor, action_masks: np.ndarray | None = None
                        ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """The rollout's decisions ``(actions, values, log_probs)``: the lean forward where it applies, else
        the policy's own ``forward``."""
        lean = self._lean_forward
        return lean(obs, action_masks) if lean is not None else self.policy(obs, action_masks=action_masks)

    def update_forward(self, obs: th.Tensor, actions: th.Tensor, action_masks: th.Tensor | None
                       ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """``(values, log_prob, entropy)`` of a minibatch in the ``fast_math`` update: the lean forward where it
        applies, else the policy's ``evaluate_actions``."""
        lean = self._lean_forward
        return lean.evaluate(obs, actions, action_masks) if lean is not None \
            else self.policy.evaluate_actions(obs, actions, action_masks=action_masks)

    def _by_hand(self, lean: LeanForward, data: MaskableRolloutBufferSamples, settings: LossSettings
                 ) -> tuple[LossTerms, dict[th.Tensor, th.Tensor]]:
        """:func:`loss_and_grads`, on ``update_threads`` torch threads where :class:`ThreadChooser` finds that
        faster now (the process's count restored after)."""
        threads = th.get_num_threads()
        chooser = self._threads
        if chooser is None or chooser.more <= threads:
            return loss_and_grads(lean, data, settings)
        count = chooser.next_count()
        start = time.perf_counter()
        th.set_num_threads(count)
        try:
            return loss_and_grads(lean, data, settings)
        finally:
            th.set_num_threads(threads)
            chooser.record(count, time.perf_counter() - start)

    def train(self) -> None:
        """sb3-contrib's update; with ``fast_math``, :meth:`_train_fast`."""
        for group in self.policy.optimizer.param_groups:  # Adam reads the flag at each step
            if self.fast_math:
                group["fused"] = True
            elif group.get("fused"):
                group["fused"] = None
        if not self.fast_math:
            super().train()
            return
        threads = th.get_num_threads()
        if self.update_threads > threads:
            if self._threads is None or self._threads.more != self.update_threads:
                self._threads = ThreadChooser(self.update_threads)
            self._threads.begin(threads)
        self._train_fast()
        if self.update_threads > threads:
            release_idle_threads()  # OpenMP's second thread would spin through the rollout

    def _train_fast(self) -> None:
        """sb3-contrib's ``MaskablePPO.train``, loss for loss, with the lean forward (:func:`fast_tanh`), fused
        Adam, and the statistics as tensors read once (each minibatch's only with ``target_kl``)."""
        policy: Any = self.policy
        policy.set_training_mode(True)
        self._update_learning_rate(policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        clip_range_vf = None
        if self.clip_range_vf is not None:
            clip_range_vf = self.clip_range_vf(self._current_progress_remaining)  # type: ignore[operator]
        self._lean_forward = LeanForward.of(policy, fast_math=True)
        discrete = isinstance(self.action_space, spaces.Discrete)
        manual = self._lean_forward if discrete and supports(self._lean_forward) else None
        settings = LossSettings(clip_range, clip_range_vf, self.ent_coef, self.vf_coef, self.normalize_advantage)
        params = list(policy.parameters())
        stats: list[th.Tensor] = []  # per minibatch: policy loss, clip fraction, value loss, entropy loss
        kls: list[th.Tensor] = []  # the last epoch's approximate KL divergences
        loss: Any = None
        continue_training = True
        for epoch in range(self.n_epochs):
            kls = []
            for data in self.rollout_buffer.get(self.batch_size):
                actions = data.actions.long().flatten() if discrete else data.actions
                grads = None
                if manual is not None:  # the loss and its gradients by hand (lean_backward), no autograd graph
                    terms, grads = self._by_hand(manual, data, settings)  # its actions as indices, as below
                else:
                    terms = self._autograd_loss(data, actions, clip_range, clip_range_vf)
                loss = terms.loss
                stats.append(th.stack((terms.policy_loss, terms.clip_fraction, terms.value_loss,
                                       terms.entropy_loss)).detach())
                kls.append(terms.approx_kl)
                if self.target_kl is not None and kls[-1].item() > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {kls[-1].item():.2f}")
                    break
                if grads is None:
                    policy.optimizer.zero_grad()
                    loss.backward()
                else:
                    for p in params:  # a frozen layer (train.freeze_body_steps) gets none, as autograd gives it
                        p.grad = grads[p] if p.requires_grad else None
                th.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
                policy.optimizer.step()
            self._n_updates += 1
            if not continue_training:
                break
        explained_var = explained_variance(self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten())
        # the same float32 values SB3 logs (its .item() of each), averaged in float64 as np.mean does
        pg, clip_fractions, value_losses, entropy_losses = (
            th.stack(stats).double().T.numpy() if stats else np.full((4, 0), np.nan))
        record = self.logger.record
        record("train/entropy_loss", np.mean(entropy_losses))
        record("train/policy_gradient_loss", np.mean(pg))
        record("train/value_loss", np.mean(value_losses))
        record("train/approx_kl", np.mean(th.stack(kls).numpy()) if kls else np.nan)
        record("train/clip_fraction", np.mean(clip_fractions))
        record("train/loss", loss.item())
        record("train/explained_variance", explained_var)
        record("train/n_updates", self._n_updates, exclude="tensorboard")
        record("train/clip_range", clip_range)
        if clip_range_vf is not None:
            record("train/clip_range_vf", clip_range_vf)

    def _autograd_loss(self, data: Any, actions: th.Tensor, clip_range: float, clip_range_vf: float | None
                       ) -> LossTerms:
        """sb3-contrib's minibatch loss on :meth:`update_forward`, for autograd (policies ``lean_backward`` does
        not cover)."""
        values, log_prob, entropy = self.update_forward(data.observations, actions, data.action_masks)
        values = values.flatten()
        advantages = data.advantages
        if self.normalize_advantage:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        ratio = th.exp(log_prob - data.old_log_prob)
        policy_loss_1 = advantages * ratio
        policy_loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
        policy_loss = -th.min(policy_loss_1, policy_loss_2).mean()
        clip_fraction = th.mean((th.abs(ratio - 1) > clip_range).float())
        values_pred = values if clip_range_vf is None else \
            data.old_values + th.clamp(values - data.old_values, -clip_range_vf, clip_range_vf)
        value_loss = F.mse_loss(data.returns, values_pred)
        entropy_loss = -th.mean(-log_prob) if entropy is None else -th.mean(entropy)
        loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
        with th.no_grad():
            log_ratio = log_prob - data.old_log_prob
            approx_kl = th.mean((th.exp(log_ratio) - 1) - log_ratio)
        return LossTerms(loss, policy_loss, clip_fraction, value_loss, entropy_loss, approx_kl)

    def collect_rollouts(self, env: VecEnv, callback: BaseCallback, rollout_buffer: Any, n_rollout_steps: int,
                         use_masking: bool = True) -> bool:
        """sb3-contrib's ``collect_rollouts``, step for step (the module's docstring says what is leaner)."""
        assert self._last_obs is not None, "No previous observation was provided"
        policy: Any = self.policy
        policy.set_training_mode(False)
        n_steps = 0
        action_masks = None
        rollout_buffer.reset()
        if use_masking and not is_masking_supported(env):
            raise ValueError("Environment does not support action masking. Consider using ActionMasker wrapper")
        self._lean_forward = LeanForward.of(policy, self.fast_math)  # the weights, read once a rollout
        forward = self.rollout_forward
        discrete = isinstance(self.action_space, spaces.Discrete)
        update_locals = locals_updater(callback)
        recorded = recorded_masks(env) if use_masking else None
        callback.on_rollout_start()
        while n_steps < n_rollout_steps:
            with th.no_grad():
                obs_tensor = obs_as_tensor(self._last_obs, self.device)  # type: ignore[arg-type]
                if use_masking:
                    action_masks = rollout_masks(env, recorded)
                action_t, values, log_probs = forward(obs_tensor, action_masks=action_masks)  # type: ignore[arg-type]
            actions = action_t.cpu().numpy()
            new_obs, rewards, dones, infos = env.step(actions)
            self.num_timesteps += env.num_envs
            update_locals(locals())
            if not callback.on_step():
                return False
            ended = bool(dones.any())
            if ended:  # episode records only where an episode ended (SB3 looks at every info)
                self._update_info_buffer(infos, dones)
            n_steps += 1
            if discrete:
                actions = actions.reshape(-1, 1)
            if ended:  # bootstrap a time-limit end with the value function (SB3's GitHub issue #633)
                for idx in np.flatnonzero(dones).tolist():
                    if infos[idx].get("terminal_observation") is not None \
                            and infos[idx].get("TimeLimit.truncated", False):
                        terminal_obs = policy.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                        with th.no_grad():
                            terminal_value = policy.predict_values(terminal_obs)[0]
                        rewards[idx] += self.gamma * terminal_value
            rollout_buffer.add(self._last_obs, actions, rewards, self._last_episode_starts, values, log_probs,
                               action_masks=action_masks)
            self._last_obs = new_obs  # type: ignore[assignment]
            self._last_episode_starts = dones
        with th.no_grad():
            values = policy.predict_values(obs_as_tensor(new_obs, self.device))  # type: ignore[arg-type]
        rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)
        callback.on_rollout_end()
        return True
