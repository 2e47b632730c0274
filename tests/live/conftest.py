"""Fixtures of the live tests: the shared real bars, found from a checkout or a worktree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path | None:
    """``../shared/data`` of the project root (or of a worktree's parent checkout folder), or
    ``$HYBRID_TRADER_SHARED_DATA``; None when absent."""
    env = os.environ.get("HYBRID_TRADER_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates += [REPO_ROOT.parent / "shared" / "data", REPO_ROOT.parents[1] / "shared" / "data"]
    return next((p for p in candidates if p.is_dir()), None)


def real_file(name: str) -> Path:
    """A shared real bars file; skips the test (with the reason) when it is absent."""
    folder = shared_data_dir()
    if folder is None:
        pytest.skip(f"real bars not available: {REPO_ROOT.parent / 'shared' / 'data'} is absent")
    path = folder / name
    if not path.exists():
        pytest.skip(f"real bars not available: {path} is absent")
    return path
