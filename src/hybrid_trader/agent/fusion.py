"""Fusion of the RL policy with the LLM's advice: the logit prior and the four fusion rules.

Two strategies, one principle (CONTRIBUTING.md, principle 2: PPO stays on-policy):

* **prior** (training, and by default evaluation and trading):
  ``logits = rl_logits + llm_weight * log p_llm(a)`` over the legal actions
  (:func:`fused_logits`). PPO samples from and scores this one distribution, so the
  executed action is the sampled one and its stored log-probability is exact.
  ``HybridMaskablePolicy`` (training) and ``HybridAgent`` (evaluation, execution) both
  call :func:`fused_logits`; the advice is read from the advice block
  (:mod:`hybrid_trader.agent.advice_block`).
* **rules** (evaluation or execution only): four priorities (agreement, a confident side
  overriding an unsure one, HOLD when both are unsure, else a confidence-weighted vote),
  applied to the RL-only distribution and the advice (:func:`fuse_rules`).

Every decision carries a reason code (``REASON_*``), greppable in decision logs.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch as th

from hybrid_trader.actions import N_ACTIONS, Action
from hybrid_trader.agent.advice_block import ADVICE, OBS_ADVICE
from hybrid_trader.config import check

PROB_FLOOR = 1e-4
"""Smallest probability inside the log of the prior (keeps it finite)."""
_clip: Any = vars(np)["_core"].umath.clip
"""The clip ufunc itself (``np.clip`` wraps it in argument checks that cost more than a rollout step's clip)."""

# Reason codes of a decision.
REASON_PRIOR = "PRIOR"
"""prior: best legal action of the fused distribution, advice present and weight > 0."""
REASON_RL_ONLY = "RL_ONLY"
"""No usable advice (or weight 0): the RL policy alone decided."""
REASON_AGREEMENT = "AGREEMENT"
"""rules: RL and LLM pick the same action."""
REASON_RL_OVERRIDE = "RL_HIGH_CONFIDENCE"
"""rules: RL very confident, LLM not."""
REASON_LLM_OVERRIDE = "LLM_HIGH_CONFIDENCE"
"""rules: LLM very confident, RL not."""
REASON_WEIGHTED = "CONFIDENCE_WEIGHTED"
"""rules: argmax of the confidence-weighted mixture."""
REASON_UNCERTAIN_HOLD = "UNCERTAINTY_HOLD"
"""rules: both unsure -> HOLD."""
RULE_REASONS = (REASON_AGREEMENT, REASON_RL_OVERRIDE, REASON_LLM_OVERRIDE, REASON_WEIGHTED,
                REASON_UNCERTAIN_HOLD, REASON_RL_ONLY)
"""The reason codes the rules strategy can give."""


@dataclass
class FusionConfig:
    """How the RL policy and the LLM advice are combined (the ``fusion`` section)."""

    llm_weight: float = 0.3
    """w in logits = rl_logits + w * log p_llm (0 = RL only), as in the seeds; learned mode: w(s) at step 0."""
    mode: Literal["constant", "learned"] = "constant"
    """constant: w = llm_weight everywhere; learned: w(s) = w_max * sigmoid(gate(s)), trained by PPO's loss."""
    w_max: float = 1.0
    """learned: the largest trust the gate can give the LLM (w(s) in [0, w_max])."""
    gate_hidden: int = 16
    """learned: hidden units of the gate's MLP."""
    advice_input: bool = True
    """The policy network also reads the advice block as input (false: the advice acts through the prior alone)."""
    strategy: Literal["prior", "rules"] = "prior"
    """At evaluation/execution: prior (best action of the fused distribution) or rules (agree, override, HOLD, vote)."""
    high_confidence: float = 0.9
    """rules: a side this confident overrides a side below ``low_confidence``."""
    low_confidence: float = 0.6
    """rules: the other side's confidence must be below this for an override."""
    uncertainty: float = 0.5
    """rules: both below this -> HOLD."""

    def __post_init__(self) -> None:
        check(self.llm_weight >= 0, "llm_weight", f"{self.llm_weight} must be >= 0", fix="use 0 (RL only) or more")
        check(self.gate_hidden >= 1, "gate_hidden", f"{self.gate_hidden} must be >= 1", fix="use e.g. 16")
        if self.mode == "learned":
            check(0 < self.llm_weight < self.w_max, "w_max",
                  f"learned fusion starts at llm_weight {self.llm_weight}, which must lie strictly between 0 and "
                  f"w_max {self.w_max}", fix=f"use e.g. w_max {max(2 * self.llm_weight, 1.0):g} and llm_weight > 0")


Array = TypeVar("Array", np.ndarray, "th.Tensor")


def _is_tensor(x: Any) -> TypeGuard[th.Tensor]:
    """Whether ``x`` is a torch tensor, without importing torch: no tensor exists before torch is imported (the
    executor's numpy policy decides without it; ``hybrid-trader run`` starts ~2 s sooner)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def log_prior(advice: Array) -> Array:
    """``log p_llm`` from advice blocks ``(..., ADVICE.size)`` (zero where no advice is present).

    Works on numpy arrays and torch tensors alike (training's policy passes tensors).
    """
    if _is_tensor(advice):
        # the presence flag is exactly 0.0 or 1.0 (advice_block writes it): multiplying by it is the
        # where() of the numpy branch in two in-place operations on the fresh clamp output (this runs
        # on every rollout step; measured 9 us against 16 us for a comparison and a product)
        probs_t = advice[..., ADVICE.probs]
        return probs_t.clamp(min=PROB_FLOOR, max=1.0).log_().mul_(advice[..., ADVICE.present_column])  # type: ignore[return-value]
    probs = advice[..., ADVICE.probs]
    present = advice[..., ADVICE.present_column] > 0.5
    return np.where(present, np.log(np.clip(probs, PROB_FLOOR, 1.0)), 0.0)  # type: ignore[return-value]


def fused_logits(rl_logits: Array, advice: Array | None, llm_weight: float | Array) -> Array:
    """``rl_logits + llm_weight * log p_llm`` (the RL logits themselves without advice or weight).

    ``llm_weight``: one constant, or one weight per row (``(n, 1)``, the learned gate's
    ``w(s)``). Masking comes after (illegal actions get probability zero), so only the
    legal actions' relative prior matters.
    """
    if advice is None or (isinstance(llm_weight, (int, float)) and not llm_weight):
        return rl_logits
    if _is_tensor(rl_logits) and isinstance(llm_weight, (int, float)):
        # one operation for the product and sum
        return rl_logits.add(log_prior(advice), alpha=llm_weight)  # type: ignore[return-value,arg-type]
    return rl_logits + llm_weight * log_prior(advice)


def obs_fused_logits(rl_logits: Array, obs: Array, llm_weight: float) -> Array:
    """:func:`fused_logits` of phase 3 observations ``(n, PHASE3_OBS_DIM)`` as training's policy samples them
    (one constant weight): the same action distribution in four tensor operations. On numpy arrays (the
    ``fast_math`` rollout's decisions) the same formula in float32, always a new array (the RL logits stay as they
    were, for the policy's records).

    The block's probabilities are read in place (``narrow``, no copy). A row without advice
    (all zero, presence 0) gets ``llm_weight * log(PROB_FLOOR)`` on every action instead of
    nothing: one constant on the whole row, which no softmax sees (the probabilities are the
    RL policy's up to rounding), so the presence flag is not read. Rows with advice get the
    same numbers as :func:`fused_logits` up to the last bit (tested). The rollout and PPO's
    update both call this, so the stored log-probabilities stay exact.
    """
    start = OBS_ADVICE.start + ADVICE.probs.start
    logits: Any = rl_logits
    if not _is_tensor(obs):
        prior = _clip(obs[:, start:start + N_ACTIONS], PROB_FLOOR, 1.0)  # a new array: the rest in place
        np.log(prior, out=prior)
        prior *= np.float32(llm_weight)
        return logits + prior
    if not llm_weight:
        return rl_logits
    probs = obs.narrow(-1, start, N_ACTIONS)
    return logits.add(probs.clamp(min=PROB_FLOOR, max=1.0).log_(), alpha=llm_weight)


def masked_softmax(logits: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Softmax over the legal actions of each row (zero on illegal ones)."""
    z = logits if mask is None else np.where(mask, logits, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def best_probability(logits: np.ndarray, masks: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Best legal action of each row ``(n, 6)`` and its probability under the masked softmax."""
    if masks is not None:
        logits = np.where(masks, logits, -np.inf)
    # probability of the best action = 1 / sum(exp(logits - max))
    return logits.argmax(axis=1), 1.0 / np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1)


def rl_confidence(logits: Sequence[float], legal: Sequence[bool] | None = None) -> float:
    """The RL confidence: probability of the best legal action under softmax(``logits``) (one row).

    Plain Python on purpose: the query policy asks for it for single environments in the
    training hot loop, where numpy's per-call cost dominates.
    """
    row = list(logits) if legal is None else [x for x, ok in zip(logits, legal) if ok]
    top = max(row)
    return 1.0 / sum(math.exp(x - top) for x in row)


def fuse_rules(rl_probs: np.ndarray, llm_probs: np.ndarray | None, llm_confidence: float, mask: np.ndarray,
               config: FusionConfig) -> tuple[int, str]:
    """The four fusion priorities, first that applies wins; returns (action, reason code). ``llm_probs`` None: RL only.

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
        return rl_action, REASON_RL_ONLY
    llm = np.where(mask, llm_probs, 0.0)
    llm_action = int(np.argmax(llm))
    llm_conf = float(llm_confidence)
    if rl_action == llm_action:
        return rl_action, REASON_AGREEMENT
    if rl_conf > config.high_confidence and llm_conf < config.low_confidence:
        return rl_action, REASON_RL_OVERRIDE
    if llm_conf > config.high_confidence and rl_conf < config.low_confidence:
        return llm_action, REASON_LLM_OVERRIDE
    if rl_conf < config.uncertainty and llm_conf < config.uncertainty:
        return int(Action.HOLD), REASON_UNCERTAIN_HOLD
    w = config.llm_weight
    score = (1 - w) * rl_conf * rl / max(rl.sum(), 1e-12) + w * llm_conf * llm / max(llm.sum(), 1e-12)
    score = np.where(mask, score, -np.inf)
    return int(np.argmax(score)), REASON_WEIGHTED
