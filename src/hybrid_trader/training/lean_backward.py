"""The PPO update's loss and gradients of a tanh MLP policy, written out by hand (``ppo.fast_math``).

``LeanMaskablePPO``'s fast update computes MaskablePPO's loss (clipped surrogate, value
loss, entropy bonus, masked categorical log-probabilities) for a 512-row minibatch and its
gradient with respect to every parameter with torch's matrix products, no autograd graph:
the same formulas autograd differentiates, each layer's backward as torch's own
(``tanh_backward``, ``grad.t() @ input``, ``grad @ weight``), equal to the autograd path to
float tolerance (``tests/training/test_fast_math.py`` against sb3-contrib's MaskablePPO).

Phases 1-2's plain policy, and phase 3's :class:`~hybrid_trader.training.policy.HybridMaskablePolicy`:
the prior ``llm_weight * log p_llm`` added to the RL logits (a constant: no gradient of its
own), the network reading the whole observation or its features only (``advice_input``), and
the learned gate's ``w(s)`` (its two layers differentiated through ``w(s) * log p_llm``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from sb3_contrib.common.maskable.buffers import MaskableRolloutBufferSamples
from stable_baselines3.common.torch_layers import FlattenExtractor
from torch import nn

from hybrid_trader.agent.advice_block import N_FEATURES, OBS_ADVICE
from hybrid_trader.agent.fusion import fused_logits, log_prior, obs_fused_logits
from hybrid_trader.training.lean_forward import HUGE_NEG, LeanForward, fast_tanh
from hybrid_trader.training.policy import AdviceFreeFeatures, HybridMaskablePolicy


@dataclass
class LossTerms:
    """A minibatch's scalars as 0-d tensors (read once an update): the loss and the four logged statistics."""

    loss: th.Tensor
    policy_loss: th.Tensor
    clip_fraction: th.Tensor
    value_loss: th.Tensor
    entropy_loss: th.Tensor
    approx_kl: th.Tensor


@dataclass(frozen=True)
class LossSettings:
    """MaskablePPO's loss coefficients for one update (the clip ranges at the update's progress)."""

    clip_range: float
    """The policy ratio's clip range."""
    clip_range_vf: float | None
    """The value prediction's clip range around the old value; None: not clipped."""
    ent_coef: float
    """The entropy loss's weight."""
    vf_coef: float
    """The value loss's weight."""
    normalize_advantage: bool
    """Normalise the minibatch's advantages (mean 0, standard deviation 1)."""


def _tanh(x: th.Tensor) -> th.Tensor:
    """tanh in place by numpy's float32 kernel (``fast_tanh``'s), on a fresh float32 CPU tensor."""
    np.tanh(x.numpy(), out=x.numpy())
    return x


def _mlp(x: th.Tensor, layers: list[tuple[th.Tensor, th.Tensor]]) -> list[th.Tensor]:
    """The inputs of each layer and the last output: ``[x, h1, ..., hn]``."""
    out = [x]
    for w, b in layers:
        out.append(_tanh(th.addmm(b, out[-1], w.t())))
    return out


def _mlp_backward(grad: th.Tensor, acts: list[th.Tensor], layers: list[tuple[th.Tensor, th.Tensor]],
                  grads: dict[th.Tensor, th.Tensor]) -> None:
    """Gradients of ``layers`` (into ``grads``) from ``grad``, the gradient of the last output ``acts[-1]``."""
    for i in range(len(layers) - 1, -1, -1):
        w, b = layers[i]
        grad = th.ops.aten.tanh_backward(grad, acts[i + 1])
        grads[w] = grad.t().mm(acts[i])
        grads[b] = grad.sum(0)
        if i:
            grad = grad.mm(w)


def supports(lean: LeanForward | None) -> bool:
    """True when :func:`loss_and_grads` covers ``lean``'s policy (``fast_math``, tanh layers with biases, float32 on
    the CPU): the plain MLP (the rollout's numpy path), or phase 3's hybrid policy with its constant prior or learned
    gate, reading the whole observation or the features only."""
    if lean is None or lean.update_act is not fast_tanh or any(b is None for _, b in (*lean.pi, *lean.vf)):
        return False
    if lean.numpy is not None:
        return True
    policy = lean.policy
    return type(policy) is HybridMaskablePolicy \
        and type(policy.features_extractor) in (FlattenExtractor, AdviceFreeFeatures) \
        and all(p.device.type == "cpu" and p.dtype == th.float32 for p in policy.parameters())


