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

from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.agent.advice_block import ADVICE, OBS_ADVICE
from hybrid_trader.agent.fusion import best_probability
from hybrid_trader.agent.gate import TREND_FEATURE, VOLATILITY_FEATURE, trust_buckets
from hybrid_trader.agent.stats import DecisionStats, configured_query_rate_pct
from hybrid_trader.features.names import FEATURE_NAMES
from hybrid_trader.llm.health import HEALTH_STAT_NAMES

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
        self._log: list | None = None
        """This rollout's steps as the policy logged them (``HybridMaskablePolicy.decision_log``)."""
        self._reset()

    def _reset(self) -> None:
        self.stats = DecisionStats(self.llm_config.batching.max_age_steps)
        self.veto_steps = 0
        self.decision_steps = 0
        self.steps = 0
        """Vector steps of this rollout (the decisions themselves are read from the rollout buffer at its end)."""
        self.gate_values: dict[str, float] = {}

    def _on_rollout_start(self) -> None:
        self._reset()
        self._log = []
        policy: Any = self.model.policy
        policy.decision_log = self._log  # each rollout step appends its RL-only logits (and trust)

    def _on_training_end(self) -> None:
        policy: Any = self.model.policy
        policy.decision_log = None

    def _on_step(self) -> bool:
        self.steps += 1
        dones = self.locals["dones"]
        if True in dones.tolist():  # a Python scan of a few bools: numpy's any() costs ten times more
            infos = self.locals["infos"]
            for i in np.flatnonzero(dones):
                info = infos[i]
                if "veto_steps" in info:
                    self.veto_steps += info["veto_steps"]
                    self.decision_steps += info["decision_steps"]
                    for code, count in info.get("veto_counts", {}).items():
                        self.veto_counts[code] = self.veto_counts.get(code, 0) + count
        return True

    def _rollout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The rollout's observations ``(steps * n_envs, d)``, legal actions and executed actions in step order,
        from the rollout buffer (None when it does not hold exactly the steps counted here)."""
        buffer: Any = getattr(self.model, "rollout_buffer", None)
        obs = getattr(buffer, "observations", None)
        if not isinstance(obs, np.ndarray) or obs.ndim != 3 or getattr(buffer, "pos", -1) != self.steps:
            return None
        n = self.steps
        masks = getattr(buffer, "action_masks", None)
        masks = np.ones((n * obs.shape[1], N_ACTIONS), bool) if masks is None else \
            masks[:n].reshape(-1, N_ACTIONS) > 0.5
        return obs[:n].reshape(-1, obs.shape[-1]), masks, np.asarray(buffer.actions[:n]).reshape(-1)

    def decisions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None:
        """The rollout's decisions from the rollout buffer and the policy that collected it: ``(observations,
        RL-only logits, legal actions, executed actions, advice blocks, learned trust or None)``, one row a
        decision in step order (None when the buffer does not hold exactly this rollout's steps).

        The RL-only logits (and the learned gate's trust) are those each step appended to the
        policy's ``decision_log``; when that log does not match the buffer's steps, they are
        computed again, in one batched forward of the unchanged policy over the stored
        observations.
        """
        rollout = self._rollout() if self.steps else None
        if rollout is None:
            return None
        obs, masks, actions = rollout
        policy: Any = self.model.policy
        log = self._log
        if log is not None and len(log) == self.steps:  # what each step computed
            rl_logits = th.cat([logits for logits, _ in log])
            trusts = [trust for _, trust in log]
            trust = None if trusts[0] is None else th.cat(trusts)
        else:  # the same, computed again from the stored observations by the unchanged policy
            with th.no_grad():
                tensor = th.as_tensor(obs, device=policy.device)
                rl_logits = policy.rl_logits(tensor)
                trust = policy.trust(tensor, rl_logits, th.as_tensor(masks, device=policy.device))
        return (obs, rl_logits.cpu().numpy(), masks, actions, obs[:, OBS_ADVICE],
                None if trust is None else trust.reshape(-1).cpu().numpy())

    def _reduce(self) -> None:
        """The rollout's decision statistics (:meth:`decisions`)."""
        rollout = self.decisions()
        if rollout is None:
            return
        obs, rl_logits, masks, actions, blocks, trust = rollout
        rl_best, rl_conf = best_probability(rl_logits, masks)
        self.stats.add(rl_best, rl_conf, actions, blocks)
        if trust is not None:
            self.gate_values = self._gate_values(obs, blocks, trust)

    def _gate_values(self, obs: np.ndarray, blocks: np.ndarray, trust: np.ndarray) -> dict[str, float]:
        """Learned fusion: the gate's trust on the rollout's advised decisions, by trend and volatility."""
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
        # replaced or dropped while it was busy: a query rate near 0.5% (asking too rarely) must show here.
        answers = float(advisor.get("llm/total_queries", 0.0) or 0.0) + float(advisor.get("llm/cache_hits", 0.0) or 0.0)
        submitted = self.advice_env.submitted
        always_on = getattr(self.advice_env, "advise_into", None) is not None
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
