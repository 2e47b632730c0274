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

from hybrid_trader.llm.advice import ABSTAIN_CODES, ACTION_WORDS, Advice
from hybrid_trader.llm.async_advisor import Advisor, build_advisor
from hybrid_trader.llm.config import LLMConfig, load_llm_config
from hybrid_trader.llm.context import AccountState, AdvisorContext, context_from_market
from hybrid_trader.llm.stats import STAT_NAMES

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
