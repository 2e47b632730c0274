"""Charts that compare variants: each variant's trials (studies, ablations), a forest plot of paired differences,
the equity of every run; Plotly figures that ``evaluation.charts.chart_html`` embeds."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.evaluation.charts import AGENT_COLORS, BASELINE_COLORS, _positions, bar_axis, compact, decimate
from hybrid_trader.evaluation.results import StrategyResult


def _variant_color(i: int) -> str:
    palette = AGENT_COLORS + BASELINE_COLORS
    return palette[i % len(palette)]


def distribution_chart(values: Mapping[str, Mapping[str, Sequence[Any]]]) -> Any:
    """One panel per figure: each variant's values (one point per trial or seed) over a box of their spread."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figures = list(values)
    fig = make_subplots(rows=1, cols=max(1, len(figures)), subplot_titles=figures, horizontal_spacing=0.06)
    variants: list[str] = []
    for f in figures:
        variants += [v for v in values[f] if v not in variants]
    for col, f in enumerate(figures, 1):
        for v, xs in values[f].items():
            y = np.asarray([x for x in xs if x is not None and np.isfinite(float(x))], dtype=float)
            fig.add_trace(go.Box(y=y, name=v, boxpoints="all", jitter=0.4, pointpos=0, boxmean=True,
                                 marker={"color": _variant_color(variants.index(v)), "size": 6},
                                 legendgroup=v, showlegend=col == 1, meta={"kind": "distribution", "figure": f},
                                 hovertemplate=f"{html.escape(v)}: %{{y:,.2f}}<extra>{html.escape(f)}</extra>"),
                          row=1, col=col)
    fig.update_layout(height=420, margin={"l": 50, "r": 20, "t": 40, "b": 40}, template="plotly_white",
                      boxmode="group")
    fig.update_xaxes(showticklabels=False)
    return fig


def forest_chart(paired: Mapping[str, Mapping[str, Any]], figures: Sequence[str], baseline: str) -> Any:
    """One panel per figure: each variant's mean paired difference with the baseline and its 95% CI; 0 marked."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=max(1, len(figures)), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[f"{f}: variant - {baseline}" for f in figures])
    names = list(paired)
    for col, f in enumerate(figures, 1):
        rows = [(n, paired[n][f]) for n in names if isinstance(paired[n].get(f), Mapping)]

        def num(d: Mapping[str, Any], key: str) -> float:
            v = d.get(key)
            return float(v) if isinstance(v, (int, float)) else float("nan")

        mean = np.array([num(d, "mean difference") for _, d in rows])
        lo = np.array([num(d, "ci_low") for _, d in rows])
        hi = np.array([num(d, "ci_high") for _, d in rows])
        fig.add_trace(go.Scatter(x=mean, y=[n for n, _ in rows], mode="markers", showlegend=False,
                                 marker={"symbol": "square", "size": 10, "color": np.where(
                                     (lo > 0) | (hi < 0), "#08519c", "#969696").tolist()},
                                 error_x={"type": "data", "symmetric": False, "array": np.nan_to_num(hi - mean),
                                          "arrayminus": np.nan_to_num(mean - lo), "thickness": 1.5, "width": 6},
                                 customdata=np.stack([lo, hi], axis=1) if len(rows) else None,
                                 hovertemplate="%{y}: %{x:,.2f} [%{customdata[0]:,.2f}, %{customdata[1]:,.2f}]"
                                               f"<extra>{html.escape(f)}</extra>",
                                 meta={"kind": "forest", "figure": f}), row=1, col=col)
        fig.add_vline(x=0, line={"color": "#444444", "width": 1, "dash": "dot"}, row=1, col=col)
    fig.update_layout(height=120 + 40 * max(1, len(names)), margin={"l": 140, "r": 20, "t": 40, "b": 40},
                      template="plotly_white")
    return fig


def variants_equity_chart(curves: Mapping[str, Sequence[StrategyResult]], prices: pd.Series) -> Any:
    """Equity of every run of every variant on the bars' even axis (one colour per variant, one line per seed)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    initial = None
    for i, (name, results) in enumerate(curves.items()):
        for k, r in enumerate(results):
            pos = _positions(prices.index, r.equity.index)
            ok = pos >= 0
            x, y = compact(*decimate(pos[ok].astype(float), r.equity.to_numpy(float)[ok]))
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=f"{name} ({len(results)} seeds)",
                                     legendgroup=name, showlegend=k == 0,
                                     line={"color": _variant_color(i), "width": 1.2},
                                     hovertemplate=f"equity %{{y:$,.0f}}<extra>{html.escape(name)}, run {k + 1}"
                                                   "</extra>",
                                     meta={"kind": "equity", "strategy": name}))
            initial = r.initial_balance
    if initial is not None:
        fig.add_hline(y=initial, line={"color": "black", "width": 0.6, "dash": "dot"})
    fig.update_xaxes(**bar_axis(prices.index), title_text="trading day (Globex, month-day)")
    fig.update_yaxes(title_text="equity [$]")
    fig.update_layout(height=460, margin={"l": 60, "r": 20, "t": 30, "b": 40}, template="plotly_white")
    return fig
