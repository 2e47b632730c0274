"""Broker: fills with slippage, stop/target order inside a bar, trailing, and the one Trade record."""

from __future__ import annotations

import math

import pytest

from hybrid_trader.env.broker import (
    EXIT_BREAKEVEN,
    EXIT_STOP,
    EXIT_TARGET,
    TRADE_COLUMNS,
    TRADE_FIELDS,
    Broker,
    Trade,
)


def broker(**kw) -> Broker:
    args = dict(contracts=1, point_value=20.0, commission_per_side=2.0, slippage_points=0.25,
                stop_atr=1.5, target_atr=3.0, trail_atr=1.0)
    args.update(kw)
    return Broker(**args)


def test_entry_fills_at_open_plus_slippage_with_atr_stop_and_target_when_long():
    b = broker()
    b.open(5, 1, 100.0, 4.0)
    assert b.entry == 100.25 and b.stop == 94.25 and b.target == 112.25


def test_stop_wins_when_bar_touches_both_stop_and_target():
    b = broker()
    b.open(5, 1, 100.0, 4.0)
    price = b.scan_bar(100.0, 113.0, 94.0)
    assert price == 94.0 and b.exit_reason == EXIT_STOP and b.bar_worst == 94.0


def test_target_fills_at_its_price_and_caps_favourable_excursion():
    b = broker()
    b.open(5, -1, 100.0, 4.0)  # short 99.75, target 87.75
    assert b.scan_bar(99.0, 99.5, 80.0) == pytest.approx(87.75)
    assert b.exit_reason == EXIT_TARGET and b.bar_fav == pytest.approx(87.75)


def test_breakeven_stop_reason_when_stop_moved_to_entry():
    b = broker()
    b.open(5, 1, 100.0, 4.0)
    b.move_stop_to_breakeven()
    assert b.scan_bar(101.0, 101.0, 100.0) == 100.0 and b.exit_reason == EXIT_BREAKEVEN


def test_trail_only_tightens_when_price_moves_in_favour():
    b = broker()
    b.open(5, 1, 100.0, 4.0)
    b.enable_trail(104.0, 2.0)
    assert b.stop == 102.0
    assert math.isnan(b.scan_bar(104.0, 108.0, 103.0))
    assert b.stop == 106.0
    b.scan_bar(106.5, 106.8, 106.1)
    assert b.stop == 106.0


def test_close_returns_trade_with_costs_and_balance_change_when_stopped():
    b = broker()
    b.open(5, 1, 100.0, 4.0)
    trade, change = b.close(7, 94.0, EXIT_STOP, at_close=False)
    assert isinstance(trade, Trade) and b.trades == [trade] and b.side == 0
    assert trade.net_pnl == pytest.approx((94.0 - 100.25) * 20 - 4)
    assert trade.gross_pnl == pytest.approx((94.25 - 100.0) * 20)
    assert trade.costs == pytest.approx(trade.gross_pnl - trade.net_pnl)
    assert change == pytest.approx((94.0 - 100.25) * 20 - 2)  # the entry commission was paid at the fill
    assert trade.bars_held == 3


def test_stored_trade_columns_derive_from_the_trade_fields():
    assert TRADE_FIELDS[:2] == ("entry_index", "exit_index")
    assert TRADE_COLUMNS[:2] == ("entry_time", "exit_time")
    assert set(TRADE_COLUMNS[2:]) < set(TRADE_FIELDS)
    with pytest.raises(AttributeError):
        Trade(*range(12)).side = 2  # frozen
