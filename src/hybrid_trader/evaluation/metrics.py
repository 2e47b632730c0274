"""Performance metrics of one strategy on one stretch of bars, labelled with units.

Every metric is defined in ``docs/EVALUATION.md`` with its formula; the short version:

- **Daily PnL** is the change of account equity (open profit included) from the last
  bar of one Globex trading day to the last bar of the next; the first day is measured
  from the initial balance. The trading date of a bar is the calendar date of its ET
  time + 6 h (a session runs 18:00 ET to 17:00 ET). Only days with bars count.
- **Daily return** ``r_d = daily PnL / initial balance`` (not compounded: a prop account
  trades a fixed size whatever its balance).
- **Sharpe (ann.)** ``mean(r) / std(r, ddof=1) * sqrt(252)``;
  **Sortino (ann.)** ``mean(r) / sqrt(mean(min(r, 0)^2)) * sqrt(252)``.
- **PSR [%]** the probabilistic Sharpe ratio of Bailey & Lopez de Prado (2012) against
  a benchmark Sharpe of 0, from the daily returns, their skewness and kurtosis.
- **Max drawdown** from the running peak of equity (the initial balance included).

Edge cases: a quantity that is undefined (no trades for win rate, fewer than two
days or zero variance for Sharpe) is ``NaN`` and is written to JSON as ``null``; a
profit factor with wins and no losses is ``inf``, written as ``"inf"``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hybrid_trader.calendar import trading_date
from hybrid_trader.env.account import Verdict, verdict_of

if TYPE_CHECKING:  # pragma: no cover
    from hybrid_trader.evaluation.results import StrategyResult

TRADING_DAYS_PER_YEAR = 252


@dataclass(frozen=True)
class MetricSpec:
    """One reported metric: its key (label with unit), what it is, and how to show it."""

    key: str
    """Label with unit, the key in metric dicts and JSON, e.g. ``Net PnL [$]``."""
    description: str
    """One line: what it measures and how."""
    fmt: str = "{:,.2f}"
    """Format for tables; ``"text"`` for strings."""
    higher_is_better: bool | None = True
    """Direction for highlighting; None when not ordered."""


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("Net PnL [$]", "final equity - initial balance (after commissions and slippage)"),
    MetricSpec("Return [%]", "100 * Net PnL / initial balance"),
    MetricSpec("Gross PnL [$]", "sum of the trades' PnL before costs"),
    MetricSpec("Costs [$]", "sum of the trades' commissions and slippage", higher_is_better=False),
    MetricSpec("Sharpe (ann.)", "mean / std (ddof 1) of daily returns * sqrt(252)"),
    MetricSpec("Sortino (ann.)", "mean daily return / sqrt(mean(min(r, 0)^2)) * sqrt(252)"),
    MetricSpec("PSR [%]", "probability that the true Sharpe > 0 (Bailey & Lopez de Prado), daily returns", "{:.1f}"),
    MetricSpec("Max drawdown [$]", "largest drop of equity from its running peak (initial balance included)",
               higher_is_better=False),
    MetricSpec("Max drawdown [%]", "largest (peak - equity) / peak * 100", higher_is_better=False),
    MetricSpec("Trades", "closed round trips", "{:,.0f}", None),
    MetricSpec("Long trades", "trades with side +1", "{:,.0f}", None),
    MetricSpec("Short trades", "trades with side -1", "{:,.0f}", None),
    MetricSpec("Win rate [%]", "100 * trades with net PnL > 0 / trades", "{:.1f}"),
    MetricSpec("Profit factor", "sum of winning net PnL / |sum of losing net PnL|"),
    MetricSpec("Avg trade [$]", "mean net PnL per trade"),
    MetricSpec("Avg holding [bars]", "mean bars from entry fill to exit fill", "{:.1f}", None),
    MetricSpec("Exposure [%]", "100 * bars closed with a position / bars", "{:.1f}", None),
    MetricSpec("Best day [$]", "largest daily PnL"),
    MetricSpec("Worst day [$]", "smallest daily PnL"),
    MetricSpec("Days", "Globex trading days with bars", "{:,.0f}", None),
    MetricSpec("Apex verdict", "passed (target before any breach), breached, or neither", "text", None),
    MetricSpec("Breach day", "trading date of the breach of the trailing threshold", "text", None),
    MetricSpec("Target day", "trading date the profit target was first reached", "text", None),
)
METRIC_KEYS: tuple[str, ...] = tuple(m.key for m in METRICS)
SPECS: dict[str, MetricSpec] = {m.key: m for m in METRICS}

FRESH_DAY_FIGURES = {
    "Net PnL, fresh days [$]": "sum over the days of the net P&L of each day traded from a fresh account",
    "Mean day, fresh [$]": "mean net P&L of a day traded from a fresh account",
    "Sharpe, fresh days (ann.)": "mean / standard deviation of those days' P&L x sqrt(252)",
    "Breached days, fresh": "days on which the fresh account breached the trailing threshold",
    "Days, fresh": "days traded from a fresh account",
    "Trades, fresh": "trades over the days traded from a fresh account",
}
"""The figures of :func:`~hybrid_trader.evaluation.runner.run_fresh_days` and their definitions."""


# ---------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------
def trading_dates(index: pd.DatetimeIndex) -> pd.DatetimeIndex:
    """Globex trading date of each timestamp: the date of (ET time + 6 h), as naive midnight."""
    idx = pd.DatetimeIndex(index)
    if idx.tz is None:
        raise ValueError("timestamps must be tz-aware")
    return pd.DatetimeIndex(trading_date(idx)).as_unit(idx.unit)


def trading_date_of(ts: pd.Timestamp | None) -> str | None:
    """ISO trading date (``YYYY-MM-DD``) of one tz-aware timestamp, None for None."""
    if ts is None or (isinstance(ts, float) and math.isnan(ts)) or pd.isna(ts):
        return None
    return trading_dates(pd.DatetimeIndex([pd.Timestamp(ts)]))[0].strftime("%Y-%m-%d")


def daily_pnl(equity: pd.Series, initial_balance: float) -> pd.Series:
    """PnL per trading day [$]: equity at the day's last bar minus the previous day's (or the initial balance)."""
    if len(equity) == 0:
        return pd.Series([], index=pd.DatetimeIndex([], name="trading_date"), dtype=float, name="daily_pnl")
    eq = pd.Series(np.asarray(equity, dtype=float), index=trading_dates(equity.index))
    closes = eq.groupby(level=0, sort=False).last()
    prev = np.r_[float(initial_balance), closes.to_numpy()[:-1]]
    out = pd.Series(closes.to_numpy() - prev, index=closes.index, name="daily_pnl")
    out.index.name = "trading_date"
    return out


def drawdown(equity: pd.Series, initial_balance: float) -> pd.Series:
    """Drawdown [$] at each bar: running peak of equity (from the initial balance) minus equity, >= 0."""
    values = np.asarray(equity, dtype=float)
    peak = np.maximum.accumulate(np.r_[float(initial_balance), values])[1:] if len(values) else values
    return pd.Series(peak - values, index=equity.index, name="drawdown")


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def probabilistic_sharpe_ratio(returns: Sequence[float] | np.ndarray, sr_benchmark: float = 0.0) -> float:
    """PSR (Bailey & Lopez de Prado 2012): P[true Sharpe > ``sr_benchmark``], in [0, 1].

    ``PSR = Phi((SR - SR*) * sqrt(n - 1) / sqrt(1 - g3 * SR + (g4 - 1) / 4 * SR^2))`` with
    ``SR = mean / std(ddof=1)`` per period (not annualised), ``g3`` the skewness
    ``m3 / m2^1.5`` and ``g4`` the (non-excess) kurtosis ``m4 / m2^2`` from the central
    moments ``m_k = mean((r - mean)^k)``. NaN for fewer than 2 returns, zero variance,
    or a non-positive term under the root.
    """
    r = np.asarray(returns, dtype=float)
    n = len(r)
    if n < 2:
        return float("nan")
    sd = float(np.std(r, ddof=1))
    if not sd > 0:
        return float("nan")
    sr = float(np.mean(r)) / sd
    dev = r - r.mean()
    m2 = float(np.mean(dev**2))
    g3 = float(np.mean(dev**3)) / m2**1.5
    g4 = float(np.mean(dev**4)) / m2**2
    radicand = 1.0 - g3 * sr + (g4 - 1.0) / 4.0 * sr**2
    if not radicand > 0:
        return float("nan")
    return _normal_cdf((sr - sr_benchmark) * math.sqrt(n - 1) / math.sqrt(radicand))


# ---------------------------------------------------------------------------------------
# The metrics
# ---------------------------------------------------------------------------------------
def result_verdict(result: StrategyResult) -> str:
    """The verdict of a result: the account's own (``extra["account"]["verdict"]``, fixed by the
    account's state machine), else, for results without it (made by hand or saved before), the same
    rule applied to its breach and target times (:func:`hybrid_trader.env.account.verdict_of`)."""
    account = result.extra.get("account") if isinstance(result.extra, Mapping) else None
    if isinstance(account, Mapping) and account.get("verdict") in tuple(Verdict):
        return str(account["verdict"])
    breach = None if result.breach_time is None or pd.isna(result.breach_time) else pd.Timestamp(result.breach_time)
    target = (None if result.target_hit_time is None or pd.isna(result.target_hit_time)
              else pd.Timestamp(result.target_hit_time))
    return verdict_of(breach, target).value


def compute_metrics(result: StrategyResult, *, trading_days_per_year: int = TRADING_DAYS_PER_YEAR) -> dict[str, Any]:
    """All metrics of ``result`` as ``{label [unit]: value}`` in the order of :data:`METRICS`.

    Undefined values are ``NaN`` (JSON ``null`` through :func:`metrics_to_json`); dates are
    ISO strings or None.
    """
    init = float(result.initial_balance)
    trades = result.trades
    equity = result.equity.astype(float)
    pos = np.asarray(result.position, dtype=float)

    net = float(equity.iloc[-1] - init) if len(equity) else 0.0
    pnl = trades["net_pnl"].to_numpy(float) if len(trades) else np.array([])
    wins = pnl[pnl > 0]
    losses = pnl[pnl < 0]
    n_trades = int(len(pnl))
    if n_trades == 0:
        win_rate = profit_factor = avg_trade = avg_hold = float("nan")
    else:
        win_rate = 100.0 * len(wins) / n_trades
        gross_loss = float(-losses.sum())
        if gross_loss > 0:
            profit_factor = float(wins.sum()) / gross_loss
        else:
            profit_factor = float("inf") if len(wins) else float("nan")
        avg_trade = float(pnl.mean())
        avg_hold = float(trades["bars_held"].astype(float).mean())

    days = daily_pnl(equity, init)
    r = days.to_numpy() / init if init else np.full(len(days), np.nan)
    ann = math.sqrt(trading_days_per_year)
    sharpe = sortino = float("nan")
    if len(r) >= 2:
        sd = float(np.std(r, ddof=1))
        mean = float(np.mean(r))
        if sd > 0:
            sharpe = mean / sd * ann
        downside = math.sqrt(float(np.mean(np.minimum(r, 0.0) ** 2)))
        if downside > 0:
            sortino = mean / downside * ann
        elif mean > 0:
            sortino = float("inf")
    psr = 100.0 * probabilistic_sharpe_ratio(r) if len(r) else float("nan")

    dd = drawdown(equity, init).to_numpy()
    max_dd = float(dd.max()) if len(dd) else 0.0
    peaks = dd + equity.to_numpy()  # the running peak at each bar
    positive = peaks > 0
    max_dd_pct = 100.0 * float((dd[positive] / peaks[positive]).max()) if positive.any() else float("nan")
    if len(dd) == 0:
        max_dd_pct = 0.0

    sides = trades["side"].to_numpy() if n_trades else np.array([])
    return {
        "Net PnL [$]": net,
        "Return [%]": 100.0 * net / init if init else float("nan"),
        "Gross PnL [$]": float(trades["gross_pnl"].sum()) if n_trades else 0.0,
        "Costs [$]": float(trades["costs"].sum()) if n_trades else 0.0,
        "Sharpe (ann.)": sharpe,
        "Sortino (ann.)": sortino,
        "PSR [%]": psr,
        "Max drawdown [$]": max_dd,
        "Max drawdown [%]": max_dd_pct,
        "Trades": n_trades,
        "Long trades": int((sides > 0).sum()),
        "Short trades": int((sides < 0).sum()),
        "Win rate [%]": win_rate,
        "Profit factor": profit_factor,
        "Avg trade [$]": avg_trade,
        "Avg holding [bars]": avg_hold,
        "Exposure [%]": 100.0 * float(np.mean(pos != 0)) if len(pos) else float("nan"),
        "Best day [$]": float(days.max()) if len(days) else float("nan"),
        "Worst day [$]": float(days.min()) if len(days) else float("nan"),
        "Days": int(len(days)),
        "Apex verdict": result_verdict(result),
        "Breach day": trading_date_of(result.breach_time),
        "Target day": trading_date_of(result.target_hit_time),
    }


# ---------------------------------------------------------------------------------------
# Several seeds
# ---------------------------------------------------------------------------------------
def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def aggregate_seeds(metric_dicts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean and standard deviation of each metric across seeds (one dict per seed).

    Numeric metrics become ``{"mean": m, "std": s, "n": k}`` over the ``k`` seeds where
    the value is defined (NaN/None skipped); ``std`` uses ddof=1 and is NaN for one
    seed; an infinite value makes the mean infinite and the std NaN. Text metrics
    (verdict, dates) become ``{"counts": {value: seeds}}`` (None counted as ``"none"``).
    A ``"Seeds"`` entry holds the number of dicts.
    """
    dicts = list(metric_dicts)
    if not dicts:
        raise ValueError("aggregate_seeds needs at least one metrics dict")
    keys: list[str] = []
    for d in dicts:
        keys.extend(k for k in d if k not in keys)
    out: dict[str, Any] = {"Seeds": len(dicts)}
    for key in keys:
        values = [d.get(key) for d in dicts]
        if all(v is None or _is_number(v) for v in values) and any(v is not None for v in values):
            arr = np.array([float(v) for v in values if v is not None], dtype=float)
            arr = arr[~np.isnan(arr)]
            if len(arr) == 0:
                out[key] = {"mean": float("nan"), "std": float("nan"), "n": 0}
                continue
            mean = float(np.mean(arr))
            if np.isinf(arr).any() or len(arr) < 2:
                std = float("nan")
            else:
                std = float(np.std(arr, ddof=1))
            out[key] = {"mean": mean, "std": std, "n": int(len(arr))}
        else:
            counts: dict[str, int] = {}
            for v in values:
                label = "none" if v is None else str(v)
                counts[label] = counts.get(label, 0) + 1
            out[key] = {"counts": counts}
    return out


