"""``hybrid-trader watch`` in a real headless Chromium while ``hybrid-trader run`` follows a growing bar file: the
page shows each bar within a second, its position and equity change as the executor trades, and no request leaves
127.0.0.1."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pandas as pd
import pytest

from hybrid_trader.live.executor import split_dates
from hybrid_trader.live.journal_read import JournalView
from tests.browser import Browser, chromium

ROOT = Path(__file__).resolve().parents[2]
POSITION = "document.getElementById('position').textContent"
EQUITY = "document.getElementById('equity').textContent"
WARMUP = 2000
"""Bars before the test day's open that the executor is fed first (the features' history)."""


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "hybrid_trader.cli.main", *args], env=env, text=True, **kw)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def watch(tmp_path):
    """``start(journal)``: the page's URL of a ``hybrid-trader watch`` started on a free port."""
    procs = []

    def start(journal: Path) -> str:
        proc = _cli("watch", str(journal), "--port", "0", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(proc)
        line = proc.stdout.readline()
        assert line.startswith("watch: http://127.0.0.1:"), line + proc.stderr.read()
        return line.split()[1]

    yield start
    for proc in procs:
        _stop(proc)


def test_page_says_why_when_the_journal_is_missing_and_shows_it_once_written(tmp_path, watch):
    chromium()
    from .journals import write_journal

    journal = tmp_path / "later.sqlite"
    url = watch(journal)
    with Browser(tmp_path / "profile") as browser:
        browser.goto(url)
        shown = browser.wait_for("!document.getElementById('problem').hidden && "
                                 "document.getElementById('problem').innerText")
        assert "journal not found" in shown and "Fix: give the --journal FILE" in shown
        write_journal(journal)
        browser.wait_for(f"{EQUITY} === '$50,080.00'", timeout_s=5)  # the journal's last account row
        assert browser.js(POSITION) == "LONG 1 @ 101.25"
        assert browser.js("document.getElementById('problem').hidden") is True


def test_page_follows_a_running_executor_within_a_second_and_stays_on_this_machine(tiny, tmp_path, watch):
    chromium()
    run, csv, _ = tiny
    lines = csv.read_text().splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    stamps = pd.to_datetime([r.split(",", 1)[0] for r in rows])
    first_test_day = pd.Timestamp(str(split_dates(run, "test")[0]))
    open_ = int((stamps < first_test_day + pd.Timedelta(hours=9, minutes=30)).sum())  # the test day's open
    start = open_ + 5  # the first decisions (the policy's first call loads it) before the page is timed
    growing, journal = tmp_path / "export.csv", tmp_path / "journal.sqlite"
    growing.write_text(header + "".join(rows[open_ - WARMUP:start]))
    executor = _cli("run", str(run), "--feed", f"follow:{growing}", "--journal", str(journal), "--split", "test",
                    "--live-from", "2000-01-01 00:00", "--max-bar-age", "1e9", "--idle-exit", "60", "--no-status",
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = watch(journal)
        with Browser(tmp_path / "profile") as browser:
            browser.goto(url)
            last_ms = browser.wait_for("window.__watch.lastBarMs", timeout_s=120)  # the executor is past the prefix
            want = int(pd.Timestamp(stamps[start - 1], tz="America/New_York").value // 1_000_000)
            browser.wait_for(f"window.__watch.lastBarMs === {want}", timeout_s=120)
            assert last_ms <= want
            # one bar at a time: from the line written (the feed polls each second) and from the bar's commit to the
            # journal, to the bar on the page
            seen = []
            with open(growing, "a") as f:
                for i in range(start, start + 15):
                    f.write(rows[i])
                    f.flush()
                    written = time.monotonic()
                    t = int(pd.Timestamp(stamps[i], tz="America/New_York").value // 1_000_000)
                    browser.wait_for(f"window.__watch.lastBarMs === {t}", timeout_s=10, every_s=0.005)
                    seen.append(time.monotonic() - written)
                journaled = browser.js("window.__watch.barToPageMs.slice(-15)")
                print(f"\nbar written -> on the page: median {statistics.median(seen) * 1000:.0f} ms, "
                      f"max {max(seen) * 1000:.0f} ms; journaled -> on the page: median "
                      f"{statistics.median(journaled):.0f} ms, max {max(journaled):.0f} ms (15 bars)")
                # the target is the page's part (journaled -> shown); the file's adds the feed's poll (1 s)
                assert statistics.median(journaled) < 1000 and max(journaled) < 2000, journaled
                assert statistics.median(seen) < 2.0, seen
                # then 30 bars at a time, until the page's position and equity have moved with the trades
                positions, equities = set(), set()
                for i in range(start + 15, len(rows), 30):
                    f.writelines(rows[i:i + 30])
                    f.flush()
                    last = min(i + 30, len(rows)) - 1
                    # sample once the page shows the chunk's last bar (a loaded machine lags; never a race)
                    shown = int(pd.Timestamp(stamps[last], tz="America/New_York").value // 1_000_000)
                    browser.wait_for(f"window.__watch.lastBarMs >= {shown}", timeout_s=60)
                    positions.add(browser.js(POSITION))
                    equities.add(browser.js(EQUITY))
                    if len(positions) > 2 and len(equities) > 2:
                        break
            t = int(pd.Timestamp(stamps[last], tz="America/New_York").value // 1_000_000)
            try:
                browser.wait_for(f"window.__watch.lastBarMs === {t}", timeout_s=60)
            except TimeoutError:
                server = json.load(urllib.request.urlopen(url + "api/state"))
                page = browser.js("JSON.stringify([window.__watch.updates, window.__watch.lastBarMs, "
                                  "window.__watch.errors, document.getElementById('link').textContent])")
                raise AssertionError(f"the last bar {t} is not on the page: page {page}, server seq "
                                     f"{server.get('seq')} ok {server.get('ok')} {server.get('problem')} last bar "
                                     f"{server.get('last_bar')}") from None
            time.sleep(0.5)  # the account row and fills committed after the last bar
            with JournalView(journal) as view:
                position = view.position_from_fills().qty
                trades = sum(1 for f in view.fills_since(0) if f.intent == "entry")
                equity = view.last_account().snapshot["equity"]
            positions.add(browser.js(POSITION))
            equities.add(browser.js(EQUITY))
            assert trades > 0, "the executor traded the test days"
            assert len(positions) >= 2 and len(equities) > 2, (positions, equities)  # the position and equity moved
            assert browser.js(EQUITY) == f"${equity:,.2f}"
            assert (browser.js(POSITION) == "FLAT") == (position == 0)
            assert browser.js("window.__watch.errors") == []
            assert browser.js("document.querySelectorAll('#price-chart .main-svg').length") > 0, "the chart drew"
            browser.pump()
            hosts = {urlsplit(u).hostname for u in browser.requests if not u.startswith(("data:", "about:"))}
            assert hosts == {"127.0.0.1"}, browser.requests
    finally:
        _stop(executor)
