"""A study with a search space, on Ray Tune: per fold a search on validation days, then its choice tested once.

Nested walk-forward (``docs/STUDY.md``, "Searches"): for each fold in turn a ``tune.Tuner`` runs
the fold's configurations (``search: grid | random | optuna``, :mod:`hybrid_trader.study.space`),
each a Tune trial on one CPU that trains the study's phases with the fold's split and reports
its periodic validation (``train.validate_every``; :data:`METRIC`, net P&L per validation day)
so that ``scheduler: asha`` can stop a trailing one; a trial that runs to its end is evaluated
on the **validation** days only. The fold's configuration is the finished trial best by
``select`` (a validation figure); it alone is evaluated, once, on the fold's test days, by
this process. No test day reaches a trial, the searcher, the scheduler or the selection.

Trials keep the study's folder, resume, lock and one writer: a trial runs in a scratch folder of
its worker (:func:`hybrid_trader.study.trials.trial_task`), hands its row and folder (a tar) to a
collector actor that holds them in memory, and a Tune callback in this process lands them in
``OUT/trials/c<sample>-s<seed>-f<fold>/`` (:func:`~hybrid_trader.study.transport.land_trial`) and
logs the attempt. A trial ASHA stops is recorded ``stopped`` with the step it reached and its last
validation (its partial runs are not kept). A rerun skips finished and stopped trials: grid and
random redraw the same points (seeded by ``sample_seed`` and the fold) and run those without a
record; Optuna is told the recorded ones (``points_to_evaluate`` with their results) and proposes
the rest.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from hybrid_trader.config import from_dict, merge_overrides, to_dict
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.metrics import jsonable
from hybrid_trader.evaluation.runner import validation_fn
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.files import atomic_write_text
from hybrid_trader.run.market import check_environment
from hybrid_trader.study.attempts import count_attempts, record_attempt
from hybrid_trader.study.cluster import ray_for_study
from hybrid_trader.study.scheduler_replay import asha_max_t
from hybrid_trader.study.search_results import (
    STOPPED,
    search_table,
    selection_of,
    summarize_search,
    write_search_report,
)
from hybrid_trader.study.space import VARIANT, decode, dimensions, encode, points, trial_keys, tune_space
from hybrid_trader.study.spec import StudySpec
from hybrid_trader.study.transport import TRIALS, DataBars, absolute_paths, land_trial, study_bars
from hybrid_trader.study.trials import (
    Trial,
    evaluate_trial,
    forget_markets,
    market_for,
    read_trial,
    trial_task,
)
from hybrid_trader.training.selection import METRIC

TABLE = "trials.parquet"
SUMMARY = "summary.json"
"""A trial's status when ASHA stopped it: its last validation and step are recorded, it is never rerun."""
DONE = ("finished", STOPPED)


def sample_name(index: int) -> str:
    """The variant name of a search's sample (its trials' folders start with it)."""
    return f"c{index:03d}"


def trial_spec(spec_data: Mapping[str, Any], variant: str, keys: Mapping[str, Any], index: int) -> dict[str, Any]:
    """A one-variant study of one configuration (the variant's keys and the point's), evaluated on validation days:
    what a search trial runs (:func:`~hybrid_trader.study.trials.run_trial`)."""
    base = next(v for v in spec_data["variants"] if v["name"] == variant)
    return {**spec_data, "variants": [{"name": sample_name(index), "set": {**base["set"], **keys}}],
            "baseline": "", "space": {}, "search": "grid", "scheduler": "none", "samples": 0, "hypotheses": [],
            "evaluate": {**spec_data["evaluate"], "split": "val"}}


def _steps_per_phase(config: RunConfig) -> int:
    """The steps one phase trains: its target rounded up to whole rollouts (the step a phase's reports start at)."""
    return config.ppo.whole_rollouts(config.ppo.total_timesteps)


