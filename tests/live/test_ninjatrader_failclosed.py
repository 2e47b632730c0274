"""The bridge fails closed: order ids per account and run, UNKNOWN terminal, partial fills at their own prices,
exact account matching, a lost position file, the connection state file."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.live.ati import position_file_matches
from hybrid_trader.live.journal import Journal
from hybrid_trader.live.ninjatrader import order_id, order_tag
from hybrid_trader.live.nt_outgoing import PositionLost
from tests.live.test_ninjatrader import ENTRY, bar, bridge_for, nt  # noqa: F401 (the fixture)

IDENTITY = {"run": "/runs/nq", "run_tag": "nq", "model": "m", "config": "c", "market": "NQ"}
T = datetime(2026, 11, 25, 14, 30, tzinfo=UTC)


def test_order_ids_differ_across_accounts_and_journals_and_repeat_on_a_restart(tmp_path):
    ids = {}
    for name in ("a", "b"):
        with Journal(tmp_path / f"{name}.sqlite", writer="test") as j:
            j.claim(IDENTITY)
            ids[name] = j.run_id()
    assert len(ids["a"]) == 8 and ids["a"] != ids["b"], "each new journal draws its own run id"
    with Journal(tmp_path / "a.sqlite", writer="test") as j:
        j.claim(IDENTITY)
        assert j.run_id() == ids["a"], "a restart on the same journal makes the same ids"
    made = {order_id(order_tag("nq", ids[j], account), T, "entry") for j in ids for account in ("Sim101", "PA1")}
    assert len(made) == 4, "another account's or a re-run's entry is never 'already sent'"
    assert order_id(order_tag("nq", ids["a"], "Sim101"), T, "entry") == f"Sim101-{ids['a']}-nq-20261125T143000-entry"
    assert order_tag("nq", "", "Sim101") == "nq", "a journal that holds orders of before keeps their names"


def test_a_journal_with_orders_of_before_keeps_their_ids_when_claimed(tmp_path):
    with Journal(tmp_path / "j.sqlite", writer="test") as j:
        j.record_order("nq-20261125T143000-entry", int(T.timestamp() * 1e9), "entry", "BUY", 1)
        j.claim(IDENTITY)
        assert j.run_id() == ""


def test_unknown_state_is_terminal_and_reported_once_when_ninjatrader_writes_it(nt):  # noqa: F811
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    (nt.outgoing / f"{ENTRY}.txt").write_text("UNKNOWN;0;0\n")
    events = [e for e in bridge.poll() if e.kind == "UNKNOWN"]
    assert [e.order_id for e in events] == [ENTRY] and "UNKNOWN" in events[0].message
    assert bridge.order_state(ENTRY).is_terminal
    (nt.outgoing / f"{ENTRY}.txt").write_text("garbage that is never read again\n")
    assert [e for e in bridge.poll() if e.kind == "UNKNOWN"] == []


def test_each_partial_fill_is_reported_at_its_own_price_when_the_average_moves(nt):  # noqa: F811
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 3, stop_price=20990, target_price=21030)
    state = nt.outgoing / f"{ENTRY}.txt"
    state.write_text("PARTFILLED;1;21000\n")
    first = [e for e in bridge.poll() if e.kind == "FILL"]
    state.write_text("FILLED;3;21001.5\n")  # 1 at 21000, then 2 at 21002.25: the average is 21001.5
    second = [e for e in bridge.poll() if e.kind == "FILL"]
    assert [(e.new_qty, e.price) for e in first] == [(1, 21000.0)]
    assert [(e.new_qty, e.price, e.avg_price) for e in second] == [(2, 21002.25, 21001.5)]


@pytest.mark.parametrize("other", ["PA_Sim101", "APEX_Sim101", "X_Sim101"])
def test_a_position_file_of_an_account_whose_name_ends_with_ours_is_not_ours(other):
    name = f"NQ 12-26 Globex_{other}_Position.txt"
    assert not position_file_matches(name, "Sim101", "NQ 12-26")
    assert position_file_matches(name, other, "NQ 12-26")


def test_a_position_file_that_disappears_is_unknown_not_flat_and_keeps_the_fills(nt):  # noqa: F811
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    assert bridge.position().qty == 1
    nt.position_file.unlink()  # NinjaTrader restarted: it empties outgoing/
    with pytest.raises(PositionLost) as err:
        bridge.poll()
    assert "unknown, not flat" in str(err.value) and str(nt.outgoing) in str(err.value)
    nt.position_file.write_text("LONG;1;21000\n")
    assert [e.kind for e in bridge.poll() if e.kind == "FILL"] == ["FILL"], "the fill read before is not lost"


def test_comma_decimals_in_the_position_file_are_an_error_naming_the_value(nt):  # noqa: F811
    nt.position_file.write_text("LONG;1;21000,25\n")
    with pytest.raises(UserError) as err:
        bridge_for(nt).poll()
    assert "'21000,25'" in str(err.value) and "decimal point" in str(err.value)


def test_connection_state_is_read_from_the_named_connection_file(nt):  # noqa: F811
    assert bridge_for(nt).connection_state() is None, "no connection named: not read"
    bridge = bridge_for(nt, connection="Rithmic")
    assert bridge.connection_state() is None, "not written yet"
    (nt.outgoing / "Rithmic.txt").write_text("DISCONNECTED\n")
    assert bridge.connection_state() == "DISCONNECTED"
    (nt.outgoing / "Rithmic.txt").write_text("CONNECTED\n")
    assert bridge.connection_state() == "CONNECTED"
    (nt.outgoing / "Rithmic.txt").write_text("MAYBE\n")
    with pytest.raises(UserError) as err:
        bridge.connection_state()
    assert "'MAYBE'" in str(err.value) and "Rithmic.txt" in str(err.value)



def test_the_journal_books_each_partial_fill_at_its_own_price_when_the_link_polls(nt, tmp_path):  # noqa: F811
    from types import SimpleNamespace

    from hybrid_trader.live.broker_link import BrokerLink

    bridge = bridge_for(nt)
    with Journal(tmp_path / "j.sqlite", writer="test") as j:
        j.claim(IDENTITY)
        link = BrokerLink(bridge, j, SimpleNamespace(target_atr=1.0, qty=3, tick=0.25))  # type: ignore[arg-type]
        j.record_order(ENTRY, 1, "entry", "BUY", 3, state="sent")
        bridge.enter(ENTRY, "BUY", 3, stop_price=20990, target_price=21030)
        state = nt.outgoing / f"{ENTRY}.txt"
        state.write_text("PARTFILLED;1;21000\n")
        link.check(2, 3, replayed=False)
        state.write_text("FILLED;3;21001.5\n")
        link.check(3, 3, replayed=False)
    db = sqlite3.connect(tmp_path / "j.sqlite")
    booked = db.execute("SELECT qty, price FROM fills WHERE source = 'broker' ORDER BY id").fetchall()
    db.close()
    assert booked == [(1, 21000.0), (2, 21002.25)], "not 2 at the cumulative average 21001.5"
