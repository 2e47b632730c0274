"""``hybrid-trader report JOURNAL.sqlite``: what a live or replayed run did, from its journal alone.

A self-contained HTML page (the evaluation report's style, figures as inline PNGs) with:
the account at the end (status, equity, distance to the threshold); the price with every
entry and exit; equity and the trailing threshold over time; the trades (entry and exit
fills paired, P&L in points: the journal does not hold the contract); the decisions by
action and by reason code with their latency; the bars refused on arrival by reason; the
errors. Everything is read from the journal (``live.journal_read.read_journal``, read-only, so
a running executor may go on writing it).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from hybrid_trader.actions import ACTION_NAMES
from hybrid_trader.calendar import EASTERN
from hybrid_trader.evaluation.figures import HEIGHT, WIDTH, _png  # sets the Agg backend
from hybrid_trader.evaluation.report import _esc, _figure, _table, html_document
from hybrid_trader.live.bar_gate import CODE_HISTORY, CODE_LATE
from hybrid_trader.live.journal_read import read_journal
from hybrid_trader.run.advice_identity import RAW

JOURNAL_SUFFIXES = (".sqlite", ".sqlite3", ".db")
"""File names the report command takes for a journal whatever they hold (its errors then say what the file is)."""
RECENT_DECISIONS = 30
"""Decisions listed one by one at the end of the report (the latest)."""
WARMUP_SHOWN_NS = 60 * 60 * 1_000_000_000
"""The price figure starts this long (an hour) before the first decision: earlier bars only warmed the features up."""


def _times(ns: pd.Series) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(pd.to_datetime(ns.astype("int64"), utc=True)).tz_convert(EASTERN)


def journal_trades(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Round trips from the fills in journal order: an entry fill opens, the next exit fill closes."""
    fills, orders = tables["fills"], tables["orders"]
    if "source" in fills:  # the executor's own fills: NinjaTrader's (``broker``) mirror them
        fills = fills[fills["source"] == "paper"]
    if fills.empty:
        return pd.DataFrame(columns=["entry_time", "exit_time", "side", "qty", "entry_price", "exit_price",
                                     "pnl_points", "exit_reason"])
    rows = fills.merge(orders[["order_id", "intent", "side", "note"]], on="order_id", how="left")
    trades, open_ = [], None
    for r in rows.itertuples(index=False):
        if r.intent == "entry":
            open_ = r
        elif r.intent == "exit" and open_ is not None:
            side = 1 if open_.side == "BUY" else -1
            trades.append({"entry_time": open_.time_ns, "exit_time": r.time_ns, "side": side, "qty": int(r.qty),
                           "entry_price": float(open_.price), "exit_price": float(r.price),
                           "pnl_points": side * (float(r.price) - float(open_.price)) * int(r.qty),
                           "exit_reason": r.note or ""})
            open_ = None
    out = pd.DataFrame(trades)
    for col in ("entry_time", "exit_time"):
        if not out.empty:
            out[col] = _times(out[col])
    return out


def _price_figure(bars: pd.DataFrame, trades: pd.DataFrame, since_ns: int | None) -> bytes | None:
    """The closes from ``since_ns`` (the first decision: the bars before only warmed the features up)."""
    good = bars[bars["accepted"] == 1].dropna(subset=["time_ns", "close"])
    if since_ns is not None:
        good = good[good["time_ns"] >= since_ns]
    if good.empty:
        return None
    t = _times(good["time_ns"])
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT))
    ax.plot(t, good["close"].to_numpy(), lw=0.8, color="#333333", label="close")
    if not trades.empty:
        for side, marker, color in ((1, "^", "#1b9e77"), (-1, "v", "#d95f02")):
            mine = trades[trades["side"] == side]
            if mine.empty:
                continue
            ax.scatter(mine["entry_time"], mine["entry_price"], marker=marker, color=color, s=36, zorder=3,
                       label="long entry" if side > 0 else "short entry")
        ax.scatter(trades["exit_time"], trades["exit_price"], marker="x", color="#555555", s=30, zorder=3,
                   label="exit")
    ax.set_ylabel("price")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def _equity_figure(account: pd.DataFrame) -> bytes | None:
    if account.empty:
        return None
    snaps = [json.loads(s) for s in account["snapshot"]]
    t = _times(account["bar_time_ns"])
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT))
    drew = False
    for key, color in (("equity", "#1f77b4"), ("balance", "#7f7f7f"), ("threshold", "#d62728")):
        values = np.array([float(s[key]) if s.get(key) is not None else np.nan for s in snaps])
        if np.isfinite(values).any():
            ax.plot(t, values, lw=1.0, color=color, label=key, drawstyle="steps-post" if key != "equity" else None)
            drew = True
    if not drew:
        plt.close(fig)
        return None
    ax.set_ylabel("$")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def _held(bars: pd.DataFrame) -> list[tuple[str, int]]:
    """Accepted bars that were not traded, by reason: history (before the live point) and late."""
    accepted = bars[bars["accepted"] == 1]["reason"]
    return [("of the accepted, history (features only, never traded)", int((accepted == CODE_HISTORY).sum())),
            ("of the accepted, late (no decision)", int((accepted == CODE_LATE).sum()))]


