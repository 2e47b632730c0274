"""A tiny phase 2 run trained once per session, copied for each test that writes advice into it."""

from __future__ import annotations

import shutil

import pytest

from hybrid_trader.advise.collect import RunPolicy, collect_llm_config
from hybrid_trader.config import merge_overrides
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_market
from hybrid_trader.training.runner import load_run_config, train_run

TINY = {"data.synthetic_days": 12, "ppo.n_steps": 128, "ppo.batch_size": 128, "ppo.n_envs": 2, "ppo.n_epochs": 2,
        "train.validate_every": 0, "train.progress_bar": False, "train.checkpoint_every": 10_000,
        "env.phase": 2, "ppo.total_timesteps": 256}


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("advise") / "p2"
    train_run(merge_overrides(RunConfig(), TINY), run, quiet=True)
    return run


@pytest.fixture(scope="session")
def run_parts(trained_run):
    """(run config, market, policy) of the tiny run, loaded once."""
    cfg = load_run_config(trained_run)
    return cfg, load_market(cfg.data, cfg.split), RunPolicy(trained_run)


@pytest.fixture
def run_dir(trained_run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(trained_run, dst)
    return dst


@pytest.fixture
def mock_config(run_parts):
    return collect_llm_config(run_parts[0], backend="mock", batch=16)
