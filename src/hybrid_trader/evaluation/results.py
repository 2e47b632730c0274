"""What one strategy did on one stretch of bars, and how it is stored on disk.

:class:`StrategyResult` is the hand-over between whoever runs a strategy (the agent,
a baseline) and whoever judges it (:mod:`~hybrid_trader.evaluation.metrics`, the report).
:func:`save_results` writes a folder a human can read (CSV + JSON) and
:func:`load_results` reads it back::

    OUT_DIR/
      results.json              # index: strategies, their files, times, extra, metrics per result
      metrics.json              # {strategy (or seed group): metrics dict} - the table of the report
      prices.csv                # time, price (the bars' close) [, open, high, low]
      <slug>.trades.csv         # one row per closed trade (TRADE_COLUMNS)
      <slug>.curve.csv          # time, equity, position [, stop, target, threshold, action]  (one row per bar)
      manifest.json             # sha256 and size of each file above (checked by load_results)

Times are ISO 8601 with their UTC offset, US/Eastern. JSON follows
:func:`~hybrid_trader.evaluation.metrics.jsonable` (NaN -> null, inf -> "inf").

Conventions read from ``extra`` (all optional):

- ``extra["role"]``: ``"agent"`` or ``"baseline"``; by default the first result is the
  agent and the others are baselines.
- ``extra["group"]`` (+ ``extra["seed"]``): results of one randomised strategy over
  several seeds (e.g. ``group="random"``). ``metrics.json`` holds one aggregated entry
  per group (mean and std over seeds, :func:`~hybrid_trader.evaluation.metrics.aggregate_seeds`)
  instead of one column per seed; each seed's own metrics stay in ``results.json``.
- ``extra["decisions"]``: the agent's decisions other than HOLD (bar ``index``, ``time``,
  ``action``, and when the policy gives them its ``probabilities``, the ``advice`` and the
  fusion ``rule``): the interactive report hovers them on the entries they opened.
- ``extra["llm"]``: dict of LLM and fusion statistics; ``extra["sample_decisions"]``: a
  list of dicts (one decision each; ``REASONING_KEY``/``EXPLAINED_BY_KEY`` hold the chain
  of thought of an explained one, ``evaluate --explain``). The report shows both when present.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from hybrid_trader.calendar import EASTERN
from hybrid_trader.env.broker import TRADE_COLUMNS  # the columns derive from the one Trade record
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.metrics import (
    aggregate_seeds,
    compute_metrics,
    jsonable,
    metrics_from_json,
)
from hybrid_trader.run.files import Manifest, atomic_write_bytes
from hybrid_trader.run.rundir import METRICS, RESULTS

FORMAT = "hybrid_trader.eval_results/1"
REASONING_KEY = "llm_reasoning"
"""A sample decision's chain-of-thought steps (``{"market": ..., "options": ..., "risks": ..., "decision": ...}``)."""
EXPLAINED_BY_KEY = "llm_explained_by"
"""The back end that wrote a sample decision's chain of thought."""
_TIME_COLUMNS = ("entry_time", "exit_time")
_INT_COLUMNS = ("side", "contracts", "bars_held")
_FLOAT_COLUMNS = ("entry_price", "exit_price", "gross_pnl", "costs", "net_pnl")
LEVEL_COLUMNS = ("stop", "target", "threshold", "action")
""":attr:`StrategyResult.levels`: stop and target in force after each bar [points] (NaN when flat), the
account's trailing threshold [$], the action decided at the bar's close (-1: none)."""
OHLC_COLUMNS = ("open", "high", "low")
"""The columns ``prices.csv`` adds to the close when the bars are given (candlesticks)."""


def empty_trades() -> pd.DataFrame:
    """A trade table with no rows and the right columns and dtypes."""
    return pd.DataFrame({
        "entry_time": pd.Series([], dtype=f"datetime64[ns, {EASTERN}]"),
        "exit_time": pd.Series([], dtype=f"datetime64[ns, {EASTERN}]"),
        "side": pd.Series([], dtype="int64"),
        "contracts": pd.Series([], dtype="int64"),
        **{c: pd.Series([], dtype="float64") for c in _FLOAT_COLUMNS},
        "bars_held": pd.Series([], dtype="int64"),
        "exit_reason": pd.Series([], dtype="object"),
    })[list(TRADE_COLUMNS)]


