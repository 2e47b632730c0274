"""``lean_backward.loss_and_grads``: PPO's minibatch loss and gradients by hand against autograd on the same formulas.

Tolerance ``rtol=1e-5, atol=1e-6`` (as ``test_fast_math.py``): the hand-written backward
sums the same terms in another order (float32 rounding, about 1e-8 here); a wrong term
(a sign, a missed mask, the clipped branch) is off by the size of the gradient itself.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.buffers import MaskableRolloutBufferSamples
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch.nn import functional as F

from hybrid_trader.agent.advice_block import ADVICE, OBS_ADVICE, PHASE3_OBS_DIM
from hybrid_trader.training.lean_backward import LossSettings, loss_and_grads, supports
from hybrid_trader.training.lean_forward import LeanForward, LeanMaskableCategoricalDistribution
from hybrid_trader.training.policy import HybridMaskablePolicy

RTOL, ATOL = 1e-5, 1e-6
N, OBS, ACTIONS = 96, 20, 6


def _policy() -> MaskableActorCriticPolicy:
    th.manual_seed(3)
    policy = MaskableActorCriticPolicy(spaces.Box(-10, 10, (OBS,), np.float32), spaces.Discrete(ACTIONS),
                                       lambda _: 3e-4, net_arch=[16, 16], activation_fn=th.nn.Tanh)
    policy.action_dist = LeanMaskableCategoricalDistribution(ACTIONS)  # as LeanMaskablePPO sets it
    return policy


def _hybrid(mode: str, advice_input: bool) -> HybridMaskablePolicy:
    """Phase 3's policy (the prior at ``llm_weight`` 0.3), as ``LeanMaskablePPO`` sets it up."""
    th.manual_seed(3)
    policy = HybridMaskablePolicy(spaces.Box(-10, 10, (PHASE3_OBS_DIM,), np.float32), spaces.Discrete(ACTIONS),
                                  lambda _: 3e-4, net_arch=[16, 16], activation_fn=th.nn.Tanh, llm_weight=0.3,
                                  fusion_mode=mode, advice_input=advice_input)
    policy.action_dist = LeanMaskableCategoricalDistribution(ACTIONS)
    if policy.gate is not None:  # a gate as after some training: its trust varies from state to state
        with th.no_grad():
            policy.gate.out.weight.normal_(0.0, 1.0)
    return policy


def _advised_obs(gen: np.random.Generator) -> np.ndarray:
    """Phase 3 observations: features, then an advice block on about two rows in three (zeros on the others)."""
    obs = gen.standard_normal((N, PHASE3_OBS_DIM)).astype(np.float32)
    block = np.zeros((N, ADVICE.size), np.float32)
    present = gen.random(N) < 0.7
    block[present, ADVICE.probs] = gen.dirichlet(np.ones(ACTIONS) * 0.5, present.sum())  # some below the floor
    block[present, ADVICE.confidence] = gen.random(present.sum())
    block[present, ADVICE.age] = gen.random(present.sum())
    block[present, ADVICE.present] = 1.0
    obs[:, OBS_ADVICE] = block
    return obs


def _data(masked: bool, obs_dim: int = OBS) -> dict[str, th.Tensor | None]:
    gen = np.random.default_rng(4)
    masks = gen.random((N, ACTIONS)) > 0.4 if masked else np.ones((N, ACTIONS), dtype=bool)
    masks[:, 0] = True
    actions = np.array([gen.choice(np.flatnonzero(m)) for m in masks])
    obs = _advised_obs(gen) if obs_dim == PHASE3_OBS_DIM else gen.standard_normal((N, obs_dim))
    return {"obs": th.as_tensor(obs, dtype=th.float32),
            "actions": th.as_tensor(actions), "masks": th.as_tensor(masks) if masked else None,
            "old_log_prob": th.as_tensor(gen.standard_normal(N) * 0.25, dtype=th.float32),  # about the new ones
            "advantages": th.as_tensor(gen.standard_normal(N), dtype=th.float32),
            "returns": th.as_tensor(gen.standard_normal(N), dtype=th.float32),
            "old_values": th.as_tensor(gen.standard_normal(N) * 0.1, dtype=th.float32)}


