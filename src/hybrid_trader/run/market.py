"""Bars, features and the time split of one run, loaded once and shared by every environment."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_trader.data import load_bars
from hybrid_trader.data.bars import Bars
from hybrid_trader.data.findings import DataFinding
from hybrid_trader.data.loader import named_market
from hybrid_trader.data.resample import resample_bars
from hybrid_trader.data.synthetic import generate_bars
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.env.risk_veto import RiskConfig, RiskVeto
from hybrid_trader.errors import UserError
from hybrid_trader.features import compute_features
from hybrid_trader.markets import get_contract
from hybrid_trader.run.config import DataConfig, RunConfig, SplitConfig, run_market
from hybrid_trader.run.splits import Split, month_folds, time_split, walk_forward


@dataclass(eq=False)
class Market:
    """What a run trades: the bars, their features (computed once) and the split by time."""

    bars: Bars
    features: object
    split: Split
    pool: list[Market] = field(default_factory=list)
    """``data.pool``: further markets whose training days (only those before this market's first
    validation day) are trained on too, each in its own environments (:func:`training_markets`)."""

    def sessions(self, part: str) -> range:
        """Session indices of ``train``, ``val`` or ``test``."""
        return self.split.part(part)

    def dates(self, part: str) -> list[str] | None:
        """The first and last trading date of ``train``, ``val`` or ``test`` (None: no day)."""
        r, days = self.sessions(part), self.bars.session_dates
        return [str(days[r.start]), str(days[r.stop - 1])] if len(r) else None

    def split_info(self) -> dict:
        """The split's sessions and dates (a run's ``split.json``)."""
        return {**self.split.to_dict(), "dates": {name: self.dates(name) for name in ("train", "val", "test")}}

    def first_evaluated_day(self) -> str | None:
        """The first validation day, else the first test day (None: neither)."""
        return next((d[0] for d in (self.dates("val"), self.dates("test")) if d), None)

    def describe(self) -> str:
        text = f"{self.bars.source}: {len(self.bars):,} bars, {self.bars.n_sessions} sessions; " + self.split.describe(
            self.bars.session_dates)
        for other in self.pool:
            r = other.sessions("train")
            dates = other.bars.session_dates
            text += (f"\npooled: {other.bars.source} ({other.bars.market}): {len(r)} training days, "
                     f"{dates[r.start]} to {dates[r.stop - 1]}")
        return text


def training_markets(market: Market, n_envs: int) -> list[Market]:
    """The market of each training environment: round-robin over the run's market and its pool."""
    markets = [market, *market.pool]
    if n_envs < len(markets):
        raise UserError(f"data.pool gives {len(markets)} markets to train on, but ppo.n_envs is {n_envs}: each "
                        "market needs at least one environment", fix=f"set ppo.n_envs to {len(markets)} or more")
    return [markets[i % len(markets)] for i in range(n_envs)]


def load_pool_bars(path: str, data: DataConfig) -> Bars:
    """The bars of one ``data.pool`` file (its own contract, ``data``'s clock options and bar size)."""
    bars = load_bars(path, tz=data.tz, time_shift=data.time_shift, market=None, repair=data.repair)
    return resample_bars(bars, data.bar_minutes) if data.bar_minutes else bars


def pooled_market(path: str, data: DataConfig, before: Any, bars: Bars | None = None) -> Market:
    """A ``data.pool`` file as a market whose training days are its sessions before the date ``before``
    (``bars``: that file's bars, loaded before, e.g. shipped to a study's trial)."""
    bars = bars if bars is not None else load_pool_bars(path, data)
    dates = np.asarray(bars.session_dates)
    n_train = int(np.searchsorted(dates, np.datetime64(before, "D"), side="left")) if before is not None \
        else len(dates)
    if n_train < 1:
        raise UserError(
            f"data.pool file {path} has no trading day before {before}, the run's first validation day "
            f"(it holds {dates[0]} to {dates[-1]}): pooled days must be older than every validation and test day",
            file=path, fix="pool a file of an earlier period, or drop it from data.pool")
    return Market(bars, compute_features(bars), Split(range(0, n_train), range(n_train, n_train), range(n_train,
                                                                                                      n_train)))


