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
  records around each decision), and skips the per-environment timeout and episode
  bookkeeping on steps where no episode ended. Other policies keep their own ``forward``.
* :class:`LeanMaskableRolloutBuffer` stores a step without SB3's defensive copies, makes a
  minibatch's tensors without a second copy, and computes GAE with the non-recursive terms
  vectorised over the rollout.

``fast_math`` (``ppo.fast_math``) adds cuts that are exact only to float tolerance: in the
update, the MLP's tanh computed by numpy (:func:`fast_tanh`: within 6e-8 of torch's, about
nine times faster on this CPU for 512-row minibatches), Adam's fused CPU kernel, the
forward as direct calls (:meth:`LeanForward.evaluate`) and the statistics kept as tensors,
read once an update; in the rollout, a plain tanh policy's decisions in numpy
(:meth:`LeanForward._numpy_decide`, sampled by ``torch.multinomial``: the same draws).
``tests/training/test_fast_math.py`` compares one update on fixed data with
``MaskablePPO``'s (losses, gradients, parameters, Adam's moments to float tolerance).

Saved models are unchanged (``MaskablePPO.save``'s format; the algorithm class is not
stored, nor ``fast_math``, nor Adam's ``fused`` flag): ``MaskablePPO.load`` reads them, and
:meth:`LeanMaskablePPO.load` reads theirs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.buffers import MaskableRolloutBuffer, MaskableRolloutBufferSamples
from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.torch_layers import FlattenExtractor
from stable_baselines3.common.utils import explained_variance, obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv
from torch import nn
from torch.nn import functional as F

HUGE_NEG = -1e8
"""The logit of a masked action (sb3-contrib's ``MaskableCategorical``)."""


class LeanMaskableCategoricalDistribution(MaskableCategoricalDistribution):
    """``MaskableCategoricalDistribution`` whose distribution is itself, computed as ``MaskableCategorical`` does.

    ``MaskableCategorical(logits=x)`` normalises ``x`` (``n1 = x - logsumexp(x)``), keeps
    ``n1`` as its original logits, and ``apply_masking(m)`` normalises
    ``where(m, n1, -1e8)`` again (with no masks: ``n1`` again). Here those two
    normalisations are the only ``logsumexp`` calls; ``probs`` is ``softmax(logits)``,
    sampling ``torch.multinomial`` on it, as in ``torch.distributions.Categorical``.
    ``self.distribution`` is ``self``, so ``dist.distribution.probs`` reads as before.
    """

    def __init__(self, action_dim: int) -> None:
        super().__init__(action_dim)
        self.distribution = self  # type: ignore[assignment]  # the same reads: .probs, .logits, .masks
        self.masks: th.Tensor | None = None
        self._original: th.Tensor | None = None
        self._logits: th.Tensor | None = None
        self._probs: th.Tensor | None = None
        self._huge_neg: dict[tuple[th.dtype, th.device], th.Tensor] = {}

    def proba_distribution(self, action_logits: th.Tensor) -> LeanMaskableCategoricalDistribution:
        raw = action_logits.view(-1, self.action_dim)
        self._original = raw - raw.logsumexp(dim=-1, keepdim=True)
        self.masks = None
        self._logits = self._probs = None  # normalised again on first use (apply_masking(None) when unmasked)
        return self

    def apply_masking(self, masks: Any) -> None:
        original = self._original
        assert original is not None, "proba_distribution first"
        if masks is not None:
            self.masks = th.as_tensor(masks, dtype=th.bool, device=original.device).reshape(original.shape)
            logits = th.where(self.masks, original, self._neg(original))
        else:
            self.masks = None
            logits = original
        self._logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._probs = None

    def _neg(self, like: th.Tensor) -> th.Tensor:
        key = (like.dtype, like.device)
        neg = self._huge_neg.get(key)
        if neg is None:
            neg = self._huge_neg[key] = th.tensor(HUGE_NEG, dtype=like.dtype, device=like.device)
        return neg

    @property
    def logits(self) -> th.Tensor:
        """Normalised log-probabilities, masked actions at about -1e8."""
        if self._logits is None:
            self.apply_masking(None)
        assert self._logits is not None
        return self._logits

    @property
    def probs(self) -> th.Tensor:
        if self._probs is None:
            self._probs = F.softmax(self.logits, dim=-1)
        return self._probs

    def log_prob(self, actions: th.Tensor) -> th.Tensor:
        logits = self.logits
        value = actions.long().unsqueeze(-1)
        if value.shape[:-1] != logits.shape[:-1]:
            value, logits = th.broadcast_tensors(value, logits)
            value = value[..., :1]
        return logits.gather(-1, value).squeeze(-1)

    def entropy(self) -> th.Tensor:
        logits = self.logits
        if self.masks is None:
            p_log_p = th.clamp(logits, min=th.finfo(logits.dtype).min) * self.probs
        else:
            p_log_p = th.where(self.masks, logits * self.probs, th.tensor(0.0, device=logits.device))
        return -p_log_p.sum(-1)

    def sample(self) -> th.Tensor:
        probs = self.probs
        return th.multinomial(probs.reshape(-1, self.action_dim), 1, True).T.reshape(probs.shape[:-1])

    def mode(self) -> th.Tensor:
        return th.argmax(self.probs, dim=1)


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


class _NumpyTanh(th.autograd.Function):
    """tanh by numpy's float32 SIMD kernel; the gradient by torch's own formula (``tanh_backward``)."""

    @staticmethod
    def forward(ctx: Any, x: th.Tensor) -> th.Tensor:
        y = th.from_numpy(np.tanh(x.detach().numpy()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: th.Tensor) -> th.Tensor:
        (y,) = ctx.saved_tensors
        return th.ops.aten.tanh_backward(grad, y)


def fast_tanh(x: th.Tensor) -> th.Tensor:
    """``tanh(x)`` of a float32 CPU tensor by numpy: within 6e-8 (about one float32 ulp) of ``torch.tanh``.

    torch's CPU tanh took 223 us for 512 x 128 values on this machine, numpy's 25 us; the
    backward is torch's ``tanh_backward`` on the output, as for ``torch.tanh``. Other
    tensors (another device or dtype) go to ``torch.tanh``.
    """
    if x.device.type != "cpu" or x.dtype != th.float32:
        return th.tanh(x)
    if x.requires_grad and th.is_grad_enabled():
        return _NumpyTanh.apply(x)
    return th.from_numpy(np.tanh(x.detach().contiguous().numpy()))


def _lean_layers(seq: nn.Module) -> list[tuple[th.Tensor, th.Tensor | None]] | None:
    """``(weight, bias)`` pairs of a Sequential of Linear + Tanh/ReLU (None: another structure)."""
    mods = list(seq.children()) if isinstance(seq, nn.Sequential) else None
    if mods is None or len(mods) % 2:
        return None
    act = type(mods[1]) if mods else nn.Tanh
    out: list[tuple[th.Tensor, th.Tensor | None]] = []
    for lin, fn in zip(mods[::2], mods[1::2], strict=True):
        if not isinstance(lin, nn.Linear) or type(fn) is not act or act not in (nn.Tanh, nn.ReLU):
            return None
        out.append((lin.weight, lin.bias))
    return out


def _log_normalise(x: np.ndarray) -> np.ndarray:
    """``x - logsumexp(x)`` along the last axis, in place (float32, the maximum subtracted first)."""
    top = x.max(axis=-1, keepdims=True)
    x -= top
    x -= np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return x


class LeanForward:
    """The rollout forward of an MLP ``MaskableActorCriticPolicy`` with the layers as direct torch calls.

    The same operations as ``policy.forward`` (the features, linear and activation per
    layer, value head, action head, the distribution), with the weights read once a
    rollout and no ``nn.Module`` dispatch. A policy with its own action distribution
    (phase 3's :class:`~hybrid_trader.training.policy.HybridMaskablePolicy`: the prior) keeps
    it (``_get_action_dist_from_latent``) and its hooks around a decision
    (``before_decision``, ``after_decision``: its ``forward`` is SB3's between them, which it
    declares with ``lean_rollout = True``). :meth:`of` returns None for any other policy.
    """

    def __init__(self, policy: MaskableActorCriticPolicy, pi: list, vf: list, act: Any, fast_math: bool = False
                 ) -> None:
        self.policy = policy
        self.pi, self.vf, self.act = pi, vf, act
        # the update's activation: fast_math's numpy tanh (on 4 rows torch's is as fast, so the torch rollout keeps it)
        self.update_act = fast_tanh if fast_math and act is th.tanh else act
        value_net, action_net = policy.value_net, policy.action_net
        assert isinstance(value_net, nn.Linear) and isinstance(action_net, nn.Linear)  # checked in of()
        self.value_w, self.value_b = value_net.weight, value_net.bias
        self.action_w, self.action_b = action_net.weight, action_net.bias
        self.dist = policy.action_dist
        self.plain = type(policy) is MaskableActorCriticPolicy and type(policy.features_extractor) is FlattenExtractor
        self.before = getattr(policy, "before_decision", None)
        self.after = getattr(policy, "after_decision", None)
        # fast_math, plain tanh MLP on the CPU in float32: the rollout's decisions in numpy on views of the weights
        # (Adam updates them in place)
        weights = [w for pair in (*pi, *vf) for w in pair] + [self.value_w, self.value_b, self.action_w, self.action_b]
        self.numpy = None
        if fast_math and self.plain and act is th.tanh \
                and all(w is not None and w.device.type == "cpu" and w.dtype == th.float32 for w in weights):
            def arrays(w: th.Tensor, b: th.Tensor) -> tuple[np.ndarray, np.ndarray]:
                return w.detach().numpy().T, b.detach().numpy()
            self.numpy = ([arrays(w, b) for w, b in pi], [arrays(w, b) for w, b in vf],
                          arrays(self.value_w, self.value_b), arrays(self.action_w, self.action_b))

    @classmethod
    def of(cls, policy: Any, fast_math: bool = False) -> LeanForward | None:
        """The lean forward of ``policy`` (None: a structure it does not cover). ``fast_math`` (float tolerance):
        the update's tanh by :func:`fast_tanh`, and a plain tanh policy's rollout decisions in numpy."""
        # a policy's own forward must declare itself SB3's between its two hooks (``lean_rollout``)
        sb3_forward = type(policy).forward is MaskableActorCriticPolicy.forward \
            or getattr(policy, "lean_rollout", False)
        if not isinstance(policy, MaskableActorCriticPolicy) or not policy.share_features_extractor or not sb3_forward \
                or not isinstance(policy.action_dist, LeanMaskableCategoricalDistribution) \
                or not isinstance(policy.value_net, nn.Linear) or not isinstance(policy.action_net, nn.Linear) \
                or not isinstance(policy.observation_space, spaces.Box) or getattr(policy, "use_sde", False):
            return None
        ext = policy.mlp_extractor
        pi, vf = _lean_layers(ext.policy_net), _lean_layers(ext.value_net)
        if pi is None or vf is None:
            return None
        mods = [m for m in (*ext.policy_net.children(), *ext.value_net.children()) if not isinstance(m, nn.Linear)]
        act = th.tanh if not mods or isinstance(mods[0], nn.Tanh) else F.relu
        return cls(policy, pi, vf, act, fast_math)

    def _latent(self, obs: th.Tensor, act: Any) -> tuple[th.Tensor, Any]:
        """The values and the action distribution of ``obs`` (the policy's hook before a decision run first)."""
        # preprocess_obs of a Box, then FlattenExtractor; else the policy's own features
        x: Any = obs.float().flatten(1) if self.plain else self.policy.extract_features(obs)  # shared: one tensor
        h = x
        for w, b in self.pi:
            h = act(F.linear(h, w, b))
        v = x
        for w, b in self.vf:
            v = act(F.linear(v, w, b))
        values = F.linear(v, self.value_w, self.value_b)
        dist: Any = self.dist.proba_distribution(F.linear(h, self.action_w, self.action_b)) if self.plain \
            else self.policy._get_action_dist_from_latent(h)
        return values, dist

    def evaluate(self, obs: th.Tensor, actions: th.Tensor, action_masks: th.Tensor | None
                 ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """``policy.evaluate_actions``: ``(values, log_prob, entropy)`` by the same operations as direct calls."""
        if self.before is not None:  # phase 3: the advice read for the prior, as evaluate_actions does
            self.before(obs, action_masks)
        values, dist = self._latent(obs, self.update_act)
        if action_masks is not None:
            dist.apply_masking(action_masks)
        return values, dist.log_prob(actions), dist.entropy()

    def _numpy_decide(self, obs: th.Tensor, action_masks: np.ndarray | None) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """``__call__``'s decisions in numpy (``fast_math``): the same formulas in float32 (the layers,
        ``MaskableCategorical``'s two normalisations, masked logits at -1e8), sampled by ``torch.multinomial`` on
        the probabilities (the same draws from torch's generator), equal to the torch path to float tolerance."""
        assert self.numpy is not None
        pi, vf, (value_w, value_b), (action_w, action_b) = self.numpy
        x = obs.numpy().reshape(len(obs), -1)
        h = x
        for w, b in pi:
            h = h @ w
            h += b
            np.tanh(h, out=h)
        v = x
        for w, b in vf:
            v = v @ w
            v += b
            np.tanh(v, out=v)
        values = v @ value_w
        values += value_b
        logits = _log_normalise(h @ action_w + action_b)
        if action_masks is not None:
            logits = _log_normalise(np.where(np.asarray(action_masks, dtype=bool).reshape(logits.shape), logits,
                                             np.float32(HUGE_NEG)))
        actions = th.multinomial(th.from_numpy(np.exp(logits)), 1, True).T.reshape(len(logits))
        log_prob = logits[np.arange(len(logits)), actions.numpy()]
        return actions, th.from_numpy(values), th.from_numpy(log_prob)

    def __call__(self, obs: th.Tensor, action_masks: np.ndarray | None) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        if self.numpy is not None and obs.dtype == th.float32:
            return self._numpy_decide(obs, action_masks)
        if self.before is not None:
            self.before(obs, action_masks)
        values, dist = self._latent(obs, self.act)
        if action_masks is not None:
            dist.apply_masking(action_masks)
        actions = dist.sample()
        log_prob = dist.log_prob(actions)
        if self.after is not None:
            self.after(action_masks)
        return actions, values, log_prob


class LeanMaskablePPO(MaskablePPO):
    """MaskablePPO with :mod:`this module <hybrid_trader.training.lean_ppo>`'s cuts (the same numbers).

    ``fast_math``: also the cuts exact only to float tolerance (the module's docstring), in the
    rollout and the update. Not saved with the model: the runner sets it from ``ppo.fast_math``.
    """

    fast_math: bool = False

    def __init__(self, *args: Any, fast_math: bool = False, **kwargs: Any) -> None:
        self.fast_math = fast_math
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
        # the lean forward is rebuilt each rollout and holds the policy; fast_math is the run's setting
        return [*super()._excluded_save_params(), "_lean_forward", "fast_math"]

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
        self._train_fast()

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
        forward = self.update_forward
        discrete = isinstance(self.action_space, spaces.Discrete)
        params = list(policy.parameters())
        stats: list[th.Tensor] = []  # per minibatch: policy loss, clip fraction, value loss, entropy loss
        kls: list[th.Tensor] = []  # the last epoch's approximate KL divergences
        loss: Any = None
        continue_training = True
        for epoch in range(self.n_epochs):
            kls = []
            for data in self.rollout_buffer.get(self.batch_size):
                actions = data.actions.long().flatten() if discrete else data.actions
                values, log_prob, entropy = forward(data.observations, actions, data.action_masks)
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
                    stats.append(th.stack((policy_loss, clip_fraction, value_loss, entropy_loss)))
                    log_ratio = log_prob - data.old_log_prob
                    kls.append(th.mean((th.exp(log_ratio) - 1) - log_ratio))
                if self.target_kl is not None and kls[-1].item() > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {kls[-1].item():.2f}")
                    break
                policy.optimizer.zero_grad()
                loss.backward()
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
        callback.on_rollout_start()
        while n_steps < n_rollout_steps:
            with th.no_grad():
                obs_tensor = obs_as_tensor(self._last_obs, self.device)  # type: ignore[arg-type]
                if use_masking:
                    action_masks = get_action_masks(env)
                action_t, values, log_probs = forward(obs_tensor, action_masks=action_masks)  # type: ignore[arg-type]
            actions = action_t.cpu().numpy()
            new_obs, rewards, dones, infos = env.step(actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
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
