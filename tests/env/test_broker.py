"""Broker: fills with slippage, stop/target order inside a bar, trailing, and the one Trade record."""

from __future__ import annotations

import math

import pytest

from hybrid_trader.env.broker import (
    EXIT_BREAKEVEN,
    EXIT_STOP,
    EXIT_TARGET,
    EXIT_TRAIL,
    TRADE_COLUMNS,
    TRADE_FIELDS,
    Broker,
    Trade,
    level_on_grid,
)


def broker(**kw) -> Broker:
    args = dict(contracts=1, point_value=20.0, commission_per_side=2.0, slippage_points=0.25, tick_size=0.25,
                stop_atr=1.5, target_atr=3.0, trail_atr=1.0)
    args.update(kw)
    return Broker(**args)


@pytest.mark.parametrize(("level", "away", "tick", "want"), [
    (16880.16, -1, 0.25, 16880.0),  # a long's stop: down, further from the entry
    (16880.16, 1, 0.25, 16880.25),  # a short's stop, a long's target: up
    (16880.0, -1, 0.25, 16880.0),  # on the grid: unchanged either way
    (16880.0, 1, 0.25, 16880.0),
    (16880.249999999, 1, 0.25, 16880.25),  # float noise below a grid price: that price either way
    (16880.249999999, -1, 0.25, 16880.25),
    (16880.250000001, -1, 0.25, 16880.25),  # float noise above it
    (16880.250000001, 1, 0.25, 16880.25),
    (16880.26, 1, 0.25, 16880.5),  # more than noise: the next grid price
    (-3.1, -1, 0.25, -3.25),  # below zero (a spread, an adjusted series): still down and up
    (-3.1, 1, 0.25, -3.0),
    (71.234, 1, 0.01, 71.24),  # a tick that is no power of two: the price NinjaTrader receives, no float tail
    (71.234, -1, 0.01, 71.23),
    (0.1 + 0.2, 1, 0.1, 0.3),
])
def test_level_on_grid_rounds_in_its_direction_and_absorbs_float_noise(level, away, tick, want):
    assert level_on_grid(level, away, tick) == want


def test_stop_and_target_are_on_the_grid_and_further_from_the_entry_for_either_side():
    b = broker(slippage_points=0.25)
    # 1.5 and 3 ATRs of 13.277 from the entry 16900.25 (long) or 16899.75 (short)
    assert b.levels(1, 16900.0, 13.277) == (16880.25, 16940.25)  # raw 16880.3345, 16940.081
    assert b.levels(-1, 16900.0, 13.277) == (16919.75, 16859.75)  # raw 16919.6655, 16859.919
    assert b.levels(1, 16900.0, 4.0) == (16894.25, 16912.25)  # on the grid already: the ATR levels themselves


def test_stop_fills_at_the_grid_stop_less_slippage_when_a_bar_crosses_it():
    b = broker()
    b.open(5, 1, 16900.0, 13.277)  # entry 16900.25, raw stop 16880.3345 -> 16880.25
    assert b.stop == 16880.25
    assert b.scan_bar(16899.0, 16901.0, 16870.0) == 16880.25 - 0.25 and b.exit_reason == EXIT_STOP
    s = broker()
    s.open(5, -1, 16900.0, 13.277)  # entry 16899.75, raw stop 16919.6655 -> 16919.75
    assert s.scan_bar(16901.0, 16930.0, 16899.0) == 16919.75 + 0.25 and s.exit_reason == EXIT_STOP


def test_target_fills_at_the_grid_target_when_a_bar_reaches_it():
    b = broker()
    b.open(5, 1, 16900.0, 13.277)  # raw target 16940.081 -> 16940.25: not reached at 16940.1
    assert math.isnan(b.scan_bar(16930.0, 16940.1, 16925.0))
    assert b.scan_bar(16930.0, 16941.0, 16925.0) == 16940.25 and b.exit_reason == EXIT_TARGET


def test_trailing_stop_moves_on_the_grid_behind_the_best_price():
    b = broker()
    b.open(5, 1, 100.0, 4.0)
    b.enable_trail(104.1, 1.3)  # 104.1 - 1.3 = 102.8 -> 102.75
    assert b.stop == 102.75
    assert math.isnan(b.scan_bar(104.0, 105.03, 103.9))  # 105.03 - 1.3 = 103.73 -> 103.5
    assert b.stop == 103.5
    assert math.isnan(b.scan_bar(104.0, 105.1, 103.9))  # 103.8 -> 103.75
    assert b.stop == 103.75
    assert b.scan_bar(104.0, 104.2, 103.0) == 103.5 and b.exit_reason == EXIT_TRAIL
    s = broker()
    s.open(5, -1, 100.0, 4.0)
    s.enable_trail(95.9, 1.3)  # 97.2 -> 97.25
    assert s.stop == 97.25


def test_breakeven_stop_is_the_entry_rounded_away_from_the_market_when_the_entry_is_off_the_grid():
    b = broker(slippage_points=0.1)  # a fractional slippage (or an off-grid open): entry 100.1
    b.open(5, 1, 100.0, 4.0)
    b.move_stop_to_breakeven()
    assert b.stop == 100.0 and b.breakeven == 100.0
    assert b.scan_bar(100.5, 100.6, 99.0) == pytest.approx(99.9) and b.exit_reason == EXIT_BREAKEVEN
    s = broker(slippage_points=0.1)
    s.open(5, -1, 100.0, 4.0)  # entry 99.9: its break-even stop is 100.0
    s.move_stop_to_breakeven()
    assert s.stop == 100.0


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
