"""Evaluation: metrics, stored results, the HTML report and the diagnosis of a run.

- :mod:`.results`  ``StrategyResult``, ``save_results``, ``load_results`` (CSV + JSON on disk)
- :mod:`.metrics`  ``compute_metrics``, ``aggregate_seeds``, ``probabilistic_sharpe_ratio``
- :mod:`.report`   ``write_report(run_dir)`` -> self-contained ``report.html`` + PNG figures
- :mod:`.diagnose` ``diagnose_run(run_dir)`` -> findings such as ``POLICY_NOT_CHANGING``

``write_report`` and ``diagnose_run`` are imported lazily (matplotlib is only loaded
when a report is written).
"""

from __future__ import annotations

from typing import Any

from hybrid_trader.evaluation.metrics import (
    METRIC_KEYS,
    METRICS,
    aggregate_seeds,
    compute_metrics,
    daily_pnl,
    drawdown,
    format_metric,
    metrics_from_json,
    metrics_to_json,
    probabilistic_sharpe_ratio,
)
from hybrid_trader.evaluation.results import (
    TRADE_COLUMNS,
    LoadedResults,
    StrategyResult,
    empty_trades,
    load_results,
    metrics_table,
    save_results,
)

__all__ = [
    "METRICS",
    "METRIC_KEYS",
    "TRADE_COLUMNS",
    "Finding",
    "LoadedResults",
    "StrategyResult",
    "aggregate_seeds",
    "compute_metrics",
    "daily_pnl",
    "diagnose_run",
    "drawdown",
    "empty_trades",
    "format_metric",
    "load_results",
    "metrics_from_json",
    "metrics_table",
    "metrics_to_json",
    "probabilistic_sharpe_ratio",
    "save_results",
    "write_report",
]

_LAZY = {
    "write_report": "hybrid_trader.evaluation.report",
    "diagnose_run": "hybrid_trader.evaluation.diagnose",
    "Finding": "hybrid_trader.evaluation.diagnose",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
