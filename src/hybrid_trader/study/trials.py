"""One trial: train its phases in turn, evaluate the last, record one row; in-process, one torch thread.

A trial's folder ``OUT/trials/<variant>-s<seed>-f<fold>/`` holds its runs (``p1``, ``p2``, ...)
and ``trial.json``, written atomically last: a trial is finished when that file says so, and
a rerun of the study skips it. A failing trial records its error and traceback there instead
and never stops the study. On Ray the trial runs in a scratch folder of its worker, from bars
shipped with it, and the driver writes the study's folder (:mod:`hybrid_trader.study.transport`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybrid_trader.config import from_dict, to_dict
from hybrid_trader.evaluation.evaluate import EvaluationOutput, EvaluationRequest, evaluate_run, verdict_measurable
from hybrid_trader.evaluation.metrics import daily_pnl, jsonable
from hybrid_trader.evaluation.results import load_results
from hybrid_trader.evaluation.runner import validation_fn
from hybrid_trader.run.files import atomic_write_text
from hybrid_trader.run.market import Market, load_market, make_split
from hybrid_trader.run.rundir import MODEL
from hybrid_trader.study.fingerprint import code_version, fingerprint, make_deterministic
from hybrid_trader.study.hypotheses import FRESH_METRICS
from hybrid_trader.study.spec import StudySpec
from hybrid_trader.study.transport import TRIAL_FILE, TRIALS, DataBars, data_key, pack, relocate, unpack
from hybrid_trader.training.runner import TrainHooks, ValidationFactory, train_run

FIGURES = ("Net PnL [$]", "Sharpe (ann.)", "Max drawdown [$]", "Trades", "Win rate [%]", "PSR [%]",
           "Return [%]", "Days")
"""The agent's metrics kept in the study table (labels of evaluation.metrics, units in them)."""
VERDICT_KEPT = ("Attempts", "Pass rate [%]", "Breach rate [%]", "Expected outcome per attempt [$]")
"""The prop-firm verdict's figures kept per trial (the agent's unlabelled, a baseline's as ``... (name)``)."""
CONFIRM_PREFIX = "confirm-"
"""A confirmation's folder in the study's: ``confirm-<DATA stem>`` (:mod:`hybrid_trader.study.confirm`)."""
CONFIRM_RECORD = "confirm.json"
"""What a confirmation folder was made from (the file's identity): another file of the same name is refused."""
REUSED_FROM = "reused_from"
"""A trial's record, when another study folder ran it and it was copied here (``study --reuse``): that folder."""
FRESH_DAILY = ("fresh day_dates", "fresh day_pnl", "momentum fresh day_pnl")
"""A trial's days each traded from a fresh account (``evaluate.fresh_days``): the dates, its net P&L [$] and
momentum's on the same days."""
DAILY = ("daily_returns", "daily_dates", "momentum daily_returns", *FRESH_DAILY)
"""A trial's daily series: in ``trial.json`` and the summary's tests, not in the study table."""


_MARKETS: dict[str, Market] = {}
"""This worker's markets by data config: the bars and features of a file are loaded once per worker."""


def market_for(config: Any, bars: Mapping[str, DataBars] | None = None) -> Market:
    """The trial's market: the bars and features this worker loaded before, with the trial's split.

    ``bars``: the study's bars by data configuration (:func:`hybrid_trader.study.transport.study_bars`, shipped
    with the trial): the market is built from them, never from the files the configuration names."""
    key = data_key(config.data)
    given = bars.get(key) if bars is not None else None
    if bars is not None and given is None:
        raise KeyError(f"no bars shipped for the trial's data configuration {key}")
    key += given.loaded if given else ""
    if config.data.pool:  # the pooled days end where this split's validation starts: one market per split
        key += json.dumps(to_dict(config.split), sort_keys=True)
    known = _MARKETS.get(key)
    if known is None:
        known = _MARKETS[key] = load_market(config.data, config.split, pool=True,
                                            bars=given.bars if given else None,
                                            pool_bars=given.pool if given else None)
        return known
    if config.data.pool:  # the key holds the split: the very market, pool included
        return known
    own = known.bars
    return Market(own, known.features, make_split(own.n_sessions, config.split, own.session_dates))


def forget_markets() -> None:
    """Drop the markets this process loaded (the driver checks the variants with them before Ray starts)."""
    _MARKETS.clear()


@dataclass(frozen=True)
class Trial:
    """One variant x seed x fold."""

    variant: str
    seed: int
    fold: int

    @property
    def slug(self) -> str:
        return f"{self.variant}-s{self.seed}-f{self.fold}"


