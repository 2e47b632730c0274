"""A tiny finished study shared by the confirmation, replication and fingerprint tests."""

from __future__ import annotations

import pytest

from hybrid_trader.study.engine import run_study
from tests.study.test_study import study_file

QUIET = {"progress": False, "say": lambda s: None}


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A finished study of 2 variants x 1 seed on 14 synthetic days (2024-01-02 to 2024-01-19): (root, study
    file, folder)."""
    root = tmp_path_factory.mktemp("tiny-study")
    path = study_file(root, seeds=[0])
    run_study(path, root / "out", workers=2, **QUIET)
    return root, path, root / "out"
