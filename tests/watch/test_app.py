"""The dashboard's server (hybrid_trader.watch.app) in Starlette's TestClient: its JSON and events, read-only."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from hybrid_trader.cli.main import main
from hybrid_trader.live.journal import Journal
from hybrid_trader.live.journal_read import JournalView
from hybrid_trader.watch.app import Watcher, create_app

from .journals import add_bar, resume, write_journal


def _client(path: Path, **kw) -> TestClient:
    return TestClient(create_app(Watcher(path, **kw), poll_s=0.02))


def _events(lines, n: int, timeout_s: float = 5.0) -> list[dict]:
    """The next ``n`` states of an open event stream's ``iter_lines()``."""
    out, start = [], time.monotonic()
    for line in lines:
        if line.startswith("data: "):
            out.append(json.loads(line[6:]))
            if len(out) == n:
                return out
        assert time.monotonic() - start < timeout_s, "no event in time"
    raise AssertionError("the stream ended")


def test_state_shows_position_orders_account_and_decisions_when_the_journal_holds_them(tmp_path):
    path = write_journal(tmp_path / "j.sqlite")
    with _client(path, last=3) as client:
        s = client.get("/api/state").json()
    assert s["ok"] and s["identity"]["run_tag"] == "p2" and s["schema_version"] == 4
    assert s["position"] == {"qty": 1, "avg_price": 101.25, "open_points": 104.5 - 101.25}
    assert [o["order_id"] for o in s["open_orders"]] == ["p2-entry-SL"] and s["open_orders"][0]["stop"] == 95.0
    assert s["account"]["equity"] == 50_080.0 and s["account"]["threshold"] == 47_500.0
    assert s["account"]["day_limit"] == 49_000.0 and s["account_series"]["equity"][-1] == 50_080.0
    assert len(s["bars"]) == 5 and s["bars"][-1][4] == 104.5 and s["last_bar"]["close"] == 104.5
    assert [f["intent"] for f in s["fills"]] == ["entry"]
    last = s["decisions"][-1]
    assert len(s["decisions"]) == 3 and last["action"] == "BUY" and last["rule_codes"] == ["fusion:agree"]
    assert last["probabilities"][0] == ["BUY", 0.7] and last["advice"]["direction"] == "long"
    assert s["latency"]["n"] == 5 and s["latency"]["max_ms"] == pytest.approx(0.44)
    assert s["ninjatrader"] is None, "a paper run mirrors nothing"


def test_state_shows_ninjatraders_halt_until_a_restart_resumes(tmp_path):
    path = write_journal(tmp_path / "j.sqlite", ninjatrader=True)
    watcher = Watcher(path, min_read_s=0)
    assert watcher.poll()
    nt = watcher.state["ninjatrader"]
    assert nt["halted"].startswith("broker:rejected") and nt["position"] == 1
    assert nt["last_error"]["code"] == "broker:rejected"
    assert [e["where"] for e in watcher.state["errors"]] == ["broker", "halt"]
    resume(path)
    assert watcher.poll() and watcher.state["ninjatrader"]["halted"] == ""
    watcher.close()


