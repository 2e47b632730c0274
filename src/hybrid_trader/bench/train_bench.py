"""``hybrid-trader bench train``: training throughput and the environment's share of it."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from hybrid_trader.config import merge_overrides
    from hybrid_trader.training.callbacks import EnvTimeCallback
    from hybrid_trader.training.config import RunConfig
    from hybrid_trader.training.market import load_market
    from hybrid_trader.training.runner import train_run

    overrides = {"env.phase": args.phase, "ppo.n_envs": args.n_envs, "ppo.vec_env": args.vec_env, "ppo.total_timesteps": args.steps,
                 "ppo.seed": args.seed, "train.validate_every": 0, "train.checkpoint_every": 10 ** 9,
                 "train.progress_bar": False}
    if args.data:
        overrides["data.path"] = args.data
        if args.tz:
            overrides["data.tz"] = args.tz
        if args.time_shift is not None:
            overrides["data.time_shift"] = args.time_shift
    config = merge_overrides(RunConfig(), overrides)
    market = load_market(config.data, config.split)
    timer = EnvTimeCallback()
    with tempfile.TemporaryDirectory() as tmp:
        init = None
        if args.phase == 2:
            p1 = merge_overrides(config, {"env.phase": 1, "ppo.total_timesteps": config.ppo.n_steps * args.n_envs})
            train_run(p1, Path(tmp) / "p1", market=market, quiet=True)
            init = Path(tmp) / "p1"
        start = time.perf_counter()
        status = train_run(config, Path(tmp) / "run", market=market, init=init, extra_callbacks=[timer], quiet=True)
        wall = time.perf_counter() - start
    steps = status["total_timesteps"]
    result = {
        "train_steps_per_s": round(steps / wall, 1),
        "env_time_share_pct": round(100 * timer.env_seconds / wall, 1),
        "env_seconds": round(timer.env_seconds, 2),
        "wall_seconds": round(wall, 2),
        "steps": steps,
        "phase": args.phase,
        "n_envs": args.n_envs,
        "vec_env": args.vec_env,
        "n_steps": config.ppo.n_steps,
        "n_epochs": config.ppo.n_epochs,
        "batch_size": config.ppo.batch_size,
        "data": args.data or "synthetic",
    }
    print(f"{result['train_steps_per_s']:,.0f} training steps/s; environment {result['env_time_share_pct']}% of wall time")
    print(json.dumps(result))
    return 0
