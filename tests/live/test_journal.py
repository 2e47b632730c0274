"""The SQLite journal: schema, idempotent orders, recovery reads, and surviving kill -9."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.live.journal import Journal, OrderPrices
from hybrid_trader.live.journal_read import SCHEMA_VERSION, to_ns
from hybrid_trader.live.journal_tx import WriteUnit

T0 = pd.Timestamp("2024-03-04 09:30", tz="America/New_York")


def _t(i: int) -> pd.Timestamp:
    return T0 + pd.Timedelta(minutes=i)


def test_journal_uses_wal_and_full_sync_when_opened(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as j:
        assert j._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert j._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert j.integrity_check() == "ok"


def test_record_order_returns_existing_row_when_order_id_repeats(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as j:
        first = j.record_order("o-1", _t(0), "entry", "BUY", 1, state="new")
        j.update_order_state("o-1", "sent")
        again = j.record_order("o-1", _t(5), "exit", "SELL", 3, state="new")
        assert j.count("orders") == 1
        assert again.state == "sent" and again.side == "BUY" and again.qty == 1
        assert again.bar_time_ns == first.bar_time_ns == to_ns(_t(0))


def test_open_orders_excludes_terminal_states_when_orders_finish(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as j:
        for i, oid in enumerate(("a", "b", "c", "d")):
            j.record_order(oid, _t(i), "entry", "BUY", 1)
        j.update_order_state("a", "filled")
        j.update_order_state("b", "cancelled")
        j.update_order_state("c", "sent")
        assert [o.order_id for o in j.open_orders()] == ["c", "d"]
        with pytest.raises(KeyError, match="zzz"):
            j.update_order_state("zzz", "sent")
        with pytest.raises(ValueError, match="not one of"):
            j.update_order_state("c", "exploded")


def test_position_from_fills_when_adding_reducing_and_reversing(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as j:
        assert j.position_from_fills().qty == 0
        j.record_order("b1", _t(0), "entry", "BUY", 2)
        j.record_fill("b1", 1, 100.0, _t(1), fill_id="f1")
        j.record_fill("b1", 1, 102.0, _t(1), fill_id="f2")
        assert not j.record_fill("b1", 1, 102.0, _t(1), fill_id="f2")  # replayed broker report: ignored
        pos = j.position_from_fills()
        assert (pos.qty, pos.avg_price) == (2, 101.0)
        j.record_order("s1", _t(2), "reverse", "SELL", 3)
        j.record_fill("s1", 3, 110.0, _t(3))
        pos = j.position_from_fills()
        assert (pos.qty, pos.avg_price) == (-1, 110.0)
        j.record_order("b2", _t(4), "exit", "BUY", 1)
        j.record_fill("b2", 1, 105.0, _t(5))
        assert j.position_from_fills().qty == 0 and j.position_from_fills().avg_price is None
        with pytest.raises(KeyError, match="nope"):
            j.record_fill("nope", 1, 1.0, _t(6))


def test_recovery_reads_return_latest_rows_when_reopened(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as j:
        assert j.last_bar_time() is None and j.last_account() is None
        j.record_bar(_t(0), (1, 2, 0.5, 1.5, 10))
        j.record_bar(_t(1), (1, 2, 0.5, 1.5, 10))
        j.record_bar(_t(2), (3, 2, 0.5, 1.5, 10), accepted=False, reason="high-below-low", message="high 2 < low 3")
        j.record_decision(_t(1), 1, [0.2, 0.7, 0.1], advice={"action": "BUY", "confidence": 0.8},
                          veto=None, rule_codes=["ok"], latency_ms=3.5)
        j.record_order("x", _t(1), "entry", "BUY", 1)
        j.record_account(_t(1), "active", {"balance": 50_000.0, "threshold": 47_500.0, "day_pnl": 0.0})
        j.record_error("feed", "bar rejected", _t(2))
    with Journal(path) as j:
        assert j.last_bar_time() == to_ns(_t(1))
        assert j.last_bar_time(accepted_only=False) == to_ns(_t(2))
        assert [o.order_id for o in j.orders_sent_for(_t(1))] == ["x"]
        assert j.orders_sent_for(_t(0)) == []
        acct = j.last_account()
        assert acct is not None and acct.status == "active" and acct.snapshot["threshold"] == 47_500.0
        assert j.count("decisions") == 1 and j.count("errors") == 1 and j.count("bars") == 3


def test_journal_refuses_to_open_when_schema_version_differs(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path):
        pass
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(UserError, match="schema version") as err:
        Journal(path)
    assert str(path) in str(err.value) and "fix:" in str(err.value)


def test_journal_refuses_file_when_it_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "bars.csv"
    path.write_text("timestamp,open,high,low,close,volume\n" * 200)
    with pytest.raises(UserError, match="not a journal") as err:
        Journal(path)
    assert str(path) in str(err.value)


_WRITER = textwrap.dedent("""
    import sys
    from hybrid_trader.live.journal import Journal
    with Journal(sys.argv[1]) as j:
        i = 0
        while True:
            j.record_bar(i, (1.0, 2.0, 0.5, 1.5, float(i)))
            j.record_order(f"o-{i}", i, "entry", "BUY", 1)
            j.record_fill(f"o-{i}", 1, 100.0 + i, i, fill_id=f"f-{i}")
            j.update_order_state(f"o-{i}", "filled")
            print(i, flush=True)
            i += 1
