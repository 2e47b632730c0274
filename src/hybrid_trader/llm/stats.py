"""Advisor statistics, exposed under TensorBoard names (seed 001's plus ours).

Every key of :meth:`AdvisorStats.snapshot` is a TensorBoard tag; units are in the
docs table (docs/LLM.md). Counters are totals since the advisor was built.
"""

from __future__ import annotations

import threading
from collections import Counter, deque

import numpy as np

from hybrid_trader.llm.advice import (
    LLM_ERROR,
    LLM_ILLEGAL_ACTION,
    LLM_LOW_COVERAGE,
    LLM_PARSE_FAILURE,
    LLM_TIMEOUT,
    Advice,
)

STAT_NAMES: dict[str, str] = {
    "llm/total_queries": "model queries completed (answered or abstained; cache hits excluded) [count]",
    "llm/avg_latency_ms": "mean time from submit to answer of model queries [ms]",
    "llm/p95_latency_ms": "95th percentile of that latency over the last 2048 queries [ms]",
    "llm/error_rate": "share of model queries that failed: errors + timeouts + parse failures [fraction]",
    "confidence/llm_avg": "mean confidence of delivered, non-abstained advice (cache reuse included) [0-1]",
    "llm/calls": "submit() calls [count]",
    "llm/submitted": "submit() calls the query policy accepted [count]",
    "llm/skipped": "submit() calls the query policy skipped (not due, cooldown) [count]",
    "llm/query_rate_pct": "submitted / calls [%]",
    "llm/cache_hits": "submitted queries answered from the cache [count]",
    "llm/cache_hit_rate": "cache hits / submitted [fraction]",
    "llm/answered": "model queries that produced advice [count]",
    "llm/abstained": "model queries that abstained, all reasons [count]",
    "llm/abstain_rate": "abstained / total_queries [fraction]",
    "llm/errors": "LLM_ERROR abstentions [count]",
    "llm/timeouts": "LLM_TIMEOUT abstentions [count]",
    "llm/parse_failures": "LLM_PARSE_FAILURE abstentions [count]",
    "llm/illegal_actions": "LLM_ILLEGAL_ACTION abstentions [count]",
    "llm/low_coverage": "LLM_LOW_COVERAGE abstentions [count]",
    "llm/label_coverage": "mean probability mass of the legal action names (scoring) [0-1]",
    "llm/dropped": "queued queries discarded before answering: superseded, queue full, closed, reset [count]",
    "llm/expired": "ready advice poll() refused as older than batching.max_age_steps [count]",
    "llm/pending": "queries waiting for the worker now [count]",
    "llm/batches": "forward passes / batch calls [count]",
    "llm/batch_size_avg": "mean queries per batch [count]",
    "llm/advice_age_avg_steps": "mean age of the advice poll() returned [steps]",
    "llm/answer_lag_steps": "steps the callers took while the model answered the last batch [steps]",
    "llm/poll_hit_rate": "poll() calls that returned advice [fraction]",
}

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
                "llm/query_rate_pct": 100.0 * self.submitted / self.calls if self.calls else 0.0,
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
