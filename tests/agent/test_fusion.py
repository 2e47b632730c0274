"""Seed 001's four fusion priorities, each with its case, the logit prior and the RL confidence."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch as th

from hybrid_trader.actions import Action
from hybrid_trader.agent.advice_block import ADVICE, OBS_ADVICE, PHASE3_OBS_DIM
from hybrid_trader.agent.fusion import (
    REASON_AGREEMENT,
    REASON_LLM_OVERRIDE,
    REASON_RL_ONLY,
    REASON_RL_OVERRIDE,
    REASON_UNCERTAIN_HOLD,
    REASON_WEIGHTED,
    FusionConfig,
    best_probability,
    fuse_rules,
    fused_logits,
    log_prior,
    masked_softmax,
    obs_fused_logits,
    rl_confidence,
)

FLAT = np.array([True, True, True, False, False, False])
CFG = FusionConfig()


def p(**kw) -> np.ndarray:
    out = np.zeros(6)
    for name, v in kw.items():
        out[Action[name]] = v
    return out


def test_agreement_when_both_pick_the_same_action():
    assert fuse_rules(p(BUY=0.6, HOLD=0.4), p(BUY=0.5, SELL=0.5), 0.5, FLAT, CFG) == (Action.BUY, REASON_AGREEMENT)


def test_rl_overrides_when_rl_very_confident_and_llm_not():
    assert fuse_rules(p(SELL=0.95, HOLD=0.05), p(BUY=0.55, HOLD=0.45), 0.55, FLAT, CFG) == (
        Action.SELL, REASON_RL_OVERRIDE)


def test_llm_overrides_when_llm_very_confident_and_rl_not():
    assert fuse_rules(p(HOLD=0.55, BUY=0.45), p(SELL=0.95, HOLD=0.05), 0.95, FLAT, CFG) == (
        Action.SELL, REASON_LLM_OVERRIDE)


def test_uncertainty_hold_when_both_unsure():
    assert fuse_rules(p(BUY=0.4, SELL=0.35, HOLD=0.25), p(SELL=0.45, BUY=0.3, HOLD=0.25), 0.45, FLAT, CFG) == (
        Action.HOLD, REASON_UNCERTAIN_HOLD)


def test_confidence_weighted_when_both_moderately_confident():
    # RL: BUY 0.7; LLM: SELL 0.8. (1-0.3) * 0.7 * 0.7 = 0.343 for BUY vs 0.3 * 0.8 * 0.8 = 0.192 for SELL.
    action, rule = fuse_rules(p(BUY=0.7, HOLD=0.3), p(SELL=0.8, HOLD=0.2), 0.8, FLAT, CFG)
    assert (action, rule) == (Action.BUY, REASON_WEIGHTED)
    action, _ = fuse_rules(p(BUY=0.7, HOLD=0.3), p(SELL=0.8, HOLD=0.2), 0.8, FLAT, FusionConfig(llm_weight=0.8))
    assert action == Action.SELL


def test_rl_only_when_no_advice_and_illegal_actions_never_chosen():
    assert fuse_rules(p(BUY=0.9), None, 0.0, FLAT, CFG) == (Action.BUY, REASON_RL_ONLY)
    in_position = np.array([True, False, False, True, True, False])
    action, _ = fuse_rules(p(BUY=0.9, HOLD=0.1), p(SELL=0.99), 0.99, in_position, CFG)
    assert in_position[action]


def test_advice_prior_is_log_probability_when_present_and_zero_when_absent():
    block = np.zeros((2, ADVICE.size))
    block[0, ADVICE.probs] = p(BUY=0.5, HOLD=0.25, SELL=0.25)
    block[0, ADVICE.present] = 1.0
    block[1, ADVICE.probs] = p(BUY=1.0)
    prior = log_prior(block)
    np.testing.assert_allclose(prior[0, :3], np.log([0.25, 0.5, 0.25]))
    assert prior[0, 3] == pytest.approx(np.log(1e-4))
    assert (prior[1] == 0).all()


def test_log_prior_is_the_same_when_given_tensors_or_arrays():
    block = np.zeros((3, ADVICE.size), dtype=np.float32)
    block[:2, ADVICE.probs] = [p(BUY=0.7, HOLD=0.3), p(SELL=0.2, MOVE_SL_TO_BE=0.8)]
    block[:2, ADVICE.present] = 1.0
    np.testing.assert_allclose(log_prior(th.as_tensor(block)).numpy(), log_prior(block), rtol=1e-6)


def test_fused_logits_add_the_weighted_prior_when_advice_present():
    rl = np.array([[0.1, 0.2, 0.3, 0.0, 0.0, 0.0]])
    block = np.zeros((1, ADVICE.size))
    block[0, ADVICE.probs] = p(BUY=0.5, HOLD=0.5)
    block[0, ADVICE.present] = 1.0
    np.testing.assert_allclose(fused_logits(rl, block, 0.3), rl + 0.3 * log_prior(block))
    assert fused_logits(rl, block, 0.0) is rl
    assert fused_logits(rl, None, 0.3) is rl


def test_obs_fused_logits_give_fused_logits_distribution_when_read_from_observations():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(5, PHASE3_OBS_DIM)).astype(np.float32)
    block = np.zeros((5, ADVICE.size), dtype=np.float32)
    block[:4, ADVICE.probs] = rng.dirichlet(np.ones(6), size=4) * (rng.random((4, 6)) > 0.3)
    block[:4, ADVICE.present] = 1.0  # the last row carries no advice
    obs[:, OBS_ADVICE] = block
    rl = th.as_tensor(rng.normal(size=(5, 6)).astype(np.float32))
    got = obs_fused_logits(rl, th.as_tensor(obs), 0.3)
    want = fused_logits(rl, th.as_tensor(obs)[..., OBS_ADVICE], 0.3)
    np.testing.assert_allclose(got[:4].numpy(), want[:4].numpy(), rtol=0, atol=1e-6)  # rows with advice
    shift = (got[4] - rl[4]).numpy()  # no advice: one constant on the row, the same distribution
    np.testing.assert_allclose(shift, 0.3 * np.log(1e-4), rtol=1e-6)
    np.testing.assert_allclose(th.softmax(got, -1).numpy(), th.softmax(want, -1).numpy(), atol=1e-6)
    assert obs_fused_logits(rl, th.as_tensor(obs), 0.0) is rl


def test_rl_confidence_when_some_actions_are_illegal_is_the_best_legal_probability():
    expected = math.exp(2) / (math.exp(1) + math.exp(2))
    assert rl_confidence([1.0, 2.0, 3.0], [True, True, False]) == pytest.approx(expected)
    assert rl_confidence([0.0, 0.0, 0.0], [True, True, True]) == pytest.approx(1 / 3)


def test_rl_confidence_when_no_masks():
    assert rl_confidence([0.0, math.log(3.0)]) == pytest.approx(0.75)


def test_rl_confidence_equals_best_probability_and_masked_softmax_when_masked():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 6))
    masks = rng.random((5, 6)) > 0.4
    masks[:, 0] = True
    best, conf = best_probability(logits, masks)
    for i in range(5):
        assert rl_confidence(logits[i].tolist(), masks[i].tolist()) == pytest.approx(conf[i])
        probs = masked_softmax(logits[i], masks[i])
        assert int(np.argmax(probs)) == best[i] and probs.max() == pytest.approx(conf[i])
        assert (probs[~masks[i]] == 0).all()
