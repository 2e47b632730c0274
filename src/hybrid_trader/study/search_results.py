"""What a search found (:mod:`hybrid_trader.study.search`): each fold's selection and its test, the statistics,
the table and the report.

:func:`summarize_search` gives the nested walk-forward's summary (the selections' test figures with CIs, their
paired difference with momentum, the DSR over every trial the folder ran, PBO of each fold's search on its
validation days); :func:`search_table` one row per trial; :func:`write_search_report` ``OUT/report.html``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.config import to_dict
from hybrid_trader.evaluation.metrics import jsonable
from hybrid_trader.evaluation.report import _esc, html_document
from hybrid_trader.run.files import atomic_write_text
from hybrid_trader.study.fingerprint import code_label
from hybrid_trader.study.multiple_tests import pbo_cscv, robust_figures
from hybrid_trader.study.spec import StudySpec
from hybrid_trader.study.stats import bootstrap_ci, fresh_day_comparison, paired_difference
from hybrid_trader.study.summary import SUMMARY_FIGURES, daily_sharpe, deflated_best
from hybrid_trader.study.trials import DAILY, FRESH_DAILY

STOPPED = "stopped"
"""The status of a trial ASHA stopped (recorded with the step it reached, never rerun)."""
FRESH_TEST = "selected on test, fresh days (paired with momentum by day)"
"""The summary's figures of the selections' test days each traded from a fresh account (``evaluate.fresh_days``):
the days joined over the folds, the mean day and momentum's with their CIs, and the paired difference."""


def selection_of(spec: StudySpec, rows: Sequence[dict[str, Any]], fold: int) -> dict[str, Any] | None:
    """The fold's selected trial: the finished one best by ``select`` on validation days (ties: the lowest sample);
    None when none finished with the figure. Reads validation figures only: a trial's ``test`` never."""
    metric, sign = spec.select.metric, (1.0 if spec.select.mode == "max" else -1.0)
    candidates = [r for r in rows if r.get("fold") == fold and r.get("status") == "finished"
                  and r.get(metric) is not None and not math.isnan(float(r[metric]))]
    if not candidates:
        return None
    return max(candidates, key=lambda r: (sign * float(r[metric]), -int(r["sample"])))


