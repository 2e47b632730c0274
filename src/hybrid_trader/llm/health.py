"""The advisor's view of its back end's health: errors by kind, a circuit breaker, a stall watch.

- :class:`AdvisorHealth` counts failed queries by kind (:data:`~hybrid_trader.llm.backends.base.ERROR_KINDS`)
  and opens a **circuit** after ``batching.circuit_errors`` consecutive failed back-end
  calls: for ``batching.circuit_cooldown_s`` no query is sent (the advisor abstains at
  once with :data:`LLM_CIRCUIT_OPEN`, so callers stop waiting on a failing server and
  decide RL-only), then one probe call tries again; a success closes the circuit.
  Opening and closing are logged as warnings, and :meth:`AdvisorHealth.rl_only_notice`
  says how much of a run went without advice.
- :class:`StallWatch` reports a back-end call that has not returned after
  ``batching.stall_warn_s`` (then every :data:`STALL_REPEAT_S`) while it waits, naming
  the server, instead of staying silent until the request timeout.

Statistics (:meth:`AdvisorHealth.snapshot`) use the names of :data:`HEALTH_STAT_NAMES`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from hybrid_trader.llm.backends.base import ERROR_KINDS, ERROR_PARSE

log = logging.getLogger("hybrid_trader.llm.advisor")

LLM_CIRCUIT_OPEN = "LLM_CIRCUIT_OPEN"
"""Abstention code: the circuit is open, the query was not sent (the decision is RL-only)."""

STALL_REPEAT_S = 30.0
"""After the first stall warning, a call still waiting is reported again every this many seconds [s]."""

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

HEALTH_STAT_NAMES: dict[str, str] = {
    "llm/error_rate_pct": "model queries that failed (any kind below) / model queries sent [%]",
    **{f"llm/errors_{kind}": f"model queries that failed with kind '{kind}' [count]" for kind in ERROR_KINDS},
    "llm/consecutive_errors": "back-end calls that failed in a row, now [count]",
    "llm/circuit_open": "1 while the circuit is open (no query sent, decisions RL-only), else 0",
    "llm/circuit_opened": "times the circuit opened [count]",
    "llm/circuit_skipped": "queries not sent because the circuit was open [count]",
    "llm/stalls": "back-end calls reported as stalled (unanswered after batching.stall_warn_s) [count]",
}
"""Statistics the advisor adds to :class:`~hybrid_trader.llm.stats.AdvisorStats` (TensorBoard names)."""


class AdvisorHealth:
    """Thread-safe error counts and circuit breaker of one advisor."""

    def __init__(self, circuit_errors: int, cooldown_s: float, describe: Callable[[], str] = lambda: "LLM back end",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.circuit_errors = int(circuit_errors)
        self.cooldown_s = float(cooldown_s)
        self._describe = describe
        self._clock = clock
        self._lock = threading.Lock()
        self.errors: Counter[str] = Counter()
        """Failed model queries by kind."""
        self.queries = 0
        """Model queries sent to the back end (each query of a failed batch call counts)."""
        self.consecutive = 0
        """Back-end calls failed in a row."""
        self.state = CLOSED
        self.open_until = 0.0
        self.times_opened = 0
        self.skipped = 0
        self.stalls = 0
        self.last_error = ""
        """The last failure's message (already redacted)."""

    # ------------------------------------------------------------------ circuit
    @property
    def circuit_open(self) -> bool:
        """The circuit is open or half-open (a probe in flight): queries are not sent."""
        return self.state != CLOSED

    def blocked(self) -> bool:
        """No query should be sent now (cheap, lock-free: called on every submit)."""
        state = self.state
        return state == HALF_OPEN or (state == OPEN and self._clock() < self.open_until)

    def allow(self) -> bool:
        """Whether a back-end call may go ahead now; after the cool-down, the first caller is the probe."""
        if self.state == CLOSED:
            return True
        with self._lock:
            if self.state == OPEN and self._clock() >= self.open_until:
                self.state = HALF_OPEN
                return True
            return self.state == CLOSED

    def on_skipped(self, n: int = 1) -> None:
        with self._lock:
            self.skipped += n

    def on_success(self, n: int) -> None:
        """A back-end call answered ``n`` queries."""
        with self._lock:
            self.queries += n
            self.consecutive = 0
            reopened = self.state != CLOSED
            self.state = CLOSED
        if reopened:
            log.warning("LLM back end %s answers again: circuit closed, advice resumes", self._describe())

    def on_parse_failure(self, n: int = 1) -> None:
        """Generation mode: ``n`` answers named no action (the call itself succeeded)."""
        with self._lock:
            self.errors[ERROR_PARSE] += n

    def on_failure(self, kind: str, message: str, n: int) -> None:
        """A back-end call for ``n`` queries failed with ``kind``; ``message`` must be redacted already."""
        with self._lock:
            self.queries += n
            self.errors[kind] += n
            self.consecutive += 1
            self.last_error = message
            probe_failed = self.state == HALF_OPEN
            opens = probe_failed or (self.state == CLOSED and self.circuit_errors > 0
                                     and self.consecutive >= self.circuit_errors)
            if opens:
                self.state = OPEN
                self.open_until = self._clock() + self.cooldown_s
                if not probe_failed:
                    self.times_opened += 1
            consecutive = self.consecutive
        if opens and not probe_failed:
            log.warning(
                "LLM CIRCUIT OPEN: %d consecutive failed calls to %s (last: %s: %s). No query is sent for %.0f s "
                "and decisions are RL-only (no advice) until the server answers again; fix the server or run "
                "without the LLM.", consecutive, self._describe(), kind, message, self.cooldown_s)
        elif opens:
            log.info("LLM back end %s still failing (%s); next probe in %.0f s", self._describe(), kind,
                     self.cooldown_s)

    # ------------------------------------------------------------------ output
    def dominant_error(self) -> str | None:
        """The most frequent error kind, or None when nothing failed."""
        with self._lock:
            return self.errors.most_common(1)[0][0] if self.errors else None

    def snapshot(self) -> dict[str, float]:
        """Statistics under :data:`HEALTH_STAT_NAMES`."""
        with self._lock:
            failed = sum(self.errors.values())
            out = {"llm/error_rate_pct": 100.0 * min(failed, self.queries) / self.queries if self.queries else 0.0}
            out.update({f"llm/errors_{kind}": float(self.errors[kind]) for kind in ERROR_KINDS})
            out.update({"llm/consecutive_errors": float(self.consecutive),
                        "llm/circuit_open": float(self.state != CLOSED),
                        "llm/circuit_opened": float(self.times_opened),
                        "llm/circuit_skipped": float(self.skipped),
                        "llm/stalls": float(self.stalls)})
        return out

    def rl_only_notice(self) -> str | None:
        """A loud sentence when advice was missing because of failures (None when the back end was healthy)."""
        with self._lock:
            failed = sum(v for k, v in self.errors.items() if k != ERROR_PARSE)
            if not self.times_opened and not (self.queries and failed == self.queries):
                return None
            dominant = self.errors.most_common(1)[0][0] if self.errors else "unknown"
            return (f"LLM advice was missing: {failed} of {self.queries} queries to {self._describe()} failed "
                    f"(mostly {dominant}; last: {self.last_error}), the circuit opened {self.times_opened} time(s) "
                    f"and {self.skipped} queries were not sent. Decisions without advice were RL-only: do not read "
                    "these results as the hybrid agent's.")


