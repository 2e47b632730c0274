"""The tiny runs of the student tests; their session fixtures (``student_market``, ``student_p2``) are in
tests/conftest.py, shared with tests/faults."""

from __future__ import annotations

import numpy as np

from hybrid_trader.config import merge_overrides
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import env_factory
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


def env_fns(market, config: RunConfig, n: int = 2, seed: int = 3) -> list:
    """``n`` environment constructors on ``market``'s training days (seeds ``seed``, ``seed + 1``, ...)."""
    return [env_factory(market, config.env, market.sessions("train"), seed + i) for i in range(n)]


def legal_actions(venv, rng: np.random.Generator) -> np.ndarray:
    """One random legal action of each environment of ``venv``."""
    masks = np.stack(venv.env_method("action_masks"))
    return np.array([rng.choice(np.flatnonzero(m)) for m in masks])
