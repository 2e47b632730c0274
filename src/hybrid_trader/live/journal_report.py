"""``hybrid-trader report JOURNAL.sqlite``: what a live or replayed run did, from its journal alone.

A self-contained HTML page (the evaluation report's style; an interactive chart by default,
inline PNGs with ``static``) with: the account at the end (status, equity, distance to the
threshold); the price (candlesticks) with every entry, exit, stop and target order and stop
move, each hovering its reason code and, for an entry, the decision's probabilities and
advice; equity, balance and the trailing threshold over time; the trades (entry and exit
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

from hybrid_trader.actions import ACTION_NAMES, Action
from hybrid_trader.calendar import EASTERN
from hybrid_trader.evaluation.charts import (
    EXIT_COLOR,
    LONG_COLOR,
    SHORT_COLOR,
    STOP_COLOR,
    TARGET_COLOR,
    THRESHOLD_COLOR,
    MarkerStyle,
    bar_axis,
    candle_trace,
    chart_html,
    compact,
    decimate,
    decision_text,
    markers,
)
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
                                     "pnl_points", "exit_reason", "entry_bar_ns"])
    rows = fills.merge(orders[["order_id", "intent", "side", "note", "bar_time_ns"]], on="order_id", how="left")
    trades, open_ = [], None
    for r in rows.itertuples(index=False):
        if r.intent == "entry":
            open_ = r
        elif r.intent == "exit" and open_ is not None:
            side = 1 if open_.side == "BUY" else -1
            trades.append({"entry_time": open_.time_ns, "exit_time": r.time_ns, "side": side, "qty": int(r.qty),
                           "entry_price": float(open_.price), "exit_price": float(r.price),
                           "pnl_points": side * (float(r.price) - float(open_.price)) * int(r.qty),
                           "exit_reason": r.note or "", "entry_bar_ns": int(open_.bar_time_ns)})
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


def _journal_decision(row: Any) -> dict[str, Any]:
    """A journaled decision as the charts' decision record (action, time, rule codes, probabilities, advice)."""
    probs = json.loads(row.probabilities) if row.probabilities else {}
    if isinstance(probs, list):
        probs = {ACTION_NAMES[i]: p for i, p in enumerate(probs) if i < len(ACTION_NAMES)}
    codes = json.loads(row.rule_codes) if row.rule_codes else []
    return {"action": int(row.action), "time": f"{_times(pd.Series([row.bar_time_ns]))[0]:%Y-%m-%d %H:%M}",
            "rule": ", ".join(codes), "probabilities": probs,
            "advice": json.loads(row.advice) if row.advice else None}


