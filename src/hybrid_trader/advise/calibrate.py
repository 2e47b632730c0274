"""``advise calibrate``: fit the run's batch calibration on its training days, and show what it changes.

States: bars of the training split's trading windows that may decide an entry, evenly
spread, each asked three times: flat (HOLD/BUY/SELL legal), long and short (entered 10
bars earlier, as ``llm ask --position``). The model's raw answers are averaged per market
and position state (:mod:`hybrid_trader.llm.batch_calibration`) and stored in
``RUN_DIR/llm_calibration.json`` with the advice identity. Only training days are read
(the environment is built on the training sessions alone), so the calibration looks at no
validation or test bar.

:func:`advice_calibration` is the one decision every caller that asks a model takes (``advise collect``,
``llm eval``, ``train --phase 3`` with a live LLM, ``run --advisor async``): the run's calibration, fitted
first when the run has none, or, with ``--no-calibrate``, none and the advice marked raw.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hybrid_trader.account_state import AccountState
from hybrid_trader.actions import Action
from hybrid_trader.env import TradingEnv
from hybrid_trader.errors import UserError
from hybrid_trader.hindsight.labels import ENTRY_MASK
from hybrid_trader.hindsight.retrieval_pool import attach_run_pool
from hybrid_trader.llm.backends import backend_spec, make_backend
from hybrid_trader.llm.backends.base import Backend
from hybrid_trader.llm.batch_calibration import (
    MIN_STATES,
    POSITION_NAMES,
    BatchCalibration,
    fit_batch_calibration,
    legal_distributions,
)
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.context import TREND_LABELS, AdvisorContext, context_from_market
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.markets import get_contract
from hybrid_trader.run.advice_identity import advice_identity
from hybrid_trader.run.calibration import (
    AdviceCalibration,
    calibration_path,
    fitted_model,
    load_calibration,
    needs_calibration,
)
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.files import check_writable
from hybrid_trader.run.market import Market, load_market
from hybrid_trader.training.runner import load_run_config

ENTERED_BARS_AGO = 10
"""A long or short calibration state entered this many bars before the decision bar."""


def calibration_bars(market: Market, run_config: RunConfig, part: str = "train", max_states: int = 200) -> np.ndarray:
    """Up to ``max_states`` entry-window bars of ``part`` (evenly spread); the env sees only ``part``'s sessions."""
    sessions = list(market.split.part(part))
    if not sessions:
        raise UserError(f"the {part} split holds no trading day: nothing to fit the calibration on",
                        fix="give the run training days (split.train)")
    cfg = dataclasses.replace(run_config.env, phase=1, episode_sessions=None)
    env = TradingEnv(market.bars, market.features, cfg, sessions=sessions)
    t = np.concatenate([np.arange(max(w.first, ENTERED_BARS_AGO), w.last_entry + 1)
                        for w in env.episode_windows if w.last_entry >= 0] or [np.zeros(0, np.int64)]).astype(np.int64)
    if len(t) > max_states:
        t = t[np.unique(np.linspace(0, len(t) - 1, max_states).round().astype(np.int64))]
    return t


ALL_POSITIONS = (0, 1, -1)
"""The position states a calibration is fitted on unless told otherwise: flat, long and short."""


def calibration_contexts(market: Market, t: Sequence[int] | np.ndarray,
                         positions: Sequence[int] = ALL_POSITIONS) -> list[AdvisorContext]:
    """The contexts at every bar of ``t`` in each of ``positions`` (0 flat, 1 long, -1 short), in that order per
    bar."""
    if not positions or not set(positions) <= set(ALL_POSITIONS):
        raise ValueError(f"positions {tuple(positions)} must be some of {ALL_POSITIONS}")
    bars, features = market.bars, market.features
    point_value = get_contract(bars.market).point_value
    out: list[AdvisorContext] = []
    for ti in (int(x) for x in t):
        if 0 in positions:
            out.append(context_from_market(bars, features, ti, AccountState(balance=50_000.0), ENTRY_MASK))
        entry = float(bars.close[ti - ENTERED_BARS_AGO])
        for pos in (p for p in positions if p):
            pnl = (float(bars.close[ti]) - entry) * pos * point_value
            mask = np.array([True, False, False, pnl > 0, True, False])
            account = AccountState(position=pos, contracts=1, entry_price=entry, unrealized_pnl=pnl,
                                   balance=50_000.0, win_rate=math.nan, consecutive_losses=0)
            out.append(context_from_market(bars, features, ti, account, mask))
    return out


