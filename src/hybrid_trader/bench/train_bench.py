"""``hybrid-trader bench train``: training throughput and the environment's share of it.

With ``--phase 3`` it answers the phase 3 question: how much longer does training take
with the LLM advisor inside the loop? It trains a short phase 1 and phase 2 (the
starting point), then times, from that same phase 2 run, a phase 2 continuation and a
phase 3 run of ``--steps`` each (``--repeats`` times, alternating), and reports
``phase3_over_phase2``: the ratio of their median ``model.learn`` wall times (model
loading and the advisor's start-up are reported apart, as ``advisor_start_seconds``),
with the share of decisions the LLM actually answered. The same ratio in CPU time
(``phase3_over_phase2_cpu``: ``model.learn``'s ``time.process_time``, torch on one thread)
is reported beside it: it counts the process's own work, so a busy machine moves it less
than the wall time (not at all is too much to hope: other jobs share the caches).

``--llm student`` (always-on: every decision advised by the distilled student) takes
``--student PATH``, or builds a tiny student itself: it asks the mock advisor on the
phase 2 run's training states and distils them (``student_build_seconds``, not timed
against phase 2).

``--breakdown`` times each segment of the loop (:mod:`hybrid_trader.bench.segments`) in
every timed run, and prints the microseconds per vector step of each (with phase 3:
both phases, medians over the repeats, and phase 3's extra): where the time goes.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_trader.advise.collect import CollectRequest, RunPolicy, collect_llm_config, collect_split
from hybrid_trader.advise.distill import DistillConfig, distill
from hybrid_trader.bench.args import TrainBenchArgs
from hybrid_trader.bench.segments import SegmentTimer, compare, format_comparison, segments_table
from hybrid_trader.config import merge_overrides
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_market
from hybrid_trader.training.callbacks import EnvTimeCallback
from hybrid_trader.training.runner import TrainHooks, train_run, update_threads_of
from hybrid_trader.training.threads import openmp_spins


def _last_record(run_dir: Path, key: str) -> Any:
    """The last value of ``key`` in a run's progress.jsonl (None when never logged)."""
    value = None
    path = run_dir / "progress.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if key in rec:
                value = rec[key]
    return value


def _mean_record(run_dir: Path, key: str) -> float | None:
    """The mean of ``key`` over the rows of a run's progress.jsonl that logged it (None when none did)."""
    path = run_dir / "progress.jsonl"
    values = [float(rec[key]) for rec in map(json.loads, path.read_text().splitlines()) if rec.get(key) is not None] \
        if path.exists() else []
    return sum(values) / len(values) if values else None