def reporting_validation(phases: Sequence[int]) -> Callable[[Any, RunConfig], Callable[[Any], dict]]:
    """Training's periodic validation that also reports each result to Ray Tune (``step``: the trial's steps over
    its phases), so that ASHA can stop the trial."""
    from ray import tune

    def factory(market: Any, config: RunConfig) -> Callable[[Any], dict]:
        evaluate = validation_fn(market, config)
        offset = list(phases).index(config.env.phase) * _steps_per_phase(config)

        def run(model: Any) -> dict:
            row = evaluate(model)
            tune.report({METRIC: float(row.get(METRIC, math.nan)), "step": offset + int(model.num_timesteps)})
            return row

        return run

    return factory


class Collector:
    """A Ray actor (no CPU): the trials' rows and folders until the driver takes them; the sample numbers of an
    Optuna search's trials."""

    def __init__(self, next_index: int) -> None:
        self.next_index = next_index
        self.index: dict[str, int] = {}
        self.results: dict[str, tuple[dict, bytes]] = {}

    def number(self, trial_id: str) -> int:
        if trial_id not in self.index:
            self.index[trial_id] = self.next_index
            self.next_index += 1
        return self.index[trial_id]

    def index_of(self, trial_id: str) -> int | None:
        return self.index.get(trial_id)

    def put(self, trial_id: str, row: dict, files: bytes) -> None:
        self.results[trial_id] = (row, files)

    def take(self, trial_id: str) -> tuple[dict, bytes] | None:
        return self.results.pop(trial_id, None)


def search_trainable(config: dict[str, Any], *, spec_data: dict, fold: int, bars: dict[str, DataBars],
                     collector: Any, home: str, fixed: list[dict[str, Any]] | None = None) -> None:
    """One Tune trial: the configuration ``config`` names (``sample`` of ``fixed``, a grid or random search's points;
    else ``config`` itself, Optuna's) trained and evaluated on the fold's validation days
    (:func:`~hybrid_trader.study.trials.trial_task`), its row and folder handed to ``collector``, its last result
    reported. A failed trial raises (Tune records it as an error)."""
    import ray
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    spec = from_dict(StudySpec, spec_data, source="study")
    if fixed is not None:
        index = int(config["sample"])
        point = fixed[index]
    else:
        index = ray.get(collector.number.remote(trial_id))
        point = decode(spec, config)
    variant, keys = trial_keys(spec, point)
    data = trial_spec(spec_data, variant, keys, index)
    trial = Trial(sample_name(index), int(spec.seeds[0]), fold)
    row, files = trial_task(data, trial, None, bars, str(Path(home) / trial.slug),
                            validation=reporting_validation(spec.phases))
    days = row.get("Days") or 0
    final = float(row["Net PnL [$]"]) / days if days and row.get("Net PnL [$]") is not None else math.nan
    steps = len(spec.phases) * _steps_per_phase(spec.run_config(spec.variants[0], trial.seed, fold, spec.phases[-1]))
    row.update({"variant": variant, "sample": index, "params": keys, METRIC: final, "steps": steps})
    ray.get(collector.put.remote(trial_id, row, files))
    if row.get("status") != "finished":
        raise RuntimeError(f"trial {trial.slug} failed: {row.get('error')}")
    tune.report({METRIC: final, "step": steps + 1})


def _recorder(out: Path, spec: StudySpec, fold: int, collector: Any, fixed: list[dict] | None,
              landed: Callable[[dict], None]) -> Any:
    """A Tune callback (it runs in this process): each trial that ends is landed in the study folder and logged."""
    import ray
    from ray.tune import Callback

    class Recorder(Callback):
        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            self._record(trial, None)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            self._record(trial, getattr(trial, "error_msg", None) or "the trial raised")

        def _record(self, trial: Any, error: str | None) -> None:
            got = ray.get(collector.take.remote(trial.trial_id))
            last = dict(trial.last_result or {})
            if got is not None:
                row, files = got
            else:  # stopped by ASHA, or its worker lost before it handed anything back
                index = (int(trial.config["sample"]) if fixed is not None
                         else ray.get(collector.index_of.remote(trial.trial_id)))
                if index is None:
                    return  # never started: nothing ran
                point = fixed[index] if fixed is not None else decode(spec, trial.config)
                variant, keys = trial_keys(spec, point)
                t = Trial(sample_name(index), int(spec.seeds[0]), fold)
                row = {"variant": variant, "seed": t.seed, "fold": fold, "trial": t.slug, "sample": index,
                       "params": keys, "steps": last.get("step"), METRIC: last.get(METRIC),
                       "seconds": round(float(last.get("time_total_s") or 0.0), 2)}
                row["status"] = "failed" if error else STOPPED
                if error:
                    row["error"] = f"worker lost: {str(error)[:300]}"
                files = None
            land_trial(out, str(row["trial"]), row, files)
            record_attempt(out, row)  # every attempt counts in the selection's DSR
            landed(row)

    return Recorder()


