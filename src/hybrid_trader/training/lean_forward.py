"""The policy's forward pass as direct calls on its weights, no ``nn.Module`` dispatch: the rollout's decisions
(in torch, or in numpy under ``ppo.fast_math``), the update's forward and the masked action distribution that
``LeanMaskablePPO`` trains with."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.torch_layers import FlattenExtractor
from torch import nn
from torch.nn import functional as F

from hybrid_trader.agent.advice_block import N_FEATURES
from hybrid_trader.agent.fusion import obs_fused_logits
from hybrid_trader.agent.numpy_forward import NumpyMLP, torch_layers
from hybrid_trader.training.decide_kernel import ALL_LEGAL, decide_into
from hybrid_trader.training.policy import AdviceFreeFeatures, HybridMaskablePolicy

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


class LeanForward:
    """The rollout forward of an MLP ``MaskableActorCriticPolicy`` with the layers as direct torch calls.

    The same operations as ``policy.forward`` (the features, linear and activation per
    layer, value head, action head, the distribution), with the weights read once a
    rollout and no ``nn.Module`` dispatch. A policy with its own action distribution
    (phase 3's :class:`~hybrid_trader.training.policy.HybridMaskablePolicy`: the prior) keeps
    it (``_get_action_dist_from_latent``) and its hooks around a decision
    (``before_decision``, ``after_decision``: its ``forward`` is SB3's between them, which it
    declares with ``lean_rollout = True``). :meth:`of` returns None for any other policy.
    Under ``fast_math`` the plain tanh policy's decisions, and phase 3's with the constant
    prior (not the learned gate's), run in numpy (:meth:`_numpy_decide`).
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
        # phase 3 with the constant prior (no gate) in the numpy rollout: its weight, and the features the network
        # reads (None: the whole observation; advice_input off: the first N_FEATURES)
        self.hybrid = type(policy) is HybridMaskablePolicy and getattr(policy, "gate", None) is None \
            and type(policy.features_extractor) in (FlattenExtractor, AdviceFreeFeatures)
        self.n_inputs = N_FEATURES if type(policy.features_extractor) is AdviceFreeFeatures else None
        # fast_math, tanh MLP on the CPU in float32 (plain, or phase 3's constant prior): the rollout's decisions in
        # numpy (agent.numpy_forward: the executor's forward too), the actor and the critic on views of the weights
        # (Adam updates them in place)
        weights = [w for pair in (*pi, *vf) for w in pair] + [self.value_w, self.value_b, self.action_w, self.action_b]
        self.numpy: tuple[NumpyMLP, NumpyMLP] | None = None
        """``(actor, critic)`` in numpy, or None: the rollout decides in torch."""
        if fast_math and (self.plain or self.hybrid) and act is th.tanh \
                and all(w is not None and w.device.type == "cpu" and w.dtype == th.float32 for w in weights):
            ext = policy.mlp_extractor
            actor = torch_layers([*ext.policy_net, action_net], views=True)
            critic = torch_layers([*ext.value_net, value_net], views=True)
            assert not isinstance(actor, str) and not isinstance(critic, str)  # Linear + Tanh with biases: checked
            self.numpy = NumpyMLP(actor), NumpyMLP(critic)

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
        """``__call__``'s decisions in numpy (``fast_math``): the same formulas in float32 (the layers, then
        ``MaskableCategorical``'s two normalisations, masked logits at -1e8, in one compiled call:
        :func:`~hybrid_trader.training.decide_kernel.decide_into`), sampled as ``torch.multinomial`` samples
        one action (``argmax(p / q)``, ``q`` exponential draws from torch's generator: the same draws), equal to the
        torch path to float tolerance. Phase 3 (constant prior): ``rl + llm_weight * log(clip(p_llm, 1e-4, 1))`` as
        ``obs_fused_logits``, the RL logits kept as the policy's ``last_rl_logits`` for its ``after_decision``."""
        assert self.numpy is not None
        actor, critic = self.numpy
        obs_np = obs.numpy().reshape(len(obs), -1)
        x = obs_np if self.n_inputs is None else obs_np[:, :self.n_inputs]
        values = critic(x)
        logits = actor(x)
        if self.hybrid:
            policy: Any = self.policy
            object.__setattr__(policy, "last_rl_logits", th.from_numpy(logits))  # as _get_action_dist_from_latent
            logits = obs_fused_logits(logits, obs_np, policy.llm_weight)  # a new array: the RL logits stay as kept
        masks = ALL_LEGAL if action_masks is None else np.asarray(action_masks, dtype=bool).reshape(logits.shape)
        # torch.multinomial(probs, 1) as it draws one sample: argmax(probs / q), q ~ Exp(1) from torch's generator
        # (the same draws, without its checks' half-dozen small kernels: 4 against 13 us a vector step)
        queue = th.empty(logits.shape, dtype=th.float32).exponential_(1).numpy()
        n = len(logits)
        chosen, log_prob = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.float32)
        if not decide_into(logits, masks, HUGE_NEG, queue, chosen, log_prob):  # the normalisations and the draw
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")  # torch's refusal
        return th.from_numpy(chosen), th.from_numpy(values), th.from_numpy(log_prob)

    def __call__(self, obs: th.Tensor, action_masks: np.ndarray | None) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        if self.numpy is not None and obs.dtype == th.float32:
            out = self._numpy_decide(obs, action_masks)
            if self.after is not None:  # phase 3's records of the decision (its advice is read from obs above)
                self.after(action_masks)
            return out
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