class _Gate:
    """The learned gate's forward on a minibatch, kept for its backward: ``w(s) = w_max * sigmoid(out(tanh(body(in))))``
    (``agent.gate.TrustGate``; its inputs read the RL logits detached, so its gradient reaches its own weights only)."""

    def __init__(self, policy: HybridMaskablePolicy, obs: th.Tensor, rl_logits: th.Tensor, masks: th.Tensor | None
                 ) -> None:
        gate = policy.gate
        assert gate is not None
        body = gate.body[0]
        assert isinstance(body, nn.Linear)
        self.body, self.out, self.w_max = body, gate.out, gate.w_max
        self.advice = obs[..., OBS_ADVICE].float()
        self.inputs = gate.inputs(obs, rl_logits, self.advice, masks)
        self.hidden = th.tanh(th.addmm(self.body.bias, self.inputs, self.body.weight.t()))
        self.trust = self.w_max * th.sigmoid(th.addmm(self.out.bias, self.hidden, self.out.weight.t()))

    def backward(self, g_logits: th.Tensor, grads: dict[th.Tensor, th.Tensor]) -> None:
        """The gate's weight gradients from ``g_logits``, the gradient of ``rl_logits + w(s) * log p_llm``."""
        g_trust = (g_logits * log_prior(self.advice)).sum(-1, keepdim=True)
        g = g_trust * self.trust * (1 - self.trust / self.w_max)  # d (w_max sigmoid(g)) = w sigmoid(-g)
        grads[self.out.weight], grads[self.out.bias] = g.t().mm(self.hidden), g.sum(0)
        g = th.ops.aten.tanh_backward(g.mm(self.out.weight), self.hidden)
        grads[self.body.weight], grads[self.body.bias] = g.t().mm(self.inputs), g.sum(0)


def log_normalise(x: np.ndarray) -> np.ndarray:
    """``x - logsumexp(x)`` along the last axis, in place (float32, the maximum subtracted first)."""
    top = x.max(axis=-1, keepdims=True)
    x -= top
    x -= np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return x


def _f32(value: Any) -> th.Tensor:
    """A 0-d float32 tensor of a numpy scalar."""
    return th.from_numpy(np.asarray(value, dtype=np.float32))


def _head(z: np.ndarray, values: np.ndarray, batch: MaskableRolloutBufferSamples, settings: LossSettings,
          llm_weight: float | None) -> tuple[LossTerms, th.Tensor, th.Tensor]:
    """The loss of a minibatch from its logits ``z`` ``(n, 6)`` and values ``(n,)``, and the loss's gradients with
    respect to them, ``(terms, d loss / d z, d loss / d values (n, 1))``, in float32 numpy.

    ``llm_weight``: phase 3's constant prior, added to ``z`` first (``obs_fused_logits``; its gradient is the fused
    logits'); None: ``z`` are the distribution's logits already. The same formulas as torch's on these 512 x 6
    values, where each of torch's calls costs more than its arithmetic (a fifth of a minibatch's time on one thread
    went to them); the results agree to float32 rounding.
    """
    n = len(z)
    if llm_weight is not None:
        z = obs_fused_logits(z, batch.observations.numpy().reshape(n, -1), llm_weight)
    m = None if batch.action_masks is None else batch.action_masks.numpy().astype(bool).reshape(z.shape)
    n1 = log_normalise(z)  # in place: z is this minibatch's own (the products' output, or the prior's sum)
    logits = log_normalise(n1.copy() if m is None else np.where(m, n1, np.float32(HUGE_NEG)))
    probs = np.exp(logits)
    idx = batch.actions.numpy().astype(np.int64).reshape(-1)
    rows = np.arange(n)
    log_prob = logits[rows, idx]
    lp = logits * probs
    entropy = -(lp if m is None else np.where(m, lp, np.float32(0.0))).sum(-1)

    adv = batch.advantages.numpy()
    if settings.normalize_advantage:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + np.float32(1e-8))  # torch's std: the unbiased one
    log_ratio = log_prob - batch.old_log_prob.numpy()
    ratio = np.exp(log_ratio)
    clip_range, clip_range_vf = settings.clip_range, settings.clip_range_vf
    loss1, loss2 = adv * ratio, adv * np.clip(ratio, 1 - clip_range, 1 + clip_range)
    policy_loss = -np.minimum(loss1, loss2).mean()
    clip_fraction = (np.abs(ratio - 1) > clip_range).astype(np.float32).mean()
    returns, old_values = batch.returns.numpy(), batch.old_values.numpy()
    if clip_range_vf is None:
        pred, vf_pass = values, None
    else:
        diff = values - old_values
        pred = old_values + np.clip(diff, -clip_range_vf, clip_range_vf)
        vf_pass = (diff >= -clip_range_vf) & (diff <= clip_range_vf)
    value_loss = np.mean((returns - pred) ** 2)
    entropy_loss = -np.mean(entropy)
    loss = policy_loss + np.float32(settings.ent_coef) * entropy_loss + np.float32(settings.vf_coef) * value_loss
    terms = LossTerms(_f32(loss), _f32(policy_loss), _f32(clip_fraction), _f32(value_loss), _f32(entropy_loss),
                      _f32(np.mean((ratio - 1) - log_ratio)))

    # d loss / d log_prob: the surrogate's branch that min() took (a tie: both halves, the same sum)
    takes_ratio = (loss1 <= loss2) | ((ratio >= 1 - clip_range) & (ratio <= 1 + clip_range))
    g_logp = np.where(takes_ratio, adv * ratio, np.float32(0.0)) * np.float32(-1.0 / n)
    # d loss / d entropy, then through entropy = -sum(m p l), p = softmax(l): -p (m (1 + l) + entropy); the
    # -p entropy term is p times a row's constant, which the log-softmax's backward below removes exactly
    inner = 1 + logits if m is None else np.where(m, 1 + logits, np.float32(0.0))
    g_l = probs * inner * np.float32(settings.ent_coef / n)
    g_l[rows, idx] += g_logp
    # through l = log_softmax(w), w = where(m, n1, -1e8), n1 = log_softmax(z)
    g_w = g_l - probs * g_l.sum(-1, keepdims=True)
    g_n1 = g_w if m is None else np.where(m, g_w, np.float32(0.0))
    g_z = g_n1 - np.exp(n1) * g_n1.sum(-1, keepdims=True)
    g_v = (pred - returns) * np.float32(2 * settings.vf_coef / n)
    if vf_pass is not None:
        g_v = np.where(vf_pass, g_v, np.float32(0.0))
    return terms, th.from_numpy(g_z.astype(np.float32, copy=False)), \
        th.from_numpy(g_v.astype(np.float32, copy=False)).unsqueeze(1)


