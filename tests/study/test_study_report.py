"""The study's report page (study.report): tables, and interactive charts unless --static."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pandas as pd

from hybrid_trader.study.report import write_study_report
from hybrid_trader.study.spec import load_study
from hybrid_trader.study.summary import PAIRED_FIGURES, SUMMARY_FIGURES, summarize_study
from tests.study.test_study import study_file


def _study(tmp_path):
    spec = load_study(study_file(tmp_path))
    rows = []
    for k, v in enumerate(spec.variants):
        for seed in spec.seeds:
            row = {"trial": f"{v.name}-s{seed}", "variant": v.name, "seed": seed, "fold": 0, "status": "finished",
                   "Apex verdict": "neither", "daily_returns": [0.01 * seed, -0.02, 0.03 * (k + 1)]}
            row.update({f: 100.0 * (k + 1) + seed for f in SUMMARY_FIGURES})
            rows.append(row)
    rows.append({"trial": "fast-s9", "variant": "fast", "seed": 9, "fold": 0, "status": "failed", "error": "boom"})
    return spec, summarize_study(spec, rows), pd.DataFrame([{k: v for k, v in r.items() if k != "daily_returns"}
                                                     for r in rows])


def _spec_of(html: str, chart_id: str) -> dict:
    m = re.search(rf'data-target="{chart_id}">(.*?)</script>', html, re.S)
    assert m, chart_id
    return json.loads(m.group(1))


def test_study_report_charts_each_variants_trials_and_the_paired_differences(tmp_path):
    spec, summary, table = _study(tmp_path)
    html = write_study_report(tmp_path, spec, summary, table).read_text()
    assert html.count('id="plotly-js-gz"') == 1
    boxes = _spec_of(html, "study-distributions")["data"]
    figures = [f for f in SUMMARY_FIGURES if f in table.columns]
    assert len(boxes) == len(figures) * len(spec.variants)  # one box per figure and variant
    assert {b["name"] for b in boxes} == {v.name for v in spec.variants}
    (forest,) = _spec_of(html, "study-forest")["data"][:1]
    assert forest["y"] == [v.name for v in spec.variants if v.name != spec.baseline]
    assert forest["meta"] == {"kind": "forest", "figure": PAIRED_FIGURES[0]}
    x = np.frombuffer(base64.b64decode(forest["x"]["bdata"]), dtype=forest["x"]["dtype"])  # a typed array
    assert x.tolist() == [summary["paired vs baseline"][n][PAIRED_FIGURES[0]]["mean difference"] for n in forest["y"]]


def test_static_study_report_has_tables_and_no_scripts(tmp_path):
    spec, summary, table = _study(tmp_path)
    html = write_study_report(tmp_path, spec, summary, table, static=True).read_text()
    assert "<script" not in html and "Paired with the baseline" in html and "boom" in html
