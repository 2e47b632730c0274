"""The NinjaTrader path under the faults that could book a fill twice, stack a position, queue a second
CLOSEPOSITION or leave a position without its stop: each one booked once, refused or closed (fail closed).

Bridge-level (``NinjaTraderBridge``): a lost stop while the position file lags, a stop never acknowledged, an
entry in state UNKNOWN. Link-level (``BrokerLink`` across a restart on the same journal): a part fill, a stop move
journaled but not written, a CLOSEPOSITION still unread; an entry while NinjaTrader still shows the position the
paper side left by a stop NinjaTrader should have taken.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hybrid_trader.env.broker import EXIT_STOP, Broker
from hybrid_trader.live.broker_halts import CODE_EXIT_PENDING, CODE_FLAT_FAILED, CODE_UNPROTECTED
from hybrid_trader.live.broker_link import BrokerLink
from hybrid_trader.live.journal import Journal
from tests.live.fake_ninjatrader import FakeNinjaTrader
from tests.live.test_broker_link import IDENTITY, broker
from tests.live.test_ninjatrader import ACCOUNT, ENTRY, INSTRUMENT, Clock, bar, bridge_for


def fake(tmp_path: Path) -> FakeNinjaTrader:
    return FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)


def read_all(nt: FakeNinjaTrader) -> None:
    """NinjaTrader reads (and deletes) every order file waiting in incoming/."""
    for p in list(nt.incoming.glob("oif*.txt")):
        p.unlink()


def sent_lines(nt: FakeNinjaTrader) -> list[str]:
    return [line for p in sorted(nt.incoming.glob("oif*.txt")) for line in p.read_text().splitlines()]


def query(path: Path, sql: str, *args) -> list[tuple]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def filled_entry(tmp_path: Path, stop_file: str | None, position: str, **bridge_kw):
    """A live link whose entry NinjaTrader read and filled (LONG 1): the stop's state file as given (None: none)."""
    nt = fake(tmp_path)
    j = Journal(tmp_path / "j.sqlite", writer="test")
    j.claim(IDENTITY)
    link = BrokerLink(bridge_for(nt, **bridge_kw), j, broker())
    link.check(0, 0, replayed=False)
    j.record_order(ENTRY, 1, "entry", "BUY", 1, state="sent")
    link.entry(ENTRY, 1, 1, 21000.0, 10.0, 1)
    link.flush(live=True)
    read_all(nt)
    (nt.outgoing / f"{ENTRY}.txt").write_text("FILLED;1;21000\n")
    if stop_file is not None:
        (nt.outgoing / f"{ENTRY}-SL.txt").write_text(stop_file)
    (nt.outgoing / f"{ENTRY}-TP.txt").write_text("WORKING;0;0\n")
    nt.position_file.write_text(position)
    return nt, j, link


@pytest.mark.parametrize("stop_state", ["REJECTED", "CANCELLED"])
def test_a_lost_stop_is_closed_once_a_lagging_position_file_shows_the_position(tmp_path, stop_state):
    """The stop's file says REJECTED or CANCELLED while the position file still reads FLAT (it lags the order
    files): the check comes back at every poll, and closes once the position shows (before: marked handled at the
    first look, never closed)."""
    nt, j, link = filled_entry(tmp_path, f"{stop_state};0;0\n", "FLAT;0;0\n")
    link.check(2, 1, replayed=False)
    assert not any(line.startswith("CLOSEPOSITION") for line in sent_lines(nt))
    nt.position_file.write_text("LONG;1;21000\n")
    link.check(3, 1, replayed=False)
    link.check(4, 1, replayed=False)
    j.close()
    assert len([line for line in sent_lines(nt) if line.startswith("CLOSEPOSITION")]) == 1
    assert link.halted == ("broker:rejected" if stop_state == "REJECTED" else CODE_UNPROTECTED)
    assert (CODE_UNPROTECTED,) in query(tmp_path / "j.sqlite", "SELECT code FROM errors")


def test_a_stop_never_acknowledged_while_its_entry_filled_closes_the_position(tmp_path):
    """NinjaTrader refused the stop's line (no state file for it after ack_timeout_s; a refused line leaves only a
    line in its Log tab) but filled the entry: the position has no stop, so it is closed and entries halt."""
    clock = Clock()
    nt, j, link = filled_entry(tmp_path, None, "LONG;1;21000\n", clock=clock, ack_timeout_s=30)
    link.check(2, 1, replayed=False)
    assert not any(line.startswith("CLOSEPOSITION") for line in sent_lines(nt))  # not yet: within the timeout
    clock.now += 60
    link.check(3, 1, replayed=False)
    j.close()
    assert any(line.startswith("CLOSEPOSITION") for line in sent_lines(nt))
    assert link.halted == CODE_UNPROTECTED
    codes = {c for (c,) in query(tmp_path / "j.sqlite", "SELECT code FROM errors")}
    assert {"broker:no_ack", CODE_UNPROTECTED} <= codes