def test_events_push_a_new_state_within_a_second_when_the_executor_commits_a_bar(tmp_path):
    path = write_journal(tmp_path / "j.sqlite")
    with _client(path) as client, client.stream("GET", "/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        (first,) = _events(lines, 1)
        assert first["last_bar"]["close"] == 104.5
        with Journal(path) as j:  # the writer appends while the page listens
            add_bar(j, 5, equity=49_900.0)
        appended = time.monotonic()
        (second,) = _events(lines, 1)
        while second["account"]["equity"] != 49_900.0:  # the bar's rows are three commits: maybe three events
            (second,) = _events(lines, 1)
        assert time.monotonic() - appended < 1.0
    assert second["seq"] > first["seq"] and second["last_bar"]["close"] == 105.5


def test_page_and_its_scripts_are_served_locally_when_asked(tmp_path):
    path = write_journal(tmp_path / "j.sqlite")
    with _client(path) as client:
        page = client.get("/")
        assert page.status_code == 200
        for element in ('id="position"', 'id="equity"', 'id="to-threshold"', 'id="to-day-limit"', 'id="decisions"',
                        'id="orders"', 'id="ninjatrader"', 'id="problem"', 'id="latency"'):
            assert element in page.text, element
        assert "http" not in page.text.replace("http-equiv", ""), "no address off this server"
        js = client.get("/static/watch.js")
        assert js.status_code == 200 and "EventSource" in js.text
        plotly = client.get("/static/plotly.min.js")
        assert plotly.status_code == 200 and len(plotly.content) > 1_000_000
        assert client.get("/static/../app.py").status_code == 404
        assert client.get("/static/state.py").status_code == 404


def test_watching_never_writes_the_journal_nor_takes_its_lock(tmp_path):
    path = write_journal(tmp_path / "j.sqlite")
    lock = tmp_path / "j.sqlite.lock"  # the writer's lock file, left by the writer
    before, mtime, lock_stat = path.read_bytes(), path.stat().st_mtime_ns, lock.stat()
    watcher = Watcher(path, min_read_s=0)
    with TestClient(create_app(watcher, poll_s=0.01)) as client:
        for _ in range(3):
            assert client.get("/api/state").json()["ok"]
            time.sleep(0.02)
        assert (lock.stat().st_mtime_ns, lock.stat().st_size) == (lock_stat.st_mtime_ns, lock_stat.st_size), \
            "the writer's lock file is the executor's alone"
        assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
        with JournalView(path) as view:  # the watcher's kind of connection (its own is its poller thread's)
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                view._db.execute("INSERT INTO errors (time_ns, location, message) VALUES (0, 'x', 'y')")
            with view.reading(), Journal(path) as j:  # mid-read: the writer takes its lock, never waits
                started = time.monotonic()
                add_bar(j, 5)
                assert time.monotonic() - started < 5.0, "the writer waited for the reader"
        deadline = time.monotonic() + 2
        while client.get("/api/state").json()["last_bar"]["close"] != 105.5:
            assert time.monotonic() < deadline, "the new bar never showed"
            time.sleep(0.02)
    assert watcher._view is None, "the connection is closed at shutdown"


def test_cli_refuses_a_port_in_use_with_the_fix(tmp_path, capsys):
    import socket

    path = write_journal(tmp_path / "j.sqlite")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        assert main(["watch", str(path), "--port", str(port)]) == 2
    finally:
        busy.close()
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is in use" in err and f"--port {port + 1}" in err


def test_cli_warns_when_listening_beyond_this_machine_and_says_its_address(tmp_path, capsys, monkeypatch):
    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append(sockets))
    path = write_journal(tmp_path / "j.sqlite")
    assert main(["watch", str(path), "--host", "0.0.0.0", "--port", "0"]) == 0
    out = capsys.readouterr()
    assert "warning: listening on 0.0.0.0" in out.err and "ssh -L" in out.err
    assert out.out.startswith("watch: http://0.0.0.0:") and "read-only" in out.out
    served[0][0].close()
    assert main(["watch", str(path), "--port", "0"]) == 0
    out = capsys.readouterr()
    assert "warning" not in out.err and out.out.startswith("watch: http://127.0.0.1:")
    served[1][0].close()


def test_a_journal_that_keeps_changing_is_read_at_most_every_min_read_s(tmp_path):
    path = write_journal(tmp_path / "j.sqlite")
    watcher = Watcher(path, min_read_s=60)
    assert watcher.poll()
    with Journal(path) as j:
        add_bar(j, 5)
    assert not watcher.poll() and watcher.state["last_bar"]["close"] == 104.5, "read moments ago: not again yet"
    watcher.min_read_s = 0
    assert watcher.poll() and watcher.state["last_bar"]["close"] == 105.5, "the change is read at the next poll"
    watcher.close()
