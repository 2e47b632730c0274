"""Decision rules run through the environment: the trained agent and the baselines.

A policy here is a callable ``(obs, mask, env) -> action``. Every one of them sees
exactly what the agent sees (the observation at bar t, the legal actions) plus the
environment for the bars up to t, and trades through the same environment, so the
costs, fills and rules are identical.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch as th

from hybrid_trader.actions import ACTION_NAMES, Action
from hybrid_trader.agent.advised import AdvisedPolicy
from hybrid_trader.agent.fusion import FusionConfig
from hybrid_trader.agent.gate import TREND_FEATURE, VOLATILITY_FEATURE, trust_buckets
from hybrid_trader.agent.hybrid_agent import Decision
from hybrid_trader.agent.stats import DecisionStats
from hybrid_trader.features.names import FEATURE_NAMES
from hybrid_trader.llm.context import context_from_market
from hybrid_trader.llm.stats import label


class Policy(Protocol):
    name: str

    def __call__(self, obs: np.ndarray, mask: np.ndarray, env: Any) -> int: ...


class FlatPolicy:
    """Never trades."""

    name = "flat"

    def __call__(self, obs, mask, env) -> int:
        return int(Action.HOLD)


class RandomPolicy:
    """Random legal actions: enters on a share ``entry_rate`` of the bars where entry is legal.

    ``entry_rate`` is set from the agent's own trade rate so that the comparison is at
    the same activity; management actions (phases 2-3) are taken with probability
    ``manage_rate`` when legal.
    """

    def __init__(self, entry_rate: float, seed: int, manage_rate: float = 0.02) -> None:
        self.entry_rate = float(entry_rate)
        self.manage_rate = float(manage_rate)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.name = f"random (seed {seed})"
        self.result_extra = {"group": "random", "seed": seed, "role": "baseline"}

    def __call__(self, obs, mask, env) -> int:
        if mask[1] and self.rng.random() < self.entry_rate:
            return int(self.rng.choice([Action.BUY, Action.SELL]))
        if len(mask) > 3 and mask[3:].any() and self.rng.random() < self.manage_rate:
            return int(self.rng.choice(np.flatnonzero(mask[3:]) + 3))
        return int(Action.HOLD)


class MomentumPolicy:
    """A simple momentum rule: enter in the direction of the last ``lookback`` bars' move
    when it exceeds ``threshold_atr`` ATRs (bars <= t only); exits by stop and target."""

    name = "momentum"

    def __init__(self, lookback: int = 20, threshold_atr: float = 1.0) -> None:
        self.lookback = lookback
        self.threshold_atr = threshold_atr

    def __call__(self, obs, mask, env) -> int:
        if not mask[1]:
            return int(Action.HOLD)
        t = env.current_index
        if t < self.lookback:
            return int(Action.HOLD)
        close = env.bars.close
        move = (close[t] - close[t - self.lookback]) / env.features.atr[t]
        if move > self.threshold_atr:
            return int(Action.BUY)
        if move < -self.threshold_atr:
            return int(Action.SELL)
        return int(Action.HOLD)


class AgentPolicy:
    """The trained MaskablePPO policy, deterministic and masked, on normalised observations."""

    def __init__(self, model: Any, vec_normalize: Any = None, name: str = "agent", deterministic: bool = True) -> None:
        self.model = model
        self.vec_normalize = vec_normalize
        self.name = name
        self.deterministic = deterministic
        self.result_extra = {"role": "agent"}
        self.last_probs: np.ndarray | None = None
        """The masked distribution over the actions of the last decision."""

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        if self.vec_normalize is None:
            return obs
        return self.vec_normalize.normalize_obs(obs)

    def __call__(self, obs, mask, env) -> int:
        # MaskablePPO.predict's own path (obs_to_tensor, masked distribution, mode or sample), keeping the distribution
        policy = self.model.policy
        policy.set_training_mode(False)
        obs_t, _ = policy.obs_to_tensor(self.normalize(obs))
        with th.no_grad():
            dist = policy.get_distribution(obs_t, action_masks=mask)
            action = dist.get_actions(deterministic=self.deterministic)
        self.last_probs = dist.distribution.probs[0].cpu().numpy()
        return int(action.reshape(-1)[0])

    def decision_record(self) -> dict:
        """What the last decision's record holds besides its action: the policy's probabilities."""
        return {"probabilities": action_probabilities(self.last_probs)}


def action_probabilities(probs: np.ndarray | None) -> dict[str, float]:
    """``{action name: probability}`` of a distribution over the actions, rounded for the results (4 digits)."""
    if probs is None:
        return {}
    return {ACTION_NAMES[i]: round(float(p), 4) for i, p in enumerate(probs)}


PolicyFn = Callable[[np.ndarray, np.ndarray, Any], int]

TREND_INDEX = FEATURE_NAMES.index(TREND_FEATURE)
VOLATILITY_INDEX = FEATURE_NAMES.index(VOLATILITY_FEATURE)
GATE_LABELS = {"fusion/gate_mean": "Trust w(s) (mean)", "fusion/gate_std": "Trust w(s) (std)",
               **{f"fusion/trust_trend_{b}": f"Trust, {b} trend" for b in ("down", "flat", "up")},
               **{f"fusion/trust_vol_{b}": f"Trust, {b} volatility" for b in ("low", "mid", "high")}}
"""Labels of the gate's statistics in evaluation tables."""


