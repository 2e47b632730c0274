"""The simulated NinjaTrader 8 (``live.nt_sim``), driven through the real bridge and raw OIF lines."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.live.ati import OifOrder, cancel_line, place_line, write_atomic
from hybrid_trader.live.ninjatrader import NinjaTraderBridge
from hybrid_trader.live.nt_outgoing import PositionLost
from hybrid_trader.live.nt_sim import NinjaTraderSim
from hybrid_trader.live.nt_sim_market import FileMarket, SimMarket
from hybrid_trader.live.nt_sim_settings import SimSettings

ACCOUNT, INSTRUMENT = "Sim101", "NQ 12-26"


def sim_at(tmp_path: Path, price: float | None = 21000.0, **kw) -> NinjaTraderSim:
    kw.setdefault("poll_s", 0.002)
    accounts = kw.pop("accounts", [ACCOUNT])
    return NinjaTraderSim(tmp_path / "NT", accounts, INSTRUMENT, SimMarket(price), SimSettings(**kw)).start()


def bridge_of(sim: NinjaTraderSim, account: str = ACCOUNT, **kw) -> NinjaTraderBridge:
    return NinjaTraderBridge(sim.folder, account, INSTRUMENT, sleep=lambda s: None, **kw)


def send(sim: NinjaTraderSim, *lines: str, name: str = "oif-test.txt") -> None:
    write_atomic(sim.incoming, name, "".join(line + "\n" for line in lines))
    sim.settle()


def read(path: Path) -> str:
    return path.read_text().strip()


def test_an_entry_moves_through_each_state_one_latency_apart_and_fills_at_the_sims_own_price(tmp_path):
    sim = sim_at(tmp_path, latency_s=0.03, slippage_ticks=2, seed=7)
    bridge = bridge_of(sim)
    bridge.enter("e1", "BUY", 2, 20990.0, 21010.0)
    seen: dict[str, list[str]] = {"e1": [], "e1-SL": [], "e1-TP": []}
    end = time.monotonic() + 2.0
    while time.monotonic() < end and (not seen["e1"] or seen["e1"][-1] != "FILLED"):
        for oid, states in seen.items():
            state = bridge.order_state(oid)
            if state is not None and (not states or states[-1] != state.state):
                states.append(state.state)
        time.sleep(0.002)
    sim.settle()
    sim.stop()
    assert seen["e1"] == ["SUBMITTED", "ACCEPTED", "WORKING", "FILLED"]
    assert seen["e1-SL"][:3] == ["SUBMITTED", "ACCEPTED", "WORKING"]
    assert list(sim.incoming.iterdir()) == [], "NinjaTrader deletes each OIF it reads"
    fill = bridge.order_state("e1")
    assert fill is not None and fill.filled_qty == 2
    assert 21000.0 <= fill.avg_price <= 21000.5 and fill.avg_price * 4 == int(fill.avg_price * 4), \
        "at the last price, at most 2 ticks worse, on the tick grid"
    assert read(sim.position_file()) == f"LONG;2;{fill.avg_price}"
    again = sim_at(tmp_path / "again", latency_s=0.0, slippage_ticks=2, seed=7)
    bridge_of(again).enter("e1", "BUY", 2, 20990.0, 21010.0)
    again.settle()
    again.stop()
    assert bridge_of(again).order_state("e1").avg_price == fill.avg_price, "seeded: the same price again"


def test_a_later_bar_through_the_stop_fills_it_at_its_level_and_cancels_the_oco_target(tmp_path):
    sim = sim_at(tmp_path)
    bridge = bridge_of(sim)
    bridge.enter("e1", "BUY", 1, 20990.0, 21010.0)
    sim.settle()
    sim.market.push(21001.0, 21008.0, 20995.0, 21000.0)  # reaches neither
    sim.settle()
    assert bridge.order_state("e1-SL").state == "WORKING"
    sim.market.push(20998.0, 21012.0, 20980.0, 20985.0)  # reaches both: the stop wins
    sim.settle()
    sim.stop()
    assert (bridge.order_state("e1-SL").state, bridge.order_state("e1-SL").avg_price) == ("FILLED", 20990.0)
    assert bridge.order_state("e1-TP").state == "CANCELLED"
    assert read(sim.position_file()) == "FLAT;0;0"
    events = bridge.poll()
    assert [(e.kind, e.order_id, e.new_qty, e.price) for e in events if e.kind == "FILL"] == [
        ("FILL", "e1", 1, 21000.0), ("FILL", "e1-SL", 1, 20990.0)]


def test_a_gap_through_a_level_fills_at_the_bars_open(tmp_path):
    sim = sim_at(tmp_path)
    bridge = bridge_of(sim)
    bridge.enter("e1", "SELL", 1, 21010.0, 20990.0)
    sim.settle()
    sim.market.push(20980.0, 20985.0, 20975.0, 20982.0)
    sim.settle()
    sim.stop()
    assert bridge.order_state("e1-TP").avg_price == 20980.0 and sim.position() == 0


def test_ninjatrader_rejects_what_it_refuses_and_logs_what_it_cannot_parse(tmp_path):
    sim = sim_at(tmp_path)
    send(sim,
         place_line("Sim999", INSTRUMENT, OifOrder("BUY", 1, "MARKET", order_id="other-account")),
         place_line(ACCOUNT, "ES 12-26", OifOrder("BUY", 1, "MARKET", order_id="other-instrument")),
         place_line(ACCOUNT, INSTRUMENT, OifOrder("BUY", 1, "MARKET", order_id="zero")).replace(";1;MARKET;",
                                                                                                ";0;MARKET;"),
         place_line(ACCOUNT, INSTRUMENT, OifOrder("SELL", 1, "STOPMARKET", stop_price=21005.0, order_id="wrong-side")),
         f"PLACE;{ACCOUNT};{INSTRUMENT};BUY;1;MARKET;0;0;GTC;;short-line;",
         place_line(ACCOUNT, INSTRUMENT, OifOrder("BUY", 1, "MARKET", order_id="bad-type")).replace("MARKET", "STOP"),
         cancel_line("nobody"))
    for oid in ("other-account", "other-instrument", "zero", "wrong-side"):
        assert read(sim.state_file(oid)) == "REJECTED;0;0", oid
    for oid in ("short-line", "bad-type", "nobody"):
        assert not sim.state_file(oid).exists(), "a line it cannot parse leaves no file, only a Log line"
    log = "\n".join(sim.log)
    assert "invalid # of parameters, should be 13 but is 12" in log
    assert "invalid order type parameter 'STOP'" in log and "order 'nobody' is not known" in log
    assert "sell stop 21005 can't be placed at or above the market (21000)" in log
    send(sim, place_line(ACCOUNT, INSTRUMENT, OifOrder("BUY", 1, "MARKET", order_id="done")))
    send(sim, cancel_line("done"), "CHANGE;;;;0;;0;21001;;;done;;", name="oif-2.txt")
    sim.stop()
    assert read(sim.state_file("done")) == "FILLED;1;21000", "a finished order is never rewritten"
    assert "order 'done' can't be cancelled: it is FILLED" in sim.log[-2]
    assert "order 'done' can't be changed: it is FILLED" in sim.log[-1]
    assert bridge_of(sim).order_state("zero").state == "REJECTED"


def test_cancel_writes_cancelpending_then_cancelled_and_takes_the_oco_sibling(tmp_path):
    sim = sim_at(tmp_path, latency_s=0.03)
    bridge = bridge_of(sim)
    send(sim, place_line(ACCOUNT, INSTRUMENT, OifOrder("SELL", 1, "STOPMARKET", stop_price=20990.0, oco_id="g",
                         order_id="s")),
         place_line(ACCOUNT, INSTRUMENT, OifOrder("SELL", 1, "LIMIT", limit_price=21010.0, oco_id="g", order_id="t")))
    write_atomic(sim.incoming, "oif-c.txt", cancel_line("s") + "\n")
    states = []
    end = time.monotonic() + 2.0
    while time.monotonic() < end and (not states or states[-1] != "CANCELLED"):
        state = bridge.order_state("s")
        if state is not None and (not states or states[-1] != state.state):
            states.append(state.state)
        time.sleep(0.002)
    sim.settle()
    sim.stop()
    assert states[-2:] == ["CANCELPENDING", "CANCELLED"]
    assert read(sim.state_file("t")) == "CANCELLED;0;0"


def test_a_change_moves_a_working_stop_which_then_fills_at_its_new_level(tmp_path):
    sim = sim_at(tmp_path)
    bridge = bridge_of(sim)
    bridge.enter("e1", "BUY", 1, 20990.0, 21050.0)
    sim.settle()
    bridge.move_stop("e1", 20998.0)
    sim.settle()
    assert read(sim.state_file("e1-SL")) == "WORKING;0;0"
    sim.market.push(21000.0, 21001.0, 20996.0, 20997.0)
    sim.settle()
    sim.stop()
    assert read(sim.state_file("e1-SL")) == "FILLED;1;20998"
    assert "CHANGE;;;;0;;0;20998;;;e1-SL;;" in sim.received


def test_flatteneverything_and_cancelallorders_act_on_every_account(tmp_path):
    sim = sim_at(tmp_path, accounts=[ACCOUNT, "Apex-1"])
    for account in (ACCOUNT, "Apex-1"):
        bridge_of(sim, account).enter(f"{account}-e", "BUY", 1, 20990.0, 21010.0)
    sim.settle()
    assert sim.position(ACCOUNT) == sim.position("Apex-1") == 1
    send(sim, "CANCELALLORDERS;;;;;;;;;;;;")
    assert {read(sim.state_file(f"{a}-e-{k}")) for a in (ACCOUNT, "Apex-1") for k in ("SL", "TP")} == \
        {"CANCELLED;0;0"}
    assert sim.position(ACCOUNT) == 1, "CANCELALLORDERS flattens nothing"
    sim.market.push(21004.0)
    send(sim, "FLATTENEVERYTHING;;;;;;;;;;;;", name="oif-f.txt")
    sim.stop()
    assert read(sim.position_file(ACCOUNT)) == read(sim.position_file("Apex-1")) == "FLAT;0;0"
    assert sim.log == []


def test_closeposition_is_one_accounts_and_a_refused_close_keeps_the_position(tmp_path):
    sim = sim_at(tmp_path, accounts=[ACCOUNT, "Apex-1"])
    for account in (ACCOUNT, "Apex-1"):
        bridge_of(sim, account).enter(f"{account}-e", "SELL", 1, 21010.0, 20990.0)
    sim.settle()
    sim.refuse_close(1)
    bridge_of(sim).close("Sim101-e")
    sim.settle()
    assert sim.position(ACCOUNT) == -1 and "refused" in sim.log[-1]
    bridge_of(sim).close_position("again")
    sim.settle()
    sim.stop()
    assert sim.position(ACCOUNT) == 0 and sim.position("Apex-1") == -1
    assert read(sim.state_file("Sim101-e-SL")) == "CANCELLED;0;0" and read(sim.state_file("Apex-1-e-SL")) == \
        "WORKING;0;0"


def test_a_partial_fill_reports_each_part_at_its_own_price(tmp_path):
    sim = sim_at(tmp_path, latency_s=0.05)
    bridge = bridge_of(sim)
    sim.partial_fill_next(1)
    bridge.enter("e1", "BUY", 3, 20990.0, 21050.0)
    end = time.monotonic() + 2.0
    while time.monotonic() < end and (bridge.order_state("e1") is None or bridge.order_state("e1").filled_qty == 0):
        time.sleep(0.002)
    first = [e for e in bridge.poll() if e.kind == "FILL"]
    sim.market.push(21004.0)  # the market moves before the rest fills
    sim.settle()
    sim.stop()
    rest = [e for e in bridge.poll() if e.kind == "FILL" and e.order_id == "e1"]
    assert [(e.state, e.new_qty, e.price) for e in first] == [("PARTFILLED", 1, 21000.0)]
    assert [(e.state, e.new_qty, pytest.approx(e.price, abs=1e-6)) for e in rest] == [("FILLED", 2, 21004.0)], \
        "the rest at the price then (derived from the written average, 8 decimals)"


def test_a_restart_empties_outgoing_and_the_bridge_reads_the_position_as_lost(tmp_path):
    sim = sim_at(tmp_path)
    bridge = bridge_of(sim, connection="Simulated")
    bridge.enter("e1", "BUY", 1, 20990.0, 21010.0)
    sim.settle()
    assert bridge.position().qty == 1 and bridge.connection_state() == "CONNECTED"
    sim.restart()
    assert [p.name for p in sim.outgoing.iterdir()] == ["Simulated.txt"]
    with pytest.raises(PositionLost, match="unknown, not flat"):
        bridge.position()
    assert sim.position() == 1, "the broker still holds it"
    sim.market.push(20985.0)
    sim.settle()
    sim.stop()
    assert read(sim.position_file()) == "FLAT;0;0", "its file comes back with the next change"


def test_a_disconnect_writes_the_connection_file_and_piles_up_oifs_until_it_reconnects(tmp_path):
    sim = sim_at(tmp_path)
    bridge = bridge_of(sim, connection="Simulated")
    sim.disconnect()
    assert bridge.connection_state() == "DISCONNECTED"
    bridge.enter("e1", "BUY", 1, 20990.0, 21010.0)
    time.sleep(0.02)
    sim.settle()
    assert len(list(sim.incoming.glob("oif*.txt"))) == 1 and bridge.order_state("e1") is None
    sim.reconnect()
    sim.settle()
    sim.stop()
    assert bridge.connection_state() == "CONNECTED" and bridge.order_state("e1").state == "FILLED"


def test_a_market_order_waits_for_the_first_price_of_a_followed_file(tmp_path):
    bars = tmp_path / "bars.csv"
    bars.write_text("timestamp,open,high,low,close,volume\n")
    sim = NinjaTraderSim(tmp_path / "NT", [ACCOUNT], INSTRUMENT, FileMarket(bars), SimSettings(poll_s=0.002)).start()
    bridge = bridge_of(sim)
    bridge.enter("e1", "BUY", 1, 20990.0, 21010.0)
    sim.settle()
    assert bridge.order_state("e1").state == "WORKING"
    with bars.open("a") as fh:
        fh.write("2026-11-27 09:30:00,21002.25,21003,21001,21002,10\n")
    time.sleep(0.05)
    sim.settle()
    sim.stop()
    assert bridge.order_state("e1").avg_price == 21002.25


def test_nt_sim_command_runs_for_its_duration_and_prints_what_it_read(tmp_path, capsys):
    folder = tmp_path / "NT"
    (folder / "incoming").mkdir(parents=True)
    write_atomic(folder / "incoming", "oif1.txt", place_line(ACCOUNT, INSTRUMENT, OifOrder("BUY", 1, "MARKET",
                                                              order_id="cli")) + "\n")
    assert main(["nt-sim", str(folder), "--instrument", INSTRUMENT, "--price", "21000", "--duration", "0.3",
                 "--latency-s", "0", "--slippage-ticks", "0"]) == 0
    out = capsys.readouterr().out
    assert "read: PLACE;Sim101;NQ 12-26;BUY;1;MARKET" in out and "position 1" in out
    assert read(folder / "outgoing" / "cli.txt") == "FILLED;1;21000"
    assert main(["nt-sim", str(folder), "--instrument", INSTRUMENT, "--price", "-1"]) == 2
    assert "--price -1" in capsys.readouterr().err


def test_an_order_read_with_a_new_bar_fills_after_that_bar_and_never_meets_its_range(tmp_path):
    """The bar and the order decided at its close arrive in the same poll: the order is NinjaTrader's only after the
    bar (it fills at the bar's close and its stop is not reached by the bar's low, a low that came before it)."""
    sim = NinjaTraderSim(tmp_path / "NT", [ACCOUNT], INSTRUMENT, SimMarket(21000.0))  # stepped by hand: no thread
    sim.step()
    bridge = bridge_of(sim)
    bridge.enter("e1", "BUY", 1, 20990.0, 21050.0)
    sim.market.push(21005.0, 21006.0, 20980.0, 21004.0)
    sim.step()
    assert read(sim.state_file("e1")) == "FILLED;1;21004"
    assert read(sim.state_file("e1-SL")) == "WORKING;0;0"
    sim.market.push(21003.0, 21004.0, 20985.0, 20986.0)
    sim.step()
    assert read(sim.state_file("e1-SL")) == "FILLED;1;20990" and sim.position() == 0