class StallWatch:
    """Reports a back-end call still waiting after ``first_s`` seconds (then every ``repeat_s``), while it waits.

    One daemon thread per advisor, started on the first call, stopped by :meth:`close`;
    :meth:`begin` and :meth:`end` cost a lock each on the caller's side.
    """

    def __init__(self, first_s: float, describe: Callable[[], str], health: AdvisorHealth | None = None,
                 repeat_s: float = STALL_REPEAT_S, timeout_s: float | None = None) -> None:
        self.first_s = float(first_s)
        self.repeat_s = float(repeat_s)
        self.timeout_s = timeout_s
        self._describe = describe
        self._health = health
        self._cond = threading.Condition(threading.Lock())
        self._since: float | None = None
        self._call = 0
        self._stop = False
        self._thread: threading.Thread | None = None

    def begin(self) -> None:
        with self._cond:
            if self._stop:
                return
            self._call += 1
            self._since = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="llm-stall-watch", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def end(self) -> None:
        with self._cond:
            self._since = None
            self._cond.notify_all()

    def _watch(self) -> None:
        with self._cond:
            while not self._stop:
                if self._since is None:
                    self._cond.wait()
                    continue
                call, since = self._call, self._since
                due = since + self.first_s
                while not self._stop and self._call == call and self._since is not None:
                    remaining = due - time.monotonic()
                    if remaining > 0:
                        self._cond.wait(remaining)
                        continue
                    waited = time.monotonic() - since
                    if self._health is not None and due == since + self.first_s:
                        with self._health._lock:
                            self._health.stalls += 1
                    limit = f" (request timeout {self.timeout_s:g} s)" if self.timeout_s else ""
                    log.warning("LLM back end %s has not answered for %.0f s%s; still waiting",
                                self._describe(), waited, limit)
                    due += self.repeat_s

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