def score_contexts(backend: Backend, prompts: PromptBuilder, contexts: Sequence[AdvisorContext], *,
                   batch: int = 16, progress: bool = False, desc: str = "") -> np.ndarray:
    """The back end's raw scoring-mode distributions (n, 6) of ``contexts``, each rendered by ``prompts`` (its
    retrieval included), ``batch`` at a time; no calibration. ``progress``: a bar named ``desc``."""
    out = []
    for start in tqdm(range(0, len(contexts), batch), desc=desc or "score", unit="batch", disable=not progress,
                      leave=False):
        queries = [prompts.query(c) for c in contexts[start:start + batch]]
        out.append(np.asarray(backend.score(queries), dtype=np.float64))
    return np.concatenate(out) if out else np.zeros((0, 6))


def lean_table(contexts: Sequence[AdvisorContext], mass: np.ndarray, cal: BatchCalibration) -> list[dict[str, Any]]:
    """Per position state and trend label: states, and the top action's shares before and after calibration."""
    legal = np.array([c.legal for c in contexts], dtype=bool)
    raw = legal_distributions(mass, legal)
    after = np.array([cal.apply(p, lg, c.market, c.position) for p, lg, c in zip(raw, legal, contexts)])
    rows = []
    for pos, pname in POSITION_NAMES.items():
        for score in sorted(TREND_LABELS, reverse=True):
            pick = [i for i, c in enumerate(contexts) if c.position == pos and c.trend_score == score]
            if not pick:
                continue
            row: dict[str, Any] = {"position": pname, "trend": TREND_LABELS[score], "states": len(pick)}
            for name, p in (("raw", raw[pick]), ("calibrated", after[pick])):
                top = p.argmax(axis=1)
                row[name] = {Action(a).name: round(100.0 * float((top == a).mean()), 1) for a in range(6)
                             if legal[pick][:, a].any()}
            rows.append(row)
    return rows


@dataclass(frozen=True)
class CalibrationFit:
    """How a batch calibration is fitted: on how many training states, asked how, of which model."""

    max_states: int = 200
    """Training bars sampled (each asked in every one of ``positions``)."""
    positions: tuple[int, ...] = ALL_POSITIONS
    """The position states each bar is asked in (0 flat, 1 long, -1 short): a state the advice is read in needs its
    own mean."""
    min_states: int = MIN_STATES
    """Fewer states of a market or position than this: a UserError (too few to divide a lean by)."""
    batch: int = 16
    """Prompts per model call."""
    backend: Backend | None = None
    """The model asked (tests); None: the LLM configuration's back end, made and closed here."""


def fit_calibration(prompts: PromptBuilder, market: Market, run_config: RunConfig,
                    fit: CalibrationFit = CalibrationFit(), *, say: Callable[[str], None] | None = None,
                    progress: bool = False,
                    desc: str = "") -> tuple[BatchCalibration, list[AdvisorContext], np.ndarray]:
    """The batch calibration of the advice ``prompts`` renders (its LLM config and retrieval: the identity), fitted
    on the training days as ``fit`` says; with the contexts asked and the model's raw answers to them.

    The one recipe of every fitted calibration (``advise calibrate``, a missing one fitted on first use, ``llm eval``'s
    variants): ``fit.max_states`` training bars (:func:`calibration_bars`), each asked in ``fit.positions``, scored by
    ``fit.backend`` (None: the config's back end, made here after ``say`` is told how many states, and closed);
    nothing is stored. ``progress``: a progress bar named ``desc``.
    """
    t = calibration_bars(market, run_config, "train", fit.max_states)
    contexts = calibration_contexts(market, t, fit.positions)
    if say is not None:
        asked = ", ".join(POSITION_NAMES[p] for p in fit.positions)
        say(f"fitting the batch calibration of {prompts.config.backend} on {len(contexts):,} states of the training "
            f"days ({len(t):,} bars, each {asked})")
    own = fit.backend is None
    backend = fit.backend or make_backend(prompts.config, prompts)
    try:
        mass = score_contexts(backend, prompts, contexts, batch=fit.batch, progress=progress, desc=desc)
    finally:
        if own:
            backend.close()
    legal = np.array([c.legal for c in contexts], dtype=bool)
    retrieval = prompts.retrieval.identity() if prompts.retrieval is not None else None
    cal = fit_batch_calibration(mass, legal, [c.market for c in contexts], [c.position for c in contexts],
                                identity=advice_identity(prompts.config, retrieval=retrieval),
                                days=market.bars.session_id[t].tolist() if len(t) else [],
                                min_states=fit.min_states)
    return cal, contexts, mass


