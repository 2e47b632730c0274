"""The broker: one position's fills, stops, targets, trailing and break-even, and its costs.

Orders decided at the close of bar t fill at the open of bar t+1 plus slippage; stops,
targets and the trailing stop are then checked against bar t+1's high and low (the stop
wins when a bar touches both; a bar that opens beyond a level fills at its open).
Stops and forced exits pay slippage, targets fill at their price. Every stop and target the
broker sets or moves (the ATR levels, break-even, the trailing stop) is on the contract's tick
grid, rounded away from the entry (:func:`level_on_grid`), as the exchange and the NinjaTrader
mirror (``hybrid_trader.live.broker_link``) hold them. Each closed position
becomes one :class:`Trade`, the one trade record used by the environment's log, the
episode info, evaluation results and reports.

The state is plain floats on one object (read and written in the hot loop); nothing is
allocated per bar except the :class:`Trade` of a closing position.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields

import numpy as np
import pandas as pd

# Exit reason codes, greppable in trade logs and reports.
EXIT_STOP = "STOP"
EXIT_TARGET = "TARGET"
EXIT_TRAIL = "TRAIL_STOP"
EXIT_BREAKEVEN = "BREAKEVEN_STOP"
EXIT_SESSION_END = "SESSION_END"
EXIT_BREACH = "BREACH_LIQUIDATION"
EXIT_DAILY_LOSS = "DAILY_LOSS_LIMIT"


@dataclass(frozen=True)
class Trade:
    """One closed round trip (prices in points, money in dollars)."""

    entry_index: int
    """Bar index of the entry fill (at its open)."""
    exit_index: int
    """Bar index of the exit fill."""
    side: int
    """+1 long, -1 short."""
    contracts: int
    """Contracts traded."""
    entry_price: float
    """Entry fill, slippage included [points]."""
    exit_price: float
    """Exit fill, slippage included [points]."""
    gross_pnl: float
    """PnL before commissions and slippage [$]."""
    costs: float
    """Commissions (both sides) and slippage [$]."""
    net_pnl: float
    """PnL after costs [$]."""
    bars_held: int
    """Bars from the entry fill to the exit fill, both included."""
    exit_reason: str
    """Exit reason code (``STOP``, ``TARGET``, ``TRAIL_STOP``, ``BREAKEVEN_STOP``, ``SESSION_END``, ...)."""
    exit_at_close: bool
    """True when the exit filled at the bar's close (session end) rather than inside the bar."""


TRADE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Trade))
"""The :class:`Trade` fields, in order."""
TRADE_BAR_FIELDS: tuple[str, ...] = ("entry_index", "exit_index", "exit_at_close")
"""Fields that locate a trade in the bars; tables replace them by ``entry_time`` and ``exit_time``."""
TRADE_LOG_COLUMNS: tuple[str, ...] = ("entry_time", "exit_time") + TRADE_FIELDS
"""Columns of ``TradingEnv.trade_log()``: the fill times, then every :class:`Trade` field."""
TRADE_COLUMNS: tuple[str, ...] = ("entry_time", "exit_time") + tuple(
    f for f in TRADE_FIELDS if f not in TRADE_BAR_FIELDS
)
"""Columns of a stored trade table (evaluation results, reports): times instead of bar indices."""


def trades_frame(trades: Sequence[Trade], index: pd.DatetimeIndex, bar_minutes: int) -> pd.DataFrame:
    """The trades as a DataFrame (:data:`TRADE_LOG_COLUMNS`) with tz-aware fill times from ``index``.

    An exit at the close of a bar is stamped at the bar's end (its start + ``bar_minutes``).
    """
    df = pd.DataFrame([astuple(tr) for tr in trades], columns=list(TRADE_FIELDS))
    if len(df):
        df.insert(0, "entry_time", index[df["entry_index"].to_numpy()])
        at_close = df["exit_at_close"].to_numpy(dtype=bool)
        exit_time = index[df["exit_index"].to_numpy()] + pd.to_timedelta(np.where(at_close, bar_minutes, 0), unit="m")
        df.insert(1, "exit_time", exit_time)
    else:
        df.insert(0, "entry_time", pd.Series([], dtype=f"datetime64[ns, {index.tz}]"))
        df.insert(1, "exit_time", pd.Series([], dtype=f"datetime64[ns, {index.tz}]"))
    return df


