"""Back ends behind one interface (:class:`~hybrid_trader.llm.backends.base.Backend`).

``make_backend(config, prompts)`` imports the chosen one lazily, so the mock back end
needs neither torch's transformers nor llama-cpp-python.
"""

from __future__ import annotations

from hybrid_trader.errors import UserError, did_you_mean
from hybrid_trader.llm.backends.base import Backend, BackendError, BackendTimeout
from hybrid_trader.llm.config import BACKENDS, LLMConfig
from hybrid_trader.llm.prompt import PromptBuilder

__all__ = ["Backend", "BackendError", "BackendTimeout", "make_backend"]


def make_backend(config: LLMConfig, prompts: PromptBuilder | None = None) -> Backend:
    """The back end named by ``config.backend`` (a UserError when it cannot be made)."""
    prompts = prompts or PromptBuilder(config)
    name = config.backend
    if getattr(config, "process", False) and name in ("transformers", "llama_cpp"):
        from hybrid_trader.llm.backends.process_backend import ProcessBackend

        return ProcessBackend(config, threads=config.process_threads)
    if name == "mock":
        from hybrid_trader.llm.backends.mock import MockBackend

        return MockBackend(config.mock)
    if name == "transformers":
        from hybrid_trader.llm.backends.transformers_backend import TransformersBackend

        return TransformersBackend(config, prompts)
    if name == "openai":
        from hybrid_trader.llm.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(config, prompts)
    if name == "llama_cpp":
        from hybrid_trader.llm.backends.llama_cpp_backend import LlamaCppBackend

        return LlamaCppBackend(config, prompts)
    raise UserError(f"unknown LLM back end '{name}'", value=name,
                    fix=f"use one of {', '.join(BACKENDS)}.{did_you_mean(name, BACKENDS)}")
