"""TradingCore: built once (``TradingCore.build``) for the environment and the executor; its state saved and
restored (the executor's snapshots) continues exactly as the core that was not stopped."""

from __future__ import annotations

import copy

import numpy as np

from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.env.core import CORE_STATE, CoreSeries, TradingCore
from hybrid_trader.markets import get_contract

from .helpers import flat_session, make_bars, stub_features


def series_of(bars, features) -> CoreSeries:
    return CoreSeries(bars.open.tolist(), bars.high.tolist(), bars.low.tolist(), bars.close.tolist(),
                      np.asarray(features.atr, float).tolist(), features.windows, features.llm_market)


def market():
    rows = flat_session("2024-01-03", "09:00", 200)
    rng = np.random.default_rng(3)
    prices = 100.0 + np.round(np.cumsum(rng.normal(0, 1.0, len(rows))) * 4) / 4
    rows = [(r[0], p, p + 1.0, p - 1.0, p) for r, p in zip(rows, prices, strict=True)]
    bars = make_bars(rows)
    return bars, stub_features(bars)


def run(core: TradingCore, actions: list[int], last: int) -> list[tuple]:
    """Drive the core as the environment does up to bar ``last``; per bar: equity, position, observation."""
    out = []
    for a in actions:
        core.observe()
        pending = core.apply(a)
        t = core.t + 1
        core.process_bar(t, pending, t >= last)
        out.append((core.record(), core.broker.side, core.observe().tobytes(), core.account.status))
        if t >= last:
            break
    return out


def test_build_wires_what_the_environment_holds():
    bars, features = market()
    env = TradingEnv(bars, features, EnvConfig(phase=2, contracts=2))
    core = TradingCore.build(EnvConfig(phase=2, contracts=2), get_contract("NQ"), series_of(bars, features))
    assert core.n_actions == env.core.n_actions == 6
    assert core.account.rules == env.rules and core.broker.qty == env.broker.qty == 2
    assert core.observer.dim == env.observer.dim


def test_restored_core_continues_as_the_core_that_was_not_stopped_when_given_its_state():
    bars, features = market()
    cfg = EnvConfig(phase=2)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 6, 150).tolist()

    def fresh() -> TradingCore:
        core = TradingCore.build(cfg, get_contract("NQ"), series_of(bars, features))
        core.t, core.last_entry = 35, 180
        core.account.begin_day(35)
        core.record()
        return core

    whole = fresh()
    expected = run(whole, actions, 190)
    first = fresh()
    head = run(first, actions[:60], 190)
    saved = copy.deepcopy((first.state(), first.broker, first.account))  # as a snapshot's pickle
    assert set(saved[0]) == set(CORE_STATE)
    later = fresh()
    later.restore(*saved)
    tail = run(later, actions[60:], 190)
    assert head + tail == expected
    assert len(whole.broker.trades) >= 3 and [t.net_pnl for t in later.broker.trades] == [
        t.net_pnl for t in whole.broker.trades]
    assert (later.invalid_actions, later.decision_steps) == (whole.invalid_actions, whole.decision_steps)
