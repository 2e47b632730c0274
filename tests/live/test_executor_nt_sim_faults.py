"""Faults against the simulated NinjaTrader on its own thread (``live.nt_sim``), the OIF sequence asserted: a close
it refuses, a restart that empties outgoing/, a disconnect, reports that lag the bars. (Here, not in tests/faults/, to
share the session's tiny run: training another costs a minute.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from hybrid_trader.live import deadline
from hybrid_trader.live.broker_halts import CODE_EXIT_PENDING, CODE_RESUMED
from hybrid_trader.live.broker_link import NT_EXITS
from hybrid_trader.live.deadline import FlatGuard
from hybrid_trader.live.executor import Executor
from hybrid_trader.live.feeds import Bar, ReplayFeed
from hybrid_trader.live.nt_sim import NinjaTraderSim

from .nt_async import ACCOUNT, CLOSE_LINE, INSTRUMENT, SimFeed, move_market, placed, sim_executor, start_sim
from .test_executor import assert_same_trades, replay
from .test_executor_ninjatrader import rows


def cancels(entry: str) -> list[str]:
    return [f"CANCEL;;;;;;;;;;{entry}-{kind};;" for kind in ("SL", "TP")]


def run_holding(tiny, tmp_path: Path, **bridge_kw) -> tuple[Executor, NinjaTraderSim]:
    """The tiny run against the simulator until the executor (and NinjaTrader) have held a position two bars."""
    run, csv, _ = tiny
    sim = start_sim(tmp_path / "NinjaTrader 8")
    ex = sim_executor(run, tmp_path / "j.sqlite", sim, bridge_kw)
    held = [0]

    def bars():
        for bar in ReplayFeed(csv):
            yield bar
            held[0] = held[0] + 1 if ex.broker.side else 0
            if held[0] >= 2:
                return
    ex.run_feed(SimFeed(bars(), sim))
    sim.settle()
    assert sim.position() == ex.broker.side * ex.broker.qty != 0
    return ex, sim


def test_a_close_ninjatrader_refuses_is_retried_then_halts_and_one_refused_once_ends_flat(tiny, tmp_path):
    for refused, case in ((99, "always"), (1, "once")):
        ex, sim = run_holding(tiny, tmp_path / case)
        # real sleeps, long enough for NinjaTrader to carry out a close on its own thread on a loaded machine (a
        # shorter wait re-sends a CLOSEPOSITION that is still on its way: harmless, but not this sequence)
        ex.link.flat_retries, ex.link.flat_retry_s = 2, 1.0
        before = len(sim.received)
        entry = placed(sim, "MARKET")[-1]
        sim.refuse_close(refused)
        FlatGuard(ex, deadline=False).flatten(deadline.CODE_FEED_END, "the feed ended")
        sim.settle()
        sim.stop()
        ex.close()
        sent = sim.received[before:]
        j = tmp_path / case / "j.sqlite"
        if case == "always":
            assert sent == [CLOSE_LINE, *cancels(entry)] * 3, "CLOSEPOSITION and 2 retries (flat_retries 2)"
            assert sim.position() != 0 and ex.link.halted == "broker:flat_failed"
            assert rows(j, "SELECT code FROM errors WHERE location = 'broker' ORDER BY id")[-3:] == [
                ("broker:flat_retry",), ("broker:flat_retry",), ("broker:flat_failed",)]
            assert [line for line in sim.log if "CLOSEPOSITION" in line] == [
                f"CLOSEPOSITION {ACCOUNT} {INSTRUMENT}: refused by the account"] * 3
        else:
            assert sent == [CLOSE_LINE, *cancels(entry)] * 2 and sim.position() == 0 and not ex.link.halted
            assert rows(j, "SELECT state FROM orders WHERE intent = 'close'") == [("filled",)]


def run_until_halted(tiny, tmp_path: Path, fault: Callable[[Executor, NinjaTraderSim, Bar], bool],
                     **bridge_kw) -> tuple[Executor, NinjaTraderSim, int]:
    """The tiny run against the simulator; ``fault`` called once the market has moved with each bar until it
    returns True; stopped 5 decisions after entries halted. Also returns how many lines were read before it."""
    run, csv, _ = tiny
    sim = start_sim(tmp_path / "NinjaTrader 8")
    ex = sim_executor(run, tmp_path / "j.sqlite", sim, bridge_kw)
    at: list[int] = []

    def after(bar: Bar) -> None:
        if not at and fault(ex, sim, bar):
            at.append(len(sim.received))

    def bars():
        halted_at: int | None = None
        for bar in ReplayFeed(csv):
            yield bar
            if ex.link.halted and halted_at is None:
                halted_at = ex.summary.decisions
            if halted_at is not None and ex.summary.decisions >= halted_at + 5:
                return
    ex.run_feed(SimFeed(bars(), sim, after))
    ex.close()
    sim.settle()
    assert at, "the fault happened"
    return ex, sim, at[0]


def halts(tmp_path: Path) -> list[tuple]:
    return rows(tmp_path / "j.sqlite", "SELECT time_ns, code, message FROM errors WHERE location = 'halt'")


def test_a_ninjatrader_restart_emptying_outgoing_halts_and_closes_the_position_it_no_longer_shows(tiny, tmp_path):
    def restart(ex: Executor, sim: NinjaTraderSim, bar: Bar) -> bool:
        if ex.broker.side != 0 and sim.position() != 0:
            sim.restart()
            return True
        return False
    ex, sim, before = run_until_halted(tiny, tmp_path, restart)
    sim.stop()
    assert ex.summary.halted == "broker:position_unknown"
    [(tns, _, message)] = halts(tmp_path)
    assert "disappeared" in message and "unknown, not flat" in message
    assert sim.received[before:] == [CLOSE_LINE], "only the CLOSEPOSITION after it: no entry, nothing else"
    assert sim.position() == 0 and sim.restarts == 1
    assert rows(tmp_path / "j.sqlite", "SELECT order_id, order_type FROM orders WHERE intent = 'close' ORDER BY id"
                )[-1] == (f"flatten-{tns}", "CLOSEPOSITION")


def test_a_disconnect_halts_entries_and_what_waited_in_incoming_is_carried_out_on_reconnect(tiny, tmp_path):
    def disconnect(ex: Executor, sim: NinjaTraderSim, bar: Bar) -> bool:
        if ex.broker.side != 0 and sim.position() != 0:
            sim.disconnect()
            return True
        return False
    ex, sim, before = run_until_halted(tiny, tmp_path, disconnect, connection="Simulated")
    assert ex.summary.halted == "broker:disconnected"
    [(tns, _, message)] = halts(tmp_path)
    assert "Simulated.txt reads DISCONNECTED" in message
    assert sim.received[before:] == [], "NinjaTrader read nothing while disconnected"
    waiting = "".join(p.read_text() for p in sorted(sim.incoming.glob("oif*.txt")))
    assert "PLACE" not in waiting, "no entry was written after the halt"
    assert rows(tmp_path / "j.sqlite", f"SELECT COUNT(*) FROM orders WHERE intent = 'entry' AND bar_time_ns > {tns}"
                ) == [(0,)]
    sim.reconnect()
    sim.settle()
    sim.stop()
    assert [line.split(";")[0] for line in sim.received[before:]] == [line.split(";")[0]
                                                                      for line in waiting.splitlines()]
    assert sim.position() == ex.broker.side * ex.broker.qty, "on reconnect NinjaTrader agrees with the paper side"


def test_ninjatrader_reporting_its_own_stop_after_the_bar_holds_entries_that_bar_and_is_not_a_halt(tiny, tmp_path):
    """NinjaTrader fills its own stop or target while the bar forms but writes its files only after the executor has
    read the bar's line: the paper side has left the position by the same stop while NinjaTrader's position file
    still shows it. Neither a lasting halt nor a CLOSEPOSITION (before: ``broker:unexpected_position`` and a
    flatten); but no entry on that bar (``broker:exit_pending``: had NinjaTrader's stop not filled, an entry would
    double the position, or leave it flat with two brackets working), so the trades are the paper run's until the
    first such bar."""
    run, csv, _ = tiny
    sim = start_sim(tmp_path / "NinjaTrader 8")
    paper = replay(run, csv, tmp_path / "paper.sqlite")
    ex = sim_executor(run, tmp_path / "j.sqlite", sim)
    lagged = []

    def lagging():
        for bar in ReplayFeed(csv):
            held, closes = sim.position(), sim.received.count(CLOSE_LINE)
            sim.hold_reports()
            move_market(sim, bar)
            if not (held and sim.position() == 0 and sim.received.count(CLOSE_LINE) == closes):
                sim.hold_reports(False)
                yield bar
                continue
            lagged.append(bar.time_ns)  # its own stop or target filled on this bar: reported after it
            yield bar
            sim.hold_reports(False)
    ex.run_feed(lagging())
    ex.close()
    sim.settle()
    sim.stop()
    held = [t for t, code, _ in halts(tmp_path) if code == CODE_EXIT_PENDING]
    assert held and {code for _, code, _ in halts(tmp_path)} == {CODE_EXIT_PENDING, CODE_RESUMED}
    assert set(held) <= set(lagged), "entries held only on the bars whose NinjaTrader exit lagged"
    marks = ",".join(map(str, held))
    assert rows(tmp_path / "j.sqlite", f"SELECT COUNT(*) FROM orders WHERE intent = 'entry' AND bar_time_ns IN "
                f"({marks})") == [(0,)], "no entry decided while NinjaTrader still showed the position"
    first = pd.Timestamp(held[0], tz="UTC")
    got, expected = ex.trade_log(), paper.trade_log()
    assert_same_trades(got[got["entry_time"] <= first], expected[expected["entry_time"] <= first])
    reasons = list(got["exit_reason"])
    assert sim.received.count(CLOSE_LINE) == len([r for r in reasons if r not in NT_EXITS])
    assert sim.position() == 0