def _to_eastern(idx: Any) -> pd.DatetimeIndex:
    """Tz-aware timestamps -> US/Eastern, nanosecond unit (one dtype whatever pandas parsed)."""
    idx = pd.DatetimeIndex(idx)
    if idx.tz is None:
        raise ValueError("timestamps must be tz-aware (US/Eastern)")
    return idx.tz_convert(EASTERN).as_unit("ns").rename(None)


def _ts(value: Any) -> pd.Timestamp | None:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    ts = pd.Timestamp(value)
    if ts.tzinfo is None:
        raise ValueError(f"timestamp {value!r} must be tz-aware")
    return ts.tz_convert(EASTERN)


@dataclass(eq=False)
class StrategyResult:
    """One strategy's trades, equity and position over one stretch of bars."""

    name: str
    """Column name in tables and legend, e.g. ``agent``, ``flat``, ``momentum``, ``random (seed 3)``."""
    trades: pd.DataFrame
    """Closed trades, one row each, columns :data:`TRADE_COLUMNS`: entry_time, exit_time (tz-aware ET fills),
    side (+1 long, -1 short), contracts, entry_price, exit_price [points], gross_pnl, costs, net_pnl [$],
    bars_held, exit_reason (``stop``, ``target``, ``trail``, ``agent``, ``session_end``, ``breach``...)."""
    equity: pd.Series
    """Account equity [$] at each bar close, open profit included; tz-aware ET index."""
    position: pd.Series
    """Signed contracts held at each bar close (same index as ``equity``)."""
    initial_balance: float
    """Account balance at the start [$]."""
    breach_time: pd.Timestamp | None = None
    """When the prop-firm threshold was breached (None: never)."""
    target_hit_time: pd.Timestamp | None = None
    """When the profit target was first reached (None: never)."""
    extra: dict = field(default_factory=dict)
    """Anything else, JSON-serialisable: ``role``, ``group``, ``seed``, ``llm`` statistics, ``sample_decisions``."""
    levels: pd.DataFrame | None = None
    """Per bar (same index as ``equity``), :data:`LEVEL_COLUMNS`; None when not kept (older results)."""

    def __post_init__(self) -> None:
        trades = self.trades if self.trades is not None else empty_trades()
        if len(trades) == 0 and not set(TRADE_COLUMNS) <= set(trades.columns):
            trades = empty_trades()
        missing = [c for c in TRADE_COLUMNS if c not in trades.columns]
        if missing:
            raise ValueError(f"StrategyResult {self.name!r}: trades lack columns {missing}")
        trades = trades.reset_index(drop=True).copy()
        if len(trades):
            for c in _TIME_COLUMNS:
                trades[c] = pd.Series(_to_eastern(trades[c]), index=trades.index)
            for c in _INT_COLUMNS:
                trades[c] = trades[c].astype("int64")
            for c in _FLOAT_COLUMNS:
                trades[c] = trades[c].astype("float64")
            reason = trades["exit_reason"].astype(object)
            trades["exit_reason"] = reason.where(reason.notna(), None)
        self.trades = trades
        self.equity = pd.Series(np.asarray(self.equity, dtype=float), index=_to_eastern(self.equity.index),
                                name="equity")
        if len(self.position) != len(self.equity):
            raise ValueError(f"StrategyResult {self.name!r}: position has {len(self.position)} rows, "
                             f"equity {len(self.equity)}")
        self.position = pd.Series(np.asarray(self.position), index=self.equity.index, name="position")
        self.initial_balance = float(self.initial_balance)
        self.breach_time = _ts(self.breach_time)
        self.target_hit_time = _ts(self.target_hit_time)
        self.extra = dict(self.extra or {})
        if self.levels is not None:
            if len(self.levels) != len(self.equity) or list(self.levels.columns) != list(LEVEL_COLUMNS):
                raise ValueError(f"StrategyResult {self.name!r}: levels need {len(self.equity)} rows of "
                                 f"{list(LEVEL_COLUMNS)}")
            self.levels = self.levels.set_axis(self.equity.index).astype(
                {"stop": "float64", "target": "float64", "threshold": "float64", "action": "int64"})

    @property
    def group(self) -> str | None:
        """Seed group this result belongs to (``extra["group"]``), or None."""
        g = self.extra.get("group")
        return None if g is None else str(g)


