"""Fixtures of the live tests: the tiny trained run shared by the executor's test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny(tiny_trained):
    """``(phase 2 run dir, its bars as an ET CSV, its market)``: the session's tiny run (tests/conftest.py)."""
    return tiny_trained