GRID_EPS = 1e-6
"""Float noise tolerated by :func:`level_on_grid` [ticks]: a level within it of a grid price is that price
(1e-6 of a 0.25 tick is 2.5e-7 points: far above float64's rounding at index prices, far below a real move)."""


def level_on_grid(level: float, away: int, tick: float) -> float:
    """``level`` on the grid of ``tick``: rounded up (``away`` > 0) or down (``away`` <= 0) to a multiple of ``tick``.

    A level within :data:`GRID_EPS` ticks of a multiple is that multiple (16880.249999999 is 16880.25
    either way); the result is the float nearest the decimal grid price (71.24 for a tick of 0.01, no
    float tail: the price NinjaTrader's order files receive). A stop of a position on ``side`` rounds
    ``away=-side``, a target ``away=side``: both further from the entry, the conservative side (a stop
    triggers no earlier, a target fills no earlier than its level).
    """
    n = level / tick
    k = math.ceil(n - GRID_EPS) if away > 0 else math.floor(n + GRID_EPS)
    per = 1.0 / tick
    whole = round(per)
    if abs(per - whole) < 1e-9 * per:  # ticks per point a whole number (every listed contract): k / whole is exact
        return k / whole
    return round(k * tick, 10)


def liquidation_price(limit_equity: float, balance: float, entry: float, side: int, dollars_per_point: float,
                      bar_open: float, tick: float) -> float:
    """Price (before slippage) of a forced liquidation: the first price on the tick grid at or beyond the level
    where the position's equity meets ``limit_equity`` (a long's rounded down, a short's up: the market order
    fills at a traded price, never a fraction of a tick better than the level), or the bar's open when it
    gapped through that level."""
    level = level_on_grid(entry + (limit_equity - balance) / (dollars_per_point * side), -side, tick)
    return bar_open if side * (bar_open - level) < 0 else level