def _summary(tables: dict[str, pd.DataFrame], trades: pd.DataFrame) -> list[tuple[str, list[str]]]:
    bars, account = tables["bars"], tables["account"]
    rows = [("bars accepted", [f"{int((bars['accepted'] == 1).sum()):,}"]),
            ("bars refused", [f"{int((bars['accepted'] == 0).sum()):,}"]),
            *[(label, [f"{n:,}"]) for label, n in _held(bars) if n],
            ("decisions", [f"{len(tables['decisions']):,}"]),
            ("orders", [f"{len(tables['orders']):,}"]),
            ("round trips", [f"{len(trades):,}"]),
            ("errors", [f"{len(tables['errors']):,}"])]
    if not bars.empty and bars["time_ns"].notna().any():
        t = _times(bars["time_ns"].dropna())
        rows.insert(0, ("bars from", [f"{t.min():%Y-%m-%d %H:%M} to {t.max():%Y-%m-%d %H:%M} ET"]))
    if not tables["decisions"].empty:
        d = _times(tables["decisions"]["bar_time_ns"])
        rows.insert(1, ("decisions from", [f"{d.min():%Y-%m-%d %H:%M} to {d.max():%Y-%m-%d %H:%M} ET"]))
    advice = [json.loads(a) for a in tables["decisions"]["advice"].dropna()] if not tables["decisions"].empty else []
    kinds = Counter(str(a.get("calibration")) for a in advice if a.get("calibration"))
    if kinds:  # a leaning LLM advised: what divided its answers (raw: its constant lean is in them)
        named = {RAW: "RAW (not calibrated: --no-calibrate)"}
        rows.append(("LLM advice calibration",
                     [", ".join(f"{named.get(k, k)} on {n:,} decisions" for k, n in kinds.items())]))
    if not trades.empty:
        rows.append(("P&L of the round trips [pts]", [f"{trades['pnl_points'].sum():+,.2f}"]))
    if not account.empty:
        last = json.loads(account["snapshot"].iloc[-1])
        rows.append(("account status", [str(account["status"].iloc[-1])]))
        for key, label in (("equity", "equity [$]"), ("balance", "balance [$]"), ("threshold", "threshold [$]")):
            if last.get(key) is not None:
                rows.append((label, [f"{float(last[key]):,.2f}"]))
        if last.get("equity") is not None and last.get("threshold") is not None:
            rows.append(("distance to the threshold [$]", [f"{float(last['equity']) - float(last['threshold']):,.2f}"]))
    return rows


