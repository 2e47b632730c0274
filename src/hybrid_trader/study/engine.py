"""Run a study on Ray: every trial a Ray task on one CPU, resumable, failures recorded, one table at the end.

``run_study(spec_path, out)``: checks the study file and every variant's configuration (keys, data,
split, environment: :func:`check_variants`), refuses a folder
written by another study (naming what differs), skips finished trials, runs the rest on Ray
(``ray.init(num_cpus=workers)`` on this machine, or ``address`` to join a cluster), shows a
progress bar with ETA, and writes ``OUT/trials.parquet`` (one row per trial), ``OUT/summary.json``
and ``OUT/report.html``. Ray's overhead per trial (the time a trial spends outside its own
work: scheduling, process start, transfers) is measured and reported. The bars go to the trials
through Ray's object store and each trial's folder comes back as its task's return value: this
process alone reads the data and writes ``OUT`` (:mod:`hybrid_trader.study.transport`).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from hybrid_trader.config import to_dict
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.metrics import jsonable
from hybrid_trader.run.files import atomic_write_text, check_writable
from hybrid_trader.run.lock import FolderLock
from hybrid_trader.run.market import check_environment
from hybrid_trader.study.attempts import count_attempts, record_attempt
from hybrid_trader.study.cluster import ray_for_study, ray_init, running_ray_cpus
from hybrid_trader.study.fingerprint import code_label, fingerprint_summary
from hybrid_trader.study.spec import StudySpec, load_study
from hybrid_trader.study.summary import NOT_RUN, summarize_study
from hybrid_trader.study.transport import DataBars, absolute_paths, carried, land_trial, study_bars
from hybrid_trader.study.trials import (
    DAILY,
    REUSED_FROM,
    TRIALS,
    Trial,
    forget_markets,
    market_for,
    read_trial,
    trial_task,
)

STUDY_FILE = "study.json"
"""The study as it was given (its identity and settings): a later run must match it."""
TABLE = "trials.parquet"
SUMMARY = "summary.json"


def trials_of(spec: StudySpec) -> list[Trial]:
    """Every trial of the grid, or the random sample of them (seeded)."""
    grid = [Trial(v.name, int(s), f) for v in spec.variants for s in spec.seeds for f in range(max(spec.folds, 1))]
    if spec.search == "random":
        rng = random.Random(spec.sample_seed)
        grid = sorted(rng.sample(grid, min(spec.samples, len(grid))), key=lambda t: (t.variant, t.seed, t.fold))
    return grid


def open_study_folder(out: Path, spec: StudySpec) -> None:
    """``out`` made this study's folder (its ``study.json`` written), or refused when it holds another study. The
    caller holds its lock."""
    _check_same_study(out, spec)
    spec.name = spec.name or out.name
    atomic_write_text(out / STUDY_FILE, json.dumps({"identity": spec.identity(), "spec": to_dict(spec)},
                                                   indent=1, default=str))


def finished_trials(out: Path, trials: Sequence[Trial]) -> set[str]:
    """The slugs of ``trials`` whose record in ``out`` says finished."""
    return {t.slug for t in trials if (read_trial(out / TRIALS / t.slug) or {}).get("status") == "finished"}


def _check_same_study(out: Path, spec: StudySpec) -> None:
    path = out / STUDY_FILE
    if not path.exists():
        if any(p.name != ".lock" for p in out.iterdir()):
            raise UserError(f"{out} is not empty and holds no study", file=str(out),
                            fix="give a new folder for the study (--out), or the folder of this study")
        return
    old = json.loads(path.read_text(encoding="utf-8"))
    if old.get("identity") == spec.identity():
        return
    new = to_dict(spec)
    differ = [k for k in sorted(set(old.get("spec", {})) | set(new)) if k != "name"
              and old.get("spec", {}).get(k) != new.get(k)]
    fix = "give this study a new --out folder, or restore the study file that made this one"
    if "hypotheses" in differ:
        fix = ("hypotheses are declared before the trials run and cannot change after them: restore the hypotheses "
               "of the study file that made this folder, or declare the new ones in a new study (a new --out)")
    raise UserError(f"{out} holds another study (its {', '.join(differ) or 'settings'} differ); its finished "
                    "trials would be mixed with this study's", file=str(path), fix=fix)


_ray_init = ray_init
"""Ray started or joined (:mod:`hybrid_trader.study.cluster`); a module name the tests replace."""


def run_study(spec_path: str | Path | StudySpec, out: str | Path, *, workers: int | None = None,
              address: str | None = None, progress: bool = True, static: bool = False,
              only: Sequence[str] | None = None, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or continue) the study (a file, or a loaded one); returns the summary (also in ``OUT/summary.json``).

    ``static``: the report without charts (``study.report.write_study_report``). ``only``: run the trials of these
    variants alone (the study is declared whole, hypotheses included; the others' trials are "not run", their
    hypotheses pending, until a later run without ``only`` or with them).
    """
    spec = spec_path if isinstance(spec_path, StudySpec) else load_study(spec_path)
    chosen = _chosen_variants(spec, only)
    out = Path(out).resolve()
    check_writable(out, what="study --out")
    ray_cpus = running_ray_cpus()
    cores = ray_cpus or os.cpu_count() or 1
    workers = workers or cores
    if workers < 1:
        raise UserError(f"--workers {workers} must be 1 or more")
    if workers > cores and not address:
        where = "the CPUs of the Ray this process runs" if ray_cpus else "the number of cores"
        say(f"note: --workers {workers} capped at {cores}, {where} (one trial per CPU)")
        workers = cores
    bars: dict[str, DataBars] = {}  # every bar file the variants name, loaded once: checked here, shipped to trials
    _check_folds(spec, bars)
    check_variants(spec, bars, only=chosen)
    out.mkdir(parents=True, exist_ok=True)
    with FolderLock(out, "study"):
        open_study_folder(out, spec)
        if spec.space:  # a search on Ray Tune, nested walk-forward (study.search)
            from hybrid_trader.study.search import run_search  # only a search loads Ray Tune and Optuna

            return run_search(spec, out, workers=workers, address=address, progress=progress, bars=bars,
                              only=only, say=say)  # its report has no charts to leave out: no static
        trials = trials_of(spec)
        done = finished_trials(out, trials)
        order = {v.name: i for i, v in enumerate(spec.variants)}  # whole pairs first: an interrupted study
        todo = sorted((t for t in trials if t.slug not in done and t.variant in chosen),  # has every variant of
                      key=lambda t: (t.seed, t.fold, order[t.variant]))  # the seeds and folds it reached
        left = [t for t in trials if t.slug not in done and t.variant not in chosen]
        for t in todo:  # a failed trial is tried again; its old record goes
            (out / TRIALS / t.slug / "trial.json").unlink(missing_ok=True)
        say(f"study {spec.name}: {len(trials)} trials ({len(spec.variants)} variants x {len(spec.seeds)} seeds x "
            f"{max(spec.folds, 1)} folds), {len(done)} finished before, {len(todo)} to run on "
            f"{'Ray at ' + address if address else f'{workers} local Ray workers'}"
            + (f"; {len(left)} of {', '.join(sorted({t.variant for t in left}))} left for a later run (--only)"
               if left else ""))
        left_slugs = {t.slug for t in left}
        timing = _run_on_ray(spec, todo, out, workers, address, progress, bars) if todo else {}
        rows = [{"trial": t.slug, "variant": t.variant, "seed": t.seed, "fold": t.fold, "status": NOT_RUN}
                if t.slug in left_slugs else read_trial(out / TRIALS / t.slug)
                or {"trial": t.slug, "variant": t.variant, "seed": t.seed, "fold": t.fold, "status": "missing"}
                for t in trials]
        table = trials_table(rows)
        table.to_parquet(out / TABLE, index=False)
        summary = summarize_study(spec, rows, attempts=count_attempts(out, rows))
        summary["fingerprints"] = fingerprint_summary(rows)
        summary["reused"] = sum(1 for r in rows if r.get(REUSED_FROM))  # copied from another study (--reuse)
        summary["timing"] = timing
        atomic_write_text(out / SUMMARY, json.dumps(jsonable(summary), indent=1))
        from hybrid_trader.study.report import write_study_report  # plotly only when a report is written

        summary["report"] = str(write_study_report(out, spec, summary, table, static=static))
    return summary