def load_bars_from_config(data: DataConfig) -> Bars:
    """The run's bars: the file in ``data.path`` or the built-in synthetic market."""
    if data.path:
        bars = load_bars(data.path, tz=data.tz, time_shift=data.time_shift, market=data.market, repair=data.repair)
    else:
        bars = generate_bars(days=data.synthetic_days, seed=data.synthetic_seed, edge=data.synthetic_edge,
                             market=data.market or "NQ")
    return resample_bars(bars, data.bar_minutes) if data.bar_minutes else bars


SHOWN_NOTES = ("market", "resampled")
"""Notes of loading that training and evaluation repeat beside the warnings (a market guessed from a file name)."""


def show_findings(bars: Bars) -> None:
    """The warnings of loading ``bars`` and the notes of :data:`SHOWN_NOTES`, on stderr."""
    shown = [f for f in bars.findings if isinstance(f, DataFinding) and (f.level == "warning" or f.code in SHOWN_NOTES)]
    for finding in shown:
        print(f"{finding.level}: {bars.source}: [{finding.code}] {finding.message}", file=sys.stderr)


def load_market(data: DataConfig, split: SplitConfig | None, bars: Bars | None = None, *,
                pool: bool = False, pool_bars: Sequence[Bars] | None = None) -> Market:
    """Load (or take) the bars, compute their features once and split the sessions by time.

    ``split`` None: no split, every session is a test day (``evaluate --split all``: the run's
    folds or shares never refuse other data).

    ``pool``: load ``data.pool`` too (training); evaluation and the other readers of a
    run's days never need it. ``pool_bars``: those files' bars, loaded before (one per file).

    The warnings ``data check`` gives (a shifted clock, a guessed market, ...) are printed to
    stderr here too, so that training and evaluation never use suspicious bars without a word.
    """
    if bars is None:
        bars = load_bars_from_config(data)
        show_findings(bars)
    features = compute_features(bars)
    n = bars.n_sessions
    market = Market(bars, features, make_split(n, split, bars.session_dates) if split is not None else
                    Split(range(0, 0), range(0, 0), range(0, n)))
    if pool and data.pool:
        later = [r for r in (market.sessions("val"), market.sessions("test")) if len(r)]
        before = bars.session_dates[min(r.start for r in later)] if later else None
        given = list(pool_bars) if pool_bars is not None else [None] * len(data.pool)
        market = replace(market, pool=[pooled_market(path, data, before, b) for path, b in zip(data.pool, given,
                                                                                                strict=True)])
    return market


def make_split(n_sessions: int, split: SplitConfig, session_dates: Any = None) -> Split:
    """The run's split: by shares, or fold ``split.fold`` of ``split.folds`` walk-forward folds.

    Walk-forward folds keep the shares' proportions: each fold's test window holds
    ``test / folds`` of the days (at least one), validation likewise, and training the
    ``train`` share of what one fold spans.
    """
    if split.unit == "month":
        if session_dates is None:
            raise ValueError("month folds need the sessions' dates")
        folds = month_folds(session_dates, split.train_months, split.val_months, split.test_months)
        fits = len(folds)
        wanted = split.folds or fits
        if fits == 0 or wanted > fits or split.fold >= min(wanted, fits):
            first, last = (str(session_dates[0]), str(session_dates[-1])) if len(session_dates) else ("-", "-")
            months = len({str(d)[:7] for d in session_dates})
            per_fold = split.train_months + split.val_months + split.test_months
            raise UserError(
                f"split.unit month: the data holds {months} calendar month(s) of sessions ({first} to {last}); "
                f"{split.train_months}+{split.val_months}+{split.test_months} = {per_fold} months per fold fit "
                f"{fits} fold(s) in them; asked fold {split.fold} of {split.folds or 'as many as fit'}",
                fix=(f"use split.fold 0 to {fits - 1} (split.folds at most {fits}), fewer months per fold, "
                     "or more data") if fits else
                    f"use at most {months} month(s) per fold (split.train_months + val_months + test_months) or data "
                    "of more months; evaluate --split all takes every day of --data without folds")
        return folds[split.fold]
    if not split.folds:
        return time_split(n_sessions, split.train, split.val, split.test)
    test = max(1, int(n_sessions * split.test / split.folds))
    val = max(1, int(n_sessions * split.val / split.folds)) if split.val > 0 else 0
    train = max(1, n_sessions - split.folds * test - val) if split.anchored else \
        max(1, int(round((test + val) * split.train / (split.val + split.test))))
    return walk_forward(n_sessions, split.folds, train, test, val, anchored=split.anchored)[split.fold]


