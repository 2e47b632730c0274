"""Confirmation on later data: every finished trial's final model evaluated on a file the study never touched.

``hybrid-trader study S.yaml --confirm DATA`` (docs/STUDY.md): each finished trial's last phase is evaluated
(``evaluate_run``, every day of DATA, the study's verdict and baselines) and the same tables are made
(:func:`~hybrid_trader.study.summary.summarize_study`), with the study's verdicts judged again
(:func:`~hybrid_trader.study.replicate.compare_verdicts`). Everything goes to ``OUT/confirm-<DATA stem>/``
(``trials/<trial>.json``, ``trials.parquet``, ``summary.json``, ``report.html``), beside the study's results,
never over them; each evaluation's own files go to the trial's run under ``eval/<stem>-<hash8>/all``.

Refused before any evaluation: no finished trial; a file of another market than a trial trained on; a file whose
first day is not later than every day a trial trained, validated or was tested on (``split.json`` of every phase).
A trial whose evaluation fails is recorded (its error) and the others go on; a rerun skips confirmed trials.
"""

from __future__ import annotations

import dataclasses
import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from hybrid_trader.config import merge_overrides, to_dict
from hybrid_trader.data.loader import named_market
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run, verdict_measurable
from hybrid_trader.evaluation.metrics import jsonable
from hybrid_trader.evaluation.results import read_json
from hybrid_trader.run import RunDir, sha256_file
from hybrid_trader.run.config import RunConfig, run_market, with_absolute_data
from hybrid_trader.run.files import atomic_write_text
from hybrid_trader.run.lock import FolderLock
from hybrid_trader.run.market import Market, load_market
from hybrid_trader.study.engine import STUDY_FILE, SUMMARY, TABLE, trials_of, trials_table
from hybrid_trader.study.fingerprint import fingerprint, fingerprint_summary
from hybrid_trader.study.replicate import compare_verdicts, verdicts_section
from hybrid_trader.study.spec import StudySpec, load_study
from hybrid_trader.study.summary import NOT_RUN, summarize_study
from hybrid_trader.study.trials import CONFIRM_PREFIX, CONFIRM_RECORD, TRIALS, Trial, evaluation_row, read_trial


def confirm_folder(out: Path, data: Path) -> Path:
    return out / f"{CONFIRM_PREFIX}{data.stem}"


def _finished(spec: StudySpec, out: Path, spec_path: str | Path) -> list[tuple[Trial, dict[str, Any]]]:
    """The study's finished trials, after checking the folder holds this study."""
    path = out / STUDY_FILE
    if json.loads(path.read_text(encoding="utf-8")).get("identity") != spec.identity():
        raise UserError(f"{out} holds another study than {spec_path} (their identities differ)", file=str(path),
                        fix="give the --out folder of this study file, or the study file that made this folder")
    done = [(t, r) for t in trials_of(spec) if (r := read_trial(out / TRIALS / t.slug) or {}).get("status")
            == "finished"]
    if not done:
        raise UserError(f"the study in {out} has no finished trial to confirm", file=str(out),
                        fix=_run_it(spec_path, out))
    return done


def _run_it(spec_path: str | Path, out: Path) -> str:
    return f"run the study first: hybrid-trader study {spec_path} --out {out}"


def _final_run(spec: StudySpec, out: Path, trial: Trial) -> Path:
    return out / TRIALS / trial.slug / f"p{spec.phases[-1]}"


def _check_market(data: Path, configs: dict[str, RunConfig]) -> dict[str, str]:
    """The market each trial's confirmation is priced as (the one it trained on); another market refused."""
    named, how = named_market(data)
    priced = {}
    for slug, config in configs.items():
        trained, where = run_market(config)
        if trained is None:
            raise UserError(f"cannot tell the market trial {slug} trained on ({where})", file=str(data),
                            fix="restore the trial's data file, or rerun the trial")
        if how == "name" and named != trained:
            raise UserError(f"the confirmation file holds {named} bars (its file name says so), but trial {slug} "
                            f"trained on {trained} ({where}): a confirmation must be on the market the study traded",
                            file=str(data), value=named, fix=f"give a later file of {trained} bars")
        priced[slug] = trained
    return priced