def test_an_entry_in_state_unknown_keeps_its_bracket(tmp_path):
    """UNKNOWN;0;0 is final but its fill count cannot be trusted (the position file shows LONG 1): the bracket is
    not cancelled as if the entry had never filled (the link halts on UNKNOWN)."""
    nt = fake(tmp_path)
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    read_all(nt)
    (nt.outgoing / f"{ENTRY}.txt").write_text("UNKNOWN;0;0\n")
    (nt.outgoing / f"{ENTRY}-SL.txt").write_text("WORKING;0;0\n")
    (nt.outgoing / f"{ENTRY}-TP.txt").write_text("WORKING;0;0\n")
    nt.position_file.write_text("LONG;1;21000\n")
    kinds = [e.kind for e in bridge.poll()]
    assert "UNKNOWN" in kinds and sent_lines(nt) == []


def test_a_never_filled_entry_still_has_its_bracket_cancelled(tmp_path):
    """The control: a CANCELLED entry with nothing filled leaves a bracket to cancel, and it is."""
    nt = fake(tmp_path)
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    read_all(nt)
    (nt.outgoing / f"{ENTRY}.txt").write_text("CANCELLED;0;0\n")
    bridge.poll()
    assert sent_lines(nt) == [f"CANCEL;;;;;;;;;;{ENTRY}-SL;;", f"CANCEL;;;;;;;;;;{ENTRY}-TP;;"]


def test_a_part_fill_booked_before_a_restart_is_not_booked_again(tmp_path):
    """1 of 3 filled and booked, the process killed, the other 2 filled meanwhile: the restart books 2 more at their
    own price (before: the order's whole 3 again under a new fill id, 4 booked for 3 filled)."""
    nt = fake(tmp_path)
    path = tmp_path / "j.sqlite"
    three = Broker(contracts=3, point_value=20.0, commission_per_side=0.0, slippage_points=0.0, tick_size=0.25,
                   stop_atr=1.0, target_atr=2.0, trail_atr=0.0)
    state = nt.outgoing / f"{ENTRY}.txt"
    with Journal(path, writer="test") as j:
        j.claim(IDENTITY)
        link = BrokerLink(bridge_for(nt), j, three)
        j.record_order(ENTRY, 1, "entry", "BUY", 3, state="sent")
        link.entry(ENTRY, 1, 3, 21000.0, 10.0, 1)
        link.flush(live=True)
        state.write_text("PARTFILLED;1;21000\n")
        nt.position_file.write_text("LONG;1;21000\n")
        link.check(2, 3, replayed=False)
    state.write_text("FILLED;3;21001\n")  # while it is down
    nt.position_file.write_text("LONG;3;21001\n")
    with Journal(path, writer="test") as j:
        BrokerLink(bridge_for(nt), j, three).check(3, 3, replayed=False)
    booked = query(path, "SELECT qty, price FROM fills WHERE source = 'broker' AND order_id = ?", ENTRY)
    assert booked == [(1, 21000.0), (2, 21001.5)]


def test_an_entry_waits_while_ninjatrader_still_shows_the_position_its_stop_should_have_closed(tmp_path):
    """The paper stop was touched (its feed printed the level), NinjaTrader's was not: within the grace the link
    holds entries (``broker:exit_pending``; before: an entry was sent, 2 contracts against the rules' 1), and when
    the grace runs out with NinjaTrader still long, the position is closed and the halt lasts."""
    nt = fake(tmp_path)
    with Journal(tmp_path / "j.sqlite", writer="test") as j:
        j.claim(IDENTITY)
        link = BrokerLink(bridge_for(nt), j, broker(), mismatch_bars=2, max_contracts=1)
        link.check(0, 0, replayed=False)
        j.record_order("e1", 0, "entry", "BUY", 1, state="sent")
        link.entry("e1", 1, 1, 21000.0, 10.0, 0)
        link.flush(live=True)
        nt.process(bar(21000, 21001, 20999, 21000))  # NinjaTrader fills e1: LONG 1, its stop at 20990
        link.check(1, 1, replayed=False)
        link.exit(EXIT_STOP, 2)
        link.flush(live=True)
        for t in (2, 3):
            link.check(t, 0, replayed=False)
            assert link.halted == CODE_EXIT_PENDING  # the executor decides no entry on these bars
        assert not any(line.startswith("CLOSEPOSITION") for line in sent_lines(nt))
        link.check(4, 0, replayed=False)  # the grace is over: NinjaTrader's position is not the paper one
    assert link.halted not in ("", CODE_EXIT_PENDING)
    assert any(line.startswith("CLOSEPOSITION") for line in sent_lines(nt)) and nt.position <= 1


