"""The HTML report (hybrid_trader.evaluation.report, `hybrid-trader report`), rendered in headless Chromium.

The static report (``--static``: PNG figures, no scripts) here; the interactive one in test_charts.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hybrid_trader.cli import main as cli_main
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.report import write_report
from tests.evaluation.browser import open_with_probe
from tests.evaluation.fakes import make_run_with_eval, write_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURES = ("equity", "drawdown", "trades", "daily_pnl")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    rd = tmp_path_factory.mktemp("run")
    write_run(rd, phase=3)
    make_run_with_eval(rd)
    return write_report(rd, static=True)


def test_report_writes_html_and_png_figures_next_to_it(report):
    assert report.name == "report.html" and report.parent.name == "test"
    for name in FIGURES:
        png = report.parent / f"report_{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC, name
    text = report.read_text()
    assert text.count('src="data:image/png;base64,') == len(FIGURES)


def test_report_is_self_contained(report):
    text = report.read_text()
    assert "<script" not in text.lower()
    assert "<link" not in text.lower()
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//|file:)""", text)
    assert "@import" not in text and "url(" not in text


def test_report_has_metrics_table_with_strategies_as_columns(report):
    text = report.read_text()
    header = re.search(r"<table><thead><tr><th class=\"l\">metric</th>(.*?)</tr></thead>", text).group(1)
    assert re.findall(r">([^<]+)</th>", header) == ["agent", "flat", "momentum", "random"]
    for row in ("Net PnL [$]", "Sharpe (ann.)", "PSR [%]", "Max drawdown [%]", "Win rate [%]", "Profit factor",
                "Apex verdict", "Seeds"):
        assert f">{row.replace('&', '&amp;')}</th>" in text, row
    assert "±" in text  # the random baseline is mean ± std over seeds


def test_report_fills_optional_sections_when_present(report):
    text = report.read_text()
    assert "LLM &amp; fusion statistics" in text and "LLM query rate [%]" in text
    assert "Sample decisions" in text
    assert "trend up &lt;strong&gt;&amp;amp; volume&lt;/strong&gt;" in text  # user text is escaped
    assert "<h2>Ablation</h2>" in text and "no risk veto" in text
    assert "<h2>Configuration</h2>" in text and "learning_rate: 0.0003" in text
    assert "<h2>Diagnosis of training</h2>" in text


def test_report_leaves_out_sections_without_data(tmp_path):
    rd = make_run_with_eval(tmp_path / "run", ablation=False, config=False, with_llm=False)
    text = write_report(rd).read_text()
    for section in ("LLM &amp; fusion", "Sample decisions", "Ablation", "Configuration", "Diagnosis"):
        assert section not in text


def test_report_shows_decisions_recorded_under_extra_decisions(tmp_path):
    from hybrid_trader.evaluation.results import save_results
    from tests.evaluation.fakes import fake_results, synthetic_prices

    prices = synthetic_prices(n_days=2, bars_per_day=30)
    results = fake_results(prices, n_random=1, with_llm=False)
    results[0].extra["decisions"] = [{"index": 12, "action": "BUY"}, {"index": 31, "action": "SELL"}]
    save_results(results, prices, tmp_path / "run" / "eval" / "test")
    text = write_report(tmp_path / "run").read_text()
    assert "Sample decisions" in text and "<td class=\"l\">SELL</td>" in text
    # an agent without trades still gets its (empty) trades figure
    results[0] = results[1].__class__("agent", None, results[1].equity, results[1].position, 50_000.0)
    save_results(results, prices, tmp_path / "run2" / "eval" / "test")
    assert (write_report(tmp_path / "run2", static=True).parent / "report_trades.png").is_file()


def test_report_with_out_file_puts_figures_next_to_it(tmp_path):
    rd = make_run_with_eval(tmp_path / "run", split="val")
    out = write_report(rd, split="val", out=tmp_path / "site" / "val.html", static=True)
    assert out == tmp_path / "site" / "val.html" and out.is_file()
    assert (tmp_path / "site" / "val_equity.png").is_file()


def test_report_explains_missing_evaluation(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(UserError, match="hybrid-trader evaluate"):
        write_report(tmp_path / "run")
    with pytest.raises(UserError, match="run directory not found"):
        write_report(tmp_path / "nope")


def test_report_command_prints_the_path(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli_main, "COMMAND_MODULES", ["hybrid_trader.cli.report"])
    rd = make_run_with_eval(tmp_path / "run")
    assert cli_main.main(["report", str(rd)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {rd / 'eval' / 'test' / 'report.html'}"
    text = (rd / "eval" / "test" / "report.html").read_text()
    assert 'class="chart-spec"' in text and not (rd / "eval" / "test" / "report_equity.png").exists()
    assert cli_main.main(["report", str(rd), "--static"]) == 0  # the PNGs, no scripts
    assert "<script" not in (rd / "eval" / "test" / "report.html").read_text()
    assert (rd / "eval" / "test" / "report_equity.png").is_file()
    capsys.readouterr()
    assert cli_main.main(["report", str(rd), "--split", "val"]) == 2
    assert "no evaluation of the val split" in capsys.readouterr().err


# ---- headless Chromium ------------------------------------------------------------------
# A probe injected at the top of <head> records script errors, failed resource loads and
# console.error calls, then on load writes the images' natural sizes, the tables and the
# errors into a <pre id="probe"> that --dump-dom prints. It also logs one console.error as
# a positive control, so the test knows that console capture works.
PROBE = """<script>
window.__errs = [];
window.addEventListener('error', function (e) {
  window.__errs.push('error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || 'resource'));
}, true);
var __ce = console.error;
console.error = function () { window.__errs.push('console.error: ' + [].join.call(arguments, ' '));
                              __ce.apply(console, arguments); };
window.addEventListener('load', function () {
  var imgs = [].map.call(document.images, function (i) {
    return {alt: i.alt, w: i.naturalWidth, h: i.naturalHeight, complete: i.complete}; });
  var rows = document.querySelectorAll('table tbody tr').length;
  var p = document.createElement('pre'); p.id = 'probe';
  p.textContent = JSON.stringify({imgs: imgs, tables: document.querySelectorAll('table').length, rows: rows,
                                  errs: window.__errs});
  document.body.appendChild(p);
  __ce.call(console, 'probe-control');
});
</script>"""


def _render(html_file: Path, tmp_path: Path) -> tuple[dict, str]:
    """Open ``html_file`` (with the probe) in headless Chromium: (probe results, browser console log)."""
    return open_with_probe(html_file, PROBE, tmp_path)


def _console_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if ":CONSOLE" in line]


def test_report_renders_figures_and_table_in_chromium_without_console_errors(report, tmp_path):
    probe, log = _render(report, tmp_path)
    assert len(probe["imgs"]) == len(FIGURES)
    for img in probe["imgs"]:
        assert img["complete"] and img["w"] > 300 and img["h"] > 100, img
    assert probe["tables"] >= 1 and probe["rows"] > 20
    assert probe["errs"] == []
    console = _console_lines(log)
    assert any("probe-control" in line for line in console), "console capture did not work:\n" + log[-2000:]
    assert [line for line in console if "probe-control" not in line] == []


def test_chromium_probe_catches_a_broken_image(report, tmp_path):
    # negative control: the same check fails for a report whose image does not load
    broken = tmp_path / "broken.html"
    broken.write_text(report.read_text().replace('src="data:image/png;base64,', 'src="data:image/png;base64,AAAA', 1))
    probe, _ = _render(broken, tmp_path)
    assert min(img["w"] for img in probe["imgs"]) == 0
    assert any(e.startswith("error") for e in probe["errs"])
