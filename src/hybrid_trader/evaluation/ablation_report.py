"""The HTML report of a variants ablation (``hybrid-trader report OUT`` on an ``evaluate --ablation OUT`` folder).

One self-contained ``OUT/report.html`` (interactive charts by default; with ``static``,
figures as base64 PNGs, also saved beside it):
the variants table (mean ± std over seeds, the same rows as ``ABLATION.md``), what was
compared (phase 2 run, student, teacher, split, steps, seeds), the net P&L of every seed
by variant, the equity of every run, and one row per run with its figures and folder.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybrid_trader import __version__
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.ablation import (
    FIGURES,
    FRESH_FIGURES,
    LLM_FIGURES,
    VERDICT,
    ablation_rows,
    ablation_title,
)
from hybrid_trader.evaluation.charts import chart_html
from hybrid_trader.evaluation.compare_charts import distribution_chart, variants_equity_chart
from hybrid_trader.evaluation.report import _esc, _figure, _table, html_document
from hybrid_trader.evaluation.results import StrategyResult, load_results, read_json, role_of
from hybrid_trader.run import RunDir
from hybrid_trader.run.rundir import ABLATION, RESULTS

REPORT = "report.html"


def is_ablation_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a variants ablation (``ablation.json`` and no run of its own)."""
    path = Path(path)
    return (path / ABLATION).is_file() and not RunDir(path).config_path.is_file()


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if math.isfinite(value) else str(value)
    return "-" if value is None else str(value)


def _agent_curves(table: dict) -> tuple[dict[str, list[StrategyResult]], Any]:
    """Each variant's agent results (equity) read from its runs' evaluations; prices of the first one."""
    curves: dict[str, list[StrategyResult]] = {}
    prices = None
    split = table.get("split", "test")
    for name, variant in table["variants"].items():
        for row in variant.get("per_seed", []):
            where = Path(row.get("eval_dir") or RunDir(row["run"]).eval_dir(split))
            if not (where / RESULTS).is_file():
                continue
            results, px, _ = load_results(where)
            agent = next((r for i, r in enumerate(results) if role_of(r, i) == "agent"), None)
            if agent is not None:
                curves.setdefault(name, []).append(agent)
                prices = px if prices is None else prices
    return curves, prices


def write_ablation_report(folder: str | Path, out: str | Path | None = None, *, static: bool = False) -> Path:
    """Write ``folder/report.html`` (or ``out``) for the ablation in ``folder``; returns its path.

    ``static``: PNG figures (also written beside it) instead of interactive charts.
    """
    folder = Path(folder)
    path = folder / ABLATION
    if not path.is_file():
        raise UserError("no ablation here", file=str(path),
                        fix="run `hybrid-trader evaluate RUN_DIR --ablation OUT` first (RUN_DIR: a phase 2 run)")
    table = read_json(path, what="ablation table")
    if not isinstance(table, dict) or not isinstance(table.get("variants"), dict) or not table["variants"]:
        raise UserError("not an ablation table (no variants)", file=str(path),
                        fix="write it again with `hybrid-trader evaluate RUN_DIR --ablation OUT`")
    out_path = Path(out) if out is not None else folder / REPORT
    out_path.parent.mkdir(parents=True, exist_ok=True)

    names, rows = ablation_rows(table)
    meta = [f"from <code>{_esc(table.get('p2_run', '?'))}</code>",
            f"student <code>{_esc(table.get('student', '?'))}</code>"]
    if table.get("teacher"):
        meta.append(f"teacher {_esc(table['teacher'])}")
    meta += [f"{_esc(table.get('timesteps', '?'))} steps per run", f"seeds {_esc(table.get('seeds', '?'))}"]
    sections = [f"<h1>{_esc(ablation_title(table))}</h1>", f'<p class="meta">{" · ".join(meta)}</p>',
                "<h2>Variants</h2>",
                '<p class="small">Every variant starts from the same phase 2 run and trains the same number of '
                "steps on the same bars and split, once per seed; each run is evaluated on the same days, net of "
                "costs, as one Apex account (and, in the <i>fresh days</i> rows, each day from a fresh account: the "
                "policy free of the path, since a bad first day can breach the account or lock it out for the rest). "
                "Cells: mean ± standard deviation over seeds. <i>RL only, phase 3</i> is the control of the LLM "
                "variants (the same risk veto and observation, never advised).</p>",
                _table(names, rows, first="figure")]

    pnl = {n: [r.get("Net PnL [$]") for r in v.get("per_seed", [])] for n, v in table["variants"].items()}
    curves, prices = _agent_curves(table)
    sections.append("<h2>Figures</h2>")
    pnl_caption = "One dot per seed, the box their spread and mean: the spread says how much a difference means."
    equity_caption = "One colour per variant, one line per seed."
    has_curves = bool(curves) and prices is not None and len(prices) > 0
    if static:
        from hybrid_trader.evaluation.figures import variants_equity_figure, variants_pnl_figure  # matplotlib only here

        figures = [("Net P&L by seed", variants_pnl_figure(pnl), "ablation_pnl.png", pnl_caption)]
        if has_curves:
            figures.append(("Equity of every run", variants_equity_figure(curves, prices), "ablation_equity.png",
                            equity_caption))
        for title, png, name, caption in figures:
            (out_path.parent / name).write_bytes(png)
            sections.append(_figure(title, png, name, caption))
    else:
        sections.append(chart_html("ablation-pnl", "Net P&L by seed", distribution_chart({"Net PnL [$]": pnl}),
                                   pnl_caption))
        if has_curves:
            sections.append(chart_html("ablation-equity", "Equity of every run", variants_equity_chart(curves, prices),
                                       equity_caption + " Zoom and pan; hover a line for its run."))

    keys = [k for k in (*FIGURES, *FRESH_FIGURES, *LLM_FIGURES.values(), VERDICT)
            if any(k in r for v in table["variants"].values() for r in v.get("per_seed", []))]
    seed_rows = []
    for name, variant in table["variants"].items():
        for seed, row in zip(table.get("seeds", []), variant.get("per_seed", [])):
            seed_rows.append((f"{name}, seed {seed}", [_cell(row.get(k)) for k in keys] + [row.get("run", "")]))
    sections += ["<h2>Runs</h2>", _table([*keys, "run"], seed_rows, first="variant, seed")]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sections.append(f'<p class="small">Written by hybrid-trader {_esc(__version__)} on {stamp} from '
                    f"{_esc(path)}. Definitions of every figure: docs/EVALUATION.md; the variants: "
                    "docs/ADVISE.md.</p>")
    out_path.write_text(html_document(ablation_title(table), sections), encoding="utf-8")
    return out_path
