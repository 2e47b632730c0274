"""The advisor: selective, cached, asynchronous and batched queries that never block the caller.

Training loop (main process, policy side)::

    advisor = build_advisor(config)                   # loads the model, starts nothing yet
    ...
    for each vectorised step t:
        for i in range(n_envs):
            advice = advisor.poll(i, t)                # latest ready advice (or None), with age_steps
            ...                                        # use it in the observation / logit prior
            advisor.submit(i, t, contexts[i], rl_confidence=conf[i])   # returns at once
        on episode end of env i: advisor.reset(i)
    advisor.close()                                   # also runs at interpreter exit

``submit`` applies the query policy (:mod:`query_policy`) and the cache (:mod:`cache`)
*inside*, in the caller's thread, in microseconds; a query that needs the model goes to
a queue holding at most one query per environment (a newer submit supersedes an older
one still waiting; while the model is busy with a batch, only once the waiting one is
``batching.refresh_steps`` old, and not at all while the model answers more slowly than
``batching.max_age_steps`` steps, three batches in a row: a busy model would otherwise make the caller build a
context every step that nobody reads). One worker thread takes up to ``batching.max_batch`` queries (waiting
at most ``batching.max_wait_ms`` after the oldest arrived) and answers them with one
back-end call. Results land in a per-environment slot; ``poll`` reads it and tells its
age in steps; advice older than ``batching.max_age_steps`` is refused (expired).
Timeouts and back-end errors become abstentions (:mod:`advice`), counted by kind in
:meth:`Advisor.stats`; nothing in the worker raises into the training loop. After
``batching.circuit_errors`` failed calls in a row the circuit opens (:mod:`health`): no
query is sent for ``batching.circuit_cooldown_s``, ``submit``/``should_query`` decline
and ``advise_now`` abstains at once (``LLM_CIRCUIT_OPEN``), so callers decide RL-only
instead of waiting on a dead server, and it is logged loudly. A call that has not
returned after ``batching.stall_warn_s`` is reported while it waits. Every error text
passes through :func:`~hybrid_trader.llm.redact.redact` before it is logged, journaled or
raised.

Three parts, each testable alone: this module queues and batches; :mod:`answering`
(:class:`~hybrid_trader.llm.answering.Answerer`) asks the model, with calibration, health
and the circuit breaker; :mod:`recording` (:class:`~hybrid_trader.llm.recording.Recorder`)
counts, caches, journals and hands on each answer. ``advise_now`` (the synchronous path)
goes through the same answerer and recorder as the worker.
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hybrid_trader.errors import UserError
from hybrid_trader.llm.advice import (
    LLM_ERROR,
    LLM_TIMEOUT,
    Advice,
    abstention,
)
from hybrid_trader.llm.answering import Answerer
from hybrid_trader.llm.backends import make_backend
from hybrid_trader.llm.backends.base import Backend
from hybrid_trader.llm.cache import AdviceCache
from hybrid_trader.llm.config import LLMConfig, load_llm_config
from hybrid_trader.llm.context import AdvisorContext
from hybrid_trader.llm.prompt import PromptBuilder, RenderedQuery
from hybrid_trader.llm.query_journal import QueryJournal
from hybrid_trader.llm.query_policy import QueryPolicy, RLConfidence
from hybrid_trader.llm.recording import Recorder
from hybrid_trader.llm.retrieval import RetrievalPool
from hybrid_trader.llm.stats import AdvisorStats

log = logging.getLogger(__name__)

SLOW_MODEL_BATCHES = 3
"""Consecutive batches answered in more than ``batching.max_age_steps`` that stop the renewal of waiting queries."""


@dataclass
class _Pending:
    env_index: int
    step: int
    context: AdvisorContext
    submitted: float
    epoch: int


def _close_at_exit(ref: weakref.ref[Advisor]) -> None:
    advisor = ref()
    if advisor is not None:
        advisor.close()


class Advisor:
    """LLM advice for many environments: ``submit``/``poll`` (asynchronous) or ``advise_now`` (synchronous)."""

    def __init__(self, config: LLMConfig, backend: Backend, *, prompts: PromptBuilder | None = None,
                 journal=None) -> None:
        self.config = config
        self.backend = backend
        self.prompts = prompts or PromptBuilder(config)
        self.policy = QueryPolicy(config.query)
        self.cache = AdviceCache(config.cache, examples_of=self.prompts.examples_key if
                                 config.prompt.retrieval.enabled else None)  # retrieved examples vary by state
        self._stats = AdvisorStats()
        self.answerer = Answerer(config, backend, self.prompts)
        """Asks the model: calibration, health and the circuit breaker (``llm.answering``)."""
        self.recorder = Recorder(scored=config.mode == "score", cache=self.cache, stats=self._stats,
                                 prompts=self.prompts, journal=journal)
        """Statistics, cache, ``on_answer`` and the journal of every answer (``llm.recording``)."""
        self.health = self.answerer.health
        """Errors by kind and the circuit breaker (read ``health.circuit_open``, ``health.rl_only_notice()``)."""
        self._cond = threading.Condition(threading.Lock())
        self._pending: OrderedDict[int, _Pending] = OrderedDict()
        self._results: dict[int, Advice] = {}
        self._results_lock = threading.Lock()
        self._epochs: dict[int, int] = {}
        self._closed = False
        self._closing = False
        self._busy = False
        """The worker is answering a batch (set and read without a lock: a plain flag)."""
        self._clock: dict[int, int] = {}
        """The latest step each environment polled or submitted at (the callers' clock)."""
        self._n_envs = 0
        """How many environments submit (0: unknown), see ``expect_envs``."""
        self._answer_lags: deque[int] = deque(maxlen=SLOW_MODEL_BATCHES)
        """Steps the callers took while the model answered each of the last batches (latency in steps)."""
        self._slow_model = False
        """Each of those batches took longer than ``max_age_steps``: renewing waiting queries cannot help."""
        self._thread: threading.Thread | None = None
        # a per-instance callable (partials compare by identity), holding only a weak reference
        self._atexit_cb = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit_cb)

    @property
    def journal(self) -> QueryJournal | None:
        return self.recorder.journal

    @property
    def on_answer(self) -> Callable[[int, int, Advice], None] | None:
        """Called in the worker with ``(env_index, step, advice)`` for every answer of the model
        (abstentions included), delivered or not: the always-on teacher's record (``training.teacher``)."""
        return self.recorder.on_answer

    @on_answer.setter
    def on_answer(self, hook: Callable[[int, int, Advice], None] | None) -> None:
        self.recorder.on_answer = hook

    # =================================================================== async API
    def submit(self, env_index: int, step: int, context: AdvisorContext, *, rl_confidence: RLConfidence = None,
               force: bool = False) -> bool:
        """Offer environment ``env_index``'s context at ``step``; never blocks.

        Applies the query policy (skip when not due), then the cache (a hit becomes the
        environment's result at once), else queues the query for the worker, replacing a
        query of the same environment still waiting (while the model is busy, not due before
        that one is ``batching.refresh_steps`` old). ``force`` bypasses the policy and that wait.
        Returns True when advice was requested (cache hit or queued).
        """
        if self._closed or self._closing:
            return False
        if self.health.blocked():  # circuit open: the caller decides RL-only, nothing is queued
            self._stats.on_submit(False)
            self.health.on_skipped()
            return False
        trigger = "forced" if force else (
            None if self._waiting(env_index, step) else self.policy.decide(env_index, step, context, rl_confidence))
        self._stats.on_submit(trigger is not None)
        if trigger is None:
            return False
        self._clock[env_index] = int(step)
        self.policy.mark(env_index, step, context)
        hit = self.cache.get(context)
        if hit is not None:
            hit = replace(hit, step=int(step), latency_ms=0.0, backend=f"{self.backend.name}+cache")
            self._stats.on_cache_hit(hit)
            self._deliver(env_index, hit, self._epochs.get(env_index, 0))
            return True
        item = _Pending(env_index, int(step), context, time.perf_counter(), self._epochs.get(env_index, 0))
        dropped = 0
        with self._cond:
            if env_index in self._pending:
                del self._pending[env_index]
                dropped += 1
            self._pending[env_index] = item
            while len(self._pending) > self.config.batching.max_pending:
                self._pending.popitem(last=False)
                dropped += 1
            self._stats.pending = len(self._pending)
            self._cond.notify()
        if dropped:
            self._stats.on_dropped(dropped)
        if self._thread is None:
            self._start_worker()
        return True

    def expect_envs(self, n_envs: int) -> None:
        """Say how many environments submit (indices 0..n-1): a batch is then complete once each
        has a query waiting, instead of waiting ``batching.max_wait_ms`` for queries that cannot come."""
        self._n_envs = max(int(n_envs), 0)

    def poll(self, env_index: int, step: int) -> Advice | None:
        """Latest ready advice of environment ``env_index`` with ``age_steps = step - advice.step``.

        None when there is none yet, or when it is older than ``batching.max_age_steps``
        (stale: counted once in ``llm/expired`` and discarded). Never blocks.
        """
        advice, age = self.latest(env_index, step)
        return None if advice is None else replace(advice, age_steps=age)

    def latest(self, env_index: int, step: int) -> tuple[Advice | None, int]:
        """``poll`` without the copy: the stored advice (its ``age_steps`` not updated) and its age.

        For hot loops (the phase 3 wrapper polls every environment every step); counted
        in the statistics exactly as ``poll``.
        """
        self._clock[env_index] = step
        advice = self._results.get(env_index)
        if advice is None:
            self._stats.on_poll(None)
            return None, 0
        age = int(step) - advice.step
        if age < 0:
            self._stats.on_poll(None)
            return None, 0
        if age > self.config.batching.max_age_steps:
            with self._results_lock:
                if self._results.get(env_index) is advice:
                    del self._results[env_index]
            self._stats.on_poll(None, expired=True)
            return None, 0
        self._stats.on_poll(age)
        return advice, age

    def reset(self, env_index: int | None = None) -> None:
        """Forget an environment's query history, queued query and advice (new episode); None: all."""
        with self._cond:
            envs = list(self._epochs) + list(self._pending) + list(self._results) if env_index is None else [env_index]
            dropped = 0
            for e in set(envs):
                self._epochs[e] = self._epochs.get(e, 0) + 1
                if self._pending.pop(e, None) is not None:
                    dropped += 1
            self._stats.pending = len(self._pending)
        with self._results_lock:
            if env_index is None:
                self._results.clear()
            else:
                self._results.pop(env_index, None)
        self.policy.reset(env_index)
        if dropped:
            self._stats.on_dropped(dropped)

    def should_query(self, env_index: int, step: int, context: AdvisorContext,
                     rl_confidence: RLConfidence = None) -> bool:
        """Whether ``submit`` would ask for advice now (no side effects).

        False while the model is busy and the environment's previous query still waits and
        is younger than ``batching.refresh_steps``; otherwise the query policy decides.
        """
        if self._waiting(env_index, step) or self.health.blocked():
            return False
        return self.policy.decide(env_index, step, context, rl_confidence) is not None

    def _waiting(self, env_index: int, step: int) -> bool:
        """The model is busy with a batch, and this environment's query waits and is too young to replace.

        While the worker gathers a batch, a newer context always replaces the waiting one
        (fresh contexts make fresh advice); while it waits for the model, the waiting one
        is renewed only every ``refresh_steps``.
        """
        if not self._busy:
            return False
        item = self._pending.get(env_index)  # a dict read: atomic, no lock needed
        if item is None or step < item.step:
            return False
        b = self.config.batching
        # A model slower than max_age_steps delivers stale advice however fresh the query it
        # picks up: renewing the waiting one would only cost the caller a context per step.
        return step - item.step < b.refresh_steps or self._slow_model

    def _deliver(self, env_index: int, advice: Advice, epoch: int) -> bool:
        with self._results_lock:
            if epoch != self._epochs.get(env_index, 0):
                return False
            current = self._results.get(env_index)
            if current is None or current.step <= advice.step:
                self._results[env_index] = advice
                return True
        return False

    # =================================================================== worker
    def _start_worker(self) -> None:
        with self._cond:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._work, name="llm-advisor", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        cfg = self.config.batching
        max_wait = cfg.max_wait_ms / 1000.0
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                oldest = next(iter(self._pending.values())).submitted
                deadline = oldest + max_wait
                # complete once every environment has a query waiting: no more can come
                full = min(cfg.max_batch, self._n_envs) if self._n_envs else cfg.max_batch
                while len(self._pending) < full and not self._closing:
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                if self._closing:
                    return
                batch: list[_Pending] = []
                while self._pending and len(batch) < cfg.max_batch:
                    batch.append(self._pending.popitem(last=False)[1])
                self._stats.pending = len(self._pending)
            self._busy = True
            try:
                self._run_batch(batch)
            except Exception:
                log.exception("LLM advisor worker: unexpected error; the batch abstains")
                for item in batch:
                    current = self._results.get(item.env_index)
                    if current is not None and current.step >= item.step:
                        continue  # already answered before the failure
                    adv = abstention(item.context.legal, LLM_ERROR, backend=self.backend.name, step=item.step)
                    self._stats.on_result(adv, scored=False)
                    self._deliver(item.env_index, adv, item.epoch)
            finally:
                self._busy = False

    def _run_batch(self, batch: list[_Pending]) -> None:
        timeout = self.config.batching.timeout_s
        now = time.perf_counter()
        live: list[_Pending] = []
        late: list[_Pending] = []
        for item in batch:
            (late if now - item.submitted > timeout else live).append(item)
        for item in late:  # waited too long in the queue: do not spend the model on it
            adv = abstention(item.context.legal, LLM_TIMEOUT, backend=self.backend.name, step=item.step,
                             latency_ms=(now - item.submitted) * 1000.0)
            self._finish(item, adv, None)
        if not live:
            return
        queries = [self.prompts.query(item.context) for item in live]
        self._stats.on_batch(len(live))
        clock = self._clock
        picked_at = [(item.env_index, clock.get(item.env_index, item.step)) for item in live]
        polls = self._stats.polls
        advices = self.answerer.answer(queries)
        done = time.perf_counter()
        if self._stats.polls != polls:  # the callers stepped meanwhile (not paused, e.g. in a PPO update)
            lag = max(clock.get(env, at) - at for env, at in picked_at)
            self._answer_lags.append(lag)
            self._stats.answer_lag_steps = lag
            # persistently slow, not one slow batch (a first call that also calibrates, a hiccup)
            self._slow_model = (len(self._answer_lags) == SLOW_MODEL_BATCHES
                                and min(self._answer_lags) > self.config.batching.max_age_steps)
        for item, q, adv in zip(live, queries, advices):
            latency = (done - item.submitted) * 1000.0
            if latency > timeout * 1000.0 and not adv.abstained:
                adv = abstention(item.context.legal, LLM_TIMEOUT, backend=adv.backend, coverage=adv.coverage,
                                 raw=adv.raw)
            adv = replace(adv, step=item.step, latency_ms=latency)
            self._finish(item, adv, q)

    def _finish(self, item: _Pending, adv: Advice, query: RenderedQuery | None) -> None:
        delivered = self._deliver(item.env_index, adv, item.epoch)
        if self.recorder.record(item.env_index, item.step, item.context, adv, query) and not delivered:
            self._stats.on_dropped(1)

    # ============================================================ answering
    # ============================================================ sync API
    def advise_now(self, contexts: Sequence[AdvisorContext], *, use_cache: bool = False,
                   raise_errors: bool = False, env_index: int = -1, step: int = -1) -> list[Advice]:
        """Answer the contexts now, in the caller's thread, in batches of ``batching.max_batch``.

        For ``llm ask``, evaluation and benchmarks. ``raise_errors``: a back-end failure
        raises a UserError (command line) instead of abstaining. Statistics and the
        journal record these queries too; the query policy is not applied.
        """
        if self._closed:
            raise UserError("the LLM advisor is closed", fix="build a new one with build_advisor(config)")
        out: list[Advice] = []
        size = self.config.batching.max_batch
        for start in range(0, len(contexts), size):
            chunk = list(contexts[start:start + size])
            todo, idx = [], []
            results: list[Advice | None] = [None] * len(chunk)
            for i, ctx in enumerate(chunk):
                hit = self.cache.get(ctx) if use_cache else None
                if hit is not None:
                    cached = replace(hit, backend=f"{self.backend.name}+cache", latency_ms=0.0, step=step)
                    results[i] = cached
                    self._stats.on_cache_hit(cached)
                else:
                    todo.append(ctx)
                    idx.append(i)
            if todo:
                queries = [self.prompts.query(c) for c in todo]
                self._stats.on_batch(len(todo))
                advices = self.answerer.answer(queries, raise_errors=raise_errors)
                for i, q, adv in zip(idx, queries, advices):
                    adv = replace(adv, step=step)
                    results[i] = adv
                    self.recorder.record(env_index, step, q.context, adv, q)
            out.extend(r for r in results if r is not None)
        return out

    def prompt_text(self, context: AdvisorContext) -> str:
        """The full prompt (shared prefix + per-query part) the model sees for this context."""
        return self.prompts.query(context).text

    # ============================================================ stats, close
    def stats(self) -> dict[str, float]:
        """Statistics under TensorBoard names (``llm/total_queries``, ``llm/avg_latency_ms``, ...).

        Includes the health statistics of :data:`~hybrid_trader.llm.health.HEALTH_STAT_NAMES`
        (``llm/error_rate_pct``, ``llm/errors_<kind>``, ``llm/circuit_open``, ...).
        """
        out = self._stats.snapshot()
        out.update(self.health.snapshot())
        return out

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker (after the batch in progress) and join it; close journal and back end. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closing = True
            dropped = len(self._pending)
            self._pending.clear()
            self._stats.pending = 0
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.config.batching.close_timeout_s if timeout is None else timeout)
            if thread.is_alive():
                log.warning("LLM advisor worker still busy after close timeout; left as a daemon thread")
        if dropped:
            self._stats.on_dropped(dropped)
        self._closed = True
        self.recorder.close()
        try:
            self.answerer.close()
        finally:
            atexit.unregister(self._atexit_cb)

    def __enter__(self) -> Advisor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def build_advisor(
    config: LLMConfig | None = None, *, backend: Backend | None = None, source: str = "llm config",
    retrieval_pool: RetrievalPool | None = None,
) -> Advisor:
    """The advisor for ``config`` (default: the packaged ``llm.yaml``), with its back end and journal.

    Raises a UserError at once for a missing model, an unreachable server (when
    ``check_on_start``), an unknown template field, an unwritable journal, or a prompt that
    retrieves its examples (``prompt.retrieval``) without ``retrieval_pool``.
    """
    if config is None:
        config = load_llm_config()
    prompts = PromptBuilder(config, source=source)
    if config.prompt.retrieval.enabled:
        if retrieval_pool is None:
            raise UserError("llm.prompt.retrieval is on but no pool of labelled training states is given", file=source,
                            fix="retrieval runs where a run's training days give the pool (llm eval --retrieval, "
                                "advise calibrate, advise collect, bench llm --retrieval-run RUN); elsewhere set "
                                "prompt.retrieval.k: 0")
        prompts.attach_retrieval(retrieval_pool)
    if backend is None:
        backend = make_backend(config, prompts)
    if config.check_on_start:
        backend.check()
    journal = None
    if config.journal:
        journal = QueryJournal(config.journal, backend=backend.name, model=backend.describe(), mode=config.mode,
                               config=config.to_dict())
    return Advisor(config, backend, prompts=prompts, journal=journal)
