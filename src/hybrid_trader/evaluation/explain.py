"""Chain-of-thought explanations of an evaluation's sample decisions (``evaluate --explain N``).

Scoring mode gives the agent the LLM's distribution over actions in a fraction of a
second; it says nothing about *why*. A four-step chain of thought (market analysis ->
options -> risks -> decision, ``llm.prompt.chain_of_thought``) costs seconds a decision
on a CPU: too slow for every bar, right for the few decisions a reader looks at. After
the evaluation loop, the first ``N`` sample decisions of the hybrid agent (those the
report shows) are put again to the LLM in generation mode with the chain of thought,
each with the context the agent had at that bar, and the steps are stored with the
decision (``llm_reasoning``; ``llm_explained_by`` names the back end). The report shows
them under each decision.

The explaining LLM is the run's (``--explain-llm`` over it). A run advised by the
distilled student is explained by the model the student was distilled from
(``transformers`` unless told otherwise): a student has no words.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from hybrid_trader.config import merge_overrides
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.results import EXPLAINED_BY_KEY, REASONING_KEY
from hybrid_trader.llm.async_advisor import build_advisor
from hybrid_trader.llm.config import COT_MAX_NEW_TOKENS, LLMConfig
from hybrid_trader.llm.context import AdvisorContext
from hybrid_trader.llm.parsing import parse_cot_steps

DEFAULT_EXPLAINER = "transformers"
"""The explaining back end of a student-advised run (the student has no words)."""


def explainer_config(llm_config: LLMConfig, backend: str | None = None) -> LLMConfig:
    """``llm_config`` in chain-of-thought generation mode, asked in this process, no cache or journal."""
    backend = backend or (DEFAULT_EXPLAINER if llm_config.backend == "student" else llm_config.backend)
    if backend == "student":
        raise UserError("--explain-llm student: the distilled student writes no reasoning",
                        fix="name a language model back end, e.g. --explain-llm transformers")
    return merge_overrides(llm_config, {"backend": backend, "mode": "generate", "prompt.chain_of_thought": True,
                                        "generation.max_new_tokens": max(llm_config.generation.max_new_tokens,
                                                                         COT_MAX_NEW_TOKENS),
                                        "cache.enabled": False, "process": False},
                           source="evaluate --explain")


def explain_decisions(samples: Sequence[dict], contexts: Sequence[AdvisorContext], llm_config: LLMConfig, n: int, *,
                      say: Callable[[str], None] = print, advisor: Any = None) -> dict[str, Any]:
    """Explain the first ``n`` sample decisions in place; returns the parse rate and latency figures.

    ``contexts[i]`` is the context of ``samples[i]``. ``advisor`` (tests) replaces the one
    built from ``llm_config`` (already an :func:`explainer_config`).
    """
    if len(samples) != len(contexts):
        raise ValueError(f"{len(samples)} sample decisions but {len(contexts)} contexts")
    todo = list(zip(samples, contexts))[:max(int(n), 0)]
    if not todo:
        return {"explained": 0}
    own = advisor is None
    advisor = advisor or build_advisor(llm_config, source="evaluate --explain")
    latencies: list[float] = []
    parsed = complete = 0
    try:
        name = advisor.backend.describe()
        for i, (sample, ctx) in enumerate(todo, 1):
            start = time.perf_counter()
            advice = advisor.advise_now([ctx])[0]
            latencies.append(time.perf_counter() - start)
            steps = parse_cot_steps(advice.raw)
            sample[REASONING_KEY] = steps or {"raw": (advice.raw or "")[:300]}
            sample[EXPLAINED_BY_KEY] = name
            parsed += bool(steps.get("decision"))
            complete += len(steps) == 4
            say(f"explained decision {i}/{len(todo)} ({sample.get('time')}) in {latencies[-1]:.1f} s")
    finally:
        if own:
            advisor.close()
    latencies.sort()
    return {"explained": len(todo), "decision_parsed_pct": 100.0 * parsed / len(todo),
            "all_four_steps_pct": 100.0 * complete / len(todo),
            "median_latency_s": latencies[len(latencies) // 2], "max_latency_s": latencies[-1]}
