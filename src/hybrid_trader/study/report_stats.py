"""The study report's statistics sections: hypotheses, robust figures, SPA / StepM, PBO (HTML, no scripts)."""

from __future__ import annotations

import math
from typing import Any

from hybrid_trader.evaluation.report import _esc


def num(v: Any, digits: int = 2) -> str:
    """A figure as the report shows it: 2 decimals (``digits``), thousands separated, '-' for none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.{digits}f}" if isinstance(v, float) else str(v)


def _p(v: Any) -> str:
    return num(v, 4)


def _hypotheses(items: list[dict[str, Any]]) -> list[str]:
    if not items:
        return []
    rows = "".join(
        f'<tr><td class="l">{_esc(h["name"])}</td><td class="l">{_esc(h["claim"])}</td><td>{h["pairs"]}</td>'
        f'<td>{num(h["mean difference"])} [{num(h["ci_low"])}, {num(h["ci_high"])}] ({num(h["CI level [%]"], 0)}%)'
        f'</td><td>{num(h["median difference"])}</td><td>{_p(h["p-value"])}</td><td>{h["alpha"]}</td>'
        f'<td><b>{_esc(h["verdict"])}</b></td><td class="l">{_esc(h["reason"])}</td></tr>' for h in items)
    return ["<h2>Pre-registered hypotheses</h2>",
            f'<p class="small">Declared in the study file before it ran. Rule: {_esc(items[0]["test"])}.</p>',
            '<table><thead><tr><th class="l">hypothesis</th><th class="l">claim</th><th>pairs</th>'
            "<th>mean difference [CI]</th><th>median difference</th><th>p (Wilcoxon, one-sided)</th><th>alpha</th>"
            f'<th>verdict</th><th class="l">why</th></tr></thead><tbody>{rows}</tbody></table>']


def _robust(summary: dict[str, Any]) -> list[str]:
    f = "Net PnL [$]"
    rows = "".join(
        f'<tr><td class="l">{_esc(name)}</td><td>{num(v["figures"][f].get("median"))}</td>'
        f'<td>[{num(v["figures"][f].get("leave-one-trial-out mean low"))}, '
        f'{num(v["figures"][f].get("leave-one-trial-out mean high"))}]</td></tr>'
        for name, v in summary["variants"].items())
    pairs = "".join(
        f'<tr><td class="l">{_esc(name)} - {_esc(summary["baseline"])}</td><td>{num(p[f].get("median"))}</td>'
        f'<td>[{num(p[f].get("leave-one-pair-out mean low"))}, {num(p[f].get("leave-one-pair-out mean high"))}]'
        f'</td><td>{_p(p[f].get("Wilcoxon signed-rank p (two-sided)"))}</td></tr>'
        for name, p in summary["paired vs baseline"].items() if f in p)
    return ["<h2>Figures one trial cannot carry</h2>",
            '<p class="small">Net P&amp;L per trial [$]: the median, and the range of the mean when any one trial (or '
            "pair) is left out: a wide range says one month makes the mean. The Wilcoxon signed-rank test ranks "
            "the paired differences (scipy).</p>",
            '<table><thead><tr><th class="l">variant</th><th>median [$]</th><th>leave-one-out mean [$]</th></tr>'
            f"</thead><tbody>{rows}</tbody></table>",
            '<table><thead><tr><th class="l">paired</th><th>median difference [$]</th><th>leave-one-out mean '
            f"difference [$]</th><th>Wilcoxon p (two-sided)</th></tr></thead><tbody>{pairs}</tbody></table>"]


def _many(mc: dict[str, Any]) -> list[str]:
    out = ["<h2>Many comparisons: SPA, StepM, PBO</h2>",
           f'<p class="small">On {mc.get("days")} common test days; {_esc(mc.get("unit", ""))}. SPA (Hansen 2005): '
           "p-value of the null that no variant beats the benchmark; StepM (Romano and Wolf 2005): the variants "
           "shown better than it, family-wise (arch.bootstrap). PBO (Bailey et al. 2015): the probability that the "
           "best variant x seed in one half of the days ranks at or below the median in the other half.</p>"]
    if "reason" in mc:
        return [*out, f"<p>Not computed: {_esc(mc['reason'])}.</p>"]
    rows = []
    for key, r in mc.items():
        if not key.startswith("against"):
            continue
        if "reason" in r:
            rows.append(f'<tr><td class="l">{_esc(key)}</td><td colspan="4" class="l">{_esc(r["reason"])}</td></tr>')
            continue
        superior: list[str] = next((v for k, v in r.items() if k.startswith("StepM superior")), [])
        rows.append(f'<tr><td class="l">{_esc(key)}</td><td>{_p(r["SPA p-value (consistent)"])}</td>'
                    f'<td>{_p(r["SPA p-value (lower)"])} / {_p(r["SPA p-value (upper)"])}</td>'
                    f'<td class="l">{_esc(", ".join(superior) or "none")}</td><td>{r["days"]}</td></tr>')
    pbo = mc.get("PBO", {})
    return [*out, '<table><thead><tr><th class="l">benchmark</th><th>SPA p (consistent)</th><th>lower / upper</th>'
            '<th class="l">StepM: better than the benchmark (5%)</th><th>days</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>",
            f"<p>PBO: <b>{num(pbo.get('pbo'))}</b> over {pbo.get('strategies', '-')} strategies, "
            f"{pbo.get('days', '-')} days in {pbo.get('blocks', '-')} blocks ({pbo.get('splits', '-')} splits)"
            + (f"; {_esc(pbo['reason'])}" if "reason" in pbo else "") + ".</p>"]


def statistics_sections(summary: dict[str, Any]) -> list[str]:
    """The sections, in order: hypotheses (if declared), robust figures, many comparisons."""
    return [*_hypotheses(summary.get("hypotheses") or []), *_robust(summary),
            *_many(summary.get("many comparisons") or {"reason": "not computed"})]
