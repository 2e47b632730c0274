"""LLM statistics: every one defined once (:data:`STATISTICS`), and the advisor's counters.

Two families, each key with its meaning and unit:

- :data:`ADVISOR_STATISTICS`: what the advisor counts (:meth:`AdvisorStats.snapshot`,
  ``advisor.stats()``); counters are totals since the advisor was built;
- :data:`DECISION_STATISTICS`: what is measured on the decisions (training rollouts and
  evaluation alike, computed by ``hybrid_trader.agent.stats.DecisionStats``).
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from hybrid_trader.llm.advice import (
    LLM_ERROR,
    LLM_ILLEGAL_ACTION,
    LLM_LOW_COVERAGE,
    LLM_PARSE_FAILURE,
    LLM_TIMEOUT,
    Advice,
)


@dataclass(frozen=True)
class Statistic:
    """One LLM statistic: its key (a TensorBoard tag), meaning and unit, defined once."""

    key: str
    """TensorBoard / progress.jsonl tag."""
    meaning: str
    """What is measured."""
    unit: str
    """Unit: count, ms, %, fraction, 0-1, steps."""
    label: str = ""
    """Label in evaluation results and reports ('' : the key)."""


ADVISOR_STATISTICS: tuple[Statistic, ...] = (
    Statistic("llm/total_queries", "model queries completed (answered or abstained; cache hits excluded)", "count"),
    Statistic("llm/avg_latency_ms", "mean time from submit to answer of model queries", "ms"),
    Statistic("llm/p95_latency_ms", "95th percentile of that latency over the last 2048 queries", "ms"),
    Statistic("llm/error_rate", "share of model queries that failed: errors + timeouts + parse failures", "fraction"),
    Statistic("confidence/llm_avg", "mean confidence of delivered, non-abstained advice (cache reuse included)", "0-1"),
    Statistic("llm/calls", "submit() calls", "count"),
    Statistic("llm/submitted", "submit() calls the query policy accepted", "count"),
    Statistic("llm/skipped", "submit() calls the query policy skipped (not due, cooldown)", "count"),
    Statistic("llm/accepted_pct", "submit() calls the query policy accepted: submitted / calls", "%"),
    Statistic("llm/cache_hits", "submitted queries answered from the cache", "count"),
    Statistic("llm/cache_hit_rate", "cache hits / submitted", "fraction"),
    Statistic("llm/answered", "model queries that produced advice", "count"),
    Statistic("llm/abstained", "model queries that abstained, all reasons", "count"),
    Statistic("llm/abstain_rate", "abstained / total_queries", "fraction"),
    Statistic("llm/errors", "LLM_ERROR abstentions", "count"),
    Statistic("llm/timeouts", "LLM_TIMEOUT abstentions", "count"),
    Statistic("llm/parse_failures", "LLM_PARSE_FAILURE abstentions", "count"),
    Statistic("llm/illegal_actions", "LLM_ILLEGAL_ACTION abstentions", "count"),
    Statistic("llm/low_coverage", "LLM_LOW_COVERAGE abstentions", "count"),
    Statistic("llm/label_coverage", "mean probability mass of the legal action names (scoring)", "0-1"),
    Statistic("llm/dropped", "queued queries discarded before answering: superseded, queue full, closed, reset",
              "count"),
    Statistic("llm/expired", "ready advice poll() refused as older than batching.max_age_steps", "count"),
    Statistic("llm/pending", "queries waiting for the worker now", "count"),
    Statistic("llm/batches", "forward passes / batch calls", "count"),
    Statistic("llm/batch_size_avg", "mean queries per batch", "count"),
    Statistic("llm/advice_age_avg_steps", "mean age of the advice poll() returned", "steps"),
    Statistic("llm/answer_lag_steps", "steps the callers took while the model answered the last batch", "steps"),
    Statistic("llm/poll_hit_rate", "poll() calls that returned advice", "fraction"),
)
"""What :meth:`AdvisorStats.snapshot` (``advisor.stats()``) returns."""

DECISION_STATISTICS: tuple[Statistic, ...] = (
    Statistic("llm/query_rate_pct", "model answers (cache hits included) per decision step", "%",
              "LLM query rate [%]"),
    Statistic("llm/request_rate_pct", "decision steps that requested advice (a busy model replaces older "
              "requests by newer ones, see llm/dropped)", "%"),
    Statistic("llm/configured_query_rate_pct", "the rate the query policy's mode and interval alone imply", "%"),
    Statistic("llm/queries", "model answers (cache hits included) the decisions asked for", "count", "LLM queries"),
    Statistic("llm/advised_pct", "decision steps whose observation carried fresh advice", "%",
              "Advised decisions [%]"),
    Statistic("llm/advice_age_mean_steps", "mean age of the advice used", "steps", "Advice age (avg) [steps]"),
    Statistic("llm/max_advice_age_steps", "the configured limit on that age (llm.batching.max_age_steps)", "steps"),
    Statistic("llm/abstain_rate_pct", "model answers that abstained", "%"),
    Statistic("confidence/rl_avg", "mean RL-only probability of the RL's best legal action", "0-1",
              "RL confidence (avg)"),
    Statistic("confidence/llm_avg", "mean confidence of the advice used (advisor.stats(): of the advice "
              "delivered)", "0-1", "LLM confidence (avg)"),
    Statistic("fusion/agreement_pct", "RL-only best action == LLM's action, over advised steps", "%",
              "Agreement RL-LLM [%]"),
    Statistic("fusion/override_pct", "executed action != RL-only best action, over all steps", "%",
              "Override of RL choice [%]"),
    Statistic("fusion/risk_veto_pct", "decision steps at which the risk veto blocked an action", "%",
              "Risk veto [% of decisions]"),
)
"""Measured on the decisions themselves: training's rollouts (``HybridStatsCallback``) and
evaluation (``HybridAgentPolicy``), both through ``agent.stats.DecisionStats``."""

STATISTICS: dict[str, Statistic] = {s.key: s for s in (*ADVISOR_STATISTICS, *DECISION_STATISTICS)}
"""Every LLM statistic by key (``confidence/llm_avg`` is the decisions' one)."""
STAT_NAMES: dict[str, str] = {s.key: f"{s.meaning} [{s.unit}]" for s in ADVISOR_STATISTICS}
"""Keys of ``advisor.stats()`` and their meaning with unit."""


def label(key: str) -> str:
    """The report label of a statistic (its key when it has none)."""
    stat = STATISTICS.get(key)
    return stat.label if stat is not None and stat.label else key

_FAILURES = (LLM_ERROR, LLM_TIMEOUT, LLM_PARSE_FAILURE)


class AdvisorStats:
    """Thread-safe counters of one advisor."""

    def __init__(self, window: int = 2048) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.submitted = 0
        self.skipped = 0
        self.cache_hits = 0
        self.total_queries = 0
        self.answered = 0
        self.abstained: Counter[str] = Counter()
        self.dropped = 0
        self.expired = 0
        self.batches = 0
        self.answer_lag_steps = 0
        self.batch_items = 0
        self.latency_sum = 0.0
        self._latencies: deque[float] = deque(maxlen=window)
        self.confidence_sum = 0.0
        self.confidence_n = 0
        self.coverage_sum = 0.0
        self.coverage_n = 0
        self.polls = 0
        self.poll_hits = 0
        self.age_sum = 0
        self.pending = 0

    # ----------------------------------------------------------- main thread
    def on_submit(self, accepted: bool) -> None:
        with self._lock:
            self.calls += 1
            if accepted:
                self.submitted += 1
            else:
                self.skipped += 1

    def on_cache_hit(self, advice: Advice) -> None:
        with self._lock:
            self.cache_hits += 1
            if not advice.abstained:
                self.confidence_sum += advice.confidence
                self.confidence_n += 1

    def on_poll(self, age: int | None, expired: bool = False) -> None:
        with self._lock:
            self.polls += 1
            if expired:
                self.expired += 1
            if age is not None:
                self.poll_hits += 1
                self.age_sum += age

    def on_dropped(self, n: int = 1) -> None:
        with self._lock:
            self.dropped += n

    # ----------------------------------------------------------- worker side
    def on_batch(self, size: int) -> None:
        with self._lock:
            self.batches += 1
            self.batch_items += size

    def on_result(self, advice: Advice, scored: bool) -> None:
        """A model query finished (answered or abstained)."""
        with self._lock:
            self.total_queries += 1
            self.latency_sum += advice.latency_ms
            self._latencies.append(advice.latency_ms)
            if advice.abstained:
                self.abstained[advice.abstain_reason or LLM_ERROR] += 1
            else:
                self.answered += 1
                self.confidence_sum += advice.confidence
                self.confidence_n += 1
            if scored and advice.abstain_reason not in (LLM_ERROR, LLM_TIMEOUT):
                self.coverage_sum += advice.coverage
                self.coverage_n += 1

    # ----------------------------------------------------------------- output
    def snapshot(self) -> dict[str, float]:
        """All statistics under their TensorBoard names (see :data:`STAT_NAMES`)."""
        with self._lock:
            n = self.total_queries
            failures = sum(self.abstained[c] for c in _FAILURES)
            lat = np.fromiter(self._latencies, dtype=np.float64) if self._latencies else None
            out = {
                "llm/total_queries": float(n),
                "llm/avg_latency_ms": self.latency_sum / n if n else 0.0,
                "llm/p95_latency_ms": float(np.percentile(lat, 95)) if lat is not None else 0.0,
                "llm/error_rate": failures / n if n else 0.0,
                "confidence/llm_avg": self.confidence_sum / self.confidence_n if self.confidence_n else 0.0,
                "llm/calls": float(self.calls),
                "llm/submitted": float(self.submitted),
                "llm/skipped": float(self.skipped),
                "llm/accepted_pct": 100.0 * self.submitted / self.calls if self.calls else 0.0,
                "llm/cache_hits": float(self.cache_hits),
                "llm/cache_hit_rate": self.cache_hits / self.submitted if self.submitted else 0.0,
                "llm/answered": float(self.answered),
                "llm/abstained": float(sum(self.abstained.values())),
                "llm/abstain_rate": sum(self.abstained.values()) / n if n else 0.0,
                "llm/errors": float(self.abstained[LLM_ERROR]),
                "llm/timeouts": float(self.abstained[LLM_TIMEOUT]),
                "llm/parse_failures": float(self.abstained[LLM_PARSE_FAILURE]),
                "llm/illegal_actions": float(self.abstained[LLM_ILLEGAL_ACTION]),
                "llm/low_coverage": float(self.abstained[LLM_LOW_COVERAGE]),
                "llm/label_coverage": self.coverage_sum / self.coverage_n if self.coverage_n else 0.0,
                "llm/dropped": float(self.dropped),
                "llm/expired": float(self.expired),
                "llm/pending": float(self.pending),
                "llm/batches": float(self.batches),
                "llm/batch_size_avg": self.batch_items / self.batches if self.batches else 0.0,
                "llm/advice_age_avg_steps": self.age_sum / self.poll_hits if self.poll_hits else 0.0,
                "llm/poll_hit_rate": self.poll_hits / self.polls if self.polls else 0.0,
                "llm/answer_lag_steps": float(self.answer_lag_steps),
            }
        return out
