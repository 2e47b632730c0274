"""What the dashboard shows, read from a journal: one JSON-ready dict (``state``) per change of the journal.

Everything comes from the journal's reads (:class:`~hybrid_trader.live.journal_read.JournalView`, read-only):
the latest bars with the trades on them, the position rebuilt from the fills, the open orders, the account
(equity, the trailing threshold, the daily loss limit's level when the executor journals it), the last decisions
with their reason codes, probabilities and advice, halts and NinjaTrader's side, and the latencies. Times are
milliseconds since the epoch (UTC), as JavaScript's ``Date`` takes them.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from hybrid_trader.actions import ACTION_NAMES
from hybrid_trader.errors import UserError
from hybrid_trader.live.broker_halts import HALT, halt_in_force
from hybrid_trader.live.journal_read import SCHEMA_VERSION, DecisionRow, JournalView, OrderRow

NS_PER_MS = 1_000_000
LATENCIES = 200
"""Decisions whose latencies the page's median and p99 are of (the latest)."""
ACCOUNT_KEYS = ("equity", "balance", "threshold", "day_limit")
"""The account snapshot's levels drawn over time (``day_limit``: the equity that locks the day, journaled since
the dashboard; absent in older journals)."""


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _action(a: int) -> str:
    return ACTION_NAMES[a] if 0 <= a < len(ACTION_NAMES) else str(a)


def _decision(d: DecisionRow) -> dict[str, Any]:
    probs = d.probabilities
    if isinstance(probs, list):  # journaled as a list: by action index
        probs = {_action(i): p for i, p in enumerate(probs)}
    top = sorted(((str(k), _num(v) or 0.0) for k, v in probs.items()), key=lambda kv: -kv[1])
    return {"t": _ms(d.bar_time_ns), "action": _action(d.action), "probabilities": top,
            "rule_codes": list(d.rule_codes), "veto": d.veto, "advice": d.advice, "latency_ms": _num(d.latency_ms)}


def _order(o: OrderRow) -> dict[str, Any]:
    return {"order_id": o.order_id, "intent": o.intent, "side": o.side, "qty": o.qty, "type": o.order_type,
            "limit": o.limit_price, "stop": o.stop_price, "state": o.state, "t": _ms(o.bar_time_ns)}


def _ninjatrader(view: JournalView, last_snapshot: dict) -> dict[str, Any] | None:
    """NinjaTrader's side: the halt in force, its position (the last live check), its fills and last error; None when
    the run mirrors nothing (paper only)."""
    halts = view.errors_at(HALT)
    broker_errors = view.errors_at("broker")
    broker_fills = view.position_from_fills("broker")
    if not halts and not broker_errors and "broker_position" not in last_snapshot:
        return None
    code, message = halt_in_force(halts)
    halted = f"{code}: {message}" if code else ""
    last_error = broker_errors[-1] if broker_errors else None
    return {"halted": halted, "position": last_snapshot.get("broker_position"), "fills_position": broker_fills.qty,
            "last_error": None if last_error is None else {"t": _ms(last_error[0]), "code": last_error[1],
                                                            "message": last_error[2]}}


def state(view: JournalView, *, last: int = 20, bars: int = 390) -> dict[str, Any]:
    """The dashboard's state: the latest ``bars`` accepted bars and what happened on them, the last ``last``
    decisions, read in one read transaction."""
    with view.reading():
        shown = view.recent_bars(bars)
        since = shown[0][0] if shown else -(2 ** 62)
        levels = view.recent_account_levels(bars, ACCOUNT_KEYS)
        account = view.last_account()
        decisions = view.recent_decisions(last)
        position = view.position_from_fills()
        snap = account.snapshot if account is not None else {}
        lat = np.array(view.recent_latencies(LATENCIES), dtype=float)
        out: dict[str, Any] = {
            "ok": True, "journal": str(view.path), "schema_version": view.version, "identity": view.identity(),
            "read_ms": time.time_ns() / NS_PER_MS,
            "counts": {"bars": view.count("bars") - (refused := view.refused_bars()), "refused": refused,
                       "decisions": view.count("decisions"), "orders": view.count("orders"),
                       "fills": view.count("fills"), "errors": view.count("errors")},
            "bars": [[_ms(t), o, h, lo, c] for t, o, h, lo, c, _ in shown],
            "last_bar": None if not shown else {"t": _ms(shown[-1][0]), "close": shown[-1][4],
                                                "recorded_ms": _ms(shown[-1][5])},
            "fills": [{"t": _ms(f.time_ns), "intent": f.intent, "side": f.side, "qty": f.qty, "price": f.price,
                       "note": f.note, "source": f.source, "order_id": f.order_id} for f in view.fills_since(since)],
            "position": {"qty": position.qty, "avg_price": position.avg_price},
            "open_orders": [_order(o) for o in view.open_orders()],
            "account": None if account is None else {
                "t": _ms(account.bar_time_ns), "status": account.status,
                **{k: _num(snap.get(k)) for k in (*ACCOUNT_KEYS, "peak", "day_pnl")},
                "verdict": snap.get("verdict")},
            "account_series": {"t": [_ms(row[0]) for row in levels],
                               **{k: [_num(row[i]) for row in levels] for i, k in enumerate(ACCOUNT_KEYS, 1)}},
            "decisions": [_decision(d) for d in decisions],
            "latency": None if not len(lat) else {"median_ms": float(np.median(lat)),
                                                  "p99_ms": float(np.percentile(lat, 99)),
                                                  "max_ms": float(lat.max()), "n": len(lat)},
            "errors": [{"t": _ms(t), "where": loc, "code": code, "message": msg}
                       for t, loc, code, msg in view.recent_errors(10)],
            "ninjatrader": _ninjatrader(view, snap),
        }
    if position.qty and shown:
        out["position"]["open_points"] = (shown[-1][4] - (position.avg_price or 0.0)) * position.qty
    return out


def problem(err: UserError, journal: str) -> dict[str, Any]:
    """The state of a journal that cannot be shown: what is wrong and the fix (the page says so, and retries)."""
    return {"ok": False, "journal": journal, "problem": err.message, "fix": err.fix, "detail": err.render(),
            "schema_version": SCHEMA_VERSION, "read_ms": time.time_ns() / NS_PER_MS}
