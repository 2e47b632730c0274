"""The evaluation report: one self-contained ``report.html`` (interactive by default, or static with PNGs).

:func:`write_report` reads what :func:`~hybrid_trader.evaluation.results.save_results`
wrote under ``RUN_DIR/eval/<split>/``. By default the figures are one interactive chart
(:func:`~hybrid_trader.evaluation.charts.run_chart`: candlesticks with every entry, exit,
stop move and target, equity with the trailing threshold, drawdown, P&L per day, on one
zoomable x axis), drawn by plotly.js inlined once in the page: it opens offline and
fetches nothing. With ``static=True`` (``report --static``: the README and papers path)
the page has no scripts and the PNG figures ``<stem>_equity.png``, ``<stem>_drawdown.png``,
``<stem>_trades.png`` (one per agent, numbered after the first) and ``<stem>_daily_pnl.png``
are written next to it and embedded as base64 data URIs. Either way the file can be
mailed or archived alone.

Sections: header (run, split, market, dates), headline, metrics table (strategies as
columns), figures, then whichever is present: LLM & fusion statistics
(``extra["llm"]``), sample decisions (``extra["sample_decisions"]``, or
``extra["decisions"]``; a list of dicts), ablation
(``RUN_DIR/eval/ablation.json``), diagnosis of the training logs, the run's config
(``RUN_DIR/config.yaml``).
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence, Set
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybrid_trader import __version__
from hybrid_trader.agent.gate import GATE_STATISTICS, TREND_BUCKETS, VOLATILITY_BUCKETS
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.charts import CHART_CLASS, CSP, chart_html, charts_runtime, run_chart
from hybrid_trader.evaluation.diagnose import diagnose
from hybrid_trader.evaluation.metrics import SPECS, format_metric, metric_rows, metrics_from_json, summary_line
from hybrid_trader.evaluation.results import (
    EXPLAINED_BY_KEY,
    REASONING_KEY,
    StrategyResult,
    load_index,
    load_ohlc,
    load_results,
    metrics_table,
    read_json,
    role_of,
)
from hybrid_trader.run import RunDir, data_identity, is_stale, same_data
from hybrid_trader.run.advice_identity import RAW
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.files import check_writable
from hybrid_trader.run.rundir import ABLATION, RESULTS

MAX_DECISIONS = 50
"""Sample decisions shown per strategy."""

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1180px;color:#222;
line-height:1.4;padding:0 16px}
h1{font-size:1.5em;margin-bottom:.2em}
h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.meta{color:#555;font-size:.9em}
.headline{background:#f4f7fb;border-left:4px solid #08519c;padding:8px 12px;margin:12px 0}
table{border-collapse:collapse;font-size:.88em;margin:8px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right;
vertical-align:top}th{background:#f2f2f2}td.l,th.l{text-align:left}th.agent{background:#dbe7f5}
tr:nth-child(even) td{background:#fafafa}figure{margin:12px 0}
figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#555}pre{background:#f6f6f6;padding:10px;overflow:auto;font-size:.82em;
border:1px solid #e4e4e4}.error{color:#b2182b;font-weight:bold}.warning{color:#b35806;font-weight:bold}
.small{font-size:.85em;color:#555}
tr.cot td{background:#f7f7fb;font-size:.9em;padding-left:2em}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _table(columns: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]], *, agent_cols: Set[str] = frozenset(),
           row_titles: Mapping[str, str] | None = None, first: str = "") -> str:
    head = "".join(f'<th class="{"agent" if c in agent_cols else ""}">{_esc(c)}</th>' for c in columns)
    out = [f'<table><thead><tr><th class="l">{_esc(first)}</th>{head}</tr></thead><tbody>']
    for label, cells in rows:
        title = f' title="{_esc(row_titles[label])}"' if row_titles and label in row_titles else ""
        out.append(f'<tr><th class="l"{title}>{_esc(label)}</th>' + "".join(f"<td>{_esc(c)}</td>" for c in cells)
                   + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def metrics_html(metrics: Mapping[str, Mapping[str, Any]], agent_cols: Set[str] = frozenset()) -> str:
    """The metrics table: one column per strategy, one labelled row per metric."""
    cols = list(metrics)
    rows = [(key, [format_metric(key, metrics[c].get(key)) if key in metrics[c] else "" for c in cols])
            for key in metric_rows(metrics)]
    titles = {k: s.description for k, s in SPECS.items()}
    titles["Seeds"] = "number of seeds aggregated (mean ± std)"
    return _table(cols, rows, agent_cols=agent_cols, row_titles=titles, first="metric")


def _generic_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False)
    return "-" if v is None else str(v)


def _stats_html(by_strategy: Mapping[str, Mapping[str, Any]]) -> str:
    cols = list(by_strategy)
    keys: list[str] = []
    for d in by_strategy.values():
        keys.extend(k for k in d if k not in keys)
    rows = [(k, [_generic_value(by_strategy[c].get(k)) if k in by_strategy[c] else "" for c in cols]) for k in keys]
    return _table(cols, rows, first="statistic")


def _reasoning_html(steps: Any, by: Any, width: int) -> str:
    """One row under a decision: the LLM's four steps (market, options, risks, decision)."""
    if not isinstance(steps, Mapping) or not steps:
        return ""
    lines = "".join(f"<div><b>{_esc(k)}</b>: {_esc(v)}</div>" for k, v in steps.items())
    who = f'<div class="small">chain of thought by {_esc(by)}</div>' if by else ""
    return f'<tr class="cot"><td class="l" colspan="{width}">{lines}{who}</td></tr>'


