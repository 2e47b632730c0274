"""Shared fixtures: the real bars in ../shared/data (skipped with a reason when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hybrid_trader.advise.collect import RunPolicy, collect_llm_config, collect_split
from hybrid_trader.advise.distill import DistillConfig, distill
from hybrid_trader.run.market import load_market
from tests.training.conftest import student_cfg, train_phase2

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("HYBRID_TRADER_SHARED_DATA") or REPO_ROOT.parent / "shared" / "data")
"""The real bars: ``../shared/data`` beside the checkout, or ``$HYBRID_TRADER_SHARED_DATA`` (a worktree elsewhere)."""

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


# A tiny phase 1 -> phase 2 chain and a student distilled from mock advice on it (built once per session).
@pytest.fixture(scope="session")
def student_market():
    c = student_cfg(1)
    return load_market(c.data, c.split)


@pytest.fixture(scope="session")
def student_p2(tmp_path_factory, student_market):
    """A phase 2 run with RUN/advice/student.pt distilled from the mock advisor's advice on its states."""
    root = tmp_path_factory.mktemp("student")
    run = train_phase2(root, student_cfg, student_market)
    cfg = student_cfg(2, 256)
    llm = collect_llm_config(cfg, backend="mock", batch=64)
    policy = RunPolicy(run)
    for split in ("train", "val"):
        collect_split(run, split, llm, market=student_market, run_config=cfg, policy=policy, progress=False,
                      max_states=1500, say=lambda s: None)
    distill(run, DistillConfig(epochs=8, hidden=(32,)), say=lambda s: None)
    return run