def summarize_search(spec: StudySpec, rows: Sequence[dict[str, Any]], chosen: Mapping[int, str | None],
                     attempts: dict[str, int]) -> dict[str, Any]:
    """The nested walk-forward's summary: per fold the selection (its point, validation figure, test figures);
    the selections' test figures over the folds (mean, 95% bootstrap CI, robust figures) and their paired
    difference with momentum; the DSR of the selections' test days for every trial the folder ran; PBO (CSCV)
    of each fold's search on its validation days."""
    by_slug = {r["trial"]: r for r in rows}
    folds, tests = [], []
    for fold in range(max(spec.folds, 1)):
        mine = [r for r in rows if r.get("fold") == fold]
        row = by_slug.get(chosen.get(fold) or "")
        test = (row or {}).get("test") or {}
        split = spec.run_config(spec.variants[0], spec.seeds[0], fold, 1).split  # a one-fold study: the base's
        entry: dict[str, Any] = {"fold": fold, "split fold": split.fold, "trials": len(mine),
                                 **{s: sum(1 for r in mine if r.get("status") == s) for s in ("finished", STOPPED,
                                                                                                "failed")},
                                 "selected": row["trial"] if row else None}
        if row:
            entry.update({"variant": row["variant"], "params": row.get("params"),
                          f"validation {spec.select.metric}": row.get(spec.select.metric),
                          "test": {k: v for k, v in test.items() if k not in DAILY and k != "dates"}})
            if test and "error" not in test:
                tests.append(test)
        folds.append(entry)
    selected: dict[str, Any] = {}
    for f in SUMMARY_FIGURES:
        values = [float(t[f]) for t in tests if t.get(f) is not None]
        mean, lo, hi = bootstrap_ci(values)
        selected[f] = {"mean": mean, "ci_low": lo, "ci_high": hi, **robust_figures(values)}
    pairs = [(float(t["Net PnL [$]"]), float(t["momentum Net PnL [$]"])) for t in tests
             if t.get("Net PnL [$]") is not None and t.get("momentum Net PnL [$]") is not None]
    vs_momentum: dict[str, Any] = {"pairs": len(pairs)}
    if pairs:
        mean, lo, hi = paired_difference([a for a, _ in pairs], [b for _, b in pairs])
        vs_momentum.update({"mean difference": mean, "ci_low": lo, "ci_high": hi})
    fresh = [t for t in tests if t.get("fresh day_pnl")]
    fresh_days = (fresh_day_comparison(*([x for t in fresh for x in t[k]] for k in FRESH_DAILY)) if fresh
                  else None)  # the selections' test days, each from a fresh account, joined over the folds
    sharpes = [s for r in rows if r.get("status") == "finished"
               and (s := daily_sharpe(r.get("daily_returns") or [])) is not None]
    variance = float(np.var(sharpes, ddof=1)) if len(sharpes) > 1 else 0.0
    joined = {"trial": "selection", "daily_returns": [x for t in tests for x in t.get("daily_returns") or []]}
    dsr = deflated_best([joined], attempts.get("attempts"), variance=variance)
    dsr["what"] = ("the selections' test days joined over the folds, against the best of N skill-less trials, N every "
                   "trial the folder ran; the Sharpe variance of the finished trials' validation days")
    return {"study": spec.name, "baseline": spec.baseline, "search": {
        "search": spec.search, "scheduler": spec.scheduler, "samples": spec.samples, "space": spec.space,
        "select": to_dict(spec.select)},
        "trials": len(rows), "finished": sum(1 for r in rows if r.get("status") == "finished"),
        STOPPED: sum(1 for r in rows if r.get("status") == STOPPED),
        "failed": sum(1 for r in rows if r.get("status") == "failed"), "not run": 0, "variants not run": [],
        "trial-steps": sum(int(r.get("steps") or 0) for r in rows),
        "folds": folds, "selected on test": selected, "selected - momentum (test, paired by fold)": vs_momentum,
        **({FRESH_TEST: fresh_days} if fresh_days else {}),
        "deflated sharpe": dsr, "PBO of the search (validation days)": _pbo(rows),
        "trials run by the folder": attempts, "variants": {}, "paired vs baseline": {}, "hypotheses": [],
        "errors": [{"trial": r["trial"], "error": r.get("error")} for r in rows if r.get("status") == "failed"]}