class LoadedResults(NamedTuple):
    """What :func:`load_results` returns: ``results, prices, metrics = load_results(d)``."""

    results: list[StrategyResult]
    prices: pd.Series
    metrics: dict[str, dict[str, Any]]


def slugify(name: str) -> str:
    """File-name-safe form of a strategy name: ``"random (seed 3)"`` -> ``random_seed_3``."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", str(name)).strip("_").lower()
    return slug or "strategy"


def role_of(result: StrategyResult, position: int) -> str:
    """``extra["role"]``, else ``"agent"`` for the first result and ``"baseline"`` for the rest."""
    role = result.extra.get("role")
    return str(role) if role else ("agent" if position == 0 else "baseline")


def metrics_table(results: Sequence[StrategyResult]) -> dict[str, dict[str, Any]]:
    """``{column: metrics}`` for a report table: one entry per result, one aggregated entry per seed group."""
    table: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        m = compute_metrics(r)
        if r.group is None:
            table[r.name] = m
        else:
            if r.group not in groups:
                table[r.group] = {}  # keep the column where the group first appears
            groups.setdefault(r.group, []).append(m)
    for g, ms in groups.items():
        table[g] = aggregate_seeds(ms)
    return table


def _json_text(data: Any) -> str:
    return json.dumps(jsonable(data), indent=2, allow_nan=False) + "\n"


def save_results(
    results: Sequence[StrategyResult],
    prices: pd.Series,
    out_dir: str | Path,
    *,
    metrics: Mapping[str, Mapping[str, Any]] | None = None,
    info: Mapping[str, Any] | None = None,
    ohlc: pd.DataFrame | None = None,
) -> Path:
    """Write ``results`` and the ``prices`` they traded (close per bar) under ``out_dir``.

    ``metrics`` is the ``{column: metrics}`` table written to ``metrics.json``; by default
    :func:`metrics_table` of the results. ``info`` (e.g. ``{"split": "test", "market":
    "NQ", "data": "file.csv", "sessions": [first, last]}``) is stored in
    ``results.json`` and shown in the report's header. ``ohlc`` (columns ``open``, ``high``,
    ``low`` on the index of ``prices``) adds the bars' candles to ``prices.csv``. Returns ``out_dir``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [r.name for r in results]
    slugs = [slugify(n) for n in names]
    if len(set(names)) != len(names) or len(set(slugs)) != len(slugs):
        raise ValueError(f"strategy names must be unique (also as file names): {names}")

    files: dict[Path, bytes] = {}
    prices = pd.Series(np.asarray(prices, dtype=float), index=_to_eastern(prices.index))
    px = pd.DataFrame({"time": prices.index, "price": prices.to_numpy()})
    if ohlc is not None:
        if len(ohlc) != len(prices):
            raise ValueError(f"ohlc has {len(ohlc)} rows, prices {len(prices)}")
        for c in OHLC_COLUMNS:
            px[c] = np.asarray(ohlc[c], dtype=float)
    files[out / "prices.csv"] = px.to_csv(index=False).encode("utf-8")

    entries = []
    for i, (r, slug) in enumerate(zip(results, slugs)):
        files[out / f"{slug}.trades.csv"] = r.trades[list(TRADE_COLUMNS)].to_csv(index=False).encode("utf-8")
        curve = pd.DataFrame({"time": r.equity.index, "equity": r.equity.to_numpy(), "position": r.position.to_numpy()})
        if r.levels is not None:
            for c in LEVEL_COLUMNS:
                curve[c] = r.levels[c].to_numpy()
        files[out / f"{slug}.curve.csv"] = curve.to_csv(index=False).encode("utf-8")
        entries.append({
            "name": r.name,
            "role": role_of(r, i),
            "trades_file": f"{slug}.trades.csv",
            "curve_file": f"{slug}.curve.csv",
            "initial_balance": r.initial_balance,
            "breach_time": r.breach_time,
            "target_hit_time": r.target_hit_time,
            "metrics": compute_metrics(r),
            "extra": r.extra,
        })
    table = metrics_table(results) if metrics is None else dict(metrics)
    files[out / METRICS] = _json_text(table).encode("utf-8")
    # results.json last: a folder whose index is there holds every file the index names
    files[out / RESULTS] = _json_text({
        "format": FORMAT,
        "written": datetime.now(UTC).isoformat(timespec="seconds"),
        "info": dict(info or {}),
        "prices_file": "prices.csv",
        "strategies": entries,
    }).encode("utf-8")
    for path, data in files.items():
        atomic_write_bytes(path, data)
    Manifest(out).record(files)
    return out