def _search_bars(spec: StudySpec, bars: dict[str, DataBars]) -> None:
    """Every data configuration the space reaches loaded into ``bars``, and every environment it reaches checked as
    a trial will build it, before Ray starts: each combination of the ``data.*``, ``env.*`` and ``risk.*`` keys'
    choices (a continuous key at both bounds), for every variant, fold and phase (a missing file or bar size, a
    split without a day, contracts above the rules' limit, ...); refused naming the point and the variant."""
    dims = [d for d in dimensions(spec) if d.key.startswith(("data.", "env.", "risk.")) or d.key == "ppo.n_envs"]
    combos: list[dict[str, Any]] = [{}]
    for d in dims:
        combos = [{**c, d.key: v} for c in combos for v in d.extremes()]
    try:
        for variant in spec.variants:
            for combo in combos:
                for fold in range(max(spec.folds, 1)):
                    for phase in spec.phases:
                        config = merge_overrides(spec.run_config(variant, spec.seeds[0], fold, phase), combo,
                                                 source="study space")
                        check_environment(market_for(config, study_bars([config.data], into=bars)), config)
    except UserError as err:
        raise UserError(f"study space ({', '.join(f'{k}: {v!r}' for k, v in combo.items()) or 'base'}, variant "
                        f"{variant.name}): {err.message}", file=err.file, value=err.value, fix=err.fix) from None
    finally:
        forget_markets()


def _records(out: Path) -> dict[str, dict[str, Any]]:
    """Every trial record in the folder, by slug."""
    found: dict[str, dict[str, Any]] = {}
    for folder in sorted((out / TRIALS).glob("c[0-9]*")) if (out / TRIALS).exists() else []:
        row = read_trial(folder)
        if row is not None:
            found[folder.name] = row
    return found


def run_search(spec: StudySpec, out: Path, *, workers: int, address: str | None, progress: bool,
               bars: dict[str, DataBars], only: Sequence[str] | None = None,
               say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or continue) a study with a search space in ``out`` (locked, its ``study.json`` written by the
    caller): the folds' searches, the selections and their test evaluations, the table, summary and report."""
    if only:
        raise UserError("--only runs some variants of a study, and a search study searches its variants together",
                        value=", ".join(only), fix="run the search study without --only")
    _search_bars(spec, bars)
    folds = list(range(max(spec.folds, 1)))
    records = _records(out)
    say(f"study {spec.name}: search {spec.search}" + (f" ({spec.samples} samples a fold)" if spec.search != "grid"
        else f" ({len(points(spec, 0))} points a fold)") + f", scheduler {spec.scheduler}, {len(folds)} folds; "
        f"{sum(1 for r in records.values() if r.get('status') in DONE)} trials finished or stopped before; on "
        + (f"Ray at {address}" if address else f"{workers} local Ray workers"))
    timing: dict[str, Any] = {}
    if any(_plan(spec, f, records)[0] for f in folds):
        timing = _run_tune(spec, out, folds, records, workers, address, progress, bars)
    rows = list(_records(out).values())
    selected = _select_and_test(spec, out, rows, bars)
    rows = list(_records(out).values())
    table = search_table(rows)
    table.to_parquet(out / TABLE, index=False)
    summary = summarize_search(spec, rows, selected, count_attempts(out, rows))
    summary["timing"] = timing
    atomic_write_text(out / SUMMARY, json.dumps(jsonable(summary), indent=1))
    summary["report"] = str(write_search_report(out, spec, summary, table))
    return summary


