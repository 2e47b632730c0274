"""Back ends behind one interface (:class:`~hybrid_trader.llm.backends.base.Backend`) and their registry.

:data:`BACKENDS` is the one list of back ends: name -> class (imported lazily, so the
mock back end needs neither transformers nor llama-cpp-python) -> its section of
:class:`~hybrid_trader.llm.config.LLMConfig`. The ``llm.backend`` choices, the CLI's
``--llm``/``--backend`` choices and the ``--model`` flag's key all come from it.
Adding a back end: a module here with a ``Backend`` subclass, a config section in
``llm/config.py``, and one row below.

This module imports nothing of the LLM package at its top, so ``llm/config.py`` can
read the registry without an import cycle.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hybrid_trader.errors import UserError, did_you_mean

if TYPE_CHECKING:  # annotations only; the config module imports this one
    from hybrid_trader.llm.backends.base import Backend
    from hybrid_trader.llm.config import LLMConfig
    from hybrid_trader.llm.prompt import PromptBuilder

__all__ = ["BACKENDS", "BACKEND_NAMES", "TEACHER_NAMES", "BackendSpec", "backend_spec", "make_backend"]


@dataclass(frozen=True)
class BackendSpec:
    """One back end: where its class is, which config section it reads, what ``--model`` sets."""

    name: str
    """Value of ``llm.backend``."""
    class_path: str
    """``module:Class`` of the :class:`Backend` subclass (imported only when used)."""
    section: str
    """Field of LLMConfig holding its options (``llm.<section>``)."""
    model_key: str
    """Key of that section that the CLI's ``--model`` sets."""
    local: bool
    """Runs the model in this machine's memory, so ``llm.process`` may move it to a child process."""
    takes_prompts: bool = True
    """Its constructor is ``Class(config, prompts)``; otherwise ``Class(config.<section>)``."""
    identity: Callable[[Any], str] | None = None
    """What model answers, from its config section (part of the advice identity: datasets, students,
    calibrations built with another are refused); None: a hash of the whole section."""
    threads_field: str | None = None
    """Field of its section that sets its CPU threads (advise collect's workers set it); None: none."""
    leans: bool = False
    """Answers with a constant lean set by its prompt (a language model: Gemma 3 270M says BUY to every flat
    state), which the run's batch calibration divides out; a rule, the mock and the student do not."""

    @property
    def language_model(self) -> bool:
        """Answers from a language model (not the student distilled from one)."""
        return self.name != "student"


BACKENDS: dict[str, BackendSpec] = {s.name: s for s in (
    # a fine-tuned adapter is another model; none leaves the id unchanged
    BackendSpec("transformers", "hybrid_trader.llm.backends.transformers_backend:TransformersBackend",
                "transformers", "model", local=True, threads_field="threads",
                identity=lambda c: f"{c.model}:{c.dtype}" + (f":adapter={c.adapter}" if c.adapter else ""), leans=True),
    BackendSpec("openai", "hybrid_trader.llm.backends.openai_backend:OpenAIBackend", "openai", "model", local=False,
                identity=lambda c: f"{c.model or c.base_url}", leans=True),
    BackendSpec("llama_cpp", "hybrid_trader.llm.backends.llama_cpp_backend:LlamaCppBackend",
                "llama_cpp", "model_path", local=True, threads_field="n_threads",
                identity=lambda c: f"{c.model_path or 'gemma-3-270m'}", leans=True),
    BackendSpec("mock", "hybrid_trader.llm.backends.mock:MockBackend", "mock", "", local=False, takes_prompts=False,
                identity=lambda c: f"coverage={c.coverage:g}"),
    # a control for the LLM: reads only the trend label (shares the mock's section: coverage)
    BackendSpec("trend_rule", "hybrid_trader.llm.backends.trend_rule_backend:TrendRuleBackend", "mock", "",
                local=False, takes_prompts=False, identity=lambda c: f"trend-label:coverage={c.coverage:g}"),
    # the student is a small network: fast in process, no child process needed
    BackendSpec("student", "hybrid_trader.llm.backends.student_backend:StudentBackend", "student", "path",
                local=False, takes_prompts=False),
)}
BACKEND_NAMES: tuple[str, ...] = tuple(BACKENDS)
"""The back-end names, in the order the docs and ``--help`` list them."""
TEACHER_NAMES: tuple[str, ...] = tuple(n for n, s in BACKENDS.items() if s.language_model)
"""The back ends that are language models (every one but the student distilled from them): what
``advise collect`` asks, ``--ablation-teacher`` evaluates with and ``--explain-llm`` explains with."""


def backend_spec(name: str) -> BackendSpec:
    """The registry row of ``name`` (a UserError with a suggestion when there is none)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise UserError(f"unknown LLM back end '{name}'", value=name,
                        fix=f"use one of {', '.join(BACKEND_NAMES)}.{did_you_mean(name, BACKEND_NAMES)}") from None


def _load_class(path: str) -> type:
    module, _, cls = path.partition(":")
    return getattr(importlib.import_module(module), cls)


def make_backend(config: LLMConfig, prompts: PromptBuilder | None = None) -> Backend:
    """The back end named by ``config.backend`` (a UserError when it cannot be made)."""
    spec = backend_spec(config.backend)
    if config.process and spec.local:
        process_backend = _load_class("hybrid_trader.llm.backends.process_backend:ProcessBackend")
        return process_backend(config, threads=config.process_threads)
    cls = _load_class(spec.class_path)
    if not spec.takes_prompts:
        return cls(getattr(config, spec.section))
    if prompts is None:  # the prompt builder reads the config, which reads this registry: the caller makes it
        raise ValueError(f"the {spec.name} back end needs the prompt builder: "
                         "make_backend(config, PromptBuilder(config))")
    return cls(config, prompts)
