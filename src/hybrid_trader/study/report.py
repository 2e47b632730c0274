"""The study's HTML page: per variant mean and CI, paired differences, the DSR, one row per trial.

By default with interactive charts (``evaluation.charts``): each variant's distribution of the
summary figures over its trials, and a forest plot of the paired differences with the
baseline and their 95% CIs. ``static``: the tables alone, no scripts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from hybrid_trader.evaluation.charts import chart_html
from hybrid_trader.evaluation.compare_charts import distribution_chart, forest_chart
from hybrid_trader.evaluation.report import _esc, html_document
from hybrid_trader.study.report_stats import num as _num
from hybrid_trader.study.report_stats import statistics_sections
from hybrid_trader.study.spec import StudySpec
from hybrid_trader.study.summary import PAIRED_FIGURES, SUMMARY_FIGURES

REPORT = "report.html"


def _ci(d: dict) -> str:
    lo, hi = d.get("ci_low"), d.get("ci_high")
    ci = "" if lo is None or (isinstance(lo, float) and math.isnan(lo)) else f" [{_num(lo)}, {_num(hi)}]"
    return _num(d.get("mean", d.get("mean difference"))) + ci


def _charts(spec: StudySpec, summary: dict, table: pd.DataFrame) -> list[str]:
    """The distributions of the figures per variant over its finished trials, and the forest plot."""
    done = table[table["status"] == "finished"] if "status" in table.columns else table
    figures = [f for f in SUMMARY_FIGURES if f in done.columns]
    out = []
    if figures and "variant" in done.columns and len(done):
        values = {f: {v.name: pd.to_numeric(done.loc[done["variant"] == v.name, f], errors="coerce").tolist()
                      for v in spec.variants} for f in figures}
        out.append(chart_html("study-distributions", "Each variant's trials", distribution_chart(values),
                              "One point per finished trial (seed and fold), the box their spread, the dashed line "
                              "their mean; hover a point for its value."))
    paired = summary.get("paired vs baseline") or {}
    if paired:
        out.append(chart_html("study-forest", "Paired differences with the baseline", forest_chart(
            paired, [f for f in PAIRED_FIGURES if any(f in p for p in paired.values())], spec.baseline),
            "Mean difference on the same seed and fold, with its 95% bootstrap CI; blue when the CI leaves out 0 "
            "(evidence of a difference), grey when it holds 0."))
    return out


def write_study_report(out: Path, spec: StudySpec, summary: dict, table: pd.DataFrame, extra: Sequence[str] = (), *,
                       static: bool = False) -> Path:
    """``OUT/report.html``: self-contained; interactive charts unless ``static`` (tables only, no scripts);
    ``extra``: more HTML sections before the trials' table."""
    v = summary["variants"]
    head = "".join(f"<th>{_esc(f)}</th>" for f in SUMMARY_FIGURES)
    rows = "".join(
        f'<tr><td class="l">{_esc(name)}{" (baseline)" if name == spec.baseline else ""}</td>'
        f"<td>{s['finished']}/{s['trials']}</td><td>{s['passed (Apex verdict)']}</td>"
        + "".join(f"<td>{_esc(_ci(s['figures'][f]))}</td>" for f in SUMMARY_FIGURES) + "</tr>"
        for name, s in v.items())
    paired = "".join(
        f'<tr><td class="l">{_esc(name)} - {_esc(spec.baseline)}</td><td>{p["pairs"]}</td>'
        + "".join(f"<td>{_esc(_ci(p[f])) if f in p else '-'}</td>" for f in PAIRED_FIGURES) + "</tr>"
        for name, p in summary["paired vs baseline"].items())
    dsr = summary["deflated sharpe"]
    t = summary.get("timing") or {}
    cols = [c for c in ("trial", "status", "Net PnL [$]", "Sharpe (ann.)", "Trades", "Apex verdict",
                        "Pass rate [%]", "Breach rate [%]", "Expected outcome per attempt [$]", "seconds", "error")
            if c in table.columns]
    trial_rows = "".join("<tr>" + "".join(f'<td class="{"l" if c in ("trial", "error") else ""}">'
                                          f"{_esc(_num(r.get(c)))}</td>" for c in cols) + "</tr>"
                         for r in table.to_dict("records"))
    sections = [
        f"<h1>Study {_esc(summary['study'])}</h1>",
        f'<p class="meta">{summary["trials"]} trials: {len(spec.variants)} variants x {len(spec.seeds)} seeds x '
        f"{max(spec.folds, 1)} folds; {summary['finished']} finished, {summary['failed']} failed"
        + (f", {summary['not run']} not run yet ({_esc(', '.join(summary['variants not run']))}: the study ran "
           "with --only; their hypotheses are pending)" if summary.get("not run") else "") + "; evaluated on "
        f"{_esc(summary.get('evaluated on') or spec.evaluate.split)} days"
        + (f"; {t.get('workers')} Ray workers, {t.get('wall_s')} s, Ray overhead "
           f"{t.get('ray_overhead_s_per_trial')} s a trial ({t.get('ray_overhead_pct')}%)" if t else "") + "</p>",
        "<h2>Variants</h2>",
        '<p class="small">The agent on each trial\'s evaluation days, net of costs: mean over seeds and folds with its '
        "95% bootstrap confidence interval; <i>passed</i> counts trials whose single account reached the target; "
        "the pass rate and expected outcome per attempt are the prop-firm verdict's (evaluation.verdict: fresh "
        "evaluation accounts, one after another or one a day, fees included).</p>",
        f'<table><thead><tr><th class="l">variant</th><th>trials</th><th>passed</th>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table>",
        "<h2>Paired with the baseline</h2>",
        '<p class="small">Differences on the same seed and fold, mean and 95% bootstrap CI: a CI that holds 0 is no '
        "evidence of a difference.</p>",
        '<table><thead><tr><th class="l">variant - baseline</th><th>pairs</th>'
        + "".join(f"<th>{_esc(f)}</th>" for f in PAIRED_FIGURES) + f"</tr></thead><tbody>{paired}</tbody></table>",
        *([] if static else ["<h2>Charts</h2>", *_charts(spec, summary, table)]),
        "<h2>Deflated Sharpe Ratio</h2>",
        f"<p>Best trial by daily Sharpe: <b>{_esc(dsr.get('best'))}</b> ({_num(dsr.get('daily sharpe'))} a day over "
        f"{_esc(dsr.get('days', '-'))} days); probability its true Sharpe beats the best of {dsr.get('trials')} "
        f"skill-less trials: <b>{_num(dsr.get('dsr'))}</b> (Bailey and Lopez de Prado, 2014; the trials are every "
        "one this folder ran, failed and re-run ones included).</p>",
        *([f'<p class="small"><b>Note:</b> {_esc(summary["fingerprints"]["warning"])}</p>']
          if (summary.get("fingerprints") or {}).get("warning") else []),
        *statistics_sections(summary),
        *extra,
        "<h2>Trials</h2>",
        "<table><thead><tr>" + "".join(f'<th class="l">{_esc(c)}</th>' for c in cols)
        + f"</tr></thead><tbody>{trial_rows}</tbody></table>",
    ]
    path = out / REPORT
    path.write_text(html_document(f"Study {summary['study']}", sections), encoding="utf-8")
    return path