def loss_and_grads(lean: LeanForward, batch: MaskableRolloutBufferSamples,
                   settings: LossSettings) -> tuple[LossTerms, dict[th.Tensor, th.Tensor]]:
    """MaskablePPO's loss on the minibatch ``batch`` (the rollout buffer's samples) and its gradient for each
    parameter of ``lean``'s policy (:func:`supports`).

    Forward as ``LeanForward.evaluate`` (phase 3: the prior on the RL logits; ``x - logsumexp(x)`` twice, masked
    logits at -1e8);
    the backward by hand: policy loss ``-mean(min(A r, A clamp(r)))`` (torch splits a tie's
    gradient in halves that add up to the same), entropy ``-sum(m p l)``, value loss
    ``mean((R - v)^2)``, then the two log-softmaxes (these on the 512 x 6 logits in numpy, :func:`_head`), the
    heads and the tanh layers (torch's matrix products).
    """
    obs, masks = batch.observations, batch.action_masks
    with th.no_grad():
        pi = [(w, b) for w, b in lean.pi if b is not None]
        vf = [(w, b) for w, b in lean.vf if b is not None]
        policy: Any = lean.policy
        hybrid = isinstance(policy, HybridMaskablePolicy)
        x = obs.float().flatten(1)
        if type(policy.features_extractor) is AdviceFreeFeatures:  # phase 3 without advice_input: the features
            x = x.narrow(-1, 0, N_FEATURES)
        hp, hv = _mlp(x, pi), _mlp(x, vf)
        values = th.addmm(lean.value_b, hv[-1], lean.value_w.t()).flatten()
        z = th.addmm(lean.action_b, hp[-1], lean.action_w.t())
        m = None if masks is None else masks.to(th.bool).reshape(z.shape)
        gate = None
        if hybrid and policy.gate is not None:  # the learned gate's w(s) (it reads the legal actions)
            gate = _Gate(policy, obs, z, m)
            z = fused_logits(z, gate.advice, gate.trust)
        terms, g_z, g_v = _head(z.numpy(), values.numpy(), batch, settings,
                                llm_weight=policy.llm_weight if hybrid and gate is None else None)

        grads: dict[th.Tensor, th.Tensor] = {
            lean.action_w: g_z.t().mm(hp[-1]), lean.action_b: g_z.sum(0),
            lean.value_w: g_v.t().mm(hv[-1]), lean.value_b: g_v.sum(0)}
        if gate is not None:
            gate.backward(g_z, grads)
        _mlp_backward(g_z.mm(lean.action_w), hp, pi, grads)
        _mlp_backward(g_v.mm(lean.value_w), hv, vf, grads)
    return terms, grads
