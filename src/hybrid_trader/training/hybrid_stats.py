"""Phase 3 monitoring: statistics that prove the LLM takes part in training.

Measured on the training rollouts themselves (never on a side channel) and logged to
TensorBoard and ``progress.jsonl`` at the end of each rollout. Every key is defined once,
with its meaning and unit, in :mod:`hybrid_trader.llm.stats` (``DECISION_STATISTICS`` for
what is measured on the decisions, computed by ``agent.stats.DecisionStats`` as in
evaluation; ``ADVISOR_STATISTICS`` for the advisor's counters copied here). Also logged:
``fusion/veto_<CODE>``, veto counts by reason code (cumulative), and with learned fusion
the gate's statistics (``agent.gate.GATE_STATISTICS``: mean, spread, mean trust per trend
and volatility bucket).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from hybrid_trader.agent.advice_block import ADVICE, OBS_ADVICE
from hybrid_trader.agent.fusion import best_probability
from hybrid_trader.agent.gate import TREND_FEATURE, VOLATILITY_FEATURE, trust_buckets
from hybrid_trader.agent.stats import DecisionStats, configured_query_rate_pct
from hybrid_trader.features.names import FEATURE_NAMES
from hybrid_trader.llm.health import HEALTH_STAT_NAMES
from hybrid_trader.training.policy import RolloutDecision

TREND_INDEX = FEATURE_NAMES.index(TREND_FEATURE)
VOLATILITY_INDEX = FEATURE_NAMES.index(VOLATILITY_FEATURE)

ADVISOR_KEYS = ("llm/total_queries", "llm/avg_latency_ms", "llm/p95_latency_ms", "llm/error_rate", "llm/timeouts",
                "llm/errors", "llm/parse_failures", "llm/cache_hits", "llm/dropped", "llm/label_coverage",
                "llm/answer_lag_steps", *HEALTH_STAT_NAMES)
"""The advisor's statistics logged with each rollout (its health: errors by kind, circuit, stalls)."""


