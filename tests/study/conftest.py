"""One local Ray kept by each test process for the study tests, and a tiny finished study shared by the
confirmation, replication and fingerprint tests."""

from __future__ import annotations

import pytest

from hybrid_trader.study.cluster import ray_init
from hybrid_trader.study.engine import run_study
from tests.study.test_study import study_file

QUIET = {"progress": False, "say": lambda s: None}


@pytest.fixture(scope="session", autouse=True)
def local_ray():
    """Ray on this machine with 2 CPUs, started once by this test process and shut down when its session ends.

    Every study of the tests in this folder runs on it (autouse: a study test asks for none by name), as on a
    caller's Ray (``study.cluster.ray_for_study``): each saves Ray's start (about 4 s), its workers' first imports
    (about 3 s) and its shutdown (about 1.4 s). Its trials run ``workers`` at a time, as on a Ray of ``workers``
    CPUs."""
    ray = ray_init(2, None)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A finished study of 2 variants x 1 seed on 14 synthetic days (2024-01-02 to 2024-01-19): (root, study
    file, folder)."""
    root = tmp_path_factory.mktemp("tiny-study")
    path = study_file(root, seeds=[0])
    run_study(path, root / "out", workers=2, **QUIET)
    return root, path, root / "out"
