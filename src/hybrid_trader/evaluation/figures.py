"""PNG figures of an evaluation (matplotlib, Agg back end): equity, drawdown, trades, PnL per day.

Every figure puts bars on an even x axis (bar number) labelled with trading dates, so
nights and weekends do not stretch the curves. Each function returns the PNG bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from hybrid_trader.evaluation.metrics import daily_pnl, drawdown, trading_dates
from hybrid_trader.evaluation.results import StrategyResult, role_of

LONG_COLOR = "#1a9850"
SHORT_COLOR = "#d73027"
AGENT_COLORS = ("#08519c", "#6a3d9a", "#b15928")
BASELINE_COLORS = ("#7f7f7f", "#e6ab02", "#66a61e", "#e7298a", "#a6761d", "#17becf")
WIDTH, HEIGHT, DPI = 11.0, 4.0, 100


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _positions(prices: pd.Series, index: pd.DatetimeIndex) -> np.ndarray:
    """Bar number in ``prices`` of each timestamp (-1 where absent)."""
    return prices.index.get_indexer(index)


def _date_axis(ax: plt.Axes, prices: pd.Series, max_labels: int = 10) -> None:
    if len(prices) == 0:
        return
    dates = trading_dates(prices.index)
    starts = np.flatnonzero(np.r_[True, dates[1:] != dates[:-1]])
    for s in starts[1:]:
        ax.axvline(s - 0.5, color="#dddddd", lw=0.6, zorder=0)
    every = max(1, int(np.ceil(len(starts) / max_labels)))
    ticks = starts[::every]
    ax.set_xticks(ticks)
    ax.set_xticklabels([dates[i].strftime("%m-%d") for i in ticks], fontsize=8)
    ax.set_xlim(-0.5, len(prices) - 0.5)
    ax.set_xlabel("trading day (Globex, month-day)")


def _styles(results: Sequence[StrategyResult]) -> list[dict]:
    """Colour, width and legend label of each result; seed groups share one colour and one label."""
    styles, group_color, labelled = [], {}, set()
    n_agent = n_base = 0
    for i, r in enumerate(results):
        agent = role_of(r, i) == "agent"
        if r.group is not None:
            if r.group not in group_color:
                group_color[r.group] = BASELINE_COLORS[n_base % len(BASELINE_COLORS)]
                n_base += 1
            n = sum(1 for x in results if x.group == r.group)
            label = None if r.group in labelled else f"{r.group} ({n} seeds)"
            labelled.add(r.group)
            styles.append({"color": group_color[r.group], "lw": 0.8, "alpha": 0.45, "label": label, "agent": False})
        elif agent:
            styles.append({"color": AGENT_COLORS[n_agent % len(AGENT_COLORS)], "lw": 1.8, "alpha": 1.0,
                           "label": r.name, "agent": True})
            n_agent += 1
        else:
            styles.append({"color": BASELINE_COLORS[n_base % len(BASELINE_COLORS)], "lw": 1.1, "alpha": 0.9,
                           "label": r.name, "agent": False})
            n_base += 1
    return styles


def _on_bars(series: pd.Series, prices: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    pos = _positions(prices, series.index)
    keep = pos >= 0
    return pos[keep], series.to_numpy(float)[keep]


def equity_figure(results: Sequence[StrategyResult], prices: pd.Series) -> bytes:
    """Equity [$] of every strategy at each bar close; agents drawn thick."""
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT))
    styles = _styles(results)
    order = sorted(range(len(results)), key=lambda i: styles[i]["agent"])  # agents on top
    for i in order:
        x, y = _on_bars(results[i].equity, prices)
        st = styles[i]
        ax.plot(x, y, color=st["color"], lw=st["lw"], alpha=st["alpha"], label=st["label"])
    return _equity_png(fig, ax, prices, results[0].initial_balance if results else None,
                       "Equity at each bar close (costs included)")


def _equity_png(fig: plt.Figure, ax: plt.Axes, prices: pd.Series, initial: float | None, title: str) -> bytes:
    """An equity figure's initial-balance line, labels, date axis, legend and grid; the PNG."""
    if initial is not None:
        ax.axhline(initial, color="black", lw=0.6, ls=":", label="initial balance")
    ax.set_ylabel("equity [$]")
    ax.set_title(title)
    _date_axis(ax, prices)
    ax.legend(loc="best", fontsize=8, ncol=2)
    ax.grid(alpha=0.25)
    return _png(fig)


def drawdown_figure(results: Sequence[StrategyResult], prices: pd.Series) -> bytes:
    """Drawdown [$] below the running equity peak, for every strategy."""
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT * 0.8))
    styles = _styles(results)
    for i, r in enumerate(results):
        dd = -drawdown(r.equity, r.initial_balance)
        x, y = _on_bars(dd, prices)
        st = styles[i]
        ax.plot(x, y, color=st["color"], lw=st["lw"] * 0.8, alpha=st["alpha"], label=st["label"])
        if st["agent"]:
            ax.fill_between(x, y, 0, color=st["color"], alpha=0.15, lw=0)
    ax.set_ylabel("drawdown [$]")
    ax.set_title("Drawdown from the running equity peak")
    _date_axis(ax, prices)
    ax.legend(loc="lower left", fontsize=8, ncol=2)
    ax.grid(alpha=0.25)
    return _png(fig)