def read_trial(folder: Path) -> dict[str, Any] | None:
    """A trial's record, or None when it never finished writing one."""
    path = folder / TRIAL_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def run_trial(spec_data: dict, trial: Trial, out: str, *, bars: Mapping[str, DataBars] | None = None,
              validation: ValidationFactory = validation_fn) -> dict[str, Any]:
    """Train and evaluate one trial in this process, in ``out``'s trial folder; its row (also written to
    ``trial.json``). ``bars``: the study's bars (see :func:`market_for`). ``validation``: training's periodic
    validation (a search's reports each result to Ray Tune: :mod:`hybrid_trader.study.search`). Never raises."""
    make_deterministic(threads=1)  # the trial's own process (a Ray worker): one thread per trial, before any work
    spec = from_dict(StudySpec, spec_data, source="study")
    folder = Path(out) / TRIALS / trial.slug
    folder.mkdir(parents=True, exist_ok=True)
    row: dict[str, Any] = {"variant": trial.variant, "seed": trial.seed, "fold": trial.fold, "trial": trial.slug,
                           "fingerprint": fingerprint(), "code": code_version(),
                           "started": datetime.now(UTC).isoformat(timespec="milliseconds")}
    started = time.perf_counter()
    try:
        variant = next(v for v in spec.variants if v.name == trial.variant)
        init = market = None
        for phase in spec.phases:
            run = folder / f"p{phase}"
            config = spec.run_config(variant, trial.seed, trial.fold, phase)
            market = market_for(config, bars)
            if (run / MODEL).exists():  # trained before the trial was interrupted: continue from it
                init = run
                continue
            if run.exists():  # a run a killed trial left unfinished: trained again from its start
                shutil.rmtree(run)
            train_run(config, run, init=init, quiet=True, market=market, hooks=TrainHooks(validation=validation))
            init = run
        assert init is not None and market is not None
        row.update(evaluate_trial(spec, config, init, market, spec.evaluate.split))
        row["status"] = "finished"
    except Exception as err:  # recorded, never raised: one trial's failure does not stop the study
        row["status"] = "failed"
        row["error"] = f"{type(err).__name__}: {err}"
        (folder / "traceback.txt").write_text(traceback.format_exc(), encoding="utf-8")
    row["seconds"] = round(time.perf_counter() - started, 2)
    atomic_write_text(folder / TRIAL_FILE, json.dumps(jsonable(row), indent=1))
    return row


def evaluate_trial(spec: StudySpec, config: Any, run: Path, market: Market, split: str) -> dict[str, Any]:
    """A trial's last run evaluated on ``split`` as the study evaluates it (its seeds, verdict and fees): the
    figures of :func:`evaluation_row`."""
    measurable = verdict_measurable(config)  # phase 3: with the student only
    verdict = None if spec.evaluate.verdict == "none" or not measurable else spec.evaluate.verdict
    out_eval = evaluate_run(run, EvaluationRequest(split=split, seeds=spec.evaluate.seeds, market=market, quiet=True,
                                                   ablation=False, verdict=verdict, verdict_config=spec.evaluate.prop,
                                                   fresh_days=spec.evaluate.fresh_days))
    return evaluation_row(out_eval)


def evaluation_row(out_eval: EvaluationOutput) -> dict[str, Any]:
    """A trial's figures from its evaluation: the agent's metrics (and its fresh days' where it traded them), the
    baselines' net P&L, the prop-firm verdict's figures, daily returns and dates (a study's trial and its
    confirmation on later data alike)."""
    agent = out_eval.metrics["agent"]
    row: dict[str, Any] = {k: agent.get(k) for k in FIGURES}
    row["Apex verdict"] = agent.get("Apex verdict")
    row.update({k: v for k, v in (out_eval.extra.get("fresh_days") or {}).items() if k in FRESH_METRICS})
    fresh = out_eval.extra.get("fresh_day_pnl")
    if fresh:
        row.update(zip(FRESH_DAILY, (fresh["dates"], fresh["agent"], fresh["momentum"])))
    for name in ("flat", "random", "momentum"):
        if name in out_eval.metrics:
            row[f"{name} Net PnL [$]"] = out_eval.metrics[name].get("Net PnL [$]")
    prop = out_eval.extra.get("prop_verdict")
    if prop:  # the agent's and the best baseline's pass rates (evaluation.verdict)
        for name, figures in prop["figures"].items():
            for key in VERDICT_KEPT:
                if key in figures:
                    row[f"{key} ({name})" if name != "agent" else key] = figures[key]
    row["daily_dates"], row["daily_returns"] = _daily_returns(out_eval.out_dir)
    if "momentum" in out_eval.metrics:  # the benchmark of study.multiple_tests' SPA and StepM
        row["momentum daily_returns"] = _daily_returns(out_eval.out_dir, "momentum")[1]
    row["dates"] = list(out_eval.dates or ())
    return row


def trial_task(spec_data: dict, trial: Trial, carry: bytes | None, bars: dict[str, DataBars], home: str = "",
               validation: ValidationFactory = validation_fn) -> tuple[dict, bytes]:
    """A Ray task: run the trial in a scratch folder of this worker; its row and its folder as bytes (its records
    naming ``home``, the trial's folder at the driver, where they will be: :func:`relocate`)."""
    scratch = Path(tempfile.mkdtemp(prefix="hybrid-trader-trial-"))
    try:
        folder = scratch / TRIALS / trial.slug
        folder.mkdir(parents=True)
        if carry:
            unpack(carry, folder)
        row = run_trial(spec_data, trial, str(scratch), bars=bars, validation=validation)
        if home:
            relocate(folder, home)
        return row, pack(folder, skip=(TRIAL_FILE,))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _daily_returns(eval_dir: Path, name: str = "agent") -> tuple[list[str], list[float]]:
    """A strategy's trading dates and daily P&L as returns on the account size (the Deflated Sharpe Ratio, SPA,
    StepM and PBO)."""
    results, _, _ = load_results(eval_dir)
    found = next((r for r in results if r.name == name), None)
    if found is None:
        return [], []
    days = daily_pnl(found.equity.astype(float), float(found.initial_balance))
    return ([d.strftime("%Y-%m-%d") for d in days.index],
            [float(x) / float(found.initial_balance) for x in days.to_numpy()])
