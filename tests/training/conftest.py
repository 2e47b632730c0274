"""A tiny phase 1 -> phase 2 chain and a student distilled from mock advice on it (built once per session)."""

from __future__ import annotations

import pytest

from hybrid_trader.advise.collect import RunPolicy, collect_llm_config, collect_split
from hybrid_trader.advise.distill import DistillConfig, distill
from hybrid_trader.config import merge_overrides
from hybrid_trader.training.config import RunConfig
from hybrid_trader.training.market import load_market
from hybrid_trader.training.runner import train_run

STUDENT_TINY = {"data.synthetic_days": 12, "data.synthetic_edge": 0.3, "ppo.n_steps": 128, "ppo.batch_size": 128,
                "ppo.n_envs": 2, "ppo.n_epochs": 2, "train.validate_every": 0, "train.progress_bar": False,
                "train.checkpoint_every": 1_000_000, "llm": {"backend": "mock", "query": {"mode": "always"}}}
"""The tiny runs of the student tests (synthetic market, 2 environments)."""


def student_cfg(phase: int, steps: int = 256, **extra) -> RunConfig:
    """A tiny run config; phase 3 advised by the student (``llm.backend: student``) unless ``extra`` says otherwise."""
    over = {**STUDENT_TINY, "env.phase": phase, "ppo.total_timesteps": steps}
    if phase == 3:
        over["llm.backend"] = "student"
    return merge_overrides(RunConfig(), {**over, **extra})


def train_phase2(root, cfg_of, market, steps: int = 256):
    """Phase 1, then phase 2 from it, under ``root`` (``cfg_of(phase, steps)`` gives each config); the phase 2 run."""
    train_run(cfg_of(1, steps), root / "p1", market=market, quiet=True)
    train_run(cfg_of(2, steps), root / "p2", init=root / "p1", market=market, quiet=True)
    return root / "p2"


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