class Broker:
    """Fills and manages one position in one contract (at most one position at a time)."""

    def __init__(
        self,
        *,
        contracts: int,
        point_value: float,
        commission_per_side: float,
        slippage_points: float,
        tick_size: float,
        stop_atr: float,
        target_atr: float,
        trail_atr: float,
    ) -> None:
        self.qty = contracts
        self.dollars_per_point = point_value * contracts
        self.commission = float(commission_per_side) * contracts
        """Commission per side for the whole position [$]."""
        self.slip = float(slippage_points)
        self.tick = float(tick_size)
        """The contract's tick: every stop and target is on its grid (:func:`level_on_grid`) [points]."""
        self.stop_atr = stop_atr
        self.target_atr = target_atr
        self.trail_atr = trail_atr
        self.reset()

    def reset(self) -> None:
        """Flat, no trades."""
        self.side = 0
        self.entry = 0.0
        """Entry fill with slippage [points]."""
        self.raw_entry = 0.0
        """Entry bar's open, before slippage [points]."""
        self.stop = 0.0
        """The stop, on the tick grid [points]."""
        self.breakeven = 0.0
        """The break-even stop: the entry on the tick grid, rounded away from the market [points]."""
        self.target = math.nan
        """The target, on the tick grid (NaN: none) [points]."""
        self.trail_on = False
        self.trail_dist = 0.0
        self.best = 0.0
        """Best price since the trail was enabled."""
        self.entry_index = -1
        self.mae = 0.0
        """Largest adverse excursion of the open position [points]."""
        self.mfe = 0.0
        """Largest favourable excursion of the open position [points]."""
        self.trades: list[Trade] = []
        self.exit_reason = ""
        """Reason of the exit found by the last :meth:`scan_bar` ("" when none)."""
        self.bar_fav = 0.0
        """Favourable price of the last scanned bar that counts for the account."""
        self.bar_worst = 0.0
        """Adverse price of the last scanned bar that counts for the account."""
        self.bar_entry_cost = 0.0
        """Commission of an entry filled on the last bar (:meth:`on_bar`), 0 when none [$]."""
        self.bar_fav_pnl = 0.0
        """Open profit at the last bar's favourable price that counts, before any exit (0 when flat) [$]."""
        self.bar_worst_pnl = 0.0
        """Open profit at the last bar's adverse price that counts, before any exit (0 when flat) [$]."""
        self.bar_closed: Trade | None = None
        """The trade a stop or target closed on the last bar (None: none)."""
        self.bar_cash = 0.0
        """Balance change of ``bar_closed`` (its PnL less the exit commission) [$]."""

    # ------------------------------------------------------------------ orders
    def open(self, t: int, side: int, bar_open: float, atr: float) -> None:
        """Fill an entry at bar t's open (+ slippage) with the ATR stop and target of the decision bar."""
        self.raw_entry = bar_open
        self.entry = bar_open + side * self.slip
        self.side = side
        self.stop, self.target = self.levels(side, bar_open, atr)
        self.breakeven = level_on_grid(self.entry, -side, self.tick)
        self.trail_on = False
        self.entry_index = t
        self.mae = 0.0
        self.mfe = 0.0

    def levels(self, side: int, bar_open: float, atr: float) -> tuple[float, float]:
        """The stop and target of an entry filled at ``bar_open`` (+ slippage), on the tick grid and each
        rounded away from the entry (:func:`level_on_grid`); NaN target when disabled."""
        entry = bar_open + side * self.slip
        tick = self.tick
        target = level_on_grid(entry + side * self.target_atr * atr, side, tick) if self.target_atr > 0 else math.nan
        return level_on_grid(entry - side * self.stop_atr * atr, -side, tick), target

    def move_stop_to_breakeven(self) -> None:
        """The stop to the entry (:attr:`breakeven`: the entry itself when it is on the grid)."""
        self.stop = self.breakeven

    def enable_trail(self, close: float, atr: float) -> None:
        """Trail ``trail_atr`` x ATR behind the best price, starting from ``close``."""
        self.trail_on = True
        self.trail_dist = self.trail_atr * atr
        self.best = close
        self.tighten_stop(close - self.side * self.trail_dist)

    def disable_trail(self) -> None:
        self.trail_on = False

    def tighten_stop(self, level: float) -> None:
        """Move the stop to ``level`` on the tick grid (rounded away from the market) if that is in the
        position's favour."""
        # the stop is on the grid: the rounded level passes it only when the raw one does (no rounding otherwise)
        side = self.side
        if side > 0:
            if level > self.stop:
                self.stop = level_on_grid(level, -1, self.tick)
        elif level < self.stop:
            self.stop = level_on_grid(level, 1, self.tick)

    # ------------------------------------------------------------------ one bar
    def on_bar(self, t: int, pending: int, o: float, h: float, lo: float, atr: float) -> None:
        """Bar t: fill a pending entry (+1 buy, -1 sell, 0 none) at its open, then run stops and targets.

        Leaves what the account books in ``bar_entry_cost``, ``bar_fav_pnl``, ``bar_worst_pnl``,
        ``bar_closed`` and ``bar_cash`` (attributes: nothing is allocated per bar).
        """
        if pending:
            self.open(t, pending, o, atr)
            self.bar_entry_cost = self.commission
        else:
            self.bar_entry_cost = 0.0
        self.bar_closed = None
        side = self.side
        if not side:
            self.bar_fav_pnl = self.bar_worst_pnl = 0.0
            return
        exit_price = self.scan_bar(o, h, lo)
        self.bar_fav_pnl = self.open_pnl(self.bar_fav)
        self.bar_worst_pnl = self.open_pnl(self.bar_worst)
        if exit_price == exit_price:
            self.bar_closed, self.bar_cash = self.close(t, exit_price, self.exit_reason, at_close=False)

    def scan_bar(self, o: float, h: float, lo: float) -> float:
        """Check stop and target against one bar of an open position; returns the exit fill (NaN: still open).

        Also sets ``exit_reason`` and the bar's favourable and adverse prices that count
        for the account, ``bar_fav`` and ``bar_worst`` (an exit caps them at the fill);
        updates MAE/MFE and, while open, the trail. (Attributes, not a returned tuple:
        nothing is allocated per bar.)
        """
        side, entry, stop, target = self.side, self.entry, self.stop, self.target
        fav = h if side > 0 else lo
        adv = lo if side > 0 else h
        mae = side * (entry - adv)
        if mae > self.mae:  # comparisons, not max(): this runs on every bar in a position
            self.mae = mae
        mfe = side * (fav - entry)
        if mfe > self.mfe:
            self.mfe = mfe
        exit_price = math.nan
        reason = ""
        at_open = True
        if side * (o - stop) <= 0:  # opened through the stop
            exit_price, reason = o - side * self.slip, self.stop_reason()
        elif target == target and side * (o - target) >= 0:  # opened through the target
            exit_price, reason = o, EXIT_TARGET
        else:
            at_open = False
            if side * (adv - stop) <= 0:  # stop first when both are touched
                exit_price, reason = stop - side * self.slip, self.stop_reason()
            elif target == target and side * (fav - target) >= 0:
                exit_price, reason = target, EXIT_TARGET
        worst = adv
        if at_open:  # out at the open: nothing the bar did after it was the position's
            fav = worst = exit_price
        elif exit_price == exit_price:
            if reason == EXIT_TARGET:
                fav = exit_price  # out at the target: nothing better counts
            else:
                worst = exit_price  # out at the stop: nothing worse counts
        elif self.trail_on:
            self.best = fav if side * (fav - self.best) > 0 else self.best
            self.tighten_stop(self.best - side * self.trail_dist)
        self.exit_reason = reason
        self.bar_fav = fav
        self.bar_worst = worst
        return exit_price

    def stop_reason(self) -> str:
        if self.trail_on:
            return EXIT_TRAIL
        if self.stop == self.breakeven:
            return EXIT_BREAKEVEN
        return EXIT_STOP

    def close(self, t: int, price: float, reason: str, *, at_close: bool) -> tuple[Trade, float]:
        """Close the position at ``price`` (slippage included) on bar t.

        Returns the :class:`Trade` and the change of the account balance (the exit's
        PnL less the exit commission; the entry commission was paid at the fill).
        """
        side = self.side
        dpp = self.dollars_per_point
        raw_exit = price + side * self.slip if reason != EXIT_TARGET else price
        gross = side * (raw_exit - self.raw_entry) * dpp
        net = side * (price - self.entry) * dpp - 2 * self.commission
        trade = Trade(self.entry_index, t, side, self.qty, self.entry, price, gross, gross - net, net,
                      t - self.entry_index + 1, reason, at_close)
        self.trades.append(trade)
        self.side = 0
        self.trail_on = False
        self.target = math.nan
        return trade, side * (price - self.entry) * dpp - self.commission

    def undo_bar_exit(self) -> None:
        """Take back this bar's exit (:attr:`bar_closed`, the last trade): the position is open again as it was
        before it, for the account to close it otherwise (a breach the bar reached as well, which wins)."""
        trade = self.bar_closed
        if trade is None or not self.trades or self.trades[-1] is not trade:
            raise RuntimeError("no exit of this bar to take back")
        self.trades.pop()
        self.side = trade.side
        self.bar_closed = None

    def liquidate(self, t: int, limit_equity: float, balance: float, bar_open: float,
                  reason: str) -> tuple[Trade, float]:
        """Force the position out on bar t where its equity met ``limit_equity`` (slippage paid).

        At the bar's open when it gapped through that level (:func:`liquidation_price`).
        """
        price = liquidation_price(limit_equity, balance, self.entry, self.side, self.dollars_per_point, bar_open,
                                  self.tick)
        return self.close(t, price - self.side * self.slip, reason, at_close=False)

    def close_at_bar_close(self, t: int, close: float, reason: str) -> tuple[Trade, float]:
        """Close the position at bar t's close (slippage paid), e.g. at the end of the session."""
        return self.close(t, close - self.side * self.slip, reason, at_close=True)

    def open_pnl(self, price: float) -> float:
        """Open profit of the position at ``price`` [$] (0 when flat)."""
        if self.side:
            return self.side * (price - self.entry) * self.dollars_per_point
        return 0.0
