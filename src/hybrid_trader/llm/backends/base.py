"""The back-end interface: score a batch (name probabilities) or generate a batch (text).

A back end receives :class:`~hybrid_trader.llm.prompt.RenderedQuery` objects (the shared
prefix, the per-query suffix and the context itself) and never sees the advisor's
queueing, caching or statistics. It raises :class:`BackendTimeout` or
:class:`BackendError` for failures; the advisor turns them into counted abstentions
(or, at the command line, into one UserError message).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from hybrid_trader.llm.advice import LLM_ERROR, LLM_TIMEOUT
from hybrid_trader.llm.prompt import RenderedQuery


class BackendError(RuntimeError):
    """A back end failed; ``code`` is the abstention code, the message says how to fix it."""

    code = LLM_ERROR

    def __init__(self, message: str, fix: str | None = None) -> None:
        self.fix = fix
        super().__init__(message)


class BackendTimeout(BackendError):
    code = LLM_TIMEOUT


class Backend(ABC):
    """One way to ask a language model."""

    name: str = "base"

    @abstractmethod
    def score(self, queries: Sequence[RenderedQuery]) -> np.ndarray:
        """``(len(queries), 6)`` float64: next-token probability of each action's name (not renormalised).

        Entry ``[i, a]`` is the probability that the continuation of query ``i`` starts
        with action ``a``'s name (summed over its case variants' first tokens). Illegal
        actions may hold anything; the advisor zeroes them.
        """

    @abstractmethod
    def generate(self, queries: Sequence[RenderedQuery], max_new_tokens: int, temperature: float) -> list[str]:
        """The model's continuation of each query (one line is enough)."""

    def check(self) -> None:
        """Raise a UserError when the back end cannot work (missing model, unreachable server)."""

    def describe(self) -> str:
        """Model description for journals and ``llm ask``."""
        return self.name

    def close(self) -> None:
        """Release resources (idempotent)."""