def _decisions_html(decisions: Sequence[Mapping[str, Any]]) -> str:
    rows = [d for d in decisions if isinstance(d, Mapping)][:MAX_DECISIONS]
    keys: list[str] = []
    for d in rows:
        keys.extend(k for k in d if k not in keys and k not in (REASONING_KEY, EXPLAINED_BY_KEY))
    out = ["<table><thead><tr>" + "".join(f'<th class="l">{_esc(k)}</th>' for k in keys) + "</tr></thead><tbody>"]
    for d in rows:
        out.append("<tr>" + "".join(f'<td class="l">{_esc(_generic_value(d.get(k)))}</td>' for k in keys) + "</tr>")
        out.append(_reasoning_html(d.get(REASONING_KEY), d.get(EXPLAINED_BY_KEY), len(keys)))
    out.append("</tbody></table>")
    more = len(decisions) - len(rows)
    if more > 0:
        out.append(f'<p class="small">{more} more not shown.</p>')
    return "".join(out)


def _ablation_html(data: Any) -> str:
    if isinstance(data, Mapping) and all(isinstance(v, Mapping) for v in data.values()):
        return metrics_html(metrics_from_json(dict(data)))
    if isinstance(data, list) and all(isinstance(v, Mapping) for v in data):
        return _decisions_html(data)
    return f"<pre>{_esc(json.dumps(data, indent=2))}</pre>"


def _trust_html(trust: Mapping[str, Mapping]) -> str:
    """The gate's mean trust per context bucket, one column per strategy."""
    names = list(trust)
    rows = [(f"fusion/trust_trend_{b}", f"{b} trend") for b in TREND_BUCKETS]
    rows += [(f"fusion/trust_vol_{b}", f"{b} volatility") for b in VOLATILITY_BUCKETS]
    rows += [("fusion/gate_mean", "all advised decisions"), ("fusion/gate_std", "spread (std) over them")]
    out = ['<table><thead><tr><th class="l">context</th>' + "".join(f"<th>{_esc(n)}</th>" for n in names)
           + "</tr></thead><tbody>"]
    for key, text in rows:
        if not any(key in trust[n] for n in names):
            continue
        cells = "".join(f"<td>{trust[n][key]:.3f}</td>" if isinstance(trust[n].get(key), (int, float))
                        else "<td>-</td>" for n in names)
        out.append(f'<tr title="{_esc(GATE_STATISTICS.get(key, ""))}"><td class="l">{_esc(text)}</td>{cells}</tr>')
    out.append("</tbody></table>")
    return "".join(out)