class HybridAgentPolicy:
    """The phase 3 agent at evaluation time: ``agent.advised.AdvisedPolicy`` with an unlimited budget (+ the env's
    risk veto), and what evaluation records of its decisions.

    Each step, the agent decides with the advice in force; when the advisor's query policy
    says so (same triggers as in training, the RL confidence taken from that decision), the
    advisor is asked synchronously and the agent decides again with the fresh advice. The
    advice is kept for up to ``max_age_steps`` steps. ``use_llm=False`` is the RL-only
    ablation: no queries and ``llm_weight`` 0. Statistics (``agent.stats.DecisionStats``,
    labelled from ``llm.stats``) and sample decisions go to ``result_extra``.

    Always-on (a back end with ``advise_batch``, the distilled student): as in training,
    every decision is advised, on the raw observation and the legal actions, age 0.
    Learned fusion: the gate's trust of each advised decision is kept and summarised by
    trend and volatility bucket (``agent.gate.trust_buckets``, "when the agent trusts the LLM").
    """

    def __init__(self, model: Any, vec_normalize: Any, advisor: Any, market: Any, fusion: FusionConfig, *,
                 use_llm: bool = True, name: str = "agent", max_samples: int = 30) -> None:
        self.advised = AdvisedPolicy.of_model(model, vec_normalize, advisor, fusion, use_llm=use_llm)
        """The advised decision (unlimited budget: every question answered before the decision)."""
        self.agent = self.advised.agent
        self.market = market
        self.fusion = fusion
        self.use_llm = use_llm
        self.name = name
        self.max_samples = max_samples
        self.last_decision: Decision | None = None
        """The latest decision (its fused probabilities, rule and advice)."""
        self.stats = DecisionStats(self.agent.max_age)
        self.reasons: dict[str, int] = {}
        self.samples: list[dict] = []
        self.sample_contexts: list = []
        """The advisor context of each sample decision (for ``evaluate --explain``)."""
        self.result_extra: dict = {"role": "agent" if use_llm else "ablation"}
        self.trust: list[float] = []
        self.trust_context: list[tuple[float, float]] = []
        """Raw trend and volatility features of the advised decisions whose trust is kept."""

    def __call__(self, obs, mask, env) -> int:
        asked = self.advised.asked
        decision = self.advised.decide(obs, mask, env)
        if self.advised.asked > asked:
            self.stats.count_queries(1, 1)
        self._record(decision, env, obs)
        self.last_decision = decision
        return decision.action

    def decision_record(self) -> dict:
        """What the last decision's record holds besides its action: fused probabilities, fusion rule, advice."""
        d = self.last_decision
        if d is None:
            return {}
        advice = d.advice
        return {"probabilities": action_probabilities(d.probs), "rule": d.reason,
                "advice": None if advice is None else {
                    "action": ACTION_NAMES[advice.action], "confidence": round(float(advice.confidence), 3),
                    "reason": advice.reason, "age": advice.age_steps}}

    def _record(self, d: Decision, env, obs: np.ndarray) -> None:
        self.stats.add(np.array([d.rl_action]), np.array([d.rl_confidence]), np.array([d.action]), d.block)
        if d.advice is not None and self.fusion.mode == "learned" and self.use_llm:
            self.trust.append(d.trust)
            self.trust_context.append((float(obs[TREND_INDEX]), float(obs[VOLATILITY_INDEX])))
        self.reasons[d.reason] = self.reasons.get(d.reason, 0) + 1
        advice = d.advice
        if len(self.samples) < self.max_samples and (d.action != 0 or (advice is not None and advice.action != 0)):
            t = env.current_index
            self.samples.append({
                "time": str(self.market.bars.frame.index[t]), "price": float(self.market.bars.close[t]),
                "position": int(env.broker.side), "rl_action": ACTION_NAMES[d.rl_action],
                "rl_confidence": round(d.rl_confidence, 3),
                "llm_action": ACTION_NAMES[advice.action] if advice is not None else None,
                "llm_confidence": round(float(advice.confidence), 3) if advice is not None else None,
                "llm_reason": advice.reason if advice is not None else None,
                "advice_age": advice.age_steps if advice is not None else None,
                "executed": ACTION_NAMES[d.action], "rule": d.reason,
            })
            self.sample_contexts.append(context_from_market(self.market.bars, self.market.features, t,
                                                            env.account_snapshot(), env.action_masks()))
        values = self.stats.values()
        shown = {label(k): values.get(k) for k in ("llm/queries", "llm/query_rate_pct", "llm/advised_pct",
                                                   "fusion/agreement_pct", "fusion/override_pct",
                                                   "confidence/rl_avg", "confidence/llm_avg",
                                                   "llm/advice_age_mean_steps")}
        shown[label("fusion/risk_veto_pct")] = 100.0 * env.veto_steps / max(env.decision_steps, 1)
        self.result_extra.update({
            "llm": {
                **shown,
                "Veto counts": dict(env.veto_counts),
                "Fusion rules used": dict(self.reasons),
                "LLM weight": self.agent.llm_weight,
                "Fusion mode": self.fusion.mode,
                "Strategy": self.fusion.strategy,
            },
            "sample_decisions": self.samples,
        })

    def finish(self) -> None:
        """Learned fusion: add the gate's trust by trend and volatility bucket to ``result_extra``."""
        if not self.trust:
            return
        context = np.asarray(self.trust_context)
        trust = trust_buckets(np.asarray(self.trust), context[:, 0], context[:, 1])
        self.result_extra["trust"] = trust
        self.result_extra["llm"].update({GATE_LABELS[k]: v for k, v in trust.items()})