def trades_figure(result: StrategyResult, prices: pd.Series) -> bytes:
    """Close price with ``result``'s trades: entries as triangles, exits as crosses, long green, short red."""
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT))
    ax.plot(np.arange(len(prices)), prices.to_numpy(float), color="#444444", lw=0.7, label="close")
    tr = result.trades
    if len(tr):
        ei = _positions(prices, pd.DatetimeIndex(tr["entry_time"]))
        xi = _positions(prices, pd.DatetimeIndex(tr["exit_time"]))
        for side, color, marker, name in ((1, LONG_COLOR, "^", "long"), (-1, SHORT_COLOR, "v", "short")):
            sel = (tr["side"].to_numpy() == side) & (ei >= 0) & (xi >= 0)
            if not sel.any():
                continue
            ep, xp = tr["entry_price"].to_numpy(float)[sel], tr["exit_price"].to_numpy(float)[sel]
            ax.scatter(ei[sel], ep, marker=marker, color=color, s=36, zorder=3, label=f"{name} entry")
            ax.scatter(xi[sel], xp, marker="x", color=color, s=30, zorder=3, label=f"{name} exit")
            segs_x = np.stack([ei[sel], xi[sel], np.full(sel.sum(), np.nan)], axis=1).ravel()
            segs_y = np.stack([ep, xp, np.full(sel.sum(), np.nan)], axis=1).ravel()
            ax.plot(segs_x, segs_y, color=color, lw=0.8, alpha=0.6)
    else:
        ax.text(0.5, 0.9, "no trades", transform=ax.transAxes, ha="center", color="#555555")
    ax.set_ylabel("price [points]")
    ax.set_title(f"Trades of {result.name} on price ({len(tr)} trades)")
    _date_axis(ax, prices)
    ax.legend(loc="best", fontsize=8, ncol=3)
    ax.grid(alpha=0.25)
    return _png(fig)


def daily_pnl_figure(results: Sequence[StrategyResult]) -> bytes:
    """PnL per trading day [$] of each given result as bars (green up, red down), one panel each."""
    n = max(1, len(results))
    fig, axes = plt.subplots(n, 1, figsize=(WIDTH, HEIGHT * (0.75 if n > 1 else 0.9) * n), squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        days = daily_pnl(r.equity, r.initial_balance)
        x = np.arange(len(days))
        values = days.to_numpy()
        ax.bar(x, values, color=np.where(values >= 0, LONG_COLOR, SHORT_COLOR), width=0.8)
        ax.axhline(0, color="black", lw=0.6)
        every = max(1, int(np.ceil(len(days) / 12)))
        ax.set_xticks(x[::every])
        ax.set_xticklabels([d.strftime("%m-%d") for d in days.index[::every]], fontsize=8)
        ax.set_ylabel("PnL [$]")
        ax.set_title(f"PnL per trading day: {r.name} ({len(days)} days)")
        ax.grid(alpha=0.25, axis="y")
    axes[-1, 0].set_xlabel("trading day (Globex, month-day)")
    fig.tight_layout()
    return _png(fig)


def variants_equity_figure(curves: dict[str, list[StrategyResult]], prices: pd.Series) -> bytes:
    """Equity [$] of every run of every variant (one colour per variant, one line per seed)."""
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT))
    initial = None
    for i, (name, results) in enumerate(curves.items()):
        color = (AGENT_COLORS + BASELINE_COLORS)[i % (len(AGENT_COLORS) + len(BASELINE_COLORS))]
        for k, r in enumerate(results):
            x, y = _on_bars(r.equity, prices)
            ax.plot(x, y, color=color, lw=1.2, alpha=0.8, label=f"{name} ({len(results)} seeds)" if k == 0 else None)
            initial = r.initial_balance
    return _equity_png(fig, ax, prices, initial, "Equity of each variant's runs at each bar close (costs included)")


def variants_pnl_figure(values: dict[str, list[float]], label: str = "net P&L [$]") -> bytes:
    """One dot per seed and the mean (a bar) of each variant's figure."""
    fig, ax = plt.subplots(figsize=(WIDTH, HEIGHT * 0.8))
    names = list(values)
    for i, name in enumerate(names):
        v = np.asarray([x for x in values[name] if x is not None and np.isfinite(x)], dtype=float)
        color = (AGENT_COLORS + BASELINE_COLORS)[i % (len(AGENT_COLORS) + len(BASELINE_COLORS))]
        if len(v):
            ax.bar(i, v.mean(), color=color, alpha=0.35, width=0.6)
            ax.scatter(np.full(len(v), i) + np.linspace(-0.15, 0.15, len(v)), v, color=color, zorder=3)
    ax.axhline(0.0, color="black", lw=0.6)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=12, fontsize=8)
    ax.set_ylabel(label)
    ax.set_title(f"{label} of each seed (dots) and their mean (bars)")
    ax.grid(alpha=0.25, axis="y")
    return _png(fig)
