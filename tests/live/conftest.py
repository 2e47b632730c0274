"""Fixtures of the live tests: one tiny trained run shared by the executor's test modules."""

from __future__ import annotations

import pytest

from .executor_run import tiny_run


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """``(phase 2 run dir, its bars as an ET CSV, its market)``, trained once per session."""
    return tiny_run(tmp_path_factory.mktemp("executor"))