def _sample_decisions(r: StrategyResult) -> list:
    """``extra["sample_decisions"]`` (or ``extra["decisions"]``) when it is a non-empty list of dicts."""
    for key in ("sample_decisions", "decisions"):
        ds = r.extra.get(key)
        if isinstance(ds, list) and ds and all(isinstance(d, Mapping) for d in ds):
            return ds
    return []


def _figure(title: str, png: bytes, file_name: str, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{_esc(title)}" src="data:image/png;base64,{data}">'
            f"<figcaption><b>{_esc(title)}.</b> {_esc(caption)} "
            f"(also saved as {_esc(file_name)})</figcaption></figure>")


def _diagnosis_html(run_dir: Path) -> str | None:
    run = RunDir(run_dir)
    if not (run.status_path.exists() or run.progress_path.exists()):
        return None

    try:
        dx = diagnose(run_dir)
    except UserError as err:
        return f'<p class="warning">The training logs could not be read: {_esc(err.render())}</p>'
    if dx.healthy:
        body = "<p>None of the known failure modes found in the training logs.</p>"
    else:
        items = []
        for f in dx.findings:
            ev = "; ".join(f"{k} = {_generic_value(v)}" for k, v in f.evidence.items())
            items.append(f'<li><span class="{_esc(f.severity)}">{_esc(f.code)}</span>: {_esc(f.message)}'
                         f'<br><span class="small">evidence: {_esc(ev)}<br>fix: {_esc(f.fix)}</span></li>')
        body = "<ul>" + "".join(items) + "</ul>"
    if dx.skipped:
        body += '<p class="small">Not checked: ' + _esc("; ".join(dx.skipped)) + "</p>"
    return body + '<p class="small">Same as <code>hybrid-trader diagnose RUN_DIR</code>.</p>'


def _figures_html(results: list, prices: Any, agents: list, out_path: Path) -> list[str]:
    """The report's figures as HTML, each also written as a PNG beside ``out_path``."""
    from hybrid_trader.evaluation import figures  # matplotlib only when a report is written

    stem = out_path.stem
    figs: list[tuple[str, bytes, str]] = [
        ("Equity", figures.equity_figure(results, prices),
         "Account equity at each bar close, open profit and all costs included; baselines thinner, "
         "seeds of one random baseline share a colour."),
        ("Drawdown", figures.drawdown_figure(results, prices), "Dollars below the running peak of equity."),
    ]
    for a in agents[:3]:
        figs.append((f"Trades of {a.name}", figures.trades_figure(a, prices),
                     "Close price; triangles are entry fills (up: long, green; down: short, red), crosses the exits."))
    if agents:
        figs.append(("PnL per day", figures.daily_pnl_figure(agents[:3]),
                     "Equity change per Globex trading day (18:00 to 17:00 ET)."))
    fig_html = []
    for k, (title, png, caption) in enumerate(figs):
        slug = {"Equity": "equity", "Drawdown": "drawdown", "PnL per day": "daily_pnl"}.get(title)
        if slug is None:
            n = sum(1 for t, _, _ in figs[:k] if t.startswith("Trades of"))
            slug = "trades" if n == 0 else f"trades_{n + 1}"
        name = f"{stem}_{slug}.png"
        (out_path.parent / name).write_bytes(png)
        fig_html.append(_figure(title, png, name, caption))
    return fig_html


def _verdict_section(pv: Any) -> list[str]:
    """The prop-firm verdict table (``evaluate --verdict``), or nothing."""
    if not (isinstance(pv, Mapping) and isinstance(pv.get("figures"), Mapping)):
        return []
    c = pv.get("config", {})
    return ["<h2>Prop-firm verdict</h2>",
            f'<p class="small">{_esc(pv.get("mode"))} attempts, each a fresh evaluation account, at most '
            f'{_esc(c.get("max_days"))} trading days; fees ${_esc(c.get("evaluation_fee"))} then '
            f'${_esc(c.get("reset_fee"))} a reset; a pass worth ${_esc(c.get("pass_value"))}. '
            "Same environment, rules and fills as the metrics above (docs/EVALUATION.md).</p>",
            *([f'<p class="warning">{_esc(pv["warning"])}</p>'] if pv.get("warning") else []),
            _stats_html(pv["figures"])]


