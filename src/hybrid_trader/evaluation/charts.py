"""Interactive charts (Plotly) of the HTML reports: price with trades, equity, drawdown, P&L per day.

A chart is a ``<div>`` plus its Plotly figure as JSON in a ``<script type="application/json">``;
:func:`charts_runtime` (added once per page by ``report.html_document`` when a chart is on it)
holds plotly.js itself, gzip-compressed and base64-encoded (about 1.9 MB instead of 4.8 MB),
unpacks it with the browser's ``DecompressionStream`` and draws every chart. Nothing is
fetched: the page carries a Content-Security-Policy that forbids every request.

The run chart (:func:`run_chart`) puts the bars on an even x axis (bar number, labelled with
trading dates, as the PNG figures do) shared by four panels, so zoom and pan move them
together: candlesticks (or the close) with every entry, exit, stop move, stop and target of
the agents, each marker hoverable with its reason code, the policy's probabilities and the
advice; equity with the prop-firm trailing threshold; drawdown with the threshold's room;
P&L per trading day. What the eye cannot see is decimated: candles are merged into at most
:data:`MAX_CANDLES` (``k`` bars each, the title says ``k``), lines keep each bucket's
minimum and maximum (at most :data:`MAX_POINTS` points); markers are never dropped.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.actions import ACTION_NAMES, Action
from hybrid_trader.evaluation.metrics import daily_pnl, drawdown, trading_dates
from hybrid_trader.evaluation.results import StrategyResult, role_of

MAX_CANDLES = 6000
"""Candles drawn at most: longer stretches merge ``k`` consecutive bars into one candle."""
MAX_POINTS = 4000
"""Points kept at most per line (the minimum and maximum of each bucket)."""
CHART_CLASS = "chart-spec"
"""Class of the ``<script>`` holding a chart's JSON (the runtime draws each one)."""
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:; connect-src 'none'")
"""The interactive page's Content-Security-Policy: inline code and data only, no request of any kind."""
LONG_COLOR, SHORT_COLOR, EXIT_COLOR = "#1a9850", "#d73027", "#333333"
STOP_COLOR, TARGET_COLOR, THRESHOLD_COLOR = "#e08214", "#2166ac", "#b2182b"
AGENT_COLORS = ("#08519c", "#6a3d9a", "#b15928")
BASELINE_COLORS = ("#7f7f7f", "#e6ab02", "#66a61e", "#e7298a", "#a6761d", "#17becf")
STOP_ACTIONS = {int(Action.MOVE_SL_TO_BE), int(Action.ENABLE_TRAIL), int(Action.DISABLE_TRAIL)}
CONFIG = {"displaylogo": False, "responsive": True, "scrollZoom": True, "showLink": False,
          "modeBarButtonsToRemove": ["select2d", "lasso2d"]}


# ---------------------------------------------------------------- page plumbing
@lru_cache(maxsize=1)
def _plotly_js_gz() -> str:
    """plotly.min.js (the one plotly.py ships), gzip-compressed and base64-encoded."""
    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode("utf-8"), 9, mtime=0)).decode("ascii")


RUNTIME_JS = """(async function () {
  var root = document.documentElement;
  try {
    if (!window.Plotly) {
      var b = atob(document.getElementById('plotly-js-gz').textContent.trim());
      var u = new Uint8Array(b.length);
      for (var i = 0; i < b.length; i++) u[i] = b.charCodeAt(i);
      var code = await new Response(new Blob([u]).stream().pipeThrough(new DecompressionStream('gzip'))).text();
      var s = document.createElement('script'); s.textContent = code; document.head.appendChild(s);
    }
    var specs = document.querySelectorAll('script.chart-spec');
    for (var k = 0; k < specs.length; k++) {
      var spec = JSON.parse(specs[k].textContent);
      await Plotly.newPlot(document.getElementById(specs[k].dataset.target), spec.data, spec.layout, spec.config);
    }
    window.chartsDrawnMs = performance.now();
    root.dataset.charts = 'ready';
  } catch (e) {
    root.dataset.charts = 'failed';
    document.querySelectorAll('.chart').forEach(function (d) {
      d.textContent = 'The interactive chart could not be drawn (' + e + '). Write the report with --static ' +
                      'for PNG figures.';
    });
    console.error('charts: ' + e);
  }
})();"""


