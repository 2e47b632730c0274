"""Answering: one back-end call for a batch of rendered queries, with calibration and health.

:class:`Answerer` is the one place a query meets the model, for the advisor's worker
thread and its synchronous path alike: it scores (or generates) the batch under one lock,
divides the scores by the batch calibration of the query's kind of state when one is set
(``batch_calibration``, fitted on a run's training days), else by the content-free answer
of its market when ``scoring.calibrate``,
turns every failure into abstentions with a reason code (or a UserError when asked), and
keeps the back end's health: errors by kind, the circuit breaker, the stall watch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import numpy as np

from hybrid_trader.errors import UserError
from hybrid_trader.llm.advice import (
    LLM_ERROR,
    LLM_PARSE_FAILURE,
    Advice,
    abstention,
    advice_from_choice,
    advice_from_mass,
)
from hybrid_trader.llm.backends.base import ERROR_OTHER, Backend, BackendError
from hybrid_trader.llm.batch_calibration import BatchCalibration
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.health import LLM_CIRCUIT_OPEN, AdvisorHealth, StallWatch
from hybrid_trader.llm.parsing import ParseError, parse_answer
from hybrid_trader.llm.prompt import PromptBuilder, RenderedQuery
from hybrid_trader.llm.redact import redact

log = logging.getLogger(__name__)


class Answerer:
    """Answers rendered queries with one back-end call per batch (thread-safe)."""

    def __init__(self, config: LLMConfig, backend: Backend, prompts: PromptBuilder) -> None:
        self.config = config
        self.backend = backend
        self.prompts = prompts
        b = config.batching
        self.health = AdvisorHealth(b.circuit_errors, b.circuit_cooldown_s, describe=backend.describe)
        """Errors by kind and the circuit breaker (read ``health.circuit_open``, ``health.rl_only_notice()``)."""
        timeout = getattr(getattr(config, backend.name, None), "request_timeout_s", None)
        self._stall = StallWatch(b.stall_warn_s, backend.describe, self.health, timeout_s=timeout)
        self._lock = threading.Lock()
        self._calibration: dict[str, np.ndarray] = {}
        self._errors_logged = 0
        self.batch_calibration: BatchCalibration | None = None
        """Mean answers per market and position state that scores are divided by (set by the run's owner)."""

    def calibration_for(self, market: str) -> np.ndarray | None:
        """The content-free answer of ``market`` that scores are divided by (None: not calibrating)."""
        if not (self.config.scoring.calibrate and self.config.mode == "score"):
            return None
        cal = self._calibration.get(market)
        if cal is None:
            mass = self.backend.score([self.prompts.content_free_query(market)])[0]
            cal = np.asarray(mass, dtype=np.float64)
            self._calibration[market] = cal
        return cal

    def divisor_for(self, market: str, position: int) -> np.ndarray | None:
        """What a query's scores are divided by: the batch calibration, else the content-free answer, else None."""
        if self.batch_calibration is not None and self.config.mode == "score":
            return self.batch_calibration.divisor(market, position)
        return self.calibration_for(market)

    def answer(self, queries: Sequence[RenderedQuery], raise_errors: bool = False) -> list[Advice]:
        """One back-end call for the batch; failures become abstentions (or UserError if ``raise_errors``).

        A closed circuit breaker answers every query at once with ``LLM_CIRCUIT_OPEN`` (nothing is sent).
        """
        name = self.backend.name
        cfg = self.config
        if not self.health.allow():
            self.health.on_skipped(len(queries))
            if raise_errors:
                raise UserError(f"the {name} back end is not asked: {self.health.consecutive} calls failed in a row "
                                f"(last: {self.health.last_error})", fix="fix the LLM server, then retry")
            return [abstention(q.context.legal, LLM_CIRCUIT_OPEN, backend=name, raw=self.health.last_error)
                    for q in queries]
        t0 = time.perf_counter()
        self._stall.begin()
        try:
            with self._lock:
                if cfg.mode == "score":
                    cals = [self.divisor_for(q.context.market, q.context.position) for q in queries]
                    mass = np.asarray(self.backend.score(queries), dtype=np.float64)
                    if mass.shape != (len(queries), 6):
                        raise BackendError(f"back end returned scores of shape {mass.shape}, "
                                           f"expected ({len(queries)}, 6)")
                else:
                    texts = self.backend.generate(queries, cfg.generation.max_new_tokens, cfg.generation.temperature)
                    if len(texts) != len(queries):
                        raise BackendError(f"back end returned {len(texts)} answers for {len(queries)} queries")
        except Exception as err:
            ms = (time.perf_counter() - t0) * 1000.0
            code = err.code if isinstance(err, BackendError) else LLM_ERROR
            kind = err.kind if isinstance(err, BackendError) else ERROR_OTHER
            text = redact(err)
            self.health.on_failure(kind, text[:300], len(queries))
            if raise_errors:
                fix = getattr(err, "fix", None) if isinstance(err, BackendError) else None
                if isinstance(err, UserError):
                    raise
                raise UserError(f"the {name} back end failed ({code}, {kind}): {text}",
                                fix=fix or "see docs/LLM.md, troubleshooting") from None
            if self._errors_logged < 5:
                self._errors_logged += 1
                log.warning("LLM back end %s failed (%s, %s): %s", name, code, kind, text)
            return [abstention(q.context.legal, code, backend=name, latency_ms=ms, raw=text[:500])
                    for q in queries]
        finally:
            self._stall.end()
        self.health.on_success(len(queries))
        ms = (time.perf_counter() - t0) * 1000.0
        out: list[Advice] = []
        if cfg.mode == "score":
            for q, m, cal in zip(queries, mass, cals):
                out.append(advice_from_mass(m, q.context.legal, min_coverage=cfg.scoring.min_coverage, backend=name,
                                            latency_ms=ms, calibration=cal))
        else:
            for q, text in zip(queries, texts):
                try:
                    parsed = parse_answer(text, chain_of_thought=self.prompts.chain_of_thought)
                except ParseError:
                    self.health.on_parse_failure()
                    out.append(abstention(q.context.legal, LLM_PARSE_FAILURE, backend=name, latency_ms=ms,
                                          raw=redact(text)))
                    continue
                conf = parsed.confidence if parsed.confidence is not None else cfg.generation.default_confidence
                out.append(advice_from_choice(parsed.action, conf, q.context.legal, backend=name,
                                              reason=parsed.reason, latency_ms=ms, raw=text))
        return out

    def close(self) -> None:
        """Stop the stall watch, say so loudly if the advisor ran RL-only, and close the back end."""
        self._stall.close()
        notice = self.health.rl_only_notice()
        if notice:
            log.warning(notice)
        self.backend.close()
