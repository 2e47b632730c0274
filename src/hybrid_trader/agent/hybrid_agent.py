"""The phase 3 decision: observation + advice (+ legal actions) -> action, and why.

:class:`HybridAgent` is the one place that turns the RL policy's output and the LLM's
advice into an action outside of PPO's sampling; evaluation uses it and an executor
can call it from a live loop::

    decision = agent.decide(obs, mask, advice)     # RL confidence for the query policy
    if advisor.should_query(0, step, ctx, decision.rl_confidence):
        advice = advisor.advise_now([ctx], env_index=0, step=step)[0]
        decision = agent.decide(obs, mask, advice)
    broker.submit(decision.action)

The distribution is the one training samples from: the same advice block
(:func:`~hybrid_trader.agent.advice_block.write_advice`) goes into the network and the
same :func:`~hybrid_trader.agent.fusion.fused_logits` adds the prior. ``prior`` takes
the most probable legal action of it; ``rules`` applies the four fusion priorities
(:func:`~hybrid_trader.agent.fusion.fuse_rules`: agreement, a confident side overriding an
unsure one, HOLD when both are unsure, else a confidence-weighted vote) to the RL-only
distribution and the advice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch as th

from hybrid_trader.agent.advice_block import write_advice
from hybrid_trader.agent.fusion import (
    REASON_PRIOR,
    REASON_RL_ONLY,
    FusionConfig,
    fuse_rules,
    fused_logits,
    masked_softmax,
)
from hybrid_trader.llm.advice import Advice


class RLPolicy(Protocol):
    """What the agent needs of the trained network (``HybridMaskablePolicy`` has it)."""

    def rl_logits(self, obs: th.Tensor) -> th.Tensor:
        """RL-only action logits ``(n, 6)`` of normalised phase 3 observations ``(n, d)``."""
        ...

    # optional: ``trust(obs, rl_logits, masks) -> (n, 1) | None``, the learned gate's w(s)
    # (HybridMaskablePolicy has it; None or absent: the constant fusion.llm_weight)


@dataclass(frozen=True)
class Decision:
    """One decision of the hybrid agent."""

    action: int
    """The action to execute (always legal)."""
    probs: np.ndarray
    """Fused distribution over the six actions (RL logits + prior, masked) [0-1]."""
    rl_action: int
    """The RL policy's own best legal action."""
    rl_probs: np.ndarray
    """RL-only distribution over the six actions (masked) [0-1]."""
    rl_confidence: float
    """RL-only probability of ``rl_action`` (what the query policy's uncertainty trigger reads) [0-1]."""
    fused_by: Literal["prior", "rules"]
    """The strategy that chose ``action``."""
    reason: str
    """Reason code: PRIOR, RL_ONLY or the fusion rule that decided (``agent.fusion.REASON_*``)."""
    advice: Advice | None
    """The usable advice the decision saw (None: none, abstained or too old)."""
    block: np.ndarray
    """The advice block that went into the observation."""
    trust: float = 0.0
    """The weight of the LLM prior in this decision: the learned gate's w(s), else fusion.llm_weight (0: none)."""


class HybridAgent:
    """RL policy + LLM advice -> action, with the prior or the four fusion rules (``agent.fusion.fuse_rules``)."""

    def __init__(self, policy: RLPolicy, fusion: FusionConfig, *, max_age: int,
                 normalize: Callable[[np.ndarray], np.ndarray] | None = None, use_llm: bool = True) -> None:
        self.policy = policy
        self.fusion = fusion
        self.max_age = int(max_age)
        """Advice older than this many steps is not used (``llm.batching.max_age_steps``)."""
        self.normalize = normalize
        """Observation normalisation of training (``VecNormalize.normalize_obs``); None: none."""
        self.use_llm = use_llm
        """False: the RL-only ablation (advice ignored, weight 0)."""
        self.llm_weight = float(fusion.llm_weight) if use_llm else 0.0

    @classmethod
    def from_model(cls, model: Any, vec_normalize: Any, fusion: FusionConfig, *, max_age: int,
                   use_llm: bool = True) -> HybridAgent:
        """The agent of a trained phase 3 model (``MaskablePPO``) and its ``VecNormalize`` (or None)."""
        normalize = vec_normalize.normalize_obs if vec_normalize is not None else None
        return cls(model.policy, fusion, max_age=max_age, normalize=normalize, use_llm=use_llm)

    def usable(self, advice: Advice | None) -> Advice | None:
        """``advice`` if the agent uses it: present, not abstained, not older than ``max_age``."""
        if not self.use_llm or advice is None or advice.abstained or advice.age_steps > self.max_age:
            return None
        return advice

    def decide(self, obs: np.ndarray, mask: np.ndarray, advice: Advice | None) -> Decision:
        """Decide on the environment's observation ``obs`` (the features, unnormalised).

        ``mask``: legal actions (the risk veto included); ``advice``: the latest advice
        with its ``age_steps`` set, or None.
        """
        mask = np.asarray(mask, dtype=bool)
        advice = self.usable(advice)
        block = write_advice(advice, self.max_age)
        full = np.concatenate([np.asarray(obs, dtype=np.float32), block])
        x = self.normalize(full) if self.normalize is not None else full
        with th.no_grad():
            x_t = th.as_tensor(np.asarray(x, dtype=np.float32)[None])
            rl_t = self.policy.rl_logits(x_t)
            weight: float | th.Tensor = self.llm_weight
            gate = getattr(self.policy, "trust", None) if self.use_llm else None
            learned = gate(x_t, rl_t, th.as_tensor(mask[None])) if gate is not None else None
            if learned is not None:
                weight = learned
            fused_t = fused_logits(rl_t, th.as_tensor(block[None]), weight)
        trust = 0.0
        if advice is not None:
            trust = float(learned.reshape(-1)[0]) if learned is not None else self.llm_weight
        rl = rl_t[0].numpy().astype(np.float64)
        rl_probs = masked_softmax(rl, mask)
        rl_action = int(np.argmax(rl_probs))
        probs = masked_softmax(fused_t[0].numpy().astype(np.float64), mask)
        if self.fusion.strategy == "rules" and self.use_llm:
            action, reason = fuse_rules(rl_probs, advice.probs if advice is not None else None,
                                        advice.confidence if advice is not None else 0.0, mask, self.fusion)
            fused_by: Literal["prior", "rules"] = "rules"
        else:
            action = int(np.argmax(probs))
            reason = REASON_PRIOR if advice is not None and trust else REASON_RL_ONLY
            fused_by = "prior"
        return Decision(action=action, probs=probs, rl_action=rl_action, rl_probs=rl_probs,
                        rl_confidence=float(rl_probs[rl_action]), fused_by=fused_by, reason=reason,
                        advice=advice, block=block, trust=trust)