def _last_seen(run_dirs: dict[str, list[Path]]) -> tuple[str, str, str]:
    """The latest day any trial trained, validated or was tested on: (date, trial and part, run folder)."""
    latest = ("", "", "")
    for slug, runs in run_dirs.items():
        for run in runs:
            split = read_json(RunDir(run).split_path, what=f"trial {slug}'s split",
                              fix="restore it, or rerun the trial (delete its folder)") or {}
            dates = split.get("dates")
            if not dates:
                raise UserError(f"trial {slug} records no days in {RunDir(run).split_path}: the confirmation cannot "
                                "tell whether it trained on the file's days", file=str(RunDir(run).split_path),
                                fix="restore the trial's split.json, or rerun the trial (delete its folder)")
            for part, span in dates.items():
                if span and str(span[-1]) > latest[0]:
                    latest = (str(span[-1]), f"{slug} {part} ({span[0]} to {span[-1]})", str(run))
    return latest


def _confirmation_market(config: RunConfig, data: Path, market: str, cache: dict[str, Market]) -> Market:
    """DATA loaded as the trial's run loads its bars (time zone, shift, repair), priced as its market; every day
    a test day (``evaluate --split all``). Loaded once per loading options."""
    config = with_absolute_data(merge_overrides(config, {"data.path": str(data), "data.market": market}))
    data_cfg = dataclasses.replace(config.data, pool=[])
    key = json.dumps(to_dict(data_cfg), sort_keys=True)
    if key not in cache:
        cache[key] = load_market(data_cfg, None)
    return cache[key]


def confirm_study(spec_path: str | Path, out: str | Path, data: str | Path, *, progress: bool = True,
                  say: Callable[[str], None] = print) -> dict[str, Any]:
    """Evaluate every finished trial of the study in ``out`` on ``data``; the confirmation's summary (also in
    ``OUT/confirm-<stem>/summary.json``), with ``vs study``: the study's verdicts judged again."""
    spec = load_study(spec_path)
    out, data = Path(out).resolve(), Path(data).resolve()
    if spec.space:
        raise UserError(f"{spec_path} is a search: --confirm evaluates a study's trials, and a search's are its "
                        "configurations, most never meant to be tested", file=str(spec_path),
                        fix=f"evaluate each fold's selected trial (the 'selected' of each fold in {out / SUMMARY}) on "
                            f"the later file: hybrid-trader evaluate {out / TRIALS}/<selected>/p{spec.phases[-1]} "
                            f"--data {data} --split all")
    if not data.is_file():
        raise UserError("confirmation file not found", file=str(data),
                        fix="give a bars file later than the study's data (CSV or Parquet), e.g. "
                            "../shared/data/NQ_1min_2025-01_03_central_ddmm.csv for the 2024 NQ studies")
    if not (out / STUDY_FILE).is_file():
        raise UserError(f"{out} holds no study: there is no finished trial to confirm", file=str(out),
                        fix=_run_it(spec_path, out))
    with FolderLock(out, "study --confirm"):  # no study run writes the trials meanwhile
        spec.name = spec.name or out.name
        done = _finished(spec, out, spec_path)
        runs = {t.slug: _final_run(spec, out, t) for t, _ in done}
        configs = {slug: RunDir(run).require().load_config(RunConfig) for slug, run in runs.items()}
        priced = _check_market(data, configs)
        cache: dict[str, Market] = {}
        markets = {slug: _confirmation_market(configs[slug], data, priced[slug], cache) for slug in runs}
        seen, where, _ = _last_seen({t.slug: [out / TRIALS / t.slug / f"p{p}" for p in spec.phases] for t, _ in done})
        first_day = min(str(m.bars.session_dates[0]) for m in markets.values())
        if first_day <= seen:
            raise UserError(f"the confirmation file starts on {first_day}, not after the days the study used: trial "
                            f"{where} ends on {seen}", file=str(data), value=first_day,
                            fix=f"confirm on a file whose first day is after {seen} (a later period of the same "
                                "market the study never touched)")
        folder = confirm_folder(out, data)
        _check_same_file(folder, data)
        rows = []
        bar = tqdm(total=len(done), desc="confirm", unit="trial", disable=not progress)
        say(f"confirmation of {len(done)} finished trial(s) of study {spec.name} on {data.name} "
            f"(from {first_day}; the study's days end on {seen}) in {folder}")
        try:
            for trial, _ in done:
                rows.append(_confirm_trial(spec, trial, runs[trial.slug], configs[trial.slug], data,
                                           markets[trial.slug], priced[trial.slug], folder))
                bar.update(1)
                bar.set_postfix(last=f"{trial.slug} {rows[-1]['status']}")
        finally:
            bar.close()
        table = trials_table(rows)
        table.to_parquet(folder / TABLE, index=False)
        # trials the study has not run (study --only): their hypotheses stay pending here too, as in the study
        finished = {t.slug for t, _ in done}
        waiting = [{"trial": t.slug, "variant": t.variant, "seed": t.seed, "fold": t.fold, "status": NOT_RUN}
                   for t in trials_of(spec) if t.slug not in finished and read_trial(out / TRIALS / t.slug) is None]
        summary = summarize_study(spec, rows + waiting)
        summary["evaluated on"] = f"{data.name}, every day from {first_day}"
        summary["confirmation"] = {"data": str(data), "first day": first_day, "study's last day": seen,
                                   "study's finished trials": len(done)}
        summary["fingerprints"] = fingerprint_summary(rows)
        study_summary = summarize_study(spec, [r for _, r in done] + waiting)
        summary["vs study"] = compare_verdicts(study_summary, summary, label="confirmation")
        atomic_write_text(folder / SUMMARY, json.dumps(jsonable(summary), indent=1))
        from hybrid_trader.study.report import write_study_report  # matplotlib only when a report is written

        summary["report"] = str(write_study_report(folder, spec, summary, table,
                                                   extra=[verdicts_section(summary["vs study"], "confirmation")]))
    return summary


