"""Fusion of the RL policy with the LLM's advice.

Two places, one principle (DESIGN.md, principle 2):

* **Inside the policy, for training and by default for trading** (``strategy: prior``):
  ``logits = rl_logits + llm_weight * log p_llm(a)`` over the legal actions. PPO samples
  from and scores this one distribution, so the executed action is the sampled one and
  its stored log-probability is exact. ``HybridMaskablePolicy`` implements it; the
  advice is read from the observation (see ``ADVICE_*`` below), so PPO's update
  recomputes exactly the distribution the rollout sampled from.
* **At evaluation or execution time only** (``strategy: rules``): the four priorities of
  seed 001, applied to the RL-only distribution and the advice (``fuse_rules``).

Observation layout of phase 3 (after the 261 features): 9 advice values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from hybrid_trader.actions import Action
from hybrid_trader.features.names import FEATURE_NAMES

N_FEATURES = len(FEATURE_NAMES)
ADVICE_PROBS = slice(N_FEATURES, N_FEATURES + 6)
"""LLM probabilities of the six actions (zero on illegal ones)."""
ADVICE_CONFIDENCE = N_FEATURES + 6
"""LLM confidence [0-1]."""
ADVICE_AGE = N_FEATURES + 7
"""Age of the advice in steps / ``llm.batching.max_age_steps`` [0-1]."""
ADVICE_PRESENT = N_FEATURES + 8
"""1 when fresh, non-abstained advice is in the observation, else 0 (then the prior is 0)."""
ADVICE_DIM = 9
PHASE3_OBS_DIM = N_FEATURES + ADVICE_DIM
PROB_FLOOR = 1e-4
"""Smallest probability inside the log of the prior (keeps it finite)."""

# Rule names of seed 001's fusion, greppable in decision logs.
RULE_AGREEMENT = "AGREEMENT"
RULE_RL_OVERRIDE = "RL_HIGH_CONFIDENCE"
RULE_LLM_OVERRIDE = "LLM_HIGH_CONFIDENCE"
RULE_WEIGHTED = "CONFIDENCE_WEIGHTED"
RULE_UNCERTAIN_HOLD = "UNCERTAINTY_HOLD"
RULE_RL_ONLY = "RL_ONLY"


@dataclass
class FusionConfig:
    """How the RL policy and the LLM advice are combined (the ``fusion`` section)."""

    llm_weight: float = 0.3
    """w in logits = rl_logits + w * log p_llm (0 = RL only), as in the seeds."""
    strategy: Literal["prior", "rules"] = "prior"
    """Decision at evaluation/execution: prior (best action of the trained fused distribution) or rules (seed 001)."""
    high_confidence: float = 0.9
    """rules: a side this confident overrides a side below ``low_confidence``."""
    low_confidence: float = 0.6
    """rules: the other side's confidence must be below this for an override."""
    uncertainty: float = 0.5
    """rules: both below this -> HOLD."""


def advice_prior(advice: np.ndarray) -> np.ndarray:
    """``log p_llm`` from the advice block of observations ``(n, 9)`` (zero where absent)."""
    probs = np.clip(advice[..., :6], PROB_FLOOR, 1.0)
    present = advice[..., 8:9] > 0.5
    return np.where(present, np.log(probs), 0.0)


def fuse_rules(rl_probs: np.ndarray, llm_probs: np.ndarray | None, llm_confidence: float, mask: np.ndarray,
               config: FusionConfig) -> tuple[int, str]:
    """Seed 001's four fusion priorities; returns (action, rule). ``llm_probs`` None: RL only.

    1. Agreement: both pick the same action -> take it.
    2. High-confidence override: one side above ``high_confidence`` while the other is
       below ``low_confidence`` -> that side.
    3. Both uncertain (below ``uncertainty``) -> HOLD.
    4. Otherwise confidence-weighted: argmax of (1-w) c_rl p_rl + w c_llm p_llm.
    Only legal actions are ever returned.
    """
    mask = np.asarray(mask, dtype=bool)
    rl = np.where(mask, rl_probs, 0.0)
    rl_action = int(np.argmax(rl))
    rl_conf = float(rl[rl_action] / max(rl.sum(), 1e-12))
    if llm_probs is None:
        return rl_action, RULE_RL_ONLY
    llm = np.where(mask, llm_probs, 0.0)
    llm_action = int(np.argmax(llm))
    llm_conf = float(llm_confidence)
    if rl_action == llm_action:
        return rl_action, RULE_AGREEMENT
    if rl_conf > config.high_confidence and llm_conf < config.low_confidence:
        return rl_action, RULE_RL_OVERRIDE
    if llm_conf > config.high_confidence and rl_conf < config.low_confidence:
        return llm_action, RULE_LLM_OVERRIDE
    if rl_conf < config.uncertainty and llm_conf < config.uncertainty:
        return int(Action.HOLD), RULE_UNCERTAIN_HOLD
    w = config.llm_weight
    score = (1 - w) * rl_conf * rl / max(rl.sum(), 1e-12) + w * llm_conf * llm / max(llm.sum(), 1e-12)
    score = np.where(mask, score, -np.inf)
    return int(np.argmax(score)), RULE_WEIGHTED