def _plan(spec: StudySpec, fold: int, records: Mapping[str, dict]) -> tuple[int, list[dict] | None, list[int]]:
    """A fold's trials to run: ``(count, fixed points or None (Optuna), the samples to run (fixed points))``."""
    mine = {r["sample"]: r for r in records.values() if r.get("fold") == fold and "sample" in r}
    if spec.search == "optuna":
        done = sum(1 for r in mine.values() if r.get("status") in DONE)
        return max(spec.samples - done, 0), None, []
    fixed = points(spec, fold)
    todo = [i for i in range(len(fixed)) if (mine.get(i) or {}).get("status") not in DONE]
    return len(todo), fixed, todo


def _run_tune(spec: StudySpec, out: Path, folds: list[int], records: dict[str, dict], workers: int,
              address: str | None, progress: bool, bars: dict[str, DataBars]) -> dict[str, Any]:
    """Each fold's search on Ray Tune, in turn; each trial landed by this process as it ends."""
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no result files on the workers
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)  # no result files: said
    logging.getLogger("optuna").setLevel(logging.WARNING)
    ray, ours = ray_for_study(workers, address)
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search.optuna import OptunaSearch

    spec_data = absolute_paths(to_dict(spec))
    scratch = Path(tempfile.mkdtemp(prefix="hybrid-trader-tune-"))  # Tune's own experiment state: not the study's
    total = sum(_plan(spec, f, records)[0] for f in folds)
    bar = tqdm(total=total, desc="trials", unit="trial", disable=not progress)
    seconds = 0.0
    ran = 0

    spans: list[tuple[int, float, float]] = []  # each landed trial's (fold, start, end) on this clock
    windows: dict[int, tuple[float, float]] = {}  # each fold's Tuner, from its start to its end

    def landed(row: dict) -> None:
        nonlocal seconds, ran
        now, took = time.perf_counter(), float(row.get("seconds") or 0.0)
        spans.append((int(row.get("fold", -1)), now - took, now))
        seconds += took
        ran += 1
        bar.update(1)
        bar.set_postfix(last=f"{row.get('trial')} {row.get('status')}")

    started = time.perf_counter()
    try:
        shipped = ray.put(bars)
        steps = len(spec.phases) * _steps_per_phase(spec.run_config(spec.variants[0], spec.seeds[0], 0,
                                                                    spec.phases[-1]))
        validate_every = spec.run_config(spec.variants[0], spec.seeds[0], 0, spec.phases[0]).train.validate_every
        for fold in folds:
            count, fixed, todo = _plan(spec, fold, records)
            if not count:
                continue
            for i in todo:  # a failed trial of a grid or random search is tried again; its old record goes
                (out / TRIALS / f"{sample_name(i)}-s{spec.seeds[0]}-f{fold}" / "trial.json").unlink(missing_ok=True)
            mine = [r for r in records.values() if r.get("fold") == fold and "sample" in r]
            if fixed is None:
                for r in mine:  # an Optuna search's failed trial is replaced by a new proposal
                    if r.get("status") not in DONE:
                        shutil.rmtree(out / TRIALS / r["trial"], ignore_errors=True)
            done = [r for r in mine if r.get("status") in DONE]
            collector = ray.remote(num_cpus=0)(Collector).remote(max((r["sample"] for r in mine), default=-1) + 1)
            trainable = tune.with_resources(tune.with_parameters(
                search_trainable, spec_data=spec_data, fold=fold, bars=shipped, collector=collector,
                home=str(out / TRIALS), fixed=fixed), {"cpu": 1})
            if fixed is not None:
                space: dict[str, Any] = {"sample": tune.grid_search(todo)}
                searcher = None
                samples = 1
            else:
                space = tune_space(spec)
                known = [(r, float(r[METRIC])) for r in done if r.get(METRIC) is not None
                         and not math.isnan(float(r[METRIC]))]
                searcher = OptunaSearch(seed=spec.sample_seed + fold,
                                        points_to_evaluate=[encode(spec, _point(spec, r)) for r, _ in known] or None,
                                        evaluated_rewards=[float(v) for _, v in known] or None)
                samples = count
            scheduler = (ASHAScheduler(time_attr="step", grace_period=spec.grace_period or max(validate_every, 1),
                                       reduction_factor=spec.reduction_factor, max_t=asha_max_t(steps))
                         if spec.scheduler == "asha" else FIFOScheduler())
            tuner = tune.Tuner(
                trainable, param_space=space,
                tune_config=tune.TuneConfig(metric=METRIC, mode="max", num_samples=samples, search_alg=searcher,
                                            scheduler=scheduler, max_concurrent_trials=workers,
                                            reuse_actors=True),  # one process per worker: torch imported once
                run_config=tune.RunConfig(storage_path=str(scratch), name=f"fold{fold}", verbose=0,
                                          callbacks=[_recorder(out, spec, fold, collector, fixed, landed)]))
            begun = time.perf_counter()
            tuner.fit()
            windows[fold] = (begun, time.perf_counter())
            ray.kill(collector)
    finally:
        bar.close()
        if ours:
            ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.perf_counter() - started
    used = min(workers, max(ran, 1))
    idle = max(wall * used - seconds, 0.0)
    tails = min(fold_end_idle(spans, windows, used), idle)

    def pct(worker_seconds: float) -> float:
        return round(100.0 * worker_seconds / (wall * used), 1) if wall > 0 else 0.0

    return {"wall_s": round(wall, 2), "trial_s_total": round(seconds, 2), "workers": used, "trials": ran,
            "tune_overhead_s_per_trial": round((idle - tails) / max(ran, 1), 2),
            "tune_overhead_pct": pct(idle - tails), "fold_end_idle_s": round(tails, 1),
            "fold_end_idle_pct": pct(tails), "worker_idle_pct": pct(idle)}