def _chosen_variants(spec: StudySpec, only: Sequence[str] | None) -> set[str]:
    """The variants whose trials this run runs: ``only``'s (each a variant of the study), else all."""
    names = [v.name for v in spec.variants]
    if not only:
        return set(names)
    unknown = [o for o in only if o not in names]
    if unknown:
        raise UserError(f"--only {', '.join(unknown)}: not a variant of study {spec.name or '(unnamed)'}",
                        value=", ".join(unknown), fix=f"name variants of the study file: {', '.join(names)}")
    return set(only)


def trials_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per trial for ``trials.parquet``: no daily series, the fingerprint by its id."""
    return pd.DataFrame([{k: (v or {}).get("id") if k == "fingerprint" else code_label(v) if k == "code" else v
                          for k, v in r.items() if k not in DAILY} for r in rows])


def _check_folds(spec: StudySpec, bars: dict[str, DataBars] | None = None) -> None:
    """A fold count the data cannot hold is refused before any trial starts (``bars``: the study's, else loaded)."""
    if not spec.folds:
        return
    config = spec.run_config(spec.variants[0], spec.seeds[0], spec.folds - 1, spec.phases[0])
    try:
        _market(config, bars)  # kept for check_variants too
    except UserError as err:
        raise UserError(f"folds: {spec.folds} walk-forward folds do not fit the data ({err.message})",
                        fix="use fewer folds, or more days of data") from None


CHECKED_KEYS = {"the data and split": ("data.", "split."), "the environment": ("env.", "risk.", "ppo.n_envs")}
"""What each stage of :func:`check_variants` checks, by key prefix: the keys named when it fails."""


def check_variants(spec: StudySpec, bars: dict[str, DataBars] | None = None,
                   only: set[str] | None = None) -> None:
    """Every variant's configuration, each phase and fold, checked as a trial's training checks it, before Ray
    starts: the config's keys and values (``load_study``), the data and its split (a part that gets no day),
    and one environment (contracts above the rules' limit, the trading window, ...). A failure is refused naming
    the variant and the keys of the study that set what failed. Not checked here: an LLM back end's start-up (a
    trial's own first step). ``bars``: the study's bars (:func:`study_bars`), else each variant's are loaded.
    ``only``: these variants alone (``study --only``)."""
    try:
        for variant in [v for v in spec.variants if only is None or v.name in only]:
            for fold in range(max(spec.folds, 1)):
                for phase in spec.phases:
                    config = spec.run_config(variant, spec.seeds[0], fold, phase)
                    if fold == 0:
                        _check_student(spec, variant, phase, config)
                    stage = "the data and split"
                    try:
                        market = _market(config, bars)
                        stage = "the environment"
                        check_environment(market, config)
                    except UserError as err:
                        where = f"phase {phase}" + (f", fold {fold}" if spec.folds else "")
                        keys = _keys_of(spec, variant, CHECKED_KEYS[stage], err.message)
                        raise UserError(f"study variant {variant.name} ({where}): {stage}: {err.message}"
                                        + (f" [set by {keys}]" if keys else ""),
                                        file=err.file, row=err.row, column=err.column, value=err.value,
                                        fix=err.fix) from None
    finally:
        forget_markets()  # the trials build their own, in their workers, from the bars shipped with them


def _check_student(spec: StudySpec, variant: Any, phase: int, config: Any) -> None:
    """A variant advised by a distilled student names a student file that exists: a trial's own phase 2 run has
    none, so without ``llm.student.path`` every trial would train phase 2 and then fail."""
    if phase != 3 or config.llm.backend != "student":
        return
    path = config.llm.student.path
    where = f"study variant {variant.name} (phase 3)"
    if not path:
        raise UserError(f"{where}: llm.backend student without llm.student.path: the trial's own phase 2 run has no "
                        "distilled student, so every trial would fail after training phase 2",
                        fix="set llm.student.path (the base or the variant) to a student.pt written by 'hybrid-trader "
                            "advise distill RUN_DIR'; for RL alone with fusion.llm_weight 0 and no advice input, any "
                            "student will do (it is not used)")
    if not Path(path).is_file():
        raise UserError(f"{where}: the student file is not there", file=str(path), value=path,
                        fix="write it with 'hybrid-trader advise distill RUN_DIR', or fix llm.student.path (relative "
                            "paths are read from the folder the study runs in)")


def _market(config: Any, bars: dict[str, DataBars] | None) -> Any:
    """The config's market, its bars loaded into ``bars`` first (loaded anew when ``bars`` is None)."""
    return market_for(config, None if bars is None else study_bars([config.data], into=bars))


def _keys_of(spec: StudySpec, variant: Any, prefixes: tuple[str, ...], message: str) -> str:
    """``key: value (variant NAME | base)`` for the keys of the study starting with one of ``prefixes``: those the
    message names, else all of them."""
    found = [(k, f"{k}: {v!r} (variant {variant.name})") for k, v in variant.set.items() if k.startswith(prefixes)]
    found += [(k, f"{k}: {v!r} (base)") for k, v in spec.base.items() if k.startswith(prefixes)
              and k not in variant.set]
    named = [text for k, text in found if k in message]
    return "; ".join(named or [text for _, text in found])


def _run_on_ray(spec: StudySpec, todo: list[Trial], out: Path, workers: int, address: str | None,
                progress: bool, bars: dict[str, DataBars]) -> dict[str, float]:
    """Each trial a Ray task (:func:`trial_task`): the bars go out once through the object store, each trial's
    row and folder come back as its return value, and this process alone writes them into ``out``. A Ray this
    process already runs is used and left running (:func:`~hybrid_trader.study.cluster.ray_for_study`)."""
    ray, ours = ray_for_study(workers, address, _ray_init)
    remote = ray.remote(num_cpus=1, max_retries=0)(trial_task)
    data = absolute_paths(to_dict(spec))
    started = time.perf_counter()
    shipped = ray.put(bars)
    queue = list(todo)
    cap = len(todo) if address else workers  # a cluster runs what its CPUs allow; this machine `workers` at a time
    submitted: dict[Any, Trial] = {}
    pending: list[Any] = []
    trial_seconds = 0.0
    bar = tqdm(total=len(todo), desc="trials", unit="trial", disable=not progress)
    try:
        while queue or pending:
            while queue and len(pending) < cap:
                t = queue.pop(0)
                ref = remote.remote(data, t, carried(out / TRIALS / t.slug), shipped, str(out / TRIALS / t.slug))
                submitted[ref] = t
                pending.append(ref)
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                t = submitted[ref]
                files: bytes | None
                try:
                    row, files = ray.get(ref)
                except Exception as err:  # the worker died (out of memory, killed): recorded like a failure
                    lost = "trial task failed" if isinstance(err, ray.exceptions.RayTaskError) else "worker lost"
                    row = {"variant": t.variant, "seed": t.seed, "fold": t.fold, "trial": t.slug,
                           "status": "failed", "error": f"{lost}: {type(err).__name__}: {str(err)[:300]}",
                           "seconds": 0.0}
                    files = None
                land_trial(out, t.slug, row, files)
                record_attempt(out, row)  # every attempt counts in the DSR's number of trials
                trial_seconds += float(row.get("seconds") or 0.0)
                bar.update(1)
                bar.set_postfix(last=f"{row.get('trial')} {row.get('status')}")
    finally:
        bar.close()
        if ours:
            ray.shutdown()
    wall = time.perf_counter() - started
    used = min(workers, len(todo))
    overhead = max(wall * used - trial_seconds, 0.0) / len(todo)
    return {"wall_s": round(wall, 2), "trial_s_total": round(trial_seconds, 2), "workers": used,
            "ray_overhead_s_per_trial": round(overhead, 2),
            "ray_overhead_pct": round(100.0 * overhead * len(todo) / (wall * used), 1) if wall > 0 else 0.0}
