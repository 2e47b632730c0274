"""Hindsight labels, checked by hand on a crafted bar sequence and against the environment."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.actions import Action
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.errors import UserError
from hybrid_trader.hindsight.labels import LabelConfig, build_labels, choose_label
from hybrid_trader.run.market import Market
from hybrid_trader.run.splits import Split
from tests.env.helpers import flat_session, make_bars, set_bar, stub_features

COMMISSION = 2.10  # NQ per side [$]
POINT = 20.0  # NQ [$ per point]
SLIP = 0.25  # one tick [points]
CFG = EnvConfig(phase=1, trade_start="09:30", trade_end="10:00", last_entry="09:50", stop_atr=1.5, target_atr=3.0)


def crafted_market() -> Market:
    """Four days of flat bars at 100 (ATR 4: stop 6, target 12 points); day 0 rallies at 09:45."""
    rows = []
    for day in ("2024-01-03", "2024-01-04", "2024-01-05", "2024-01-08"):
        rows += flat_session(day, start="09:00", n=60)
    set_bar(rows, "09:45", 100.0, 113.0, 100.0, 110.0)  # the first day's 09:45 (set_bar takes the first match)
    bars = make_bars(rows)
    return Market(bars, stub_features(bars, atr=4.0), Split(train=range(0, 2), val=range(2, 3), test=range(3, 4)))


def bar_at(market: Market, stamp: str) -> int:
    return int(np.flatnonzero(market.bars.frame.index.strftime("%Y-%m-%d %H:%M") == stamp)[0])


def test_labels_match_hand_computation_when_a_rally_hits_the_buy_target():
    market = crafted_market()
    t = bar_at(market, "2024-01-03 09:40")
    labels, ok = build_labels(market, CFG, "train", t=np.array([t]), config=LabelConfig(horizon=None))
    assert ok.tolist() == [True]
    buy_entry, sell_entry = 100.0 + SLIP, 100.0 - SLIP
    buy = (buy_entry + 12.0 - buy_entry) * POINT - 2 * COMMISSION  # target fills at its price
    sell = -((sell_entry + 6.0 + SLIP) - sell_entry) * POINT - 2 * COMMISSION  # stop pays slippage
    assert labels.pnl[0].tolist() == pytest.approx([0.0, buy, sell])
    assert labels.exit_index[0].tolist() == [bar_at(market, "2024-01-03 09:45")] * 2
    assert labels.label.tolist() == [Action.BUY]


def test_flat_bars_label_hold_when_costs_make_every_entry_lose():
    market = crafted_market()
    t = bar_at(market, "2024-01-04 09:40")
    labels, _ = build_labels(market, CFG, "train", t=np.array([t]), config=LabelConfig(horizon=5))
    # closed at the horizon's close (100) less slippage: both sides lose slippage twice and commissions
    assert labels.pnl[0, 1] == pytest.approx(labels.pnl[0, 2]) == pytest.approx(-2 * SLIP * POINT - 2 * COMMISSION)
    assert labels.exit_index[0].tolist() == [t + 5, t + 5]
    assert labels.label.tolist() == [Action.HOLD]


def test_margin_makes_hold_win_when_the_best_entry_earns_less():
    pnl = np.array([[0.0, 50.0, -10.0], [0.0, -5.0, 30.0], [0.0, -1.0, -2.0]])
    assert choose_label(pnl, 0.0).tolist() == [Action.BUY, Action.SELL, Action.HOLD]
    assert choose_label(pnl, 40.0).tolist() == [Action.BUY, Action.HOLD, Action.HOLD]


def test_label_equals_the_environments_trade_when_the_agent_buys_on_that_bar():
    market = crafted_market()
    t = bar_at(market, "2024-01-03 09:40")
    labels, _ = build_labels(market, CFG, "train", t=np.array([t]), config=LabelConfig(horizon=None))
    env = TradingEnv(market.bars, market.features, EnvConfig(**{**CFG.__dict__, "episode_sessions": None}),
                     sessions=[0])
    env.reset(seed=0, options={"start": 0})
    while env.current_index < t:
        env.step(Action.HOLD)
    env.step(Action.BUY)
    while env.broker.side:
        env.step(Action.HOLD)
    assert env.broker.trades[0].net_pnl == pytest.approx(labels.pnl[0, 1])


def test_no_training_label_reads_bars_of_evaluation_days_when_built_to_the_session_end():
    market = crafted_market()
    labels, ok = build_labels(market, CFG, "train", config=LabelConfig(horizon=None))
    assert len(labels) > 0 and ok.all()
    train_sessions = set(market.split.train)
    assert set(market.bars.session_id[labels.t].tolist()) <= train_sessions
    assert set(market.bars.session_id[labels.exit_index.ravel()].tolist()) <= train_sessions
    # every exit stays in its own decision day
    assert (market.bars.session_id[labels.exit_index] == market.bars.session_id[labels.t][:, None]).all()


@pytest.mark.parametrize("part", ["val", "test"])
def test_training_labels_are_refused_when_asked_on_evaluation_days(part):
    market = crafted_market()
    with pytest.raises(UserError, match=f"{part} split .*2024-01-0"):
        build_labels(market, CFG, part)


def test_training_labels_are_refused_when_a_state_lies_on_a_test_day():
    market = crafted_market()
    t = bar_at(market, "2024-01-08 09:40")
    with pytest.raises(UserError, match="test days .*2024-01-08"):
        build_labels(market, CFG, "train", t=np.array([t]))


def test_evaluation_labels_are_built_when_the_purpose_is_to_evaluate():
    market = crafted_market()
    labels, _ = build_labels(market, CFG, "test", purpose="evaluate")
    assert len(labels) > 0
    assert set(market.bars.session_id[labels.t].tolist()) == {3}