def fold_end_idle(spans: Sequence[tuple[int, float, float]], windows: Mapping[int, tuple[float, float]],
                  workers: int) -> float:
    """Worker-seconds left idle at the folds' ends: from the start of a fold's last trial to the end of its search,
    the workers not running one of its trials (the folds are searched one after another, so nothing else could use
    them). ``spans``: each trial's ``(fold, start, end)``; ``windows``: each fold's ``(start, end)``.

    The rest of the workers' idle time (``wall x workers - trial seconds``) is Tune's own, per trial: starting each
    fold's Tuner and its trials, handing results back."""
    idle = 0.0
    for fold, (_, end) in windows.items():
        mine = [(a, b) for f, a, b in spans if f == fold]
        if not mine:
            continue
        last = max(a for a, _ in mine)
        busy = sum(max(0.0, min(b, end) - max(a, last)) for a, b in mine)
        idle += max(workers * (end - last) - busy, 0.0)
    return idle


def _point(spec: StudySpec, row: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded trial's point of the space (its keys, and its variant when the space searches them)."""
    point = dict(row.get("params") or {})
    if len(spec.variants) > 1:
        point[VARIANT] = row["variant"]
    return point


def _select_and_test(spec: StudySpec, out: Path, rows: list[dict[str, Any]], bars: dict[str, DataBars]
                     ) -> dict[int, str | None]:
    """Each fold's selection, evaluated once on the fold's test days (in this process, into the trial's folder;
    ``test`` in its ``trial.json``); a selection tested before is not evaluated again."""
    spec_data = absolute_paths(to_dict(spec))
    chosen: dict[int, str | None] = {}
    try:
        for fold in range(max(spec.folds, 1)):
            row = selection_of(spec, rows, fold)
            chosen[fold] = row["trial"] if row else None
            if row is None or row.get("test"):
                continue
            one = from_dict(StudySpec, trial_spec(spec_data, row["variant"], row["params"], int(row["sample"])),
                            source="study")
            config = one.run_config(one.variants[0], int(row["seed"]), fold, spec.phases[-1])
            market = market_for(config, study_bars([config.data], into=bars))
            folder = out / TRIALS / row["trial"]
            try:
                row["test"] = evaluate_trial(spec, config, folder / f"p{spec.phases[-1]}", market, "test")
            except Exception as err:  # the selection stays; its test is missing, said in the summary
                row["test"] = {"error": f"{type(err).__name__}: {err}"}
            atomic_write_text(folder / "trial.json", json.dumps(jsonable(row), indent=1))
    finally:
        forget_markets()
    return chosen