def env_factory(
    market: Market, env_config: EnvConfig, sessions: Sequence[int], seed: int, *, ignore_sigint: bool = False,
    wrap: Callable | None = None, risk: RiskConfig | None = None,
) -> Callable[[], TradingEnv]:
    """A picklable constructor of one environment on ``sessions`` (for DummyVecEnv/SubprocVecEnv).

    In a worker process ``ignore_sigint`` leaves Ctrl-C to the main process, which saves
    a checkpoint and then closes the workers itself.
    """

    def make() -> TradingEnv:
        if ignore_sigint:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        env = TradingEnv(market.bars, market.features, env_config, sessions=list(sessions), risk_veto=make_veto(risk))
        env.reset(seed=seed)
        return wrap(env) if wrap is not None else env

    return make


def check_environment(market: Market, config: Any) -> None:
    """The checks a run's environments make when training builds them (``env.contracts`` against the rules'
    limit, the rules preset, the trading window, ``data.pool`` against ``ppo.n_envs``): one environment of
    ``config`` (a ``RunConfig``) on ``market``'s training days, built and closed; a UserError when one fails."""
    training_markets(market, config.ppo.n_envs)
    risk = config.risk if config.env.phase == 3 else None
    env_factory(market, config.env, market.sessions("train"), config.ppo.seed, risk=risk)().close()


def make_veto(risk: RiskConfig | None) -> RiskVeto | None:
    """A RiskVeto for an enabled RiskConfig, else None."""
    if risk is None or not risk.enable_risk_veto:
        return None
    return RiskVeto(risk)


def priced_market(run_dir: Path, config: RunConfig, data_path: str | Path | None, symbol: str | None, *,
                  flag: str = "--data") -> tuple[str | None, str | None]:
    """The contract root the bars of ``data_path`` are priced with (None: the run's own bars, loaded as it
    trained), and a note when that is not the market the run trained on: ``evaluate --data`` and
    ``run --feed`` alike (``flag`` names the option in messages).

    ``symbol`` (``--market``) is checked as train checks it and always wins: another market than the run's is an
    explicit override, noted. Without it, ``flag``'s file whose name says another market than the run's is
    refused naming both; a name that says none is priced as the run's market, noted.
    """
    trained, where = run_market(config)
    if symbol is not None:
        symbol = get_contract(symbol).symbol
        if trained is not None and symbol == trained:
            return (symbol if data_path else None), None
        return symbol, (f"--market {symbol}: the bars are priced as {symbol} ({_contract_text(symbol)}), but the "
                        f"agent of {run_dir} trained on {trained or 'an unknown market'} ({where}); results.json "
                        "records the contract used")
    if not data_path:
        return None, None
    named, how = named_market(str(data_path))
    if how == "name" and named is not None and named != trained:
        if trained is None:
            return named, f"{flag} is priced as {named} (its file name); the run's own market is unknown ({where})"
        raise UserError(
            f"{flag} holds {named} bars (its file name says so), but the run {run_dir} trained on {trained} "
            f"({where}): its trades would be priced with the wrong contract ({_contract_text(named)} against "
            f"{_contract_text(trained)})", file=str(data_path),
            fix=f"use {trained} bars; or pass --market {named} to price these bars as {named} (an explicit "
                f"override, recorded in results.json and the journal); or --market {trained} when the file's name "
                "misleads")
    if how == "name":
        return named, None
    if trained is None:
        raise UserError(f"neither {flag}'s name nor the run {run_dir} says the market ({how}; {where})",
                        file=str(data_path), fix="pass --market SYMBOL (e.g. --market NQ)")
    return trained, (f"{flag}'s file name names no market: its bars are priced as the run's market {trained} "
                     f"({_contract_text(trained)}); pass --market to say otherwise")


def _contract_text(symbol: str) -> str:
    return f"${get_contract(symbol).point_value:g} a point"
