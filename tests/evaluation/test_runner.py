"""The evaluation runner: fresh-day evaluations over any sessions a file has."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from hybrid_trader.data import generate_bars
from hybrid_trader.data.bars import Bars
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.evaluation.policies import RandomPolicy
from hybrid_trader.evaluation.runner import run_fresh_days, trade_fresh_days
from hybrid_trader.features import compute_features


def test_fresh_days_trade_every_usable_day_when_some_sessions_cannot_be_traded():
    full = generate_bars(days=5, seed=2, market="NQ")
    last_day = full.frame.index[-1].normalize()
    cut = full.frame[full.frame.index < last_day + pd.Timedelta(hours=9, minutes=31)]  # a last day of 1 bar
    bars = Bars(frame=cut, market="NQ", bar_minutes=1, source="cut", findings=[])
    market = SimpleNamespace(bars=bars, features=compute_features(bars))
    every_session = list(range(len(bars.session_bounds)))  # the last has 1 bar in its window: nothing to trade
    usable = TradingEnv(bars, market.features, EnvConfig(phase=1), sessions=every_session).episode_windows
    assert 0 < len(usable) < len(every_session)
    figures = run_fresh_days(lambda: RandomPolicy(0.05, seed=1), market, EnvConfig(phase=1), every_session)
    assert figures["Days, fresh"] == len(usable)


def test_fresh_days_count_the_trades_of_every_day():
    bars = generate_bars(days=4, seed=3, market="NQ")
    market = SimpleNamespace(bars=bars, features=compute_features(bars))
    sessions = list(range(len(bars.session_bounds)))
    flat = run_fresh_days(lambda: RandomPolicy(0.0, seed=1), market, EnvConfig(phase=1), sessions)
    busy = run_fresh_days(lambda: RandomPolicy(0.05, seed=1), market, EnvConfig(phase=1), sessions)
    assert flat["Trades, fresh"] == 0 and flat["Net PnL, fresh days [$]"] == 0
    assert busy["Trades, fresh"] >= busy["Days, fresh"]  # at 5% of the bars, every day of ~390 bars trades


def test_fresh_days_keep_each_days_date_and_pnl_and_their_figures_are_the_sums():
    bars = generate_bars(days=4, seed=3, market="NQ")
    market = SimpleNamespace(bars=bars, features=compute_features(bars))
    sessions = list(range(len(bars.session_bounds)))
    days = trade_fresh_days(lambda: RandomPolicy(0.05, seed=1), market, EnvConfig(phase=1), sessions)
    windows = TradingEnv(bars, market.features, EnvConfig(phase=1), sessions=sessions).episode_windows
    assert days.dates == tuple(str(bars.session_dates[w.session]) for w in windows)
    assert len(set(days.pnl)) > 1  # each day its own P&L
    figures = run_fresh_days(lambda: RandomPolicy(0.05, seed=1), market, EnvConfig(phase=1), sessions)
    assert figures == days.figures()
    assert figures["Net PnL, fresh days [$]"] == pytest.approx(sum(days.pnl))