# ---------------------------------------------------------------------------------------
# JSON and display
# ---------------------------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """Plain JSON data: NaN -> None, +-inf -> ``"inf"``/``"-inf"``, numpy scalars -> Python, timestamps -> ISO."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isnan(f):
            return None
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(value, pd.Timestamp):
        return None if pd.isna(value) else value.isoformat()
    if value is pd.NaT:
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (str, int)) or value is None:
        return value
    return str(value)


def metrics_to_json(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics dict (or ``{strategy: metrics}``) ready for ``json.dump`` (see :func:`jsonable`)."""
    return jsonable(metrics)


def metrics_from_json(data: Any) -> Any:
    """Inverse of :func:`metrics_to_json` for numbers: ``"inf"`` -> inf; ``null`` numeric metrics -> NaN."""
    if isinstance(data, Mapping):
        out = {}
        for k, v in data.items():
            if v is None and k in SPECS and SPECS[k].fmt != "text" or v is None and k in ("mean", "std"):
                out[k] = float("nan")
            else:
                out[k] = metrics_from_json(v)
        return out
    if isinstance(data, list):
        return [metrics_from_json(v) for v in data]
    if data == "inf":
        return float("inf")
    if data == "-inf":
        return float("-inf")
    return data


def format_metric(key: str, value: Any) -> str:
    """Text for a table cell: ``"-"`` for undefined, ``"inf"``, ``mean ± std`` for aggregates."""
    spec = SPECS.get(key)
    fmt = spec.fmt if spec else "{:,.4g}"
    if isinstance(value, Mapping):
        if "counts" in value:
            return ", ".join(f"{k} {v}" for k, v in value["counts"].items())
        if "mean" in value:
            mean = format_metric(key, value.get("mean"))
            std = value.get("std")
            if std is None or (isinstance(std, float) and math.isnan(std)):
                return mean
            return f"{mean} ± {format_metric(key, std)}"
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    if value is None:
        return "-"
    if _is_number(value):
        f = float(value)
        if math.isnan(f):
            return "-"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f"{f:g}" if fmt == "text" else fmt.format(f)
    if value in ("inf", "-inf"):
        return value
    return str(value)


def metric_rows(metrics_by_strategy: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Row labels for a table of several strategies: :data:`METRIC_KEYS` order, then any others."""
    keys = [k for k in METRIC_KEYS if any(k in m for m in metrics_by_strategy.values())]
    for m in metrics_by_strategy.values():
        keys.extend(k for k in m if k not in keys)
    return keys


def summary_line(metrics: Mapping[str, Any], keys: Iterable[str] = ("Net PnL [$]", "Sharpe (ann.)", "Max drawdown [$]",
                                                                   "Trades", "Win rate [%]", "Apex verdict")) -> str:
    """``Net PnL [$] 1,000.00 | Sharpe (ann.) 6.48 | ...`` for command-line output."""
    return " | ".join(f"{k} {format_metric(k, metrics.get(k))}" for k in keys if k in metrics)