def build_tiny_student(run_dir: Path, run_config: Any, market: Any, max_states: int = 4000) -> dict:
    """Distil a small student into ``run_dir/advice/student.pt`` from the mock advisor's advice on its train states.

    Returns its fidelity on the validation days.
    """
    llm = collect_llm_config(run_config, backend="mock", batch=256)
    policy = RunPolicy(run_dir)
    for split, n in (("train", max_states), ("val", max_states // 4)):
        collect_split(run_dir, split, llm, CollectRequest(market=market, run_config=run_config, policy=policy,
                                                          max_states=n, progress=False, say=lambda s: None))
    out = distill(run_dir, DistillConfig(epochs=10, hidden=(64, 64)), say=lambda s: None)
    return out["metrics"].get("val", {})


def bench_config(args: TrainBenchArgs) -> RunConfig:
    """The timed runs' configuration: no validation, no checkpoints, no progress bar."""
    phase = int(args.phase)
    overrides: dict[str, Any] = {"env.phase": phase, "ppo.n_envs": args.n_envs, "ppo.vec_env": args.vec_env,
                 "ppo.total_timesteps": args.steps, "ppo.seed": args.seed, "train.validate_every": 0,
                 "train.checkpoint_every": 10 ** 9, "train.progress_bar": False}
    if args.fast_math is not None:
        overrides["ppo.fast_math"] = args.fast_math == "true"
    if args.torch_threads is not None:
        overrides["ppo.torch_threads"] = args.torch_threads
    if args.update_threads is not None:
        overrides["ppo.update_threads"] = args.update_threads if args.update_threads == "auto" \
            else int(args.update_threads)
    if phase == 3:
        overrides["llm.backend"] = args.llm
        overrides["fusion.mode"] = args.fusion
        if args.advice_input is not None:
            overrides["fusion.advice_input"] = args.advice_input == "true"
        if args.llm == "student" and args.student:
            overrides["llm.student.path"] = str(Path(args.student).resolve())
    if args.data:
        overrides["data.path"] = args.data
        if args.tz:
            overrides["data.tz"] = args.tz
        if args.time_shift is not None:
            overrides["data.time_shift"] = args.time_shift
    return merge_overrides(RunConfig(), overrides)


def run(args: TrainBenchArgs) -> int:
    phase = int(args.phase)
    config = bench_config(args)
    market = load_market(config.data, config.split)
    extra: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_dir = Path(tmp)
        init = None
        short = config.ppo.n_steps * args.n_envs
        if phase >= 2:
            p1 = merge_overrides(config, {"env.phase": 1, "ppo.total_timesteps": short})
            train_run(p1, tmp_dir / "p1", market=market, quiet=True)
            init = tmp_dir / "p1"
        if phase == 3:
            p2 = merge_overrides(config, {"env.phase": 2, "ppo.total_timesteps": short})
            train_run(p2, tmp_dir / "p2", market=market, init=init, quiet=True)
            init = tmp_dir / "p2"
            if args.llm == "student" and not args.student:
                start = time.perf_counter()
                extra["student_metrics"] = build_tiny_student(init, p2, market)
                extra["student_build_seconds"] = round(time.perf_counter() - start, 1)
        repeats = args.repeats if phase == 3 else 1
        p2_times: list[float] = []
        p3_times: list[float] = []
        cpu_times: tuple[list[float], list[float]] = ([], [])
        p2_segments: list[dict] = []
        segments: list[dict] = []
        for r in range(repeats):
            if phase == 3:
                # the same length of phase 2 from the same starting point, for the ratio; runs
                # alternate so that a slow spell of a shared machine hits both alike. Both get
                # the same timing callbacks (each costs a little per step).
                same = merge_overrides(config, {"env.phase": 2})
                same_segments = SegmentTimer() if args.breakdown else None
                gc.collect()  # no run inherits the collection the set-up's garbage is due (below)
                s2 = train_run(
                    same, tmp_dir / f"p2-same-{r}", market=market, init=init, quiet=True,
                    hooks=TrainHooks(extra_callbacks=[EnvTimeCallback(), *([same_segments] if same_segments else [])]))
                p2_times.append(float(s2["wall_seconds"]))
                cpu_times[0].append(float(s2["cpu_seconds"]))
                if same_segments is not None:
                    p2_segments.append(same_segments.table())
            timer = EnvTimeCallback()
            run_segments = SegmentTimer() if args.breakdown else None
            # The set-up (imports, the market, the short runs, the student) leaves ~400,000 objects: a full collection
            # over them costs 0.2-0.3 s in whichever run it falls (it fell in phase 3's logger.dump with --breakdown)
            gc.collect()
            start = time.perf_counter()
            run_dir = tmp_dir / f"run-{r}"
            status = train_run(config, run_dir, market=market, init=init, quiet=True,
                               hooks=TrainHooks(extra_callbacks=[timer, *([run_segments] if run_segments else [])]))
            wall = time.perf_counter() - start
            p3_times.append(float(status["wall_seconds"]))
            cpu_times[1].append(float(status["cpu_seconds"]))
            if run_segments is not None:
                segments.append(run_segments.table())
        if args.breakdown:
            extra["segments_us_per_step"] = compare(p2_segments, segments) if phase == 3 else \
                {name: row["us_per_step"] for name, row in segments[0].items()}
        if phase == 3:
            extra.update(_phase3_figures(config, run_dir, status, wall, p2_times, p3_times))
            extra.update(_cpu_figures(*cpu_times))
    steps = status["total_timesteps"]
    learn = status["wall_seconds"] or wall
    cpu = float(status.get("cpu_seconds") or 0.0)
    result = {
        "train_steps_per_s": round(steps / learn, 1),
        "train_steps_per_cpu_s": round(steps / cpu, 1) if cpu > 0 else None,
        "cpu_seconds": cpu,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "env_time_share_pct": round(100 * timer.env_seconds / learn, 1),
        "env_seconds": round(timer.env_seconds, 2),
        "advice_time_share_pct": round(100 * timer.advice_seconds / learn, 1),  # phase 3's advice layer (else 0)
        "wall_seconds": round(wall, 2),
        "learn_seconds": learn,
        "steps": steps,
        "phase": phase,
        "n_envs": args.n_envs,
        "vec_env": args.vec_env,
        "n_steps": config.ppo.n_steps,
        "n_epochs": config.ppo.n_epochs,
        "batch_size": config.ppo.batch_size,
        "fast_math": config.ppo.fast_math,
        "torch_threads": config.ppo.torch_threads,
        "update_threads": update_threads_of(config),  # the runner's rule, as the timed runs used it
        "openmp_spins": openmp_spins(),
        "data": args.data or "synthetic",
        **extra,
    }
    print(f"{result['train_steps_per_s']:,.0f} training steps/s "
          f"({result['train_steps_per_cpu_s'] or 0:,.0f} per CPU second, 1-minute load {result['load_average'][0]}); "
          f"environments and normaliser {result['env_time_share_pct']}% of wall time"
          + (f", the advice layer {result['advice_time_share_pct']}%" if phase == 3 else ""))
    if phase == 3:
        route = "input and prior" if result["advice_input"] else "prior alone"
        print(f"phase 3 ({result['llm_backend']}, advice as {route}) took {result['phase3_over_phase2']:.2f}x "
              f"the time of phase 2 "
              f"({result['phase3_learn_seconds']} s vs {result['phase2_learn_seconds']} s for {steps:,} steps, "
              f"median of {result['repeats']}); "
              f"the LLM answered {result['llm_query_rate_pct']}% of decisions")
        print(f"in CPU time (the process's own work, less moved by other jobs): "
              f"{result['phase3_over_phase2_cpu']:.2f}x ({result['phase3_cpu_seconds']} s vs "
              f"{result['phase2_cpu_seconds']} s)")
    if args.breakdown:
        if phase == 3:
            print(format_comparison(result["segments_us_per_step"]))
        else:
            print(segments_table(result["segments_us_per_step"]))
    print(json.dumps(result))
    return 0


def _cpu_figures(p2_cpu: list[float], p3_cpu: list[float]) -> dict[str, Any]:
    """The phase 3 comparison in CPU time (``model.learn``'s ``time.process_time``): medians and their ratio."""
    p2, p3 = round(float(np.median(p2_cpu)), 2), round(float(np.median(p3_cpu)), 2)
    return {"phase2_cpu_seconds": p2, "phase3_cpu_seconds": p3, "phase2_cpu_runs_seconds": p2_cpu,
            "phase3_cpu_runs_seconds": p3_cpu, "phase3_over_phase2_cpu": round(p3 / max(p2, 1e-9), 3)}


def _phase3_figures(config: RunConfig, run_dir: Path, status: dict, wall: float, p2_times: list[float],
                    p3_times: list[float]) -> dict[str, Any]:
    """The phase 3 comparison: medians of both phases, their ratio, and what the LLM did in the last run."""
    extra: dict[str, Any] = {"repeats": len(p3_times)}
    extra["phase2_learn_seconds"] = round(float(np.median(p2_times)), 2)
    extra["phase3_learn_seconds"] = round(float(np.median(p3_times)), 2)
    extra["phase2_runs_seconds"] = p2_times
    extra["phase3_runs_seconds"] = p3_times
    extra["phase3_over_phase2"] = round(extra["phase3_learn_seconds"] / max(extra["phase2_learn_seconds"], 1e-9), 3)
    extra["advisor_start_seconds"] = round(wall - status["wall_seconds"], 1)
    extra["llm_backend"] = config.llm.backend
    extra["fusion_mode"] = config.fusion.mode
    extra["advice_input"] = config.fusion.advice_input
    extra["llm_advised_pct"] = round(_mean_record(run_dir, "llm/advised_pct") or 0.0, 2)
    for key in ("llm/total_queries", "llm/avg_latency_ms", "llm/label_coverage", "llm/error_rate"):
        extra[key] = _last_record(run_dir, key)
    steps_logged = max(status["total_timesteps"], 1)
    # query rate over the whole run: answered queries (cache hits included) per decision
    answered = float(extra["llm/total_queries"] or 0) + float(_last_record(run_dir, "llm/cache_hits") or 0)
    extra["llm_query_rate_pct"] = round(100.0 * answered / steps_logged, 3)
    if config.llm.backend == "student":  # always-on: answered in the wrapper, logged per rollout
        extra["llm_query_rate_pct"] = round(_mean_record(run_dir, "llm/query_rate_pct") or 0.0, 3)
    extra["llm_request_rate_pct"] = round(_mean_record(run_dir, "llm/request_rate_pct") or 0.0, 2)
    return extra