""")


def test_journal_is_consistent_when_writer_is_killed_mid_loop(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    last = -1
    deadline = time.monotonic() + 60
    while last < 150 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        last = int(line)
    os.kill(proc.pid, signal.SIGKILL)  # mid-write: the writer never pauses between transactions
    proc.wait()
    for line in proc.stdout:  # what it printed after the line read above, before it died: it did not wait for us
        last = int(line)
    proc.stdout.close()
    assert last >= 150, f"the writer stopped early (rc {proc.returncode})"

    with Journal(path) as j:
        assert j.integrity_check() == "ok"
        bars = j.count("bars")
        # every iteration printed was committed; at most the one after it is partly there
        assert last + 1 <= bars <= last + 2
        for i in range(last + 1):
            assert j.order(f"o-{i}") is not None and j.order(f"o-{i}").state == "filled"  # type: ignore[union-attr]
        assert j.last_bar_time() == bars - 1
        assert j.count("orders") in (bars - 1, bars)
        assert j.count("fills") <= j.count("orders")
        assert j.position_from_fills().qty == j.count("fills")


def test_journal_keeps_unreadable_bar_and_nan_advice_when_recorded(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as j:
        j.record_bar(None, (1.0, float("nan"), 0.5, 1.5, 3), accepted=False, reason="bad-timestamp",
                     message="line 7: cannot read the timestamp", raw="xx,yy,1,nan,0.5,1.5,3")
        j.record_decision(_t(0), 0, np.array([0.5, 0.25, 0.25], dtype=np.float32),
                          advice={"action": "HOLD", "confidence": float("nan"), "probs": np.array([1.0, 0.0])})
        assert j.last_bar_time() is None and j.last_bar_time(accepted_only=False) is None
        raw, high = j._db.execute("SELECT raw, high FROM bars").fetchone()
        assert raw.startswith("xx,yy") and high is None
        advice = j._db.execute("SELECT advice, probabilities FROM decisions").fetchone()
        assert '"confidence": null' in advice[0] and advice[1] == "[0.5, 0.25, 0.25]"
        with pytest.raises(ValueError, match="reason code"):
            j.record_bar(_t(1), (1, 2, 0.5, 1.5, 1), accepted=False)


def test_journal_upgrades_in_place_when_opening_a_version_1_journal(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as j:
        j.record_order("o-1", 0, "entry", "BUY", 1, state="sent")
        j.record_fill("o-1", 1, 100.0, 0, fill_id="o-1")
    db = sqlite3.connect(path)  # as version 1 wrote it: no fills.source, no errors.code
    db.executescript("ALTER TABLE fills DROP COLUMN source; ALTER TABLE errors DROP COLUMN code; "
                     "UPDATE schema_version SET version = 1;")
    db.close()
    from hybrid_trader.live.journal_read import read_journal

    assert read_journal(path)["fills"]["source"].tolist() == ["paper"], "read as it is"
    with Journal(path) as j:
        assert j.position_from_fills().qty == 1
        j.record_fill("o-1", 1, 101.0, 1, fill_id="o-1:broker:1", source="broker")
        j.record_error("broker", "rejected", 1, code="broker:rejected")
        assert j.position_from_fills().qty == 1 and j.position_from_fills("broker").qty == 1
    assert sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION


def test_journal_upgrades_in_place_when_opening_a_version_2_journal(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as j:
        j.record_bar(_t(0), (1, 2, 0.5, 1.5, 10))
    db = sqlite3.connect(path)  # as version 2 wrote it: no snapshots table
    db.executescript("DROP TABLE snapshots; UPDATE schema_version SET version = 2;")
    db.close()
    from hybrid_trader.live.journal_read import read_journal

    assert len(read_journal(path)["bars"]) == 1, "read as it is"
    with Journal(path) as j:
        assert j.last_snapshot() is None
        j.record_snapshot(_t(0), "key", b"state")
        assert j.last_snapshot() == (to_ns(_t(0)), "key", b"state")
    assert sqlite3.connect(path).execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION == 4


def test_snapshot_replaces_the_earlier_ones_when_recorded(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as j:
        for i in range(3):
            j.record_snapshot(_t(i), f"k{i}", bytes([i]) * 10)
        assert j.last_snapshot() == (to_ns(_t(2)), "k2", bytes([2]) * 10)
        assert j._db.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0] == 1


def test_bar_history_gives_the_accepted_bars_in_time_order_when_read_back(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as j:
        j.record_bar(_t(0), (1.0, 2.0, 0.5, 1.5, 10.0))
        j.record_bar(None, (9, 9, 9, 9, 9), accepted=False, reason="bad_time", raw="x")
        j.record_bar(_t(1), (1.25, 2.25, 0.75, 1.75, float("nan")))
        j.record_bar(_t(2), (3.0, 4.0, 2.0, 3.5, 5.0))
        h = j.bar_history(_t(1))
    assert h["time_ns"].tolist() == [to_ns(_t(0)), to_ns(_t(1))]
    assert h["o"].tolist() == [1.0, 1.25] and h["c"].tolist() == [1.5, 1.75]
    assert h["v"][0] == 10.0 and np.isnan(h["v"][1]), "a NaN volume (NULL in the journal) comes back as NaN"


def test_record_change_moves_the_price_and_keeps_a_row_when_an_order_is_changed(tmp_path):
    with Journal(tmp_path / "j.sqlite") as j:
        j.record_order("e-SL", 10, "stop", "SELL", 1, prices=OrderPrices("STOPMARKET", stop_price=100.0), state="sent")
        j.record_change("e-SL", 11, "stop_price", 101.25)
        j.record_change("e-SL", 12, "stop_price", 102.5)
        assert j.last_order("stop").stop_price == 102.5
        db = sqlite3.connect(tmp_path / "j.sqlite")
        changes = db.execute("SELECT order_id, bar_time_ns, price_field, price FROM order_changes ORDER BY id")
        assert changes.fetchall() == [("e-SL", 11, "stop_price", 101.25), ("e-SL", 12, "stop_price", 102.5)]
        db.close()
        with pytest.raises(KeyError, match="not in the journal"):
            j.record_change("nope", 13, "stop_price", 1.0)
        with pytest.raises(ValueError, match="neither stop_price nor limit_price"):
            j.record_change("e-SL", 13, "qty", 2.0)


def test_second_writer_is_refused_while_a_journal_is_open_and_admitted_after_close(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    first = Journal(path, writer="run runs/p2")
    with pytest.raises(UserError, match=rf"{path} is being written by this process, through another handle "
                                         rf"\(PID {os.getpid()}: run runs/p2\)"):
        Journal(path)
    first.close()
    first.close()  # a second close does nothing
    with Journal(path) as j:
        assert j.integrity_check() == "ok"


# ---- Ctrl-C at any line of a write ------------------------------------------------------------------------------
_JOURNAL_SOURCES = {Journal.__init__.__code__.co_filename, WriteUnit.__enter__.__code__.co_filename}
"""The journal's modules: its writes and their transactions (``live.journal_tx``)."""


