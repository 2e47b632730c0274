"""Seed 001's four fusion priorities, each with its case, and the logit prior."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.actions import Action
from hybrid_trader.training.fusion import (
    RULE_AGREEMENT, RULE_LLM_OVERRIDE, RULE_RL_ONLY, RULE_RL_OVERRIDE, RULE_UNCERTAIN_HOLD, RULE_WEIGHTED,
    FusionConfig, advice_prior, fuse_rules,
)

FLAT = np.array([True, True, True, False, False, False])
CFG = FusionConfig()


def p(**kw) -> np.ndarray:
    out = np.zeros(6)
    for name, v in kw.items():
        out[Action[name]] = v
    return out


def test_agreement_when_both_pick_the_same_action():
    assert fuse_rules(p(BUY=0.6, HOLD=0.4), p(BUY=0.5, SELL=0.5), 0.5, FLAT, CFG) == (Action.BUY, RULE_AGREEMENT)


def test_rl_overrides_when_rl_very_confident_and_llm_not():
    assert fuse_rules(p(SELL=0.95, HOLD=0.05), p(BUY=0.55, HOLD=0.45), 0.55, FLAT, CFG) == (Action.SELL, RULE_RL_OVERRIDE)


def test_llm_overrides_when_llm_very_confident_and_rl_not():
    assert fuse_rules(p(HOLD=0.55, BUY=0.45), p(SELL=0.95, HOLD=0.05), 0.95, FLAT, CFG) == (Action.SELL, RULE_LLM_OVERRIDE)


def test_uncertainty_hold_when_both_unsure():
    assert fuse_rules(p(BUY=0.4, SELL=0.35, HOLD=0.25), p(SELL=0.45, BUY=0.3, HOLD=0.25), 0.45, FLAT, CFG) == (
        Action.HOLD, RULE_UNCERTAIN_HOLD)


def test_confidence_weighted_when_both_moderately_confident():
    # RL: BUY 0.7; LLM: SELL 0.8. (1-0.3) * 0.7 * 0.7 = 0.343 for BUY vs 0.3 * 0.8 * 0.8 = 0.192 for SELL.
    action, rule = fuse_rules(p(BUY=0.7, HOLD=0.3), p(SELL=0.8, HOLD=0.2), 0.8, FLAT, CFG)
    assert (action, rule) == (Action.BUY, RULE_WEIGHTED)
    action, _ = fuse_rules(p(BUY=0.7, HOLD=0.3), p(SELL=0.8, HOLD=0.2), 0.8, FLAT, FusionConfig(llm_weight=0.8))
    assert action == Action.SELL


def test_rl_only_when_no_advice_and_illegal_actions_never_chosen():
    assert fuse_rules(p(BUY=0.9), None, 0.0, FLAT, CFG) == (Action.BUY, RULE_RL_ONLY)
    in_position = np.array([True, False, False, True, True, False])
    action, _ = fuse_rules(p(BUY=0.9, HOLD=0.1), p(SELL=0.99), 0.99, in_position, CFG)
    assert in_position[action]


def test_advice_prior_is_log_probability_when_present_and_zero_when_absent():
    block = np.zeros((2, 9))
    block[0, :6] = p(BUY=0.5, HOLD=0.25, SELL=0.25)
    block[0, 8] = 1.0
    block[1, :6] = p(BUY=1.0)
    prior = advice_prior(block)
    np.testing.assert_allclose(prior[0, :3], np.log([0.25, 0.5, 0.25]))
    assert prior[0, 3] == pytest.approx(np.log(1e-4))
    assert (prior[1] == 0).all()
