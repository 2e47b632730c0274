"""Headless Chromium for the report tests: open a page with a probe script, read what the probe wrote (the DevTools
driver is ``tests.browser``)."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.browser import chromium

QUIET = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
"""Flags that keep the browser from its own background traffic where it can."""


CHART_PROBE = """<script>
window.__errs = [];
window.addEventListener('error', function (e) { window.__errs.push('error: ' + (e.message || 'resource')); }, true);
window.addEventListener('securitypolicyviolation', function (e) { window.__errs.push('csp: ' + e.blockedURI); });
var __ce = console.error;
console.error = function () { window.__errs.push('console.error: ' + [].join.call(arguments, ' '));
                              __ce.apply(console, arguments); };
function __sleep(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }
async function __label(gd, kind) {  // hover the first point of that kind; Plotly throttles hovers (50 ms)
  var k = gd.data.findIndex(function (t) { return t.meta && t.meta.kind === kind && t.customdata &&
                                                  t.customdata.length; });
  if (k < 0) return null;
  Plotly.Fx.unhover(gd); await __sleep(120);
  Plotly.Fx.hover(gd, [{curveNumber: k, pointNumber: 0}]); await __sleep(120);
  var label = gd.querySelector('g.hovertext');
  return label ? label.textContent : null;
}
var __t = setInterval(async function () {
  var state = document.documentElement.dataset.charts;
  if (!state) return;
  clearInterval(__t);
  var out = {state: state, errs: window.__errs, charts: {}, hover: {},
             paint: performance.getEntriesByType('paint').map(function (e) { return [e.name, e.startTime]; }),
             drawn: window.chartsDrawnMs || null};
  for (const gd of document.querySelectorAll('.chart')) {
    out.charts[gd.id] = (gd.data || []).map(function (t, i) {
      var full = gd._fullData && gd._fullData[i];
      return {kind: t.meta && t.meta.kind, strategy: t.meta && t.meta.strategy, type: t.type,
              n: full && full.x ? full.x.length : null, codes: t.customdata ? [].slice.call(t.customdata) : null};
    });
    out.hover[gd.id] = {exit: await __label(gd, 'exit'), entry: await __label(gd, 'entry'),
                        move: await __label(gd, 'stop-move')};
  }
  var p = document.createElement('pre'); p.id = 'probe'; p.textContent = JSON.stringify(out);
  document.body.appendChild(p);
}, 20);
</script>"""
"""Once the page's charts are drawn (or failed): each chart's traces (kind, strategy, points drawn, reason codes)
and the hover label of the first exit, entry and stop move, written as JSON into ``<pre id="probe">``."""


def open_with_probe(page: Path, probe: str, tmp_path: Path, *flags: str, timeout: float = 180) -> tuple[Any, str]:
    """Open a copy of ``page`` with ``probe`` (a ``<script>``) first in ``<head>``; (the JSON the probe put in
    ``<pre id="probe">``, the browser's stderr)."""
    probed = page.with_name(page.stem + "_probe.html")
    probed.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>" + probe, 1), encoding="utf-8")
    cmd = [chromium(), *QUIET, f"--user-data-dir={tmp_path / 'chromium-profile'}", "--enable-logging=stderr",
           "--v=0", "--window-size=1280,2000", *flags, "--dump-dom", probed.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert m, "the probe did not write its result: " + proc.stderr[-2000:]
    return json.loads(html.unescape(m.group(1))), proc.stderr


def page_requests(net_log: Path) -> list[str]:
    """URLs the page itself asked for, from a Chromium ``--log-net-log`` file (the browser's own traffic has no
    origin as initiator and is left out; a ``file://`` page's requests have the opaque origin ``null``)."""
    log = json.loads(net_log.read_text(encoding="utf-8"))
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    starts = [e.get("params", {}) for e in log["events"] if e["type"] == start]
    return [p["url"] for p in starts if "url" in p and p.get("initiator") != "not an origin"]