def _llm_sections(results: list) -> list[str]:
    """LLM and fusion statistics, the learned trust and sample decisions (empty without an LLM)."""
    sections: list[str] = []
    llm = {r.name: r.extra["llm"] for r in results if isinstance(r.extra.get("llm"), Mapping)}
    if llm:
        sections += ["<h2>LLM &amp; fusion statistics</h2>", _stats_html(llm)]
    trust = {r.name: r.extra["trust"] for r in results if isinstance(r.extra.get("trust"), Mapping)}
    if trust:
        sections += ["<h2>When the agent trusts the LLM</h2>",
                     '<p class="small">Learned fusion: the mean weight w(s) the gate gives the LLM prior '
                     "(logits = RL logits + w(s) log p_LLM) on the advised decisions, by trend (market_regime) "
                     "and volatility (volatility_regime) of the bar.</p>", _trust_html(trust)]
    decisions = [(r.name, _sample_decisions(r)) for r in results if _sample_decisions(r)]
    if decisions:
        sections.append("<h2>Sample decisions</h2>")
        for name, ds in decisions:
            sections += [f"<h3>{_esc(name)}</h3>", _decisions_html(ds)]
    return sections


def write_report(run_dir: str | Path, eval_dir: str | Path | None = None, *, split: str = "test",
                 out: str | Path | None = None, static: bool = False) -> Path:
    """Write the HTML report of ``run_dir``'s evaluation on ``split``; returns its path.

    ``eval_dir`` defaults to ``RUN_DIR/eval/<split>``, ``out`` to ``<eval_dir>/report.html``.
    ``static``: PNG figures (written next to it) instead of the interactive chart.
    Raises :class:`UserError` when the run directory or its evaluation is missing.
    """
    rd = Path(run_dir)
    run = RunDir(rd)
    if not rd.is_dir():
        raise UserError("run directory not found", file=str(rd), fix="give the --out folder of `hybrid-trader train`")
    ed = Path(eval_dir) if eval_dir is not None else run.eval_dir(split)
    if not (ed / RESULTS).is_file():
        raise UserError(f"no evaluation of the {split} split", file=str(ed),
                        fix=f"run `hybrid-trader evaluate {rd} --split {split}` first")
    results, prices, metrics = load_results(ed)
    info = load_index(ed).get("info", {}) or {}
    if not metrics:
        metrics = metrics_table(results)
    out_path = Path(out) if out is not None else ed / "report.html"
    check_writable(out_path.parent, what="report")  # before the figures are drawn
    out_path.parent.mkdir(parents=True, exist_ok=True)

    agents = [r for i, r in enumerate(results) if role_of(r, i) == "agent"]
    fig_html = _figures_html(results, prices, agents, out_path) if static else \
        [chart_html("run-chart", "Price, trades, equity, drawdown and P&L per day",
                    *run_chart(results, prices, load_ohlc(ed)))]
    agent_cols = {r.name for r in agents}
    title = f"{rd.resolve().name}: {split} split"
    status = run.read_status()
    meta = [f"run <code>{_esc(rd)}</code>", f"split <b>{_esc(split)}</b>"]
    for key in ("market", "data", "sessions", "seeds"):
        if key in info:
            meta.append(f"{key} {_esc(_data_text(info[key]) if key == 'data' else info[key])}")
    if info.get("llm"):
        meta.append(f"advisor <b>{_esc(info.get('llm_backend', ''))}</b> ({_esc(info['llm'])})"
                    + (" <b>instead of the run's own</b>" if info.get("advisor_override") else "")
                    + (" <b>raw advice: no batch calibration divided the model's lean</b>"
                       if info.get("llm_calibration") == RAW else ""))
    if len(prices):
        meta.append(f"bars {len(prices):,} from {_esc(prices.index[0].strftime('%Y-%m-%d %H:%M'))} to "
                    f"{_esc(prices.index[-1].strftime('%Y-%m-%d %H:%M'))} ET")
    if isinstance(status, dict) and status:
        meta.append(f"training: phase {_esc(status.get('phase', '?'))}, {_esc(status.get('state', '?'))}, "
                    f"{_esc(status.get('total_timesteps', '?'))} steps")

    sections = [f"<h1>{_esc(title)}</h1>", f'<p class="meta">{" · ".join(meta)}</p>']
    if is_stale(ed) or ed in run.stale_evaluations():
        sections.append('<p class="error">Stale: the run\'s model changed after this evaluation (training was '
                        f"resumed). Run <code>hybrid-trader evaluate {_esc(rd)} --split {_esc(split)}</code> "
                        "again.</p>")
    own = data_identity_of_config(run)
    if isinstance(info.get("data"), Mapping) and own is not None and not same_data(dict(info["data"]), own):
        sections.append('<p class="warning">These results used other bars than the run trained on: '
                        f"{_esc(_data_text(info['data']))}. The configuration below is the run's own "
                        f"(data: {_esc(_data_text(own))}).</p>")
    if agents and agents[0].name in metrics:
        sections.append(f'<div class="headline"><b>{_esc(agents[0].name)}</b>: '
                        f"{_esc(summary_line(metrics[agents[0].name]))}</div>")
    sections += ["<h2>Metrics</h2>",
                 '<p class="small">Net of commissions and slippage. Daily figures use Globex trading days; Sharpe and '
                 "Sortino are annualised by sqrt(252); PSR is the probability that the true Sharpe ratio is above 0. "
                 "Random baselines show mean ± std over seeds. Hover a row for its definition.</p>",
                 metrics_html(metrics, agent_cols), "<h2>Figures</h2>", *fig_html]

    sections += _verdict_section(info.get("prop_verdict"))
    sections += _llm_sections(results)
    ablation_path = run.ablation_path if ed == run.eval_dir(split) else ed.parent / ABLATION
    if ablation_path.is_file():
        sections += ["<h2>Ablation</h2>", _ablation_html(read_json(ablation_path, what="ablation table"))]
    diag = _diagnosis_html(rd)
    if diag:
        sections += ["<h2>Diagnosis of training</h2>", diag]
    cfg = run.config_path
    if cfg.is_file():
        sections += ["<h2>Configuration</h2>", f"<pre>{_esc(cfg.read_text(encoding='utf-8', errors='replace'))}</pre>"]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sections.append(f'<p class="small">Written by hybrid-trader {_esc(__version__)} on {stamp}. '
                    "Definitions of every metric: docs/EVALUATION.md.</p>")

    out_path.write_text(html_document(title, sections), encoding="utf-8")
    return out_path