def charts_runtime() -> str:
    """plotly.js (compressed, once per page) and the script that draws the page's charts."""
    return (f'<script type="application/octet-stream" id="plotly-js-gz">{_plotly_js_gz()}</script>'
            f"<script>{RUNTIME_JS}</script>")


def chart_html(chart_id: str, title: str, fig: Any, caption: str, *, height: int | None = None) -> str:
    """One chart as HTML: its ``<div>`` and its figure's JSON (drawn by :func:`charts_runtime`)."""
    spec = json.loads(fig.to_json())
    spec["config"] = CONFIG
    text = json.dumps(spec, separators=(",", ":")).replace("<", "\\u003c")  # no "</script>" or "<!--" inside
    style = f' style="height:{int(height)}px"' if height else ""
    return (f'<figure><div id="{html.escape(chart_id)}" class="chart"{style}></div>'
            f'<script type="application/json" class="{CHART_CLASS}" data-target="{html.escape(chart_id)}">'
            f"{text}</script><figcaption><b>{html.escape(title)}.</b> {html.escape(caption)}</figcaption></figure>")


# ---------------------------------------------------------------- decimation
def decimate(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points of a line: the first, minimum, maximum and last of equal buckets, in order."""
    n = len(x)
    if n <= max_points:
        return x, y
    buckets = max(1, max_points // 4)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    keep = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        if hi <= lo:
            continue
        seg = y[lo:hi]
        finite = np.isfinite(seg)
        if finite.any():
            idx = np.flatnonzero(finite)
            keep += [lo + idx[0], lo + idx[np.argmin(seg[idx])], lo + idx[np.argmax(seg[idx])], lo + idx[-1]]
        else:
            keep.append(lo)
    k = np.unique(np.asarray(keep, dtype=np.int64))
    return x[k], y[k]


def compact(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smaller arrays for the page: whole bar numbers as int32, values as float32 (exact on a 0.25 tick grid)."""
    x = np.asarray(x)
    if len(x) and np.isfinite(x).all() and (x == np.round(x)).all():
        x = x.astype(np.int32)
    return x, np.asarray(y, dtype=np.float32)


def steps(x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A piecewise-constant series (NaN: none) as the first and last point of each run (a ``hv`` line)."""
    if len(v) == 0:
        return x, v
    same = (v[1:] == v[:-1]) | (np.isnan(v[1:]) & np.isnan(v[:-1]))
    starts = np.flatnonzero(np.r_[True, ~same])
    ends = np.r_[starts[1:] - 1, len(v) - 1]
    k = np.unique(np.r_[starts, ends])
    return x[k], v[k]


def candles(ohlc: pd.DataFrame, max_candles: int = MAX_CANDLES) -> tuple[pd.DataFrame, int]:
    """``ohlc`` merged ``k`` bars a candle (first open, highest high, lowest low, last close) and ``k``."""
    k = max(1, int(np.ceil(len(ohlc) / max_candles)))
    if k == 1:
        out = ohlc[["open", "high", "low", "close"]].copy()
        out["x"] = np.arange(len(ohlc))
        out["time"] = ohlc.index
        return out.reset_index(drop=True), 1
    g = np.arange(len(ohlc)) // k
    frame = pd.DataFrame({"open": ohlc["open"].to_numpy(float), "high": ohlc["high"].to_numpy(float),
                          "low": ohlc["low"].to_numpy(float), "close": ohlc["close"].to_numpy(float),
                          "x": np.arange(len(ohlc)), "time": ohlc.index, "g": g})
    out = frame.groupby("g").agg(open=("open", "first"), high=("high", "max"), low=("low", "min"),
                                 close=("close", "last"), x=("x", "mean"), time=("time", "first"))
    return out.reset_index(drop=True), k


# ---------------------------------------------------------------- axes
def bar_axis(index: pd.DatetimeIndex, max_labels: int = 12) -> dict[str, Any]:
    """Tick positions and labels (trading dates) of an even bar-number axis over ``index``."""
    if len(index) == 0:
        return {}
    dates = trading_dates(index)
    starts = np.flatnonzero(np.r_[True, dates[1:] != dates[:-1]])
    every = max(1, int(np.ceil(len(starts) / max_labels)))
    ticks = starts[::every]
    return {"tickmode": "array", "tickvals": ticks.tolist(), "ticktext": [dates[i].strftime("%m-%d") for i in ticks]}


def _positions(prices_index: pd.DatetimeIndex, times: Any) -> np.ndarray:
    """Bar number in ``prices_index`` of each timestamp (-1 where absent)."""
    if len(times) == 0:
        return np.zeros(0, dtype=np.int64)
    return prices_index.get_indexer(pd.DatetimeIndex(times))


def _styles(results: Sequence[StrategyResult]) -> list[dict[str, Any]]:
    """Colour, width and legend group of each result; seed groups share one colour and one legend entry."""
    styles: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    n_agent = n_base = 0
    for i, r in enumerate(results):
        if r.group is not None:
            first = r.group not in seen
            if first:
                seen[r.group] = BASELINE_COLORS[n_base % len(BASELINE_COLORS)]
                n_base += 1
            styles.append({"color": seen[r.group], "width": 0.8, "opacity": 0.5, "group": r.group,
                           "legend": first, "label": r.group, "agent": False})
        elif role_of(r, i) == "agent":
            styles.append({"color": AGENT_COLORS[n_agent % len(AGENT_COLORS)], "width": 1.8, "opacity": 1.0,
                           "group": r.name, "legend": True, "label": r.name, "agent": True})
            n_agent += 1
        else:
            styles.append({"color": BASELINE_COLORS[n_base % len(BASELINE_COLORS)], "width": 1.1, "opacity": 0.9,
                           "group": r.name, "legend": True, "label": r.name, "agent": False})
            n_base += 1
    return styles


# ---------------------------------------------------------------- hover texts
def _probs_text(probs: Any) -> str:
    if not isinstance(probs, Mapping) or not probs:
        return ""
    top = sorted(((k, float(v)) for k, v in probs.items() if v is not None), key=lambda kv: -kv[1])
    return "<br>policy: " + ", ".join(f"{k} {v:.2f}" for k, v in top if v >= 0.005)


def _advice_text(advice: Any) -> str:
    if not isinstance(advice, Mapping):
        return ""
    if "action" not in advice:  # another recorder's fields: shown as they are
        return "<br>advice: " + html.escape(json.dumps(advice, default=str))[:200]
    reason = html.escape(str(advice.get("reason") or ""))[:160]
    return (f"<br>advice: {html.escape(str(advice.get('action')))} (confidence {advice.get('confidence')}, "
            f"age {advice.get('age')} bars)" + (f"<br>&nbsp;&nbsp;{reason}" if reason else ""))


def decision_text(decision: Mapping[str, Any] | None) -> str:
    """The hover lines of a recorded decision: its action, fusion rule, probabilities and advice."""
    if not decision:
        return ""
    a = decision.get("action")
    name = ACTION_NAMES[a] if isinstance(a, int) and 0 <= a < len(ACTION_NAMES) else str(a)
    rule = f" ({html.escape(str(decision['rule']))})" if decision.get("rule") else ""
    return (f"<br>decision at {html.escape(str(decision.get('time', '?'))[:16])}: {name}{rule}"
            + _probs_text(decision.get("probabilities")) + _advice_text(decision.get("advice")))


def _decisions_by_position(result: StrategyResult, index: pd.DatetimeIndex) -> dict[int, Mapping[str, Any]]:
    """The result's recorded decisions (``extra["decisions"]``) by bar number of their decision bar."""
    ds = [d for d in result.extra.get("decisions") or [] if isinstance(d, Mapping) and d.get("time")]
    if not ds:
        return {}
    pos = _positions(index, [pd.Timestamp(d["time"]) for d in ds])
    return {int(p): d for p, d in zip(pos, ds) if p >= 0}


@dataclass(frozen=True)
class MarkerStyle:
    """What a marker trace is (its kind, legend entry and strategy) and how it is drawn."""

    kind: str
    """What the points are (``entry``, ``exit``, ``stop-move``, ...): the trace's ``meta["kind"]``."""
    name: str
    """The legend entry."""
    strategy: str
    """The strategy the points belong to: the legend group and ``meta["strategy"]``."""
    symbol: Any
    """A plotly marker symbol, or one per point."""
    color: Any
    """A colour, or one per point."""
    size: int = 9
    """The marker size in pixels."""


def markers(go: Any, x: Any, y: Any, *, texts: Sequence[str], codes: Sequence[str], style: MarkerStyle) -> Any:
    """A marker trace hovering each point's text; ``customdata``: each point's reason code; ``meta``: its kind."""
    return go.Scatter(x=x, y=y, mode="markers", name=style.name, legendgroup=style.strategy,
                      marker={"symbol": style.symbol, "color": style.color, "size": style.size, "line": {"width": 0.5}},
                      hovertext=list(texts), hoverinfo="text", customdata=list(codes),
                      meta={"kind": style.kind, "strategy": style.strategy})


def candle_trace(go: Any, ohlc: pd.DataFrame) -> tuple[Any, int]:
    """Candlesticks of ``ohlc`` (merged to at most :data:`MAX_CANDLES`), hovering their start time; and ``k``."""
    c, k = candles(ohlc)
    xs = c["x"].to_numpy(np.float32)
    f32 = {col: c[col].to_numpy(np.float32) for col in ("open", "high", "low", "close")}
    times = pd.DatetimeIndex(c["time"]).strftime("%Y-%m-%d %H:%M")
    return go.Candlestick(x=xs, **f32, name="price", hovertext=list(times), increasing_line_color="#5b9e7a",
                          decreasing_line_color="#c76b6b", meta={"kind": "candles", "bars": k}), k


# ---------------------------------------------------------------- the run chart
def _trade_traces(go: Any, r: StrategyResult, index: pd.DatetimeIndex, color: str, legend: str) -> list[Any]:
    """Entries (one marker per trade), exits, stop moves, stop and target lines of one agent."""
    tr = r.trades
    traces = []
    decisions = _decisions_by_position(r, index)
    ei = _positions(index, tr["entry_time"]) if len(tr) else np.zeros(0, dtype=np.int64)
    xi = _positions(index, tr["exit_time"]) if len(tr) else np.zeros(0, dtype=np.int64)
    if len(tr):  # an exit at a session's last close is stamped at that bar's end: no bar starts there
        missing = xi < 0
        xi[missing] = index.searchsorted(pd.DatetimeIndex(tr["exit_time"])[missing]) - 1
    side = tr["side"].to_numpy() if len(tr) else np.zeros(0, dtype=np.int64)
    entry_text, entry_code = [], []
    for k, row in enumerate(tr.itertuples(index=False)):
        d = decisions.get(int(ei[k]) - 1)  # decided at the close of the bar before the fill
        code = ACTION_NAMES[int(d["action"])] if d and isinstance(d.get("action"), int) else \
            ("BUY" if row.side > 0 else "SELL")
        entry_code.append(code)
        entry_text.append(f"<b>{r.name}: {'long' if row.side > 0 else 'short'} entry</b> "
                          f"{row.entry_time:%Y-%m-%d %H:%M}<br>reason: {code}<br>fill {row.entry_price:,.2f} x "
                          f"{row.contracts}" + decision_text(d))
    exit_text = [f"<b>{r.name}: exit</b> {row.exit_time:%Y-%m-%d %H:%M}<br>reason: {row.exit_reason}"
                 f"<br>fill {row.exit_price:,.2f}, net P&L ${row.net_pnl:,.2f} after {row.bars_held} bars"
                 for row in tr.itertuples(index=False)]
    ep = tr["entry_price"].to_numpy(float) if len(tr) else np.zeros(0)
    xp = tr["exit_price"].to_numpy(float) if len(tr) else np.zeros(0)
    symbols = np.where(side > 0, "triangle-up", "triangle-down").tolist()
    colors = np.where(side > 0, LONG_COLOR, SHORT_COLOR).tolist()
    traces.append(markers(go, ei, ep, texts=entry_text, codes=entry_code,
                          style=MarkerStyle("entry", f"{legend}: entries", r.name, symbols, colors, size=10)))
    traces.append(markers(go, xi, xp, texts=exit_text, codes=tr["exit_reason"].astype(str).tolist() if len(tr) else [],
                          style=MarkerStyle("exit", f"{legend}: exits", r.name, "x", EXIT_COLOR, size=8)))
    seg_x = np.stack([ei, xi, np.full(len(ei), -1)], axis=1).ravel().astype(float)
    seg_x[2::3] = np.nan
    seg_y = np.stack([ep, xp, np.full(len(ep), np.nan)], axis=1).ravel()
    traces.append(go.Scatter(x=seg_x, y=seg_y, mode="lines", line={"color": color, "width": 0.8, "dash": "dot"},
                             hoverinfo="skip", showlegend=False, legendgroup=legend, meta={"kind": "trade-line"}))
    lv = r.levels
    if lv is not None and len(lv):
        pos = _positions(index, lv.index)
        ok = pos >= 0
        pos, lv = pos[ok], lv[ok]
        for col, c, label in (("stop", STOP_COLOR, "stop"), ("target", TARGET_COLOR, "target")):
            x, y = compact(*steps(pos.astype(float), lv[col].to_numpy(float)))
            traces.append(go.Scatter(x=x, y=y, mode="lines", line={"color": c, "width": 1, "shape": "hv"},
                                     name=f"{legend}: {label}", legendgroup=legend, connectgaps=False,
                                     hovertemplate=f"{label} %{{y:,.2f}}<extra>{html.escape(r.name)}</extra>",
                                     meta={"kind": label, "strategy": r.name}))
        actions = lv["action"].to_numpy()
        stop = lv["stop"].to_numpy(float)
        # a stop decision at the close of bar m - 1 is in force (recorded) from bar m
        moved = [int(m) + 1 for m in np.flatnonzero(np.isin(actions[:-1], list(STOP_ACTIONS)))
                 if np.isfinite(stop[m + 1])]
        texts = []
        for m in moved:
            code = ACTION_NAMES[int(actions[m - 1])]
            texts.append(f"<b>{r.name}: stop move</b> {lv.index[m - 1]:%Y-%m-%d %H:%M}<br>reason: {code}"
                         f"<br>stop {stop[m - 1]:,.2f} -> {stop[m]:,.2f}"
                         + decision_text(decisions.get(int(pos[m - 1]))))
        traces.append(markers(go, pos[moved], stop[moved], texts=texts,
                              codes=[ACTION_NAMES[int(actions[m - 1])] for m in moved],
                              style=MarkerStyle("stop-move", f"{legend}: stop moves", r.name, "diamond", STOP_COLOR,
                                                size=7)))
    return traces


def run_chart(results: Sequence[StrategyResult], prices: pd.Series, ohlc: pd.DataFrame | None,
              max_agents: int = 3) -> tuple[Any, str]:
    """The run's chart (price and trades, equity, drawdown, P&L per day on one x axis) and its caption."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    index = prices.index
    agents = [(i, r) for i, r in enumerate(results) if role_of(r, i) == "agent"][:max_agents]
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.045,
                        row_heights=[0.46, 0.22, 0.16, 0.16],
                        subplot_titles=("Price", "Equity and the trailing threshold [$]",
                                        "Drawdown from the equity peak [$]", "P&L per trading day [$]"))
    k = 1
    if ohlc is not None and len(ohlc) == len(prices):
        trace, k = candle_trace(go, ohlc)
        fig.add_trace(trace, row=1, col=1)
        price_title = f"Price ({k}-bar candles)" if k > 1 else "Price (one candle a bar)"
    else:
        x, y = compact(*decimate(np.arange(len(prices), dtype=float), prices.to_numpy(float)))
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name="close", line={"color": "#444444", "width": 0.8},
                                 meta={"kind": "close"}), row=1, col=1)
        price_title = "Close"
    fig.layout.annotations[0].update(text=price_title + " with each agent's entries, exits, stop moves, stop and "
                                     "target (hover a marker for its reason)")
    for n, (_, r) in enumerate(agents):
        for t in _trade_traces(go, r, index, AGENT_COLORS[n % len(AGENT_COLORS)], r.name):
            fig.add_trace(t, row=1, col=1)

    styles = _styles(results)
    order = sorted(range(len(results)), key=lambda i: styles[i]["agent"])  # agents on top
    for i in order:
        r, st = results[i], styles[i]
        pos = _positions(index, r.equity.index)
        ok = pos >= 0
        line = {"color": st["color"], "width": st["width"]}
        x, y = compact(*decimate(pos[ok].astype(float), r.equity.to_numpy(float)[ok]))
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=st["label"], legendgroup=st["group"],
                                 showlegend=st["legend"], opacity=st["opacity"], line=line,
                                 hovertemplate=f"equity %{{y:$,.0f}}<extra>{html.escape(r.name)}</extra>",
                                 meta={"kind": "equity", "strategy": r.name}), row=2, col=1)
        dd = -drawdown(r.equity, r.initial_balance).to_numpy(float)[ok]
        x, y = compact(*decimate(pos[ok].astype(float), dd))
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=st["label"], legendgroup=st["group"], showlegend=False,
                                 opacity=st["opacity"], line={**line, "width": st["width"] * 0.8},
                                 fill="tozeroy" if st["agent"] else None,
                                 hovertemplate=f"drawdown %{{y:$,.0f}}<extra>{html.escape(r.name)}</extra>",
                                 meta={"kind": "drawdown", "strategy": r.name}), row=3, col=1)
    for _, r in agents:
        if r.levels is None or not len(r.levels):
            continue
        pos = _positions(index, r.levels.index)
        ok = pos >= 0
        thr = r.levels["threshold"].to_numpy(float)[ok]
        x, y = compact(*decimate(*steps(pos[ok].astype(float), thr)))
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=f"{r.name}: trailing threshold", legendgroup=r.name,
                                 line={"color": THRESHOLD_COLOR, "width": 1.2, "dash": "dash", "shape": "hv"},
                                 hovertemplate=f"threshold %{{y:$,.0f}}<extra>{html.escape(r.name)}</extra>",
                                 meta={"kind": "threshold", "strategy": r.name}), row=2, col=1)
        eq = r.equity.to_numpy(float)[ok]
        peak = np.maximum.accumulate(np.r_[r.initial_balance, eq])[1:]
        x, y = compact(*decimate(pos[ok].astype(float), thr - peak))
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=f"{r.name}: threshold below the peak",
                                 legendgroup=r.name, showlegend=False,
                                 line={"color": THRESHOLD_COLOR, "width": 1.2, "dash": "dash"},
                                 hovertemplate=f"threshold - peak %{{y:$,.0f}}<extra>{html.escape(r.name)}</extra>",
                                 meta={"kind": "threshold-room", "strategy": r.name}), row=3, col=1)
    if len(index):
        dates = trading_dates(index)
        starts = np.flatnonzero(np.r_[True, dates[1:] != dates[:-1]])
        ends = np.r_[starts[1:], len(index)]
        where = {d: (s, e) for d, s, e in zip(dates[starts], starts, ends)}
        for n, (_, r) in enumerate(agents):
            days = daily_pnl(r.equity, r.initial_balance)
            span = np.array([where.get(d, (np.nan, np.nan)) for d in days.index], dtype=float).reshape(-1, 2)
            v = days.to_numpy(float)
            width = (span[:, 1] - span[:, 0]) * 0.8 / len(agents)
            center = span.mean(axis=1) - 0.5 + (n - (len(agents) - 1) / 2) * width
            fig.add_trace(go.Bar(x=center, y=v, width=width,
                                 marker_color=np.where(v >= 0, LONG_COLOR, SHORT_COLOR).tolist(),
                                 name=f"{r.name}: P&L per day", legendgroup=r.name, showlegend=False,
                                 hovertext=[f"{d:%Y-%m-%d}: ${x:,.2f}" for d, x in zip(days.index, v)],
                                 hoverinfo="text", meta={"kind": "daily-pnl", "strategy": r.name}), row=4, col=1)
    axis = bar_axis(index)
    fig.update_xaxes(**axis, showgrid=True, gridcolor="#eeeeee", rangeslider_visible=False)
    fig.update_xaxes(title_text="trading day (Globex, month-day); zoom on any panel, the others follow", row=4, col=1)
    fig.update_yaxes(showgrid=True, gridcolor="#eeeeee")
    fig.update_layout(height=1100, margin={"l": 60, "r": 20, "t": 40, "b": 50}, hovermode="closest",
                      dragmode="zoom", template="plotly_white", legend={"orientation": "h", "y": -0.06},
                      uirevision="run")
    caption = ("Bars on an even axis (nights and weekends take no room). Triangles: entry fills (up long, down "
               "short); crosses: exits; diamonds: stop moves decided by the agent; orange and blue steps: the stop "
               "and target in force; dashed red: the prop-firm trailing threshold (and, under drawdown, how far "
               "below the equity peak it is). "
               + (f"Candles merge {k} bars each at this length (markers stay exact). " if k > 1 else "")
               + "Lines keep each stretch's lowest and highest point.")
    return fig, caption


# ---------------------------------------------------------------- variants (ablation, study)
