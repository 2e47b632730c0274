"""A back end served by a child process answers like the same back end in-process."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.llm.backends import make_backend
from hybrid_trader.llm.backends.base import BackendError
from hybrid_trader.llm.backends.process_backend import ProcessBackend
from hybrid_trader.llm.prompt import PromptBuilder

from . import make_context, mock_config


def test_process_backend_scores_like_in_process_backend_and_closes_its_child():
    config = mock_config()
    queries = [PromptBuilder(config).query(make_context(rsi=r)) for r in (30.0, 50.0, 75.0)]
    backend = ProcessBackend(config)
    try:
        assert "child process" in backend.describe()
        np.testing.assert_allclose(backend.score(queries), make_backend(config).score(queries))
        proc = backend._proc
        assert proc.is_alive()
    finally:
        backend.close()
    assert not proc.is_alive()
    backend.close()  # idempotent


def test_process_backend_raises_backend_error_when_child_has_died():
    config = mock_config()
    backend = ProcessBackend(config)
    try:
        backend._proc.terminate()
        backend._proc.join(5)
        with pytest.raises(BackendError, match="exited"):
            backend.score([PromptBuilder(config).query(make_context())])
    finally:
        backend.close()