class HybridStatsCallback(BaseCallback):
    """Aggregates advice, fusion and veto statistics over each rollout."""

    def __init__(self, advice_env: Any, llm_config: Any) -> None:
        super().__init__()
        self.advice_env = advice_env
        self.llm_config = llm_config
        self.veto_counts: dict[str, int] = {}
        self.answers0 = 0.0
        self.submitted0 = advice_env.submitted
        self._reset()

    def _reset(self) -> None:
        self.stats = DecisionStats(self.llm_config.batching.max_age_steps)
        self.veto_steps = 0
        self.decision_steps = 0
        # per step: RL-only logits, masks, executed actions; reduced once at the end of the
        # rollout (per-step array work costs training time). The observations (their advice
        # blocks) are read then from the rollout buffer, which holds every step's already.
        self._rl_logits: list[th.Tensor] = []
        self._masks: list[np.ndarray | None] = []
        self._actions: list[np.ndarray] = []
        self._trust: list[th.Tensor] = []
        self.gate_values: dict[str, float] = {}

    def _on_rollout_start(self) -> None:
        self._reset()

    def _on_step(self) -> bool:
        decision: RolloutDecision | None = getattr(self.model.policy, "last_decision", None)
        if decision is None:
            return True
        self._rl_logits.append(decision.rl_logits)
        self._masks.append(decision.masks)
        if decision.trust is not None:
            self._trust.append(decision.trust)
        self._actions.append(self.locals["actions"])
        dones = self.locals["dones"]
        if dones.any():
            infos = self.locals["infos"]
            for i in np.flatnonzero(dones):
                info = infos[i]
                if "veto_steps" in info:
                    self.veto_steps += info["veto_steps"]
                    self.decision_steps += info["decision_steps"]
                    for code, count in info.get("veto_counts", {}).items():
                        self.veto_counts[code] = self.veto_counts.get(code, 0) + count
        return True

    def _rollout_obs(self) -> np.ndarray | None:
        """The rollout's observations ``(steps * n_envs, d)`` in step order, from the rollout buffer (None
        when it does not hold exactly the steps recorded here)."""
        buffer = getattr(self.model, "rollout_buffer", None)
        obs = getattr(buffer, "observations", None)
        steps = len(self._rl_logits)
        if not isinstance(obs, np.ndarray) or obs.ndim != 3 or getattr(buffer, "pos", -1) != steps:
            return None
        return obs[:steps].reshape(-1, obs.shape[-1])

    def _reduce(self) -> None:
        """Turn the rollout's per-step records into the decision statistics."""
        obs = self._rollout_obs() if self._rl_logits else None
        if obs is None:
            return
        logits = th.cat(self._rl_logits).cpu().numpy()
        masks = None if any(m is None for m in self._masks) else \
            np.concatenate([m for m in self._masks if m is not None])
        rl_best, rl_conf = best_probability(logits, masks)
        actions = np.concatenate([np.asarray(a).reshape(-1) for a in self._actions])
        blocks = obs[:, OBS_ADVICE]
        self.stats.add(rl_best, rl_conf, actions, blocks)
        if self._trust and len(self._trust) == len(self._rl_logits):
            self.gate_values = self._gate_values(obs, blocks)

    def _gate_values(self, obs: np.ndarray, blocks: np.ndarray) -> dict[str, float]:
        """Learned fusion: the gate's trust on the rollout's advised decisions, by trend and volatility."""
        trust = th.cat(self._trust).reshape(-1).cpu().numpy()
        advised = blocks[:, ADVICE.present] > 0.5
        obs = obs[advised]
        vec = self.model.get_vec_normalize_env()
        # the buckets are on raw feature values
        raw = np.asarray(vec.unnormalize_obs(obs) if vec is not None else obs)
        return trust_buckets(trust[advised], raw[:, TREND_INDEX], raw[:, VOLATILITY_INDEX])

    def _on_rollout_end(self) -> None:
        self._reduce()
        rec = self.logger.record
        advisor = self.advice_env.advisor.stats()
        for key in ADVISOR_KEYS:
            if key in advisor:
                rec(key, advisor[key])
        if "llm/abstain_rate" in advisor:
            rec("llm/abstain_rate_pct", 100.0 * float(advisor["llm/abstain_rate"] or 0.0))
        # Queries the model actually answered (cache hits included), not requests that were
        # replaced or dropped while it was busy: the seed's 0.5% failure must show here.
        answers = float(advisor.get("llm/total_queries", 0.0) or 0.0) + float(advisor.get("llm/cache_hits", 0.0) or 0.0)
        submitted = self.advice_env.submitted
        always_on = getattr(self.advice_env, "advise_batch", None) is not None
        if always_on:
            # every advised decision was answered for its own observation (age 0); the answers
            # to the observations after a rollout's last step are counted with the next rollout
            self.stats.count_queries(self.stats.advised, self.stats.advised)
        else:
            self.stats.count_queries(answers - self.answers0, submitted - self.submitted0)
        self.answers0, self.submitted0 = answers, submitted
        values = self.stats.values()
        values.pop("llm/queries")
        for key, value in values.items():
            rec(key, value)
        for key, value in self.gate_values.items():
            rec(key, value)
        teacher = getattr(self.advice_env, "teacher", None)
        if teacher is not None:
            for key, value in teacher.stats().items():
                rec(key, value)
        rec("llm/configured_query_rate_pct", 100.0 if always_on else configured_query_rate_pct(self.llm_config.query))
        rec("llm/max_advice_age_steps", self.llm_config.batching.max_age_steps)
        if self.decision_steps:
            rec("fusion/risk_veto_pct", 100.0 * self.veto_steps / self.decision_steps)
        for code, count in self.veto_counts.items():
            rec(f"fusion/veto_{code}", count)
