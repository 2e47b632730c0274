"""``hybrid-trader watch`` on journals it cannot show (yet): each a state that says why with the fix, never a blank
page, and read again as soon as it can be."""

from __future__ import annotations

import sqlite3
import time

import pytest
from starlette.testclient import TestClient

from hybrid_trader.cli.main import main
from hybrid_trader.live.journal import Journal
from hybrid_trader.watch.app import Watcher, create_app
from tests.watch.journals import IDENTITY, add_bar, write_journal


def _state(path) -> dict:
    with TestClient(create_app(Watcher(path), poll_s=0.02)) as client:
        assert "hybrid-trader watch" in client.get("/").text, "the page is served whatever the journal"
        return client.get("/api/state").json()


def _damaged(path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)


def _no_tables(path) -> None:
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()


def _schema(version: int):
    def write(path) -> None:
        write_journal(path)
        db = sqlite3.connect(path)
        db.execute("UPDATE schema_version SET version = ?", (version,))
        db.commit()
        db.close()
    return write


@pytest.mark.parametrize("make, problem, fix", [
    (None, "journal not found", "--journal FILE of `hybrid-trader run`"),
    (lambda p: p.write_bytes(b""), "an empty file (0 bytes), not a journal", "a journal holds at least its tables"),
    (_damaged, "the file is damaged or not a journal", "restore it from a backup"),
    (_no_tables, "not a journal: no such table: schema_version", "--journal FILE"),
    (_schema(99), "journal schema version 99 is not this program's version 4", "the hybrid-trader version"),
], ids=["missing", "empty-file", "damaged", "not-a-journal", "newer-schema"])
def test_state_says_what_is_wrong_and_the_fix_when_the_journal_cannot_be_read(tmp_path, make, problem, fix):
    path = tmp_path / "j.sqlite"
    if make is not None:
        make(path)
    s = _state(path)
    assert s["ok"] is False and s["problem"].startswith(problem), s["problem"]
    assert fix in s["fix"] and str(path) in s["detail"]


def test_an_older_journal_is_shown_as_it_is(tmp_path):
    path = write_journal(tmp_path / "j.sqlite", ninjatrader=True)
    db = sqlite3.connect(path)  # as version 1 wrote it: no fills.source, no errors.code
    db.executescript("ALTER TABLE fills DROP COLUMN source; ALTER TABLE errors DROP COLUMN code; "
                     "DROP TABLE identity; UPDATE schema_version SET version = 1;")
    db.close()
    s = _state(path)
    assert s["ok"] and s["schema_version"] == 1 and s["identity"] == {}
    assert s["position"]["qty"] == 1 and [f["source"] for f in s["fills"]] == ["paper"]
    assert s["ninjatrader"]["halted"] == "broker:halted: order rejected: no new entries", "a halt without its code"


def test_an_empty_journal_is_shown_waiting_for_its_first_bar(tmp_path):
    path = tmp_path / "j.sqlite"
    with Journal(path) as j:
        j.claim(IDENTITY)
    s = _state(path)
    assert s["ok"] and s["bars"] == [] and s["last_bar"] is None and s["account"] is None
    assert s["position"] == {"qty": 0, "avg_price": None} and s["decisions"] == [] and s["latency"] is None


def test_a_journal_mid_write_shows_its_last_commit_without_waiting(tmp_path):
    path = write_journal(tmp_path / "j.sqlite")
    with Journal(path) as j:
        j.begin()  # the executor's replay batch: rows written, not committed
        add_bar(j, 5)
        watcher = Watcher(path, min_read_s=0)
        started = time.monotonic()
        assert watcher.poll()
        assert time.monotonic() - started < 1.0, "the reader never waits for the writer"
        assert watcher.state["ok"] and watcher.state["last_bar"]["close"] == 104.5, "the last committed bar"
        j.commit()
    assert watcher.poll() and watcher.state["last_bar"]["close"] == 105.5
    watcher.close()


def test_the_page_recovers_when_a_missing_journal_appears(tmp_path):
    path = tmp_path / "j.sqlite"
    watcher = Watcher(path, min_read_s=0)
    assert watcher.poll() and not watcher.state["ok"]
    assert not watcher.poll(), "the same problem again: no new event"
    assert not path.exists(), "a missing journal is never created by the watcher"
    write_journal(path)
    assert watcher.poll() and watcher.state["ok"] and watcher.state["last_bar"]["close"] == 104.5
    watcher.close()


def test_a_journal_replaced_by_another_file_is_read_anew(tmp_path):
    path = write_journal(tmp_path / "j.sqlite")
    watcher = Watcher(path, min_read_s=0)
    assert watcher.poll() and watcher.state["counts"]["bars"] == 5
    (tmp_path / "old").mkdir()
    path.rename(tmp_path / "old" / "j.sqlite")
    write_journal(path, bars=2)
    assert watcher.poll() and watcher.state["counts"]["bars"] == 2
    watcher.close()


def test_cli_says_what_is_wrong_and_serves_the_page_that_says_so(tmp_path, capsys, monkeypatch):
    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append(sockets))
    missing = tmp_path / "nope.sqlite"
    assert main(["watch", str(missing), "--port", "0"]) == 0
    out = capsys.readouterr()
    assert f"warning: {missing}: journal not found" in out.err and "reads the journal again" in out.err
    assert out.out.startswith("watch: http://127.0.0.1:")
    served[0][0].close()


@pytest.mark.parametrize("args, message", [
    (["--last", "0"], "--last 0: at least 1"),
    (["--poll", "0"], "--poll 0.0: between 0.01 and 10 seconds"),
    (["--host", "no-such-host.invalid"], "--host no-such-host.invalid: not an address of this machine"),
])
def test_cli_refuses_options_it_cannot_serve_with(tmp_path, capsys, args, message):
    assert main(["watch", str(write_journal(tmp_path / "j.sqlite")), "--port", "0", *args]) == 2
    assert message in capsys.readouterr().err