def calibrate_run(run_dir: Path, run_config: RunConfig, llm_config: LLMConfig, market: Market,
                  fit: CalibrationFit = CalibrationFit(), *, force: bool = False,
                  say: Callable[[str], None] | None = None) -> tuple[BatchCalibration, list[dict[str, Any]]]:
    """Fit (:func:`fit_calibration`, as ``fit`` says) and store ``RUN_DIR/llm_calibration.json``; returns it and the
    lean table.

    ``say``: told how many states are asked, before the model is loaded."""
    if llm_config.mode != "score":
        raise UserError("batch calibration divides scoring-mode distributions; llm.mode is 'generate'",
                        fix="set llm.mode: score")
    path = calibration_path(run_dir)
    if path.exists() and not force:
        raise UserError("the run already has a batch calibration", file=str(path),
                        fix="add --force to fit it again (advice collected with the old one keeps it)")
    check_writable(path, what="advise calibrate")
    prompts = PromptBuilder(llm_config, source="the run's llm config")
    attach_run_pool(prompts, market, run_config)  # retrieval: the pool of the training days (nothing when off)
    tell = None if say is None else (lambda line: say(f"{line} -> {path}"))
    cal, contexts, mass = fit_calibration(prompts, market, run_config, fit, say=tell)
    cal.save(path)
    return cal, lean_table(contexts, mass, cal)


def advice_calibration(run_dir: Path, llm_config: LLMConfig, *, calibrate: bool = True,
                       run_config: RunConfig | None = None, market: Market | None = None,
                       retrieval: dict | None = None, say: Callable[[str], None] = print,
                       fit: CalibrationFit = CalibrationFit()) -> AdviceCalibration:
    """The run's batch calibration for ``llm_config``'s advice: the one rule of every caller that asks a model.

    A back end without an answer lean (trend rule, mock, student; ``run.calibration.needs_calibration``) gets
    the run's calibration when one was fitted for it by hand, and is never fitted nor marked raw. A leaning one
    gets the run's, fitted first on the training days when the run has none (said, with its cost in states and
    seconds); with ``calibrate=False`` (``--no-calibrate``) none, even when the run has one, and the result
    says ``raw``.
    ``retrieval``: the prompt's ``Retriever.identity()`` when it retrieves its examples; ``fit``: how a missing
    calibration is fitted.
    """
    run_dir = Path(run_dir)
    if not needs_calibration(llm_config):  # the calibration fitted for one by hand (advise calibrate --llm mock)
        mine = fitted_model(run_dir) in (None, advice_identity(llm_config)["model"])  # not the run's Gemma one
        cal = load_calibration(run_dir, llm_config, retrieval=retrieval) if calibrate and mine else None
        return AdviceCalibration(cal, calibration_path(run_dir) if cal is not None else None,
                                 content_free=llm_config.scoring.calibrate and backend_spec(llm_config.backend).leans)
    if not calibrate:
        say(f"note: --no-calibrate: the {llm_config.backend} back end's raw answers are used, its constant lean "
            "undivided, and the advice is marked raw (to divide it out: drop --no-calibrate)")
        return AdviceCalibration(raw=True)
    cal = load_calibration(run_dir, llm_config, retrieval=retrieval)
    if cal is not None:
        return AdviceCalibration(cal, calibration_path(run_dir))
    run_config = run_config or load_run_config(run_dir)
    market = market or load_market(run_config.data, run_config.split)
    say(f"the run has no batch calibration of the {llm_config.backend} advice: fitting it first "
        "(--no-calibrate skips it and marks the advice raw)")
    start = time.perf_counter()
    cal, _ = calibrate_run(run_dir, run_config, llm_config, market, fit, say=say)
    seconds = time.perf_counter() - start
    say(f"batch calibration fitted in {seconds:.1f} s on {sum(cal.counts.values()):,} states: "
        + ", ".join(f"{k} {n}" for k, n in cal.counts.items()))
    return AdviceCalibration(cal, calibration_path(run_dir), fitted_s=seconds)
