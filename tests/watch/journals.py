"""Journals for the dashboard's tests, written through the executor's own :class:`Journal`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hybrid_trader.live.broker_halts import CODE_RESUMED, HALT
from hybrid_trader.live.journal import Journal, OrderPrices

T0 = pd.Timestamp("2024-03-28 14:30", tz="UTC")
IDENTITY = {"run": "runs/p2", "run_tag": "p2", "model": "m", "config": "c", "market": "NQ"}


def minute(i: int) -> pd.Timestamp:
    return T0 + pd.Timedelta(minutes=i)


def add_bar(j: Journal, i: int, *, equity: float = 50_000.0, status: str = "active", **snapshot: float) -> None:
    """Bar ``i`` (close 100 + i), a decision on it and the account after it."""
    t = minute(i)
    j.record_bar(t, (100 + i, 101 + i, 99 + i, 100.5 + i, 10))
    j.record_decision(t, 1, [0.1, 0.7, 0.2, 0.0, 0.0, 0.0], advice={"direction": "long", "confidence": 0.8},
                      rule_codes=["fusion:agree"], latency_ms=0.4 + i / 100)
    j.record_account(t, status, {"balance": 50_000.0, "equity": equity, "threshold": 47_500.0, "peak": 50_000.0,
                                 "day_pnl": 0.0, "day_limit": 49_000.0, **snapshot})


def write_journal(path: Path, bars: int = 5, *, ninjatrader: bool = False) -> Path:
    """A journal of ``bars`` bars with a long entry filled at bar 1 and its stop still working."""
    with Journal(path) as j:
        j.claim(IDENTITY)
        for i in range(bars):
            add_bar(j, i, equity=50_000.0 + 20 * i, **({"broker_position": 1} if ninjatrader else {}))
            if i == 1:
                j.record_order("p2-entry", minute(1), "entry", "BUY", 1, state="filled")
                j.record_fill("p2-entry", 1, 101.25, minute(1), fill_id="p2-entry")
                j.record_order("p2-entry-SL", minute(1), "stop", "SELL", 1,
                               prices=OrderPrices("STOPMARKET", stop_price=95.0), state="accepted")
        if ninjatrader:
            j.record_error("broker", "order rejected: margin", minute(2), code="broker:rejected")
            j.record_error(HALT, "order rejected: no new entries", minute(2), code="broker:rejected")
    return path


def resume(path: Path) -> None:
    """A restart that cleared the journal's halt."""
    with Journal(path) as j:
        j.record_error(HALT, "restarted after a halt", minute(9), code=CODE_RESUMED)
