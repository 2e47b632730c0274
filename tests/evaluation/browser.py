"""Headless Chromium for the report tests: open a page with a probe script, read what the probe wrote."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

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


def chromium() -> str:
    """The Chromium executable; skips the test (with the reason) when none is installed."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium not installed (apt-get install -y chromium)")


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


class DevTools:
    """Chromium driven over ``--remote-debugging-pipe`` (the DevTools protocol, no client library): a page opened in
    real time, whose state a test reads with :meth:`evaluate` once it is ready."""

    def __init__(self, url: str, tmp_path: Path, *flags: str) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds() -> None:  # the browser reads commands on fd 3 and writes answers on fd 4
            commands, answers = os.dup(to_chrome_r), os.dup(from_chrome_w)  # copies first: either may be 3 or 4
            os.dup2(commands, 3)
            os.dup2(answers, 4)

        self.proc = subprocess.Popen(
            [chromium(), *QUIET, "--remote-debugging-pipe", f"--user-data-dir={tmp_path / 'chromium-devtools'}",
             "--window-size=1280,2000", *flags, url],
            preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        try:
            self._open(url)
        except BaseException:
            self.close()
            raise

    def _open(self, url: str) -> None:
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the page target starts blank, then loads ``url``
            try:
                if self.evaluate("location.href") == url:
                    return
            except AssertionError:  # its context went away while navigating
                pass
            time.sleep(0.05)
        raise AssertionError(f"the browser did not open {url}")

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}, **({"sessionId": session} if session else {})}
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self._buf:
                chunk = os.read(self._from_chrome, 1 << 16)
                assert chunk, "the browser closed its DevTools pipe"
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._id:
                assert "error" not in answer, answer
                return answer["result"]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                "returnByValue": True}, session=self.session)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def close(self) -> None:
        with contextlib.suppress(AssertionError, OSError):  # the browser may be gone already
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        os.close(self._to_chrome)
        os.close(self._from_chrome)
