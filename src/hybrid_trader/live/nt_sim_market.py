"""The simulated NinjaTrader's market (``live.nt_sim``): the prices it fills at (pushed bars, or a followed bars
file) and its fill arithmetic (where a working stop or limit fills on a bar; a position after a fill)."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_trader.errors import UserError


@dataclass(frozen=True)
class Quote:
    """One bar of the simulator's market: the prices it fills at, in this order (open, then the range, close)."""

    open: float
    high: float
    low: float
    close: float


class SimMarket:
    """The simulator's prices: bars pushed (by a test, :class:`FileMarket`), taken in order by the simulator."""

    def __init__(self, price: float | None = None) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Quote] = deque()
        if price is not None:
            self.push(price)

    def push(self, open: float, high: float | None = None, low: float | None = None,
             close: float | None = None) -> None:
        """A new bar (one price: ``open`` alone); a bar whose prices do not hold together is a UserError."""
        quote = Quote(open, open if high is None else high, open if low is None else low,
                      open if close is None else close)
        if not (0 < quote.low <= min(quote.open, quote.close) and max(quote.open, quote.close) <= quote.high):
            raise UserError("a simulator price bar needs 0 < low <= open, close <= high", value=quote,
                            fix="pass the bar's open, high, low and close")
        with self._lock:
            self._queue.append(quote)

    def take(self) -> list[Quote]:
        """The bars pushed since the last call, oldest first."""
        with self._lock:
            quotes = list(self._queue)
            self._queue.clear()
        return quotes

    @property
    def idle(self) -> bool:
        with self._lock:
            return not self._queue


class FileMarket(SimMarket):
    """Prices from a bars file the simulator follows (the follow feed's reader: a CSV with a header, or
    NinjaTrader's export lines): each new complete line is a bar; unreadable lines are skipped."""

    def __init__(self, path: str | Path) -> None:
        from hybrid_trader.live.feeds import FollowFeed  # pandas: only when a file is followed

        super().__init__()
        self.feed = FollowFeed(path)

    def take(self) -> list[Quote]:
        for bar in self.feed.poll():
            try:
                self.push(bar.open, bar.high, bar.low, bar.close)
            except UserError:
                continue  # a line the reader could not read (NaN) or a bar that does not hold together
        return super().take()


def touched(order_type: str, buys: bool, stop: float, limit: float, bar: Any) -> float | None:
    """The price a working stop or limit order fills at on ``bar`` (open, high, low), None if the bar does not
    reach it: its level, or the bar's open when the bar opens beyond it."""
    if order_type in ("STOPMARKET", "STOPLIMIT"):
        if buys and bar.high >= stop:
            return max(stop, bar.open)
        if not buys and bar.low <= stop:
            return min(stop, bar.open)
    if order_type == "LIMIT":
        if buys and bar.low <= limit:
            return min(limit, bar.open)
        if not buys and bar.high >= limit:
            return max(limit, bar.open)
    return None


def apply_fill(qty: int, avg: float, signed: int, price: float) -> tuple[int, float]:
    """A position ``qty`` at average ``avg`` after a fill of ``signed`` contracts at ``price``: adding averages,
    reducing keeps the average, flat has none, a reversal starts at the fill's price."""
    new = qty + signed
    if qty == 0 or (qty > 0) == (signed > 0):
        avg = (avg * abs(qty) + price * abs(signed)) / abs(new)
    elif new == 0:
        avg = 0.0
    elif (new > 0) != (qty > 0):
        avg = price
    return new, avg
