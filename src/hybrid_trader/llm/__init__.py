"""The LLM advisor: prompts, back ends, scored answers, selective asynchronous batched queries.

Entry points::

    from hybrid_trader.llm import build_advisor, load_llm_config, context_from_market, AccountState

    advisor = build_advisor(load_llm_config(overrides={"backend": "mock"}))
    advisor.submit(env_index, step, context)      # never blocks
    advice = advisor.poll(env_index, step)        # Advice | None, with age_steps
    advisor.advise_now([context])                 # synchronous
    advisor.stats()                               # {"llm/total_queries": ..., ...}
    advisor.close()

See docs/LLM.md.
"""

import importlib
from typing import Any

# The entry points are loaded on first use (PEP 562): importing a submodule such as
# hybrid_trader.llm.config (the CLI's --help reads its choices and docstrings) must not load
# numpy and the advisor's modules (measured: 0.15 s, 13 modules, on every `hybrid-trader --help`).
_EXPORTS = {
    "ABSTAIN_CODES": "advice", "ACTION_WORDS": "advice", "Advice": "advice",
    "Advisor": "async_advisor", "build_advisor": "async_advisor",
    "LLMConfig": "config", "load_llm_config": "config",
    "AccountState": "context", "AdvisorContext": "context", "context_from_market": "context",
    "STAT_NAMES": "stats",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hybrid_trader.llm' has no attribute {name!r}")
    return getattr(importlib.import_module(f"hybrid_trader.llm.{module}"), name)


__all__ = [
    "ABSTAIN_CODES",
    "ACTION_WORDS",
    "AccountState",
    "Advice",
    "Advisor",
    "AdvisorContext",
    "LLMConfig",
    "STAT_NAMES",
    "build_advisor",
    "context_from_market",
    "load_llm_config",
]
