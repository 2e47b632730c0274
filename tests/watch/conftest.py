"""Fixtures of the dashboard's tests: the executor's tiny trained run (tests/live), for a real executor to watch."""

from __future__ import annotations

from tests.live.conftest import tiny  # noqa: F401  (the fixture, by name)
