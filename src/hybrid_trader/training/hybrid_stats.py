"""Phase 3 monitoring: statistics that prove the LLM takes part in training.

Measured on the training rollouts themselves (never on a side channel) and logged to
TensorBoard and ``progress.jsonl`` at the end of each rollout, under the seed's names
plus a few more:

==============================  =============================================================
key                             meaning
==============================  =============================================================
``llm/total_queries``           queries the advisor answered or is answering (cumulative)
``llm/avg_latency_ms``          mean submit-to-answer latency
``llm/error_rate``              share of queries that errored or timed out [%]
``llm/query_rate_pct``          queries answered (cache hits included) per decision step [%]
``llm/request_rate_pct``        share of decision steps that requested advice [%] (requests a busy
                                model cannot take are replaced by newer ones, see ``llm/dropped``)
``llm/configured_query_rate_pct`` the rate the query policy's interval alone implies [%]
``llm/advised_pct``             share of decision steps whose observation carried fresh advice [%]
``llm/advice_age_mean_steps``   mean age of the advice used [steps]
``llm/max_advice_age_steps``    the configured limit on that age [steps]
``llm/answer_lag_steps``        steps taken while the model answered its last batch [steps]
``llm/abstain_rate_pct``        share of answers that abstained [%]
``confidence/rl_avg``           mean probability of the RL-only best action (masked)
``confidence/llm_avg``          mean confidence of the advice used
``fusion/agreement_pct``        RL-only best action == LLM's action, over advised steps [%]
``fusion/override_pct``         executed action != RL-only best action, over all steps [%]
``fusion/risk_veto_pct``        decision steps at which the risk veto blocked an action [%]
``fusion/veto_<CODE>``          veto counts by reason code (cumulative)
==============================  =============================================================
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback


class HybridStatsCallback(BaseCallback):
    """Aggregates advice, fusion and veto statistics over each rollout."""

    def __init__(self, advice_env: Any, llm_config: Any) -> None:
        super().__init__()
        self.advice_env = advice_env
        self.llm_config = llm_config
        self.veto_counts: dict[str, int] = {}
        self.queries0 = 0.0
        self._reset()

    def _reset(self) -> None:
        self.n = 0
        self.advised = 0
        self.agree = 0
        self.override = 0
        self.rl_conf_sum = 0.0
        self.llm_conf_sum = 0.0
        self.age_sum = 0.0
        self.submitted0 = self.advice_env.submitted
        self.steps0 = self.advice_env.total_steps
        self.veto_steps = 0
        self.decision_steps = 0
        # per step: RL-only logits, masks, executed actions, advice block; reduced once at
        # the end of the rollout (per-step array work costs training time)
        self._rl_logits: list[th.Tensor] = []
        self._masks: list[np.ndarray] = []
        self._actions: list[np.ndarray] = []
        self._advice: list[th.Tensor] = []

    def _on_rollout_start(self) -> None:
        self._reset()

    @property
    def _needs_rl_confidence(self) -> bool:
        """Whether the advisor's query policy reads the RL confidence (its uncertainty trigger)."""
        q = self.llm_config.query
        return q.mode == "selective" and "uncertainty" in q.triggers

    def _on_step(self) -> bool:
        rl_logits = self.model.policy.last_rl_logits
        if rl_logits is None:
            return True
        masks = self.locals.get("action_masks")
        if self._needs_rl_confidence:
            # the advisor computes an environment's confidence from these only when it asks
            self.advice_env.rl_logits = rl_logits.tolist()
            self.advice_env.rl_masks = None if masks is None else _as_masks(masks, rl_logits).tolist()
        self._rl_logits.append(rl_logits)
        self._masks.append(masks)
        self._actions.append(self.locals["actions"])
        obs = self.locals.get("obs_tensor")
        if isinstance(obs, th.Tensor):
            self._advice.append(obs)  # sliced to the advice block at the end of the rollout
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

    def _reduce(self) -> None:
        """Turn the rollout's per-step records into the counts the logs report."""
        if not self._rl_logits:
            return
        logits = th.cat(self._rl_logits).cpu().numpy()
        masks = None if any(m is None for m in self._masks) else \
            np.concatenate([_as_masks(m, t) for m, t in zip(self._masks, self._rl_logits)])
        rl_best, rl_conf = _best_probability(logits, masks)
        actions = np.concatenate([np.asarray(a).reshape(-1) for a in self._actions])
        self.n = len(actions)
        self.rl_conf_sum = float(rl_conf.sum())
        self.override = int((actions != rl_best).sum())
        if len(self._advice) == len(self._rl_logits):
            advice = th.cat([obs[:, -9:] for obs in self._advice]).cpu().numpy()
            present = advice[:, 8] > 0.5
            if present.any():
                llm_best = advice[present, :6].argmax(axis=1)
                self.advised = int(present.sum())
                self.agree = int((llm_best == rl_best[present]).sum())
                self.llm_conf_sum = float(advice[present, 6].sum())
                self.age_sum = float(advice[present, 7].sum()) * self.llm_config.batching.max_age_steps

    def _on_rollout_end(self) -> None:
        self._reduce()
        rec = self.logger.record
        stats = self.advice_env.advisor.stats()
        for key in ("llm/total_queries", "llm/avg_latency_ms", "llm/p95_latency_ms", "llm/error_rate",
                    "llm/timeouts", "llm/errors", "llm/parse_failures", "llm/cache_hits", "llm/dropped",
                    "llm/label_coverage", "llm/answer_lag_steps"):
            if key in stats:
                rec(key, stats[key])
        if "llm/abstain_rate" in stats:
            rec("llm/abstain_rate_pct", 100.0 * float(stats["llm/abstain_rate"] or 0.0))
        steps = self.advice_env.total_steps - self.steps0
        queries = float(stats.get("llm/total_queries", 0.0) or 0.0) + float(stats.get("llm/cache_hits", 0.0) or 0.0)
        if steps:
            # Queries the model actually answered (cache hits included), not requests that were
            # replaced or dropped while it was busy: the seed's 0.5% failure must show here.
            rec("llm/query_rate_pct", 100.0 * (queries - self.queries0) / steps)
            rec("llm/request_rate_pct", 100.0 * (self.advice_env.submitted - self.submitted0) / steps)
        self.queries0 = queries
        q = self.llm_config.query
        rec("llm/configured_query_rate_pct", 100.0 if q.mode == "always" else
            (0.0 if q.mode == "never" else 100.0 / max(q.interval, 1)))
        rec("llm/max_advice_age_steps", self.llm_config.batching.max_age_steps)
        if self.n:
            rec("llm/advised_pct", 100.0 * self.advised / self.n)
            rec("confidence/rl_avg", self.rl_conf_sum / self.n)
            rec("fusion/override_pct", 100.0 * self.override / self.n)
        if self.advised:
            rec("confidence/llm_avg", self.llm_conf_sum / self.advised)
            rec("fusion/agreement_pct", 100.0 * self.agree / self.advised)
            rec("llm/advice_age_mean_steps", self.age_sum / self.advised)
        if self.decision_steps:
            rec("fusion/risk_veto_pct", 100.0 * self.veto_steps / self.decision_steps)
        for code, count in self.veto_counts.items():
            rec(f"fusion/veto_{code}", count)


def _as_masks(masks: Any, logits: th.Tensor) -> np.ndarray | None:
    """One rollout step's action masks as a bool array shaped like its logits (None: no masks)."""
    return None if masks is None else np.asarray(masks, dtype=bool).reshape(logits.shape)


def _best_probability(logits: np.ndarray, masks: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Best legal action of each row and its probability under softmax(logits) over the legal actions."""
    if masks is not None:
        logits = np.where(masks, logits, -np.inf)
    # probability of the best action = 1 / sum(exp(logits - max))
    return logits.argmax(axis=1), 1.0 / np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1)
