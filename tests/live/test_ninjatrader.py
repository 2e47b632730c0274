"""The NinjaTrader 8 ATI bridge against a fake NinjaTrader that follows the documented file protocol."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import subprocess
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.live import ati
from hybrid_trader.live.ati import BrokerPosition, instrument_aliases, position_file_matches
from hybrid_trader.live.ninjatrader import NinjaTraderBridge, bracket_ids, order_id
from tests.live.fake_ninjatrader import FakeBar, FakeNinjaTrader

ACCOUNT = "Sim101"
INSTRUMENT = "NQ 12-26"
ENTRY = "run1-20261125T143000-entry"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def nt(tmp_path: Path) -> FakeNinjaTrader:
    return FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)


def bridge_for(nt: FakeNinjaTrader, **kwargs) -> NinjaTraderBridge:
    kwargs.setdefault("sleep", lambda s: None)
    return NinjaTraderBridge(nt.nt_dir, ACCOUNT, INSTRUMENT, **kwargs)


def bar(o: float, h: float, low: float, c: float) -> FakeBar:
    return FakeBar(o, h, low, c)


def oif_files(nt: FakeNinjaTrader) -> list[Path]:
    return sorted(p for p in nt.incoming.iterdir() if fnmatch.fnmatch(p.name, "oif*.txt"))


# --- what is written ---------------------------------------------------------------------------------------------


def test_entry_writes_one_place_line_per_order_when_entering(nt):
    bridge = bridge_for(nt)
    b = bridge.enter(ENTRY, "BUY", 2, stop_price=20990.25, target_price=21030.5)
    files = oif_files(nt)
    assert len(files) == 1 and b.sent
    assert files[0].name.startswith("oif") and files[0].name.endswith(f"_{ENTRY}.txt")
    lines = files[0].read_text().splitlines()
    assert lines == [
        f"PLACE;Sim101;NQ 12-26;BUY;2;MARKET;0;0;GTC;;{ENTRY};;",
        f"PLACE;Sim101;NQ 12-26;SELL;2;STOPMARKET;0;20990.25;GTC;{ENTRY}-OCO;{ENTRY}-SL;;",
        f"PLACE;Sim101;NQ 12-26;SELL;2;LIMIT;21030.5;0;GTC;{ENTRY}-OCO;{ENTRY}-TP;;",
    ]
    assert all(line.count(";") == 12 for line in lines)  # 13 fields, as the help guide's templates
    assert (b.stop_id, b.target_id, b.oco_id) == bracket_ids(ENTRY) == (f"{ENTRY}-SL", f"{ENTRY}-TP", f"{ENTRY}-OCO")


def test_sell_entry_mirrors_the_bracket_when_side_is_sell(nt):
    bridge_for(nt).enter(ENTRY, "SELL", 1, stop_price=21010, target_price=20950)
    lines = oif_files(nt)[0].read_text().splitlines()
    assert lines[1].startswith("PLACE;Sim101;NQ 12-26;BUY;1;STOPMARKET;0;21010;")
    assert lines[2].startswith("PLACE;Sim101;NQ 12-26;BUY;1;LIMIT;20950;0;")


def test_close_cancel_and_move_stop_write_the_documented_layouts_when_called(nt):
    bridge = bridge_for(nt)
    bridge.close(ENTRY)
    bridge.move_stop(ENTRY, 21000)
    bridge.cancel(f"{ENTRY}-TP")
    texts = [p.read_text().splitlines() for p in oif_files(nt)]  # oif<n>_...: n counts up
    assert [t for ts in texts for t in ts] == [
        "CLOSEPOSITION;Sim101;NQ 12-26;;;;;;;;;;",
        f"CANCEL;;;;;;;;;;{ENTRY}-SL;;",
        f"CANCEL;;;;;;;;;;{ENTRY}-TP;;",
        f"CHANGE;;;;0;;0;21000;;;{ENTRY}-SL;;",
        f"CANCEL;;;;;;;;;;{ENTRY}-TP;;",
    ]
    assert len({p.name for p in oif_files(nt)}) == 3  # unique names: the help guide warns of locking otherwise


def test_bad_bracket_is_refused_when_the_stop_is_on_the_winning_side(nt):
    bridge = bridge_for(nt)
    with pytest.raises(UserError, match="stop on the losing side"):
        bridge.enter(ENTRY, "BUY", 1, stop_price=21050, target_price=21000)
    with pytest.raises(UserError, match="quantity"):
        bridge.enter(ENTRY, "BUY", 0, stop_price=20990, target_price=21010)
    assert oif_files(nt) == []


@pytest.mark.parametrize("bad", ["", "a_b", "a b", "../x", "x;y", "-x", "a" * 65, "é"])
def test_order_id_is_refused_when_it_is_not_safe_for_a_file_name(nt, bad):
    with pytest.raises(UserError, match="order id"):
        bridge_for(nt).enter(bad, "BUY", 1, stop_price=1, target_price=2)
    assert oif_files(nt) == []


def test_oif_is_never_visible_half_written_when_written(nt, monkeypatch):
    seen: list[tuple[str, list[str]]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def spy_fsync(fd):
        # the bytes are in the temp file now: nothing NinjaTrader would read may exist yet
        seen.append(("fsync", [p.name for p in oif_files(nt)]))
        return real_fsync(fd)

    def spy_replace(src, dst):
        seen.append(("replace", [Path(src).name, Path(dst).name]))
        return real_replace(src, dst)

    monkeypatch.setattr(ati.os, "fsync", spy_fsync)
    monkeypatch.setattr(ati.os, "replace", spy_replace)
    bridge_for(nt).enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21010)
    assert seen[0] == ("fsync", [])
    kind, (temp, final) = seen[1]
    assert kind == "replace"
    assert not fnmatch.fnmatch(temp.lower(), "oif*.txt") and fnmatch.fnmatch(final, "oif*.txt")
    assert [p.name for p in nt.incoming.iterdir()] == [final]  # the temp file is gone


def test_failed_write_leaves_no_file_when_the_rename_fails(nt, monkeypatch):
    bridge = bridge_for(nt)

    def broken(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr(ati.os, "replace", broken)
    with pytest.raises(UserError, match="cannot write"):
        bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21010)
    assert list(nt.incoming.iterdir()) == []


def test_stale_temp_file_is_removed_when_a_bridge_starts(nt):
    (nt.incoming / ".pending-deadbeef.tmp").write_text("PLACE;Sim101;NQ 12-26;BUY;1;MARKET")
    bridge_for(nt)
    assert list(nt.incoming.iterdir()) == []


# --- what is read back -------------------------------------------------------------------------------------------


def test_fill_and_position_read_back_when_the_fake_fills_the_entry(nt):
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 2, stop_price=20990, target_price=21030)
    nt.process(bar(21000.25, 21005, 20995, 21002))
    assert oif_files(nt) == []  # NinjaTrader deletes what it read
    state = bridge.order_state(ENTRY)
    assert (state.state, state.filled_qty, state.avg_price) == ("FILLED", 2, 21000.25)
    assert bridge.order_state(f"{ENTRY}-SL").state == "WORKING"
    assert bridge.order_state(f"{ENTRY}-TP").state == "WORKING"
    position = bridge.position()
    assert (position.side, position.qty, position.avg_price, position.signed_qty) == ("LONG", 2, 21000.25, 2)
    assert position.known
    assert nt.position_file.name == "NQ 12-26 Globex_Sim101_Position.txt"
    events = bridge.poll()
    fills = [e for e in events if e.kind == "FILL"]
    assert [(e.order_id, e.new_qty, e.avg_price) for e in fills] == [(ENTRY, 2, 21000.25)]
    assert [(e.kind, e.state, e.filled_qty) for e in events if e.kind == "POSITION"] == [("POSITION", "LONG", 2)]
    assert bridge.poll() == []  # nothing new


def test_oco_stop_fills_and_cancels_the_target_when_a_bar_crosses_the_stop(nt):
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    bridge.poll()
    nt.process(bar(21001, 21002, 20985, 20988))
    events = bridge.poll()
    assert bridge.order_state(f"{ENTRY}-SL").state == "FILLED"
    assert bridge.order_state(f"{ENTRY}-SL").avg_price == 20990
    assert bridge.order_state(f"{ENTRY}-TP").state == "CANCELLED"
    assert {(e.kind, e.order_id) for e in events} >= {("FILL", f"{ENTRY}-SL"), ("CANCELLED", f"{ENTRY}-TP")}
    assert bridge.position() == BrokerPosition("FLAT", 0, 0.0, nt.position_file)
    assert not any(e.kind == "UNPROTECTED" for e in events)


def test_stop_wins_when_one_bar_touches_both_stop_and_target(nt):
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "SELL", 1, stop_price=21010, target_price=20980)
    nt.process(bar(21000, 21001, 20999, 21000))
    nt.process(bar(21000, 21015, 20970, 21000))
    assert bridge.order_state(f"{ENTRY}-SL").state == "FILLED"
    assert bridge.order_state(f"{ENTRY}-TP").state == "CANCELLED"
    assert bridge.position().side == "FLAT"


def test_target_fills_at_its_price_and_cancels_the_stop_when_reached(nt):
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    bridge.poll()
    nt.process(bar(21010, 21035, 21008, 21020))
    events = bridge.poll()
    assert bridge.order_state(f"{ENTRY}-TP").avg_price == 21030
    assert bridge.order_state(f"{ENTRY}-SL").state == "CANCELLED"
    assert not any(e.kind == "UNPROTECTED" for e in events)  # a stop cancelled by its filled target is not lost
    assert [f for f in oif_files(nt)] == []  # and no CLOSEPOSITION was sent


def test_close_flattens_and_cancels_the_bracket_when_called(nt):
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    bridge.poll()
    bridge.close(ENTRY)
    nt.process(bar(21003, 21006, 21001, 21004))
    events = bridge.poll()
    assert bridge.position().side == "FLAT"
    assert bridge.order_state(f"{ENTRY}-SL").state == "CANCELLED"
    assert bridge.order_state(f"{ENTRY}-TP").state == "CANCELLED"
    assert not any(e.kind == "UNPROTECTED" for e in events)  # cancelled on purpose: no second flatten
    assert oif_files(nt) == []


def test_move_stop_changes_the_working_stop_when_the_fake_reads_it(nt):
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    bridge.move_stop(ENTRY, 21000)
    nt.process(bar(21010, 21012, 21002, 21011))
    assert nt.orders[f"{ENTRY}-SL"].stop == 21000
    nt.process(bar(21003, 21004, 20999, 21000))
    assert bridge.order_state(f"{ENTRY}-SL").avg_price == 21000


def test_account_prefixed_state_files_and_other_contract_spellings_are_read_when_ninjatrader_writes_them(tmp_path):
    nt = FakeNinjaTrader(tmp_path, ACCOUNT, INSTRUMENT, state_file_style="account_prefixed",
                         position_file_instrument="NQ DEC26")
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    assert (nt.outgoing / f"Sim101_{ENTRY}.txt").is_file()
    assert bridge.order_state(ENTRY).state == "FILLED"
    assert bridge.position().side == "LONG"
    assert bridge.was_sent(ENTRY)


def test_position_file_matching_is_exact_when_other_accounts_and_contracts_are_present():
    assert instrument_aliases("NQ 12-26") == {"NQ 12-26", "NQ 1226", "NQ DEC26", "NQZ6", "NQZ26"}
    assert position_file_matches("NQ 12-26 Globex_Sim101_Position.txt", "Sim101", "NQ 12-26")
    assert position_file_matches("NQZ6 Globex_Sim101_position.txt", "Sim101", "NQ 12-26")
    assert not position_file_matches("MNQ 12-26 Globex_Sim101_Position.txt", "Sim101", "NQ 12-26")
    assert not position_file_matches("NQ 03-27 Globex_Sim101_Position.txt", "Sim101", "NQ 12-26")
    assert not position_file_matches("NQ 12-26 Globex_Sim1012_Position.txt", "Sim101", "NQ 12-26")
    assert not position_file_matches("NQ 12-26 Globex_XSim101_Position.txt", "Sim101", "NQ 12-26")


def test_position_is_flat_when_ninjatrader_has_written_no_file(nt):
    assert bridge_for(nt).position() == ati.FLAT and not bridge_for(nt).position().known
    assert bridge_for(nt).order_state(ENTRY) is None


def test_the_position_read_looks_at_the_position_files_alone_however_many_order_files_outgoing_holds(nt,
                                                                                                      monkeypatch):
    """NinjaTrader keeps a state file for every order in outgoing/: the read of the position (every bar) picks the
    position files by name before it asks the disk about them (it stat'ed every file: a seventh of a long replay)."""
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    for i in range(50):
        (nt.outgoing / f"run1-20261125T{i:06d}-entry.txt").write_text("FILLED;1;21000.00\n")
    asked: list[str] = []
    is_file = Path.is_file
    monkeypatch.setattr(Path, "is_file", lambda self: asked.append(self.name) or is_file(self))
    assert bridge.position().side == "LONG"
    assert asked and all(position_file_matches(name, ACCOUNT, INSTRUMENT) for name in asked), asked


def test_partial_fill_reports_each_part_when_the_market_fills_in_two_bars(nt):
    bridge = bridge_for(nt)
    nt.partial_fill_next(1)
    bridge.enter(ENTRY, "BUY", 3, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    first = [e for e in bridge.poll() if e.kind == "FILL"]
    assert [(e.state, e.filled_qty, e.new_qty) for e in first] == [("PARTFILLED", 1, 1)]
    assert bridge.position().qty == 1
    nt.process(bar(21002, 21004, 20996, 21001))
    second = [e for e in bridge.poll() if e.kind == "FILL"]
    assert [(e.state, e.filled_qty, e.new_qty) for e in second] == [("FILLED", 3, 2)]
    assert bridge.order_state(ENTRY).avg_price == pytest.approx((21000 + 2 * 21002) / 3)
    assert bridge.position().qty == 3


def test_part_filled_entry_resizes_its_bracket_when_the_rest_is_cancelled(nt):
    bridge = bridge_for(nt)
    nt.partial_fill_next(1)
    bridge.enter(ENTRY, "BUY", 3, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    nt.orders[ENTRY].state = "CANCELLED"  # the broker cancels the unfilled rest
    nt._mark(nt.orders[ENTRY])
    nt._flush()
    bridge.poll()
    nt.process(bar(21001, 21002, 21000, 21001))
    assert (nt.orders[f"{ENTRY}-SL"].qty, nt.orders[f"{ENTRY}-TP"].qty) == (1, 1)


# --- rejections and faults ---------------------------------------------------------------------------------------


def test_rejection_surfaces_as_an_event_and_a_clear_error_when_ninjatrader_rejects(nt):
    bridge = bridge_for(nt)
    nt.reject_next("There is no market data available to drive the simulation engine.")
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    assert nt.state_file(ENTRY).read_text().strip() == "REJECTED;0;0"
    events = bridge.poll()
    rejected = [e for e in events if e.kind == "REJECTED"]
    assert [e.order_id for e in rejected] == [ENTRY]
    assert "rejected" in str(rejected[0].error()) and "Log tab" in str(rejected[0].error())
    with pytest.raises(UserError) as err:
        bridge.require_ok(ENTRY)
    text = str(err.value)
    assert ENTRY in text and str(nt.state_file(ENTRY)) in text and "Log tab" in text
    # the bracket of an entry that never filled is cancelled, so it cannot open a position by itself
    nt.process(bar(21000, 21004, 20996, 21001))
    assert nt.orders[f"{ENTRY}-SL"].state == "CANCELLED" and nt.orders[f"{ENTRY}-TP"].state == "CANCELLED"
    assert nt.position == 0


def test_rejected_stop_flattens_the_position_when_the_entry_filled(nt):
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    nt.orders[f"{ENTRY}-SL"].state = "REJECTED"  # e.g. the broker refused the stop price
    nt._mark(nt.orders[f"{ENTRY}-SL"])
    nt._flush()
    events = bridge.poll()
    assert [e.order_id for e in events if e.kind == "UNPROTECTED"] == [f"{ENTRY}-SL"]
    nt.process(bar(21002, 21003, 21000, 21001))
    assert bridge.position().side == "FLAT"
    assert nt.orders[f"{ENTRY}-TP"].state == "CANCELLED"
    assert [e for e in bridge.poll() if e.kind == "UNPROTECTED"] == []  # flattened once


def test_cancelled_stop_of_an_old_bracket_does_not_flatten_when_a_newer_bracket_holds_the_position(nt):
    bridge = bridge_for(nt)
    old, new = f"{ENTRY}-a", f"{ENTRY}-b"
    bridge.enter(old, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    bridge.close(old)
    nt.process(bar(21001, 21004, 20996, 21001))
    bridge.enter(new, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21002, 21004, 20996, 21001))
    restarted = bridge_for(nt)  # re-attaches both from the journal, oldest first
    for entry in (old, new):
        restarted.adopt(restarted.enter(entry, "BUY", 1, stop_price=20990, target_price=21030))
    events = restarted.poll()
    assert not any(e.kind == "UNPROTECTED" for e in events)
    assert oif_files(nt) == [] and restarted.position().qty == 1


def test_cancelling_the_stop_by_hand_flattens_when_the_oco_takes_the_target_with_it(nt):
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    bridge.poll()
    (nt.incoming / "oif9_by_hand.txt").write_text(f"CANCEL;;;;;;;;;;{ENTRY}-SL;;\n")  # someone cancels the stop
    nt.process(bar(21001, 21004, 20996, 21001))
    assert nt.orders[f"{ENTRY}-TP"].state == "CANCELLED"  # OCO: cancelling one cancels the other
    assert [e.kind for e in bridge.poll() if e.kind == "UNPROTECTED"] == ["UNPROTECTED"]
    nt.process(bar(21001, 21004, 20996, 21001))
    assert bridge.position().side == "FLAT"


def test_an_unread_order_file_is_reported_once_and_withdrawn_after_the_ack_timeout(nt):
    clock = Clock()
    bridge = bridge_for(nt, clock=clock, ack_timeout_s=30)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.disconnect()
    nt.process(bar(21000, 21004, 20996, 21001))
    assert [e for e in bridge.poll() if e.kind == "NO_ACK"] == []
    assert len(oif_files(nt)) == 1
    clock.now += 31
    events = bridge.poll()
    assert [e.order_id for e in events if e.kind == "NO_ACK"] == [ENTRY]
    assert "still waits in incoming/" in events[0].message and "AT Interface" in events[0].message
    assert "Log tab" in str(events[0].error())
    withdrawn = [e for e in events if e.kind == "WITHDRAWN"]
    assert sorted(e.order_id for e in withdrawn) == sorted([ENTRY, f"{ENTRY}-SL", f"{ENTRY}-TP"])
    assert all(e.state == "WITHDRAWN" and "withdrawn" in e.message for e in withdrawn)
    assert oif_files(nt) == []  # a NinjaTrader that comes back does not act on the stale entry
    nt.reconnect()
    nt.process(bar(21001, 21004, 20996, 21001))
    assert ENTRY not in nt.orders and bridge.position().side == "FLAT"
    assert bridge.poll() == []


def test_no_ack_names_a_refused_line_when_ninjatrader_read_the_oif_but_wrote_nothing(nt):
    clock = Clock()
    bridge = bridge_for(nt, clock=clock, ack_timeout_s=30)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    for path in oif_files(nt):  # NinjaTrader read it and refused every line: no outgoing file at all
        path.unlink()
    clock.now += 31
    events = [e for e in bridge.poll() if e.kind == "NO_ACK"]
    assert len(events) == 3 and "wrote no state file" in events[0].message


def test_wait_state_returns_the_terminal_state_when_ninjatrader_writes_it(nt):
    clock = Clock()

    def sleep(seconds):
        clock.now += seconds
        nt.process(bar(21000, 21004, 20996, 21001))

    bridge = bridge_for(nt, clock=clock, sleep=sleep)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    state = bridge.wait_state(ENTRY, timeout_s=5, interval_s=0.5)
    settled = bridge.retry_delay_s  # a fill is read once more, to see its file settled
    assert state.state == "FILLED" and clock.now == pytest.approx(1000.5 + settled)
    assert bridge.wait_state(f"{ENTRY}-SL", timeout_s=2, interval_s=0.5).state == "WORKING"
    assert clock.now == pytest.approx(1000.5 + settled + 2)


def test_delay_acknowledges_at_once_and_fills_later_when_delayed(nt):
    bridge = bridge_for(nt)
    nt.delay(2)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    assert oif_files(nt) == []  # read at once
    assert bridge.order_state(ENTRY).state == "ACCEPTED"
    assert bridge.position().side == "FLAT"
    nt.process(bar(21001, 21004, 20996, 21001))
    assert bridge.order_state(ENTRY).filled_qty == 0
    nt.process(bar(21003, 21004, 20996, 21001))
    assert (bridge.order_state(ENTRY).state, bridge.order_state(ENTRY).avg_price) == ("FILLED", 21003)
    assert bridge.order_state(f"{ENTRY}-SL").state == "WORKING"
    assert bridge.position().qty == 1


def test_disconnect_piles_up_files_and_reconnect_processes_them_when_toggled(nt):
    bridge = bridge_for(nt)
    nt.disconnect()
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    nt.process(bar(21000, 21004, 20996, 21001))
    assert len(oif_files(nt)) == 1 and bridge.order_state(ENTRY) is None
    assert bridge.was_sent(ENTRY)  # waiting in incoming/ counts as sent
    nt.reconnect()
    nt.process(bar(21005, 21006, 21001, 21004))
    assert oif_files(nt) == []
    assert bridge.order_state(ENTRY).avg_price == 21005
    assert bridge.position().side == "LONG"


def test_broker_side_stop_fills_while_disconnected_when_reconnected_it_is_reported(nt):
    bridge = bridge_for(nt)
    bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    bridge.poll()
    nt.disconnect()
    nt.process(bar(20995, 20996, 20980, 20985))
    assert bridge.order_state(f"{ENTRY}-SL").state == "WORKING"  # NinjaTrader wrote nothing meanwhile
    nt.reconnect()
    assert bridge.order_state(f"{ENTRY}-SL").state == "FILLED"
    assert bridge.position().side == "FLAT"


def test_ninjatrader_7_stop_type_is_refused_by_the_fake_when_sent(nt):
    (nt.incoming / "oif1.txt").write_text("PLACE;Sim101;NQ 12-26;SELL;1;STOP;0;20990;GTC;;x-SL;;\nCANCEL;;x;;\n")
    nt.process(bar(21000, 21004, 20996, 21001))
    assert "invalid order type parameter 'STOP'" in nt.log[0]
    assert "invalid # of parameters, should be 13 but is 5" in nt.log[1]
    assert list(nt.outgoing.iterdir()) == []


# --- restart and idempotence -------------------------------------------------------------------------------------


def test_restart_sees_the_position_and_does_not_resend_when_the_id_was_sent(nt):
    first = bridge_for(nt)
    first.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    nt.process(bar(21000, 21004, 20996, 21001))
    del first  # the program is killed

    second = bridge_for(nt)  # a new process on the same folders
    assert second.position().side == "LONG" and second.position().qty == 1
    assert second.was_sent(ENTRY)
    again = second.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)  # the same decision, replayed
    assert not again.sent
    assert oif_files(nt) == []
    nt.process(bar(21001, 21004, 20996, 21001))
    assert nt.position == 1 and [line.split(";")[10] for line in nt.received].count(ENTRY) == 1
    # the restarted bridge still watches the bracket: the stop fill comes through
    nt.process(bar(21001, 21002, 20985, 20988))
    assert {(e.kind, e.order_id) for e in second.poll()} >= {("FILL", f"{ENTRY}-SL")}


def test_restart_does_not_resend_when_the_oif_still_waits_in_incoming(nt):
    nt.disconnect()
    bridge_for(nt).enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    again = bridge_for(nt).enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    assert not again.sent and len(oif_files(nt)) == 1


def test_order_id_is_the_same_when_the_same_decision_is_made_again():
    t = datetime(2026, 11, 25, 9, 30, tzinfo=timezone(timedelta(hours=-5)))
    a = order_id("nq ppo_phase3", t, "entry")
    assert a == order_id("nq ppo_phase3", t.astimezone(UTC), "entry") == "nq-ppo-phase3-20261125T143000-entry"
    assert a != order_id("nq ppo_phase3", t + timedelta(minutes=1), "entry")
    assert a != order_id("nq ppo_phase3", t, "close")
    long = order_id("x" * 80, t, "entry")
    assert len(long) <= 60 and long == order_id("x" * 80, t, "entry") != order_id("x" * 81, t, "entry")
    assert ati.ORDER_ID.fullmatch(f"{long}-OCO")


# --- malformed files and bad folders -----------------------------------------------------------------------------


@pytest.mark.parametrize(("content", "value"), [
    ("FILLED;one;21000.25\n", "one"),
    ("FILLED;1;21000,25\n", "21000,25"),
    ("EXPLODED;1;21000.25\n", "EXPLODED"),
    ("WORKING;0;0\nFILLED;1\n", "FILLED;1"),
])
def test_malformed_state_file_names_file_line_and_value_when_read(nt, content, value):
    path = nt.outgoing / f"{ENTRY}.txt"
    path.write_text(content)
    with pytest.raises(UserError) as err:
        bridge_for(nt).order_state(ENTRY)
    text = str(err.value)
    assert str(path) in text and repr(value) in text
    assert f"line {content.count(chr(10))}" in text


def test_malformed_position_file_names_file_line_and_value_when_read(nt):
    path = nt.outgoing / "NQ 12-26 Globex_Sim101_Position.txt"
    path.write_text("SIDEWAYS;1;21000\n")
    with pytest.raises(UserError) as err:
        bridge_for(nt).position()
    assert str(path) in str(err.value) and "'SIDEWAYS'" in str(err.value) and "line 1" in str(err.value)


def test_half_written_state_file_is_read_again_when_ninjatrader_finishes_it(nt):
    path = nt.outgoing / f"{ENTRY}.txt"
    path.write_text("FILL")

    def finish(_seconds):
        path.write_text("FILLED;1;21000.25")

    bridge = NinjaTraderBridge(nt.nt_dir, ACCOUNT, INSTRUMENT, sleep=finish)
    assert bridge.order_state(ENTRY).state == "FILLED"


def test_a_fill_is_read_twice_and_booked_at_the_finished_price_when_its_file_parses_half_written(nt):
    # caught mid-write, "FILLED;3;2100" parses: the fill's price would be 2100 instead of 21003.25
    bridge = NinjaTraderBridge(nt.nt_dir, ACCOUNT, INSTRUMENT, sleep=lambda s: None)
    bridge.enter(ENTRY, "BUY", 3, stop_price=20990, target_price=21030)
    path = nt.outgoing / f"{ENTRY}.txt"
    path.write_text("FILLED;3;2100")
    reads = []

    def finish(_seconds):
        reads.append(path.read_text())
        path.write_text("FILLED;3;21003.25")

    bridge.sleep = finish
    fills = [e for e in bridge.poll() if e.kind == "FILL"]
    assert [(e.filled_qty, e.price) for e in fills] == [(3, 21003.25)]
    assert reads == ["FILLED;3;2100", "FILLED;3;21003.25"], "read again until two reads agree"
    # a state that books nothing more is read once
    bridge.sleep = lambda s: pytest.fail("a state with no new fill is not read twice")
    assert not [e for e in bridge.poll() if e.kind == "FILL"]


def test_missing_user_folder_names_the_folder_and_the_fix_when_constructed(tmp_path):
    with pytest.raises(UserError) as err:
        NinjaTraderBridge(tmp_path / "nope", ACCOUNT, INSTRUMENT)
    assert str(tmp_path / "nope") in str(err.value) and "Automated trading interface" in str(err.value)


@pytest.mark.parametrize("missing", ["incoming", "outgoing"])
def test_missing_ati_folder_names_the_folder_when_constructed(tmp_path, missing):
    for name in ("incoming", "outgoing"):
        if name != missing:
            (tmp_path / name).mkdir()
    with pytest.raises(UserError) as err:
        NinjaTraderBridge(tmp_path, ACCOUNT, INSTRUMENT)
    assert str(tmp_path / missing) in str(err.value) and "AT Interface" in str(err.value)


@contextlib.contextmanager
def unwritable(folder: Path):
    """chmod a-w; as root (which chmod does not stop) also the immutable attribute, where the file system has it."""
    folder.chmod(0o555)
    immutable = False
    if os.geteuid() == 0:
        immutable = subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
    try:
        probe = folder / "probe"
        try:
            probe.write_text("")
        except OSError:
            pass
        else:
            probe.unlink()
            pytest.skip("cannot make a folder unwritable here (root without chattr)")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def test_unwritable_incoming_gives_a_clear_error_when_constructed(nt):
    with unwritable(nt.incoming), pytest.raises(UserError) as err:
        bridge_for(nt)
    text = str(err.value)
    assert str(nt.incoming) in text and "write access" in text


def test_unwritable_incoming_gives_a_clear_error_when_it_turns_read_only_later(nt):
    bridge = bridge_for(nt)
    with unwritable(nt.incoming), pytest.raises(UserError) as err:
        bridge.enter(ENTRY, "BUY", 1, stop_price=20990, target_price=21030)
    assert "incoming" in str(err.value) and "fix:" in str(err.value)