def _decisions_html(decisions: pd.DataFrame) -> list[str]:
    if decisions.empty:
        return ["<p>No decision was journaled.</p>"]
    out = []
    actions = Counter(int(a) for a in decisions["action"])
    out.append(_table(["decisions"], [(ACTION_NAMES[a] if 0 <= a < len(ACTION_NAMES) else str(a), [f"{n:,}"])
                                      for a, n in sorted(actions.items())], first="action"))
    codes: Counter[str] = Counter()
    for text in decisions["rule_codes"]:
        codes.update(json.loads(text) if text else [])
    if codes:
        out.append(_table(["decisions"], [(c, [f"{n:,}"]) for c, n in codes.most_common()], first="reason code"))
    lat = decisions["latency_ms"].dropna().to_numpy(dtype=float)
    if len(lat):
        out.append(f'<p class="small">Latency from bar arrival to decision: median {np.median(lat):.2f} ms, '
                   f"p99 {np.percentile(lat, 99):.2f} ms, max {lat.max():.2f} ms over {len(lat):,} decisions.</p>")
    recent = decisions.tail(RECENT_DECISIONS)
    rows = []
    for r in recent.itertuples(index=False):
        probs = json.loads(r.probabilities) if r.probabilities else {}
        top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(probs.items(), key=lambda kv: -kv[1])[:3]) \
            if isinstance(probs, dict) else str(probs)
        name = ACTION_NAMES[int(r.action)] if 0 <= int(r.action) < len(ACTION_NAMES) else str(r.action)
        rows.append((f"{_times(pd.Series([r.bar_time_ns]))[0]:%Y-%m-%d %H:%M}",
                     [name, top, ", ".join(json.loads(r.rule_codes) if r.rule_codes else []) or "-",
                      f"{r.latency_ms:.2f}" if r.latency_ms is not None and np.isfinite(r.latency_ms) else "-"]))
    out.append(f"<h3>The last {len(rows)} decisions</h3>")
    out.append(_table(["action", "most probable", "reason codes", "latency [ms]"], rows, first="bar (ET)"))
    return out


def write_journal_report(journal: str | Path, out: str | Path | None = None) -> Path:
    """Write the report of ``journal`` to ``out`` (default: next to it, ``<stem>.report.html``); its path."""
    journal = Path(journal)
    tables = read_journal(journal)
    out_path = Path(out) if out else journal.with_name(journal.stem + ".report.html")
    trades = journal_trades(tables)
    sections = [f"<h1>Journal {_esc(journal.name)}</h1>",
                f'<p class="meta">{_esc(journal.resolve())}</p>',
                _table(["value"], _summary(tables, trades), first="")]
    decisions = tables["decisions"]
    since = int(decisions["bar_time_ns"].min()) - WARMUP_SHOWN_NS if not decisions.empty else None
    price = _price_figure(tables["bars"], trades, since)
    if price is not None:
        sections.append(_figure("Price and trades", price, "(inline only)",
                                "closes of the accepted bars from an hour before the first decision; triangles: "
                                "entries; crosses: exits"))
    equity = _equity_figure(tables["account"])
    if equity is not None:
        sections.append(_figure("Account", equity, "(inline only)",
                                "equity (marked to the bar's close), balance and the trailing threshold"))
    if not trades.empty:
        rows = [(f"{r.entry_time:%Y-%m-%d %H:%M}", [f"{r.exit_time:%H:%M}", "long" if r.side > 0 else "short",
                                                    str(r.qty), f"{r.entry_price:,.2f}", f"{r.exit_price:,.2f}",
                                                    f"{r.pnl_points:+,.2f}", r.exit_reason])
                for r in trades.itertuples(index=False)]
        columns = ["exit (ET)", "side", "qty", "entry", "exit", "P&L [pts]", "exit reason"]
        sections += ["<h2>Trades</h2>", _table(columns, rows, first="entry (ET)")]
    sections += ["<h2>Decisions</h2>", *_decisions_html(tables["decisions"])]
    refused = tables["bars"][tables["bars"]["accepted"] == 0]
    if not refused.empty:
        counts = Counter(refused["reason"].fillna("?"))
        sections += ["<h2>Bars refused on arrival</h2>",
                     _table(["bars", "example"], [(code, [f"{n:,}", str(refused[refused['reason'].fillna('?') == code]
                                                                       ['message'].iloc[0])])
                                                  for code, n in counts.most_common()], first="reason")]
    errors = tables["errors"]
    if not errors.empty:
        sections += ["<h2>Errors</h2>", _table(["where", "message"], [
            (f"{_times(pd.Series([r.time_ns]))[0]:%Y-%m-%d %H:%M:%S}", [r.location, r.message])
            for r in errors.itertuples(index=False)], first="time (ET)")]
    out_path.write_text(html_document(f"Journal {journal.name}", sections), encoding="utf-8")
    return out_path


def is_journal(path: Any) -> bool:
    """True when ``path`` is a SQLite file, or a file named like one (``.sqlite``, ``.sqlite3``, ``.db``: an empty or
    damaged journal, which ``read_journal`` then names), to the report command."""
    p = Path(str(path))
    if not p.is_file():
        return False
    if p.suffix.lower() in JOURNAL_SUFFIXES:
        return True
    with open(p, "rb") as f:
        return f.read(16) == b"SQLite format 3\x00"