def price_chart(tables: dict[str, pd.DataFrame], trades: pd.DataFrame, since_ns: int | None) -> tuple[Any, str] | None:
    """The interactive chart: candles with entries, exits, stop and target orders and stop moves; the account."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    good = tables["bars"][tables["bars"]["accepted"] == 1].dropna(subset=["time_ns", "close"])
    if since_ns is not None:
        good = good[good["time_ns"] >= since_ns]
    if good.empty:
        return None
    good = good.sort_values("time_ns")
    bar_ns = good["time_ns"].to_numpy(dtype=np.int64)
    index = _times(good["time_ns"])

    def pos(ns: Any) -> np.ndarray:
        """Bar number of the bar each time falls in (its start at or before it)."""
        return np.searchsorted(bar_ns, np.asarray(ns, dtype=np.int64), side="right") - 1

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.06, row_heights=[0.65, 0.35],
                        subplot_titles=("Price", "Equity, balance and the trailing threshold [$]"))
    ohlc = pd.DataFrame({c: good[c].to_numpy(float) for c in ("open", "high", "low", "close")}, index=index)
    trace, k = candle_trace(go, ohlc)
    fig.add_trace(trace, row=1, col=1)
    decisions = {int(r.bar_time_ns): _journal_decision(r) for r in tables["decisions"].itertuples(index=False)}
    if not trades.empty:
        ns = lambda col: trades[col].map(lambda t: t.value).to_numpy(np.int64)  # noqa: E731
        side = trades["side"].to_numpy()
        texts, codes = [], []
        for r in trades.itertuples(index=False):
            d = decisions.get(int(r.entry_bar_ns))
            code = ACTION_NAMES[d["action"]] if d and d["action"] in (Action.BUY, Action.SELL) else \
                ("BUY" if r.side > 0 else "SELL")  # the entry decision journaled at the order's bar, else the side
            codes.append(code)
            texts.append(f"<b>{'long' if r.side > 0 else 'short'} entry</b> {r.entry_time:%Y-%m-%d %H:%M}"
                         f"<br>reason: {code}<br>fill {r.entry_price:,.2f} x {r.qty}" + decision_text(d))
        entries = MarkerStyle("entry", "entries", "journal",
                              np.where(side > 0, "triangle-up", "triangle-down").tolist(),
                              np.where(side > 0, LONG_COLOR, SHORT_COLOR).tolist(), size=10)
        fig.add_trace(markers(go, pos(ns("entry_time")), trades["entry_price"].to_numpy(float), texts=texts,
                              codes=codes, style=entries), row=1, col=1)
        fig.add_trace(markers(go, pos(ns("exit_time")), trades["exit_price"].to_numpy(float),
                              texts=[f"<b>exit</b> {r.exit_time:%Y-%m-%d %H:%M}<br>reason: {r.exit_reason or '?'}"
                                     f"<br>fill {r.exit_price:,.2f}, {r.pnl_points:+,.2f} points"
                                     for r in trades.itertuples(index=False)],
                              codes=[str(c) for c in trades["exit_reason"]],
                              style=MarkerStyle("exit", "exits", "journal", "x", EXIT_COLOR, size=8)), row=1, col=1)
    orders = tables["orders"]
    for intent, col, color, symbol in (("stop", "stop_price", STOP_COLOR, "line-ew-open"),
                                       ("target", "limit_price", TARGET_COLOR, "line-ew-open")):
        mine = orders[(orders["intent"] == intent)].dropna(subset=[col]) if not orders.empty else orders
        if not mine.empty:
            fig.add_trace(markers(go, pos(mine["bar_time_ns"]), mine[col].to_numpy(float),
                                  texts=[f"<b>{intent} order</b> {o}: {p:,.2f}" for o, p in zip(mine["order_id"],
                                                                                                 mine[col])],
                                  codes=[intent.upper()] * len(mine),
                                  style=MarkerStyle(intent, f"{intent} orders", "journal", symbol, color, size=12)),
                          row=1, col=1)
    changes = tables.get("order_changes")
    if changes is not None and not changes.empty:
        fig.add_trace(markers(go, pos(changes["bar_time_ns"]), changes["price"].to_numpy(float),
                              texts=[f"<b>{f.replace('_price', '')} moved</b> ({o}) to {p:,.2f}" for o, f, p in
                                     zip(changes["order_id"], changes["price_field"], changes["price"])],
                              codes=[f"MOVE_{f.replace('_price', '').upper()}" for f in changes["price_field"]],
                              style=MarkerStyle("stop-move", "stop/target moves", "journal", "diamond", STOP_COLOR,
                                                size=7)), row=1, col=1)
    account = tables["account"]
    if not account.empty:
        snaps = [json.loads(s) for s in account["snapshot"]]
        x = pos(account["bar_time_ns"]).astype(float)
        for key, color in (("equity", "#1f77b4"), ("balance", "#7f7f7f"), ("threshold", THRESHOLD_COLOR)):
            values = np.array([float(s[key]) if s.get(key) is not None else np.nan for s in snaps])
            if np.isfinite(values).any():
                xs, ys = compact(*decimate(x, values))
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=key,
                                         line={"color": color, "width": 1.2,
                                               "dash": "dash" if key == "threshold" else None,
                                               "shape": "hv" if key != "equity" else "linear"},
                                         hovertemplate=f"{key} %{{y:$,.2f}}<extra></extra>", meta={"kind": key}),
                              row=2, col=1)
    fig.update_xaxes(**bar_axis(index), showgrid=True, gridcolor="#eeeeee", rangeslider_visible=False)
    fig.update_layout(height=800, margin={"l": 60, "r": 20, "t": 40, "b": 40}, template="plotly_white",
                      legend={"orientation": "h", "y": -0.08}, dragmode="zoom")
    caption = ("accepted bars from an hour before the first decision on an even axis (zoom on either panel, the "
               "other follows); triangles: entries, crosses: exits, dashes: stop and target orders, diamonds: their "
               "moves; hover a marker for its reason" + (f"; candles merge {k} bars each" if k > 1 else ""))
    return fig, caption


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


def write_journal_report(journal: str | Path, out: str | Path | None = None, *, static: bool = False) -> Path:
    """Write the report of ``journal`` to ``out`` (default: next to it, ``<stem>.report.html``); its path.

    ``static``: PNG figures inline instead of the interactive chart.
    """
    journal = Path(journal)
    tables = read_journal(journal)
    out_path = Path(out) if out else journal.with_name(journal.stem + ".report.html")
    trades = journal_trades(tables)
    sections = [f"<h1>Journal {_esc(journal.name)}</h1>",
                f'<p class="meta">{_esc(journal.resolve())}</p>',
                _table(["value"], _summary(tables, trades), first="")]
    decisions = tables["decisions"]
    since = int(decisions["bar_time_ns"].min()) - WARMUP_SHOWN_NS if not decisions.empty else None
    chart = None if static else price_chart(tables, trades, since)
    if chart is not None:
        sections.append(chart_html("journal-chart", "Price, trades and account", *chart))
    price = _price_figure(tables["bars"], trades, since) if static else None
    if price is not None:
        sections.append(_figure("Price and trades", price, "(inline only)",
                                "closes of the accepted bars from an hour before the first decision; triangles: "
                                "entries; crosses: exits"))
    equity = _equity_figure(tables["account"]) if static else None
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