def _traded_bars(j: Journal) -> None:
    """What the executor writes for two bars: a traded one in a batch, a lone order, a stop change, an untraded one."""
    j.begin()
    j.record_bar(_t(0), (1, 2, 0.5, 1.5, 10))
    j.record_order("a", _t(0), "entry", "BUY", 1)
    j.record_fill("a", 1, 100.0, _t(0), fill_id="fa")
    j.commit()
    j.record_order("s", _t(0), "stop", "SELL", 1, prices=OrderPrices("STOPMARKET", stop_price=90.0))
    j.record_change("s", _t(1), "stop_price", 95.0)
    j.begin()
    j.record_bar(_t(1), (1, 2, 0.5, 1.5, 10))
    j.record_account(_t(1), "active", {"balance": 50_000.0})
    j.commit()


class _InterruptAt:
    """A trace function raising KeyboardInterrupt at the ``at``-th line the journal's modules run (as Ctrl-C's handler
    does between two lines); with ``at`` None it only counts them."""

    def __init__(self, at: int | None) -> None:
        self.at, self.lines = at, 0

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename not in _JOURNAL_SOURCES:
            return None
        if event == "line":
            if self.lines == self.at:
                sys.settrace(None)
                raise KeyboardInterrupt
            self.lines += 1
        return self


def _interrupted_then_stopped(path: Path, at: int | None) -> bool:
    """The writes interrupted at line ``at``, then what the run does after Ctrl-C: the stop journaled and committed,
    the journal closed. True when the interrupt came."""
    j = Journal(path)
    tracer = _InterruptAt(at)
    interrupted = False
    sys.settrace(tracer)
    try:
        _traded_bars(j)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sys.settrace(None)
    j.record_error("stop", "flatten after the bar", _t(1), code="stop:flatten")
    j.commit()
    j.close()
    return interrupted


def test_a_ctrl_c_at_any_line_of_a_write_leaves_the_stop_journaled_and_every_write_whole(tmp_path: Path) -> None:
    counter = _InterruptAt(None)
    with Journal(tmp_path / "count.sqlite") as j:
        sys.settrace(counter)
        try:
            _traded_bars(j)
        finally:
            sys.settrace(None)
    assert counter.lines > 50, counter.lines
    for at in range(counter.lines):
        path = tmp_path / f"j{at}.sqlite"
        assert _interrupted_then_stopped(path, at), at
        with Journal(path) as j:
            assert j.integrity_check() == "ok"
            assert j.stops() == {to_ns(_t(1)): "flatten"}, at
            fills = j._db.execute("SELECT order_id FROM fills").fetchall()
            assert all(j.order(o) is not None for (o,) in fills), at
            changes = j._db.execute("SELECT price FROM order_changes").fetchall()
            stop = j.order("s")
            assert (stop is None and not changes) or stop.stop_price == (changes[-1][0] if changes else 90.0), at
