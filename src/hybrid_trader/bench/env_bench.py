"""``hybrid-trader bench env``: environment steps per second with random legal actions.

Times ``env.step`` plus ``env.action_masks`` (what a masked policy calls every step)
on one core; feature computation is done once beforehand and timed separately.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from hybrid_trader.bench.args import EnvBenchArgs
from hybrid_trader.data import load_bars
from hybrid_trader.data.synthetic import generate_bars
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.features import compute_features


def run(args: EnvBenchArgs) -> int:
    t0 = time.perf_counter()
    if args.data:
        bars = load_bars(args.data, tz=args.tz or "America/New_York", time_shift=args.time_shift or 0.0,
                         market=args.market)
    else:
        bars = generate_bars(days=40, seed=args.seed, market=args.market or "NQ")
    t1 = time.perf_counter()
    features = compute_features(bars)
    t2 = time.perf_counter()
    env = TradingEnv(bars, features, EnvConfig(phase=args.phase, episode_sessions=5, reward=args.reward))
    rng = np.random.default_rng(args.seed)
    # Pre-draw random numbers so that the loop times the environment, not the generator.
    draws = rng.integers(0, 1 << 30, size=args.steps)
    env.reset(seed=args.seed)
    episodes = 0
    start = time.perf_counter()
    for i in range(args.steps):
        legal = np.flatnonzero(env.action_masks())
        _, _, term, trunc, _ = env.step(int(legal[draws[i] % len(legal)]))
        if term or trunc:
            episodes += 1
            env.reset()
    elapsed = time.perf_counter() - start
    result = {
        "env_steps_per_s": round(args.steps / elapsed, 1),
        "steps": args.steps,
        "episodes": episodes,
        "phase": args.phase,
        "reward": args.reward,
        "bars": len(bars),
        "load_s": round(t1 - t0, 3),
        "features_s": round(t2 - t1, 3),
        "data": args.data or "synthetic",
        "pid_cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }
    print(f"{result['env_steps_per_s']:,.0f} env steps/s over {args.steps:,} steps ({episodes} episodes), "
          f"features {result['features_s']} s for {len(bars):,} bars")
    print(json.dumps(result))
    return 0
