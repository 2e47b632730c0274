"""The back-end interface: score a batch (name probabilities) or generate a batch (text).

A back end receives :class:`~hybrid_trader.llm.prompt.RenderedQuery` objects (the shared
prefix, the per-query suffix and the context itself) and never sees the advisor's
queueing, caching or statistics. It raises :class:`BackendTimeout` or
:class:`BackendError` for failures; the advisor turns them into counted abstentions
(or, at the command line, into one UserError message).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from hybrid_trader.llm.advice import LLM_ERROR, LLM_TIMEOUT
from hybrid_trader.llm.prompt import RenderedQuery

# What went wrong, for the advisor's error counts (``llm/errors_<kind>``) and ``diagnose``.
ERROR_AUTH = "auth"
"""The server refused the credentials (HTTP 401/403)."""
ERROR_CONNECTION = "connection"
"""The server could not be reached (connection refused, reset, DNS)."""
ERROR_TIMEOUT = "timeout"
"""No answer within the request timeout."""
ERROR_HTTP_5XX = "http_5xx"
"""The server answered with an HTTP 5xx error."""
ERROR_HTTP_4XX = "http_4xx"
"""The server answered with an HTTP 4xx error other than 401/403 (unknown model, bad request)."""
ERROR_GARBAGE = "garbage"
"""The answer was not the JSON the protocol promises, or a back end returned the wrong shape."""
ERROR_PARSE = "parse"
"""Generation mode: the written answer names no action (the model answered, but not usably)."""
ERROR_OTHER = "other"
"""Anything else a back end raised (out of memory, a bug)."""
ERROR_KINDS = (ERROR_AUTH, ERROR_CONNECTION, ERROR_TIMEOUT, ERROR_HTTP_5XX, ERROR_HTTP_4XX, ERROR_GARBAGE,
               ERROR_PARSE, ERROR_OTHER)


class BackendError(RuntimeError):
    """A back end failed; ``code`` is the abstention code, ``kind`` one of :data:`ERROR_KINDS`, ``fix`` the fix."""

    code = LLM_ERROR
    default_kind = ERROR_OTHER

    def __init__(self, message: str, fix: str | None = None, kind: str | None = None) -> None:
        self.fix = fix
        self.kind = kind or self.default_kind
        super().__init__(message)


class BackendTimeout(BackendError):
    code = LLM_TIMEOUT
    default_kind = ERROR_TIMEOUT


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

    def check(self) -> None:  # noqa: B027 - an optional hook: a no-op unless the back end can check
        """Raise a UserError when the back end cannot work (missing model, unreachable server)."""

    def describe(self) -> str:
        """Model description for journals and ``llm ask``."""
        return self.name

    def close(self) -> None:  # noqa: B027 - an optional hook: a no-op unless the back end holds resources
        """Release resources (idempotent)."""
