"""Shared fixtures: the real bars in ../shared/data (skipped with a reason when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

NQ_1MIN = "NQ_1min_2023-11_eastern.csv"
ES_1MIN = "ES_1min_2025-09_11_eastern_plus5h.csv"
NQ_5MIN = "NQ_5min_2024Q1_chicago_adjusted.csv"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Folder of real bars; skips the test when ../shared/data is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real bars not available: {SHARED_DATA} is absent")
    return SHARED_DATA


def shared_file(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.is_file():
        pytest.skip(f"real bars not available: {path} is absent")
    return path
