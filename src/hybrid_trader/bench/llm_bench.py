"""``hybrid-trader bench llm``: advisor decisions per second and how long its callers block.

The loop plays a training loop's policy side: ``--batch`` environments step together;
each vectorised step, every environment polls its latest advice and submits its new
context (query policy ``always``, cache off, so every submit wants the model), then the
loop sleeps ``--step-ms`` (the environments' own time). The worker thread batches the
waiting queries (one per environment, newer replacing older) into one back-end call.

Reported (JSON, last line):

- ``decisions_per_s``: model answers delivered per second of wall time;
- ``p99_blocking_ms``: 99th percentile of the time one ``poll`` + ``submit`` pair takes
  in the caller's thread (what a training step pays);
- ``mean_latency_ms``: mean time from submit to answer (queueing + batch);
- ``decisions_per_cpu_s``: answers per CPU-second the process used (all threads): a
  figure that does not depend on what else runs on the machine; an idle machine with
  ``cpus`` cores can give at most ``cpus`` CPU-seconds per second;
- and load time, batch sizes, abstention rate, label coverage, the 1-minute load average.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np

from hybrid_trader.bench.args import LLMBenchArgs
from hybrid_trader.errors import UserError
from hybrid_trader.finetune.pipeline import load_run
from hybrid_trader.hindsight.retrieval_pool import build_pool
from hybrid_trader.llm import build_advisor, load_llm_config
from hybrid_trader.llm.backends.transformers_backend import prefer_passive_openmp
from hybrid_trader.llm.context import TREND_LABELS
from hybrid_trader.llm.prompt import sample_context
from hybrid_trader.run.calibration import load_calibration


def bench_contexts(n: int, seed: int = 0) -> list:
    """``n`` varied, plausible contexts (no data or features needed)."""
    rng = np.random.default_rng(seed)
    more = np.random.default_rng([seed, 1])  # the numbers prompt's fields: a second stream keeps the first's draws
    base = sample_context()
    out = []
    for i in range(n):
        pos = int(rng.choice([-1, 0, 0, 1]))
        score = int(rng.integers(-2, 3))
        legal = np.array([True, pos == 0, pos == 0, pos != 0 and rng.random() < 0.5, pos != 0, False])
        out.append(dataclasses.replace(
            base,
            timestamp=base.timestamp + np.timedelta64(int(i), "m").item(),
            price=round(float(16850 + rng.normal(0, 40)) * 4) / 4,
            adx=float(rng.uniform(10, 45)), rsi=float(rng.uniform(20, 80)),
            vwap_distance=float(rng.normal(0, 0.002)), momentum=float(rng.normal(0, 15)),
            trend_score=score, trend=TREND_LABELS[score], position=pos,
            position_status="FLAT" if pos == 0 else ("LONG 1" if pos > 0 else "SHORT 1"),
            unrealized_pnl=0.0 if pos == 0 else float(rng.normal(0, 400)),
            win_rate=float(rng.uniform(0.3, 0.7)), consecutive_losses=int(rng.integers(0, 4)),
            balance=float(50_000 + rng.normal(0, 800)), legal=legal,
            ret_5=float(more.normal(0, 0.001)), ret_20=float(more.normal(0, 0.003)),
            ret_60=float(more.normal(0, 0.006)), atr=float(more.uniform(8, 30)),
            session_high_atr=float(more.exponential(2.0)), session_low_atr=float(more.exponential(2.0)),
        ))
    return out


def _cpu_seconds() -> float:
    """CPU time of this process, all threads (user + system) [s]."""
    t = os.times()
    return t.user + t.system


def run(args: LLMBenchArgs) -> int:
    passive = prefer_passive_openmp()  # before torch is imported (see its docstring)
    over: dict = dict(args.llm_overrides)
    batch = max(1, int(args.batch))
    over["query"] = {"mode": "always"}
    over["cache"] = {"enabled": False}
    bat: dict[str, float] = {"max_batch": batch, "max_age_steps": 1_000_000, "max_pending": max(batch, 4096)}
    if args.max_wait_ms is not None:
        bat["max_wait_ms"] = args.max_wait_ms
    over["batching"] = bat
    cfg = load_llm_config(args.config, over)
    queries = args.queries or (2000 if cfg.backend == "mock" else 128)

    t0 = time.perf_counter()
    retrieval_pool = None
    if cfg.prompt.retrieval.enabled:
        if not args.retrieval_run:
            raise UserError("llm.prompt.retrieval is on but bench llm has no run to take the pool from",
                            fix="give --retrieval-run RUN_DIR (its training days), or set llm.prompt.retrieval.k: 0")
        run = load_run(args.retrieval_run)
        retrieval_pool = build_pool(run.market, run.config, cfg, source=args.retrieval_run)
    advisor = build_advisor(cfg, retrieval_pool=retrieval_pool)
    if args.calibration_run:
        advisor.answerer.batch_calibration = load_calibration(Path(args.calibration_run), cfg, required=True)
    load_s = time.perf_counter() - t0
    try:
        pool = bench_contexts(max(4 * batch, 64), seed=args.seed)
        # warm-up: prefix caches, first-call allocations (not timed, not counted)
        t1 = time.perf_counter()
        advisor.advise_now(pool[:batch])
        warm_s = time.perf_counter() - t1
        base_total = advisor.stats()["llm/total_queries"]

        blocking: list[float] = []
        step = 0
        cpu0 = _cpu_seconds()
        sleep = max(0.0, args.step_ms) / 1000.0
        start = time.perf_counter()
        deadline = start + 3600.0
        while advisor.stats()["llm/total_queries"] - base_total < queries:
            step += 1
            for env in range(batch):
                ctx = pool[(step * 7 + env) % len(pool)]
                b0 = time.perf_counter()
                advisor.poll(env, step)
                advisor.submit(env, step, ctx)
                blocking.append(time.perf_counter() - b0)
            if sleep:
                time.sleep(sleep)
            if time.perf_counter() > deadline:
                break
        elapsed = time.perf_counter() - start
        cpu_s = _cpu_seconds() - cpu0
        stats = advisor.stats()
    finally:
        advisor.close()
    answered = stats["llm/total_queries"] - base_total
    b = np.asarray(blocking) * 1000.0
    result = {
        "backend": cfg.backend,
        "calibration": "batch" if args.calibration_run else None,
        "retrieval": advisor.prompts.retrieval.identity() if advisor.prompts.retrieval is not None else None,
        "model": advisor.backend.describe(),
        "mode": cfg.mode,
        "batch": batch,
        "queries": int(answered),
        "decisions_per_s": round(answered / elapsed, 2),
        "p99_blocking_ms": round(float(np.percentile(b, 99)), 4),
        "p50_blocking_ms": round(float(np.percentile(b, 50)), 4),
        "max_blocking_ms": round(float(b.max()), 3),
        "mean_latency_ms": round(stats["llm/avg_latency_ms"], 1),
        "p95_latency_ms": round(stats["llm/p95_latency_ms"], 1),
        "batch_size_avg": round(stats["llm/batch_size_avg"], 2),
        "abstain_rate": round(stats["llm/abstain_rate"], 4),
        "label_coverage": round(stats["llm/label_coverage"], 4),
        "confidence_avg": round(stats["confidence/llm_avg"], 4),
        "elapsed_s": round(elapsed, 2),
        "process_cpu_s": round(cpu_s, 2),
        "decisions_per_cpu_s": round(answered / cpu_s, 3) if cpu_s > 0 else None,
        "loadavg_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "load_s": round(load_s, 2),
        "warmup_s": round(warm_s, 2),
        "step_ms": args.step_ms,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default") + (" (set by bench)" if passive else ""),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    print(f"{result['decisions_per_s']:.2f} decisions/s ({cfg.backend}, {cfg.mode}, batch {batch}, "
          f"{int(answered)} answers in {elapsed:.1f} s); caller blocks p99 {result['p99_blocking_ms']:.3f} ms; "
          f"mean latency {result['mean_latency_ms']:.0f} ms")
    print(json.dumps(result))
    return 0