class Killed(BaseException):
    """The process dies (kill -9) at this point."""


def test_a_stop_move_journaled_before_a_kill_is_sent_again_by_the_restart(tmp_path, monkeypatch):
    """A trailing stop move journaled (committed) and then killed before its CHANGE file: the restart's replay
    brings the mirror to the paper levels without sending, so the first live bar sends the CHANGE again (before:
    NinjaTrader's stop stayed at the old, wider level)."""
    from types import SimpleNamespace

    nt = fake(tmp_path)
    path = tmp_path / "j.sqlite"

    def paper():
        return SimpleNamespace(target_atr=2.0, qty=1, tick=0.25, side=0, stop=0.0, target=0.0,
                               levels=lambda side, ref, atr: (20990.0, 21020.0))

    def bars(link, b, replay: bool) -> None:
        link.check(0, 0, replayed=replay)
        link.entry("e1", 1, 1, 21000.0, 10.0, 0)
        link.flush(live=not replay)
        if not replay:
            nt.process(bar(21000, 21001, 20999, 21000))  # NinjaTrader fills e1
        b.side, b.stop, b.target = 1, 20990.0, 21020.0
        link.check(1, 1, replayed=replay)
        link.flush(live=not replay)
        b.stop = 20995.0  # the trailing stop moves
        link.check(2, 1, replayed=replay)
        link.flush(live=not replay)

    j = Journal(path, writer="test")
    j.claim(IDENTITY)
    j.record_order("e1", 0, "entry", "BUY", 1, state="sent")
    b = paper()
    bridge = bridge_for(nt)
    link = BrokerLink(bridge, j, b)

    def die(*a):
        raise Killed
    monkeypatch.setattr(bridge, "move_stop", die)
    with pytest.raises(Killed):
        bars(link, b, replay=False)
    j.close()
    assert query(path, "SELECT order_id, price FROM order_changes") == [("e1-SL", 20995.0)]
    assert nt.orders["e1-SL"].stop == 20990.0
    with Journal(path, writer="test") as j2:
        b2 = paper()
        link2 = BrokerLink(bridge_for(nt), j2, b2)
        bars(link2, b2, replay=True)
        link2.check(3, 1, replayed=False)
        assert link2.pending
        link2.flush(live=True)
        nt.process(bar(21000, 21001, 20999, 21000))
        assert not link2.pending
    assert nt.orders["e1-SL"].stop == 20995.0


def test_a_restart_waits_for_a_closeposition_still_unread_instead_of_queuing_another(tmp_path):
    """A CLOSEPOSITION written, then the process killed while NinjaTrader is not reading incoming/: the restart
    waits for that file (and halts when it is never read) instead of queuing a second one behind it."""
    nt = fake(tmp_path)
    path = tmp_path / "j.sqlite"

    def closes() -> list[str]:
        return sorted(p.name for p in nt.incoming.glob("oif*.txt") if p.read_text().startswith("CLOSEPOSITION"))

    with Journal(path, writer="test") as j:
        j.claim(IDENTITY)
        link = BrokerLink(bridge_for(nt), j, broker())
        link.check(0, 0, replayed=False)
        j.record_order("e1", 0, "entry", "BUY", 1, state="sent")
        link.entry("e1", 1, 1, 21000.0, 10.0, 0)
        link.flush(live=True)
        nt.process(bar(21000, 21001, 20999, 21000))  # LONG 1
        link.check(1, 1, replayed=False)
        link.exit("SESSION_END", 2)  # an exit NinjaTrader does not take itself
        link.flush(live=True)  # CLOSEPOSITION written; NinjaTrader is not reading now
    assert len(closes()) == 1
    with Journal(path, writer="test") as j:
        link = BrokerLink(bridge_for(nt), j, broker())
        link.flat_retries, link.sleep = 1, (lambda s: None)
        link.check(3, 0, replayed=False)
    assert len(closes()) == 1
    assert link.halted == CODE_FLAT_FAILED
