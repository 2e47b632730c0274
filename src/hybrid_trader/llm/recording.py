"""Recording: what happens to an answer once the model gave it.

:class:`Recorder` counts it in the statistics, caches it (unless it abstained), hands it to
the ``on_answer`` hook (a phase 3 teacher's dataset) and writes it to the journal, the
same way for the advisor's worker and its synchronous path. An answer the circuit breaker
gave (never sent to the model) is not a model query: nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Callable

from hybrid_trader.llm.advice import Advice
from hybrid_trader.llm.cache import AdviceCache
from hybrid_trader.llm.context import AdvisorContext
from hybrid_trader.llm.health import LLM_CIRCUIT_OPEN
from hybrid_trader.llm.prompt import PromptBuilder, RenderedQuery
from hybrid_trader.llm.query_journal import QueryJournal
from hybrid_trader.llm.stats import AdvisorStats


class Recorder:
    """Statistics, cache, the answer hook and the journal of an advisor's answers."""

    def __init__(self, *, scored: bool, cache: AdviceCache, stats: AdvisorStats, prompts: PromptBuilder,
                 journal: QueryJournal | None = None) -> None:
        self.scored = scored
        self.cache = cache
        self.stats = stats
        self.prompts = prompts
        self.journal = journal
        self.on_answer: Callable[[int, int, Advice], None] | None = None
        """Called with ``(env_index, step, advice)`` for every answer of the model (abstentions included)."""

    def record(self, env_index: int, step: int, context: AdvisorContext, advice: Advice,
               query: RenderedQuery | None = None) -> bool:
        """Record one answer; False (nothing recorded) when the circuit breaker gave it."""
        if advice.abstain_reason == LLM_CIRCUIT_OPEN:
            return False
        self.stats.on_result(advice, scored=self.scored)
        if not advice.abstained:
            self.cache.put(context, advice)
        if self.on_answer is not None:
            self.on_answer(env_index, step, advice)
        if self.journal is not None:
            q = query or self.prompts.query(context)
            self.journal.record(env_index, step, context, q.suffix, q.prefix, advice)
        return True

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
