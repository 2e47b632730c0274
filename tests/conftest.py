"""Shared fixtures: the real bars in ../shared/data (skipped with a reason when absent)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hybrid_trader.advise.collect import CollectRequest, RunPolicy, collect_llm_config, collect_split
from hybrid_trader.advise.distill import DistillConfig, distill
from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import ReplayFeed
from hybrid_trader.run.market import load_market
from tests.live.executor_run import tiny_run
from tests.training.conftest import student_cfg

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
def tiny_trained(tmp_path_factory, student_market):
    """``(phase 2 run dir, its bars as an ET CSV, its market)``: the tiny phase 1 -> phase 2 chain (``p1`` beside
    the run), trained once per session for the executor's, the dashboard's, the faults' and the student's tests
    (``tiny`` in tests/live, tests/watch, tests/faults). Read-only: a test that writes into the run copies it first
    (as ``student_p2`` does)."""
    return tiny_run(tmp_path_factory.mktemp("executor"), student_market)


@pytest.fixture(scope="session")
def tiny_replayed(tmp_path_factory, tiny_trained) -> tuple[Path, Executor]:
    """``tiny_trained``'s bars replayed whole with the paper broker: ``(its journal, the closed executor)``, once per
    session. Read-only: a test that writes into the journal (or opens it with ``Journal``) copies it first."""
    run, csv, _ = tiny_trained
    journal = tmp_path_factory.mktemp("replayed") / "whole.sqlite"
    feed = ReplayFeed(csv)
    ex = Executor(run, journal,
                  ExecutorOptions(trade_dates=split_dates(run, "test"), market=feed.bars.market,
                                  bar_minutes=feed.bars.bar_minutes))
    ex.run_feed(feed)
    ex.close()
    return journal, ex


@pytest.fixture(scope="session")
def student_p2(tmp_path_factory, student_market, tiny_trained):
    """A copy of ``tiny_trained``'s phase 2 run with RUN/advice/student.pt distilled from the mock advisor's advice
    on its states."""
    root = tmp_path_factory.mktemp("student")
    shutil.copytree(tiny_trained[0].parent / "p1", root / "p1")
    run = root / "p2"
    shutil.copytree(tiny_trained[0], run)
    cfg = student_cfg(2, 256)
    llm = collect_llm_config(cfg, backend="mock", batch=64)
    policy = RunPolicy(run)
    for split in ("train", "val"):
        collect_split(run, split, llm, CollectRequest(market=student_market, run_config=cfg, policy=policy,
                                                      progress=False, max_states=1500, say=lambda s: None))
    distill(run, DistillConfig(epochs=8, hidden=(32,)), say=lambda s: None)
    return run