def _read_times(series: pd.Series) -> pd.Series:
    if len(series) == 0:
        return pd.Series([], dtype=f"datetime64[ns, {EASTERN}]")
    return pd.to_datetime(series, utc=True).dt.tz_convert(EASTERN)


def _read_csv(path: Path) -> pd.DataFrame:
    _check(path)
    try:
        return pd.read_csv(path, keep_default_na=True)
    except FileNotFoundError:
        raise UserError("evaluation file missing", file=str(path),
                        fix="re-run `hybrid-trader evaluate RUN_DIR` to write the results again") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        raise UserError(f"cannot read evaluation file: {err}", file=str(path),
                        fix="re-run `hybrid-trader evaluate RUN_DIR` to write the results again") from None


def _check(path: Path) -> None:
    """A UserError naming ``path`` when it differs from what ``save_results`` wrote (its folder's manifest)."""
    path = Path(path)
    if path.exists():
        Manifest(path.parent).verify(path, fix="re-run `hybrid-trader evaluate RUN_DIR` to write the results again")


def read_json(path: Path, *, what: str = "file", fix: str | None = None) -> Any:
    """Parse a JSON file; a UserError naming the file (and line) when it is missing or broken."""
    _check(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{what} not found", file=str(path), fix=fix) from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read {what}: {err}", file=str(path), fix=fix) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{what} is not valid JSON: {err.msg}", file=str(path), row=err.lineno, fix=fix) from None


def load_results(out_dir: str | Path) -> LoadedResults:
    """Read back what :func:`save_results` wrote: ``(results, prices, metrics)``."""
    out = Path(out_dir)
    fix = "run `hybrid-trader evaluate RUN_DIR --split SPLIT` first"
    if not out.is_dir():
        raise UserError("no evaluation results here (folder missing)", file=str(out), fix=fix)
    index = read_json(out / RESULTS, what="evaluation index", fix=fix)
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise UserError(f"not an evaluation index of format {FORMAT}", file=str(out / RESULTS), fix=fix)
    px = _read_csv(out / index.get("prices_file", "prices.csv"))
    prices = pd.Series(px["price"].to_numpy(float), index=_to_eastern(_read_times(px["time"])), name="price")

    results = []
    for e in index["strategies"]:
        t = _read_csv(out / e["trades_file"])
        trades = empty_trades() if len(t) == 0 else t
        if len(t):
            for c in _TIME_COLUMNS:
                trades[c] = _read_times(trades[c])
        c = _read_csv(out / e["curve_file"])
        idx = pd.DatetimeIndex(_read_times(c["time"]))
        extra = dict(e.get("extra") or {})
        levels = c[list(LEVEL_COLUMNS)].set_axis(idx) if set(LEVEL_COLUMNS) <= set(c.columns) else None
        results.append(StrategyResult(
            name=e["name"],
            trades=trades,
            equity=pd.Series(c["equity"].to_numpy(float), index=idx),
            position=pd.Series(c["position"].to_numpy(), index=idx),
            initial_balance=float(e["initial_balance"]),
            breach_time=e.get("breach_time"),
            target_hit_time=e.get("target_hit_time"),
            extra=extra,
            levels=levels,
        ))
    metrics_path = out / METRICS
    metrics = metrics_from_json(read_json(metrics_path, what="metrics")) if metrics_path.exists() else {}
    return LoadedResults(results, prices, metrics)


def load_ohlc(out_dir: str | Path) -> pd.DataFrame | None:
    """The bars' ``open``, ``high``, ``low``, ``close`` of an evaluation folder; None when only closes were kept."""
    out = Path(out_dir)
    px = _read_csv(out / load_index(out).get("prices_file", "prices.csv"))
    if not set(OHLC_COLUMNS) <= set(px.columns):
        return None
    frame = px[list(OHLC_COLUMNS)].astype(float).set_axis(_to_eastern(_read_times(px["time"])))
    frame["close"] = px["price"].to_numpy(float)
    return frame


def load_index(out_dir: str | Path) -> dict[str, Any]:
    """The raw ``results.json`` of an evaluation folder (info, strategies with their metrics)."""
    return read_json(Path(out_dir) / RESULTS, what="evaluation index",
                     fix="run `hybrid-trader evaluate RUN_DIR --split SPLIT` first")