def _pbo(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per fold, PBO (CSCV) of picking the best of its finished trials by their validation days' daily P&L."""
    out: dict[str, Any] = {}
    for fold in sorted({int(r["fold"]) for r in rows}):
        series = [dict(zip(r.get("daily_dates") or [], r.get("daily_returns") or [])) for r in rows
                  if r.get("fold") == fold and r.get("status") == "finished" and r.get("daily_returns")]
        days = sorted(set.intersection(*[set(s) for s in series])) if series else []
        out[f"fold {fold}"] = pbo_cscv(np.array([[s[d] for s in series] for d in days]).reshape(len(days),
                                                                                               len(series)))
    values = [v["pbo"] for v in out.values() if not math.isnan(v["pbo"])]
    out["mean"] = float(np.mean(values)) if values else math.nan
    return out


def search_table(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per trial: its point as ``param KEY`` columns, its validation figures, the selection's test figures
    as ``test FIGURE``; no daily series."""
    out = []
    for r in sorted(rows, key=lambda r: (r.get("fold", 0), r.get("sample", 0))):
        flat = {k: v for k, v in r.items() if k not in DAILY and k not in ("params", "test", "dates", "fingerprint",
                                                                            "code")}
        flat["fingerprint"] = (r.get("fingerprint") or {}).get("id")
        flat["code"] = code_label(r.get("code"))
        flat.update({f"param {k}": v for k, v in (r.get("params") or {}).items()})
        flat.update({f"test {k}": v for k, v in (r.get("test") or {}).items() if k not in DAILY and k != "dates"})
        out.append(flat)
    return pd.DataFrame(out)


def fold_label(entry: Mapping[str, Any]) -> str:
    """A summary fold's name: ``0``, or ``0 (split.fold 2)`` for a one-fold study of a later fold of the data."""
    data_fold = entry.get("split fold", entry["fold"])
    return str(entry["fold"]) + ("" if data_fold == entry["fold"] else f" (split.fold {data_fold})")


def write_search_report(out: Path, spec: StudySpec, summary: dict[str, Any], table: pd.DataFrame) -> Path:
    """``OUT/report.html``: the folds' selections and their test figures, the statistics, every trial."""
    def num(x: Any) -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else (
            f"{x:,.2f}" if isinstance(x, float) else _esc(str(x)))

    folds = "".join(
        f"<tr><td>{_esc(fold_label(f))}</td><td>{f['finished']}/{f[STOPPED]}/{f['failed']}</td><td>{num(f['selected'])}</td>"
        f"<td>{_esc(json.dumps(f.get('params')))}</td><td>{num(f.get(f'validation {spec.select.metric}'))}</td>"
        f"<td>{num((f.get('test') or {}).get('Net PnL [$]'))}</td>"
        f"<td>{num((f.get('test') or {}).get('momentum Net PnL [$]'))}</td></tr>" for f in summary["folds"])
    sel = "".join(f"<tr><td>{_esc(k)}</td><td>{num(v['mean'])}</td><td>[{num(v['ci_low'])}, {num(v['ci_high'])}]"
                  f"</td></tr>" for k, v in summary["selected on test"].items())
    stats = (f"<p>Deflated Sharpe Ratio of the selection over {summary['deflated sharpe'].get('trials')} trials: "
             f"{num(summary['deflated sharpe'].get('dsr'))}; PBO of the search (mean over folds): "
             f"{num(summary['PBO of the search (validation days)']['mean'])}; selected - momentum on test: "
             f"{_esc(json.dumps(jsonable(summary['selected - momentum (test, paired by fold)'])))}</p>")
    fresh = summary.get(FRESH_TEST)
    if fresh:
        rows = "".join(f"<tr><td>{_esc(k)}</td><td>{num(v['mean'])}</td><td>[{num(v['ci_low'])}, "
                       f"{num(v['ci_high'])}]</td></tr>" for k, v in fresh.items() if isinstance(v, dict))
        stats += (f"<h3>Each test day from a fresh account ({fresh['days']} days, {_esc(fresh['first'])} to "
                  f"{_esc(fresh['last'])}, the folds joined)</h3><table><tr><th>figure</th><th>mean</th>"
                  f"<th>95% CI (bootstrap over days)</th></tr>{rows}</table>")
    sections = [
        f"<h1>Study {_esc(summary['study'])}: search</h1>",
        f"<p>{summary['trials']} trials ({summary['finished']} finished, {summary[STOPPED]} stopped by ASHA, "
        f"{summary['failed']} failed); search {spec.search}, scheduler {spec.scheduler}; selected by "
        f"{_esc(spec.select.metric)} ({spec.select.mode}) on validation days, tested once.</p>",
        "<h2>Folds</h2><table><tr><th>fold</th><th>finished/stopped/failed</th><th>selected</th><th>point</th>"
        f"<th>validation {_esc(spec.select.metric)}</th><th>test net P&amp;L [$]</th><th>momentum [$]</th></tr>"
        f"{folds}</table>",
        f"<h2>Selections on their test days</h2><table><tr><th>figure</th><th>mean</th><th>95% CI</th></tr>{sel}"
        f"</table>{stats}",
        "<h2>Trials</h2>" + table.to_html(index=False, na_rep="-", float_format=lambda x: f"{x:,.4g}"),
    ]
    path = out / "report.html"
    atomic_write_text(path, html_document(f"Study {summary['study']}", sections))
    return path