def _autograd(policy, d, clip_range: float, clip_range_vf: float | None, ent_coef: float, vf_coef: float):
    """MaskablePPO.train's loss on ``evaluate_actions``, differentiated by autograd."""
    values, log_prob, entropy = policy.evaluate_actions(d["obs"], d["actions"], action_masks=d["masks"])
    values = values.flatten()
    adv = d["advantages"]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = th.exp(log_prob - d["old_log_prob"])
    policy_loss = -th.min(adv * ratio, adv * th.clamp(ratio, 1 - clip_range, 1 + clip_range)).mean()
    pred = values if clip_range_vf is None else \
        d["old_values"] + th.clamp(values - d["old_values"], -clip_range_vf, clip_range_vf)
    value_loss = F.mse_loss(d["returns"], pred)
    entropy_loss = -th.mean(entropy)
    loss = policy_loss + ent_coef * entropy_loss + vf_coef * value_loss
    policy.zero_grad()
    loss.backward()
    clipped = th.mean((th.abs(ratio - 1) > clip_range).float())
    return (loss, policy_loss, clipped, value_loss, entropy_loss), {p: p.grad.clone() for p in policy.parameters()}


def _check_against_autograd(policy, d, clip_range_vf: float | None) -> None:
    """The hand-written loss terms and every parameter's gradient against autograd's on ``d``."""
    with th.no_grad():  # ratios of exp(+-0.25): some outside the clip range on both sides
        d["old_log_prob"] += policy.evaluate_actions(d["obs"], d["actions"], action_masks=d["masks"])[1]
    lean = LeanForward.of(policy, fast_math=True)
    assert lean is not None and supports(lean)
    kw = {"clip_range": 0.2, "clip_range_vf": clip_range_vf, "ent_coef": 0.05, "vf_coef": 0.5}
    ref, ref_grads = _autograd(policy, d, **kw)
    batch = MaskableRolloutBufferSamples(observations=d["obs"], actions=d["actions"], old_values=d["old_values"],
                                         old_log_prob=d["old_log_prob"], advantages=d["advantages"],
                                         returns=d["returns"], action_masks=d["masks"])
    terms, grads = loss_and_grads(lean, batch, LossSettings(normalize_advantage=True, **kw))
    ours = (terms.loss, terms.policy_loss, terms.clip_fraction, terms.value_loss, terms.entropy_loss)
    for name, a, b in zip(("loss", "policy", "clip fraction", "value", "entropy"), ref, ours, strict=True):
        assert float(b) == pytest.approx(float(a.detach()), rel=RTOL, abs=ATOL), name
    assert 0.1 < float(terms.clip_fraction) < 0.9  # both branches of the clipped surrogate are exercised
    assert set(grads) == set(policy.parameters())
    for (name, p), g in ((np_, grads[np_[1]]) for np_ in policy.named_parameters()):
        assert g.shape == p.shape and not g.requires_grad, name
        # the parameter's own layout: Adam's fused CPU kernel reads a transposed gradient in the wrong order
        assert g.stride() == p.stride(), name
        assert th.allclose(g, ref_grads[p], rtol=RTOL, atol=ATOL), name
        assert float(ref_grads[p].abs().max()) > 100 * ATOL, name  # every gradient is far from the tolerance


@pytest.mark.parametrize(("masked", "clip_range_vf"), [(True, None), (False, None), (True, 0.05)])
def test_loss_and_gradients_match_autograd(masked, clip_range_vf):
    _check_against_autograd(_policy(), _data(masked), clip_range_vf)


@pytest.mark.parametrize(("mode", "advice_input", "masked"),
                         [("constant", True, True), ("constant", False, True), ("constant", True, False),
                          ("learned", True, True), ("learned", False, False)])
def test_phase3_loss_and_gradients_match_autograd(mode, advice_input, masked):
    """Phase 3's hybrid policy: the prior inside the distribution, the narrow network, the learned gate's weights."""
    policy, d = _hybrid(mode, advice_input), _data(masked, PHASE3_OBS_DIM)
    _check_against_autograd(policy, d, None)
    with th.no_grad():  # the prior is really in the loss: without it the log-probabilities differ
        with_prior = policy.evaluate_actions(d["obs"], d["actions"], action_masks=d["masks"])[1]
        policy.llm_weight, policy.gate = 0.0, None
        rl_only = policy.evaluate_actions(d["obs"], d["actions"], action_masks=d["masks"])[1]
    assert float((with_prior - rl_only).abs().max()) > 0.1


def test_supports_only_the_plain_tanh_mlp():
    policy = _policy()
    assert supports(LeanForward.of(policy, fast_math=True))
    assert not supports(LeanForward.of(policy, fast_math=False))  # the exact path keeps autograd
    relu = MaskableActorCriticPolicy(spaces.Box(-10, 10, (OBS,), np.float32), spaces.Discrete(ACTIONS),
                                     lambda _: 3e-4, net_arch=[16], activation_fn=th.nn.ReLU)
    relu.action_dist = LeanMaskableCategoricalDistribution(ACTIONS)
    assert not supports(LeanForward.of(relu, fast_math=True))
    assert supports(LeanForward.of(_hybrid("learned", False), fast_math=True))
    assert not supports(LeanForward.of(_hybrid("constant", True), fast_math=False))