def _check_same_file(folder: Path, data: Path) -> None:
    """One confirmation file per folder: another file of the same name is refused (its records would mix)."""
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / CONFIRM_RECORD
    digest = sha256_file(data)
    old = read_json(record, what="confirmation record") if record.exists() else None
    if old and old.get("sha256") != digest:
        raise UserError(f"{folder} holds the confirmation on another file named {data.name} ({old.get('path')})",
                        file=str(record), fix=f"move {folder} away, or rename the new file")
    if not old:
        atomic_write_text(record, json.dumps({"path": str(data), "sha256": digest}, indent=1))


def _confirm_trial(spec: StudySpec, trial: Trial, run: Path, config: RunConfig, data: Path, market: Market,
                   priced: str, folder: Path) -> dict[str, Any]:
    """One trial's final model on every day of ``data``: its row (in ``folder/trials/<slug>.json``). A trial
    confirmed before is read back; a failure is recorded, never raised."""
    path = folder / TRIALS / f"{trial.slug}.json"
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("status") == "finished":
            return old
    except (OSError, ValueError):
        pass
    row: dict[str, Any] = {"variant": trial.variant, "seed": trial.seed, "fold": trial.fold, "trial": trial.slug,
                           "fingerprint": fingerprint()}
    started = time.perf_counter()
    try:
        verdict = None if spec.evaluate.verdict == "none" or not verdict_measurable(config) else spec.evaluate.verdict
        out_eval = evaluate_run(run, EvaluationRequest(
            split="all", seeds=spec.evaluate.seeds, data_overrides={"path": str(data)}, symbol=priced, market=market,
            quiet=True, ablation=False, verdict=verdict, verdict_config=spec.evaluate.prop))
        row.update(evaluation_row(out_eval))
        row["evaluation"] = str(out_eval.out_dir)
        row["status"] = "finished"
    except Exception as err:  # recorded: one trial's failure does not stop the confirmation
        row["status"] = "failed"
        row["error"] = f"{type(err).__name__}: {err}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".traceback.txt").write_text(traceback.format_exc(), encoding="utf-8")
    row["seconds"] = round(time.perf_counter() - started, 2)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(jsonable(row), indent=1))
    return row