def html_document(title: str, sections: Sequence[str]) -> str:
    """A self-contained page: the report's CSS inline, the sections in order.

    No scripts, unless a section holds an interactive chart (``evaluation.charts``): then
    plotly.js (once) and the script that draws the charts, under a Content-Security-Policy
    that forbids every request.
    """
    body = "\n".join(sections)
    head = f"<title>{_esc(title)}</title><style>{CSS}</style>"
    tail = ""
    if f'class="{CHART_CLASS}"' in body:
        head = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' + head
        tail = charts_runtime()
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"{head}</head><body>\n{body}\n{tail}</body></html>\n")


def _data_text(data: Any) -> str:
    """A data record of results.json (path, sha256, options, or the synthetic recipe) as one line."""
    if not isinstance(data, Mapping):
        return str(data)
    if data.get("path"):
        opts = ", ".join(f"{k} {data[k]}" for k in ("market", "tz", "time_shift", "repair") if data.get(k) is not None)
        sha = data.get("sha256") or "?"
        return f"{data['path']} (sha256 {sha[:12]}…" + (f"; {opts})" if opts else ")")
    synth = data.get("synthetic") or {}
    return "built-in synthetic market (" + ", ".join(f"{k} {v}" for k, v in synth.items()) + ")"


def data_identity_of_config(run: RunDir) -> dict | None:
    """The data record of the run's own config.yaml, or None when it cannot be read."""
    try:
        return data_identity(run.load_config(RunConfig).data)
    except UserError:
        return None


def agent_results(results: Sequence[StrategyResult]) -> list[StrategyResult]:
    """The results whose role is ``agent`` (see :func:`~hybrid_trader.evaluation.results.role_of`)."""
    return [r for i, r in enumerate(results) if role_of(r, i) == "agent"]
