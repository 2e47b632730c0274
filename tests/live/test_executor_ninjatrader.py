"""``run --broker ninjatrader``: the paper decisions mirrored to a fake NinjaTrader, halts, restarts, Ctrl-C."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hybrid_trader.env.broker import EXIT_BREAKEVEN, EXIT_STOP, EXIT_TARGET, EXIT_TRAIL
from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import Bar, ReplayFeed
from hybrid_trader.live.ninjatrader import NinjaTraderBridge
from hybrid_trader.live.status import format_status, snapshot

from .fake_ninjatrader import FakeBar, FakeNinjaTrader
from .nt_async import ACCOUNT, CLOSE_LINE, INSTRUMENT, SimFeed, move_market, placed, sim_executor, start_sim
from .test_executor import assert_same_trades

REPO = Path(__file__).resolve().parents[2]


class NTFeed:
    """The replay, with the fake NinjaTrader processing each bar before the executor sees it."""

    def __init__(self, csv: Path, nt: FakeNinjaTrader, interrupt=None) -> None:
        self.feed = ReplayFeed(csv)
        self.nt = nt
        self.interrupt = interrupt

    def __iter__(self):
        for bar in self.feed:
            self.nt.process(fake_bar(bar))
            yield bar
            if self.interrupt is not None and self.interrupt():
                raise KeyboardInterrupt


def fake_bar(bar: Bar) -> FakeBar:
    return FakeBar(bar.open, bar.high, bar.low, bar.close)


def executor(run: Path, journal: Path, nt: FakeNinjaTrader) -> Executor:
    bridge = NinjaTraderBridge(nt.nt_dir, ACCOUNT, INSTRUMENT, sleep=lambda s: None)
    return Executor(run, journal, ExecutorOptions(trade_dates=split_dates(run, "test"), market="NQ", bar_minutes=1),
                    bridge=bridge)


def untagged(journal: Path, values: list) -> list:
    """``values`` (ids, or rows holding them) with the journal's run id taken out: another journal's run draws
    another one (``Journal.run_id``), so its ids are compared with it taken out."""
    [(run_id,)] = rows(journal, "SELECT value FROM identity WHERE key = 'run_id'")

    def plain(v):
        return v.replace(f"-{run_id}-", "-RUN-") if isinstance(v, str) else v
    return [tuple(plain(x) for x in v) if isinstance(v, tuple) else plain(v) for v in values]


def rows(journal: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=30.0)
    try:
        return db.execute(sql).fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []
    finally:
        db.close()


@pytest.fixture(scope="module")
def mirrored(tiny, tiny_replayed, tmp_path_factory):
    """The tiny run's test days replayed with the paper broker alone (the session's replay), and mirrored to the
    simulated NinjaTrader (its own thread, its own prices with a tick of slippage)."""
    run, csv, _ = tiny
    root = tmp_path_factory.mktemp("mirrored")
    paper = tiny_replayed[1]
    sim = start_sim(root / "NinjaTrader 8")
    ex = sim_executor(run, root / "nt.sqlite", sim)
    ex.run_feed(SimFeed(ReplayFeed(csv), sim))
    ex.close()
    sim.settle()
    sim.stop()
    return paper, ex, sim, root / "nt.sqlite"


def test_ninjatrader_gets_the_paper_trades_when_a_run_is_replayed_against_it(mirrored):
    paper, ex, nt, journal = mirrored
    assert_same_trades(ex.trade_log(), paper.trade_log())  # mirroring changes no decision
    trades = ex.trade_log()
    assert len(trades) > 5 and ex.summary.halted == ""
    assert rows(journal, "SELECT code, message FROM errors WHERE code LIKE 'broker:%'") == []
    entries = [r[0] for r in rows(journal, "SELECT order_id FROM orders WHERE intent = 'entry' ORDER BY id")]
    assert placed(nt, "MARKET") == entries, "each entry reaches NinjaTrader once, under its journal id"
    assert all(nt.orders[f"{e}-SL"].order_type == "STOPMARKET" and nt.orders[f"{e}-TP"].oco == f"{e}-OCO"
               for e in entries)
    broker = rows(journal, "SELECT o.order_id, o.intent, o.side, f.qty, f.time_ns FROM fills f "
                           "JOIN orders o USING (order_id) WHERE f.source = 'broker' ORDER BY f.id")
    paper_fills = rows(journal, "SELECT o.order_id, o.intent, o.side, f.qty, f.time_ns FROM fills f "
                                "JOIN orders o USING (order_id) WHERE f.source = 'paper' ORDER BY f.id")
    assert [f for f in broker if f[1] == "entry"] == [f for f in paper_fills if f[1] == "entry"], \
        "NinjaTrader fills each entry on the paper fill's bar, same side and quantity"
    prices = ("SELECT f.price FROM fills f JOIN orders o USING (order_id) WHERE o.intent = 'entry' "
              "AND f.source = '{}' ORDER BY f.id")
    own = [p for (p,) in rows(journal, prices.format("broker"))]
    assert own != [p for (p,) in rows(journal, prices.format("paper"))], "NinjaTrader fills at its own prices"
    assert all(round(p * 4) == p * 4 for p in own), "on the tick grid"
    nt_exits = {EXIT_STOP, EXIT_TARGET, EXIT_TRAIL, EXIT_BREAKEVEN}
    paper_exits = list(zip(trades["exit_reason"], paper_fills[1::2], strict=True))
    by_nt = [(f[2], f[3], f[4]) for r, f in paper_exits if r in nt_exits]
    assert [(f[2], f[3], f[4]) for f in broker if f[1] in ("stop", "target")] == by_nt, \
        "NinjaTrader's own stop or target exits on the paper exit's bar"
    # and at the paper exit's price: the paper levels are NinjaTrader's, on the tick grid (the simulator fills a stop
    # at its price or the open, without the paper broker's slippage but with its own: at most one tick, seeded)
    nt_prices = rows(journal, "SELECT f.price FROM fills f JOIN orders o USING (order_id) WHERE f.source = 'broker' "
                              "AND o.intent IN ('stop', 'target') ORDER BY f.id")
    slip = ex.broker.slip
    paper_prices = [p + (0.0 if r == EXIT_TARGET else s * slip) for r, p, s in
                    zip(trades["exit_reason"], trades["exit_price"], trades["side"], strict=True) if r in nt_exits]
    sim_slip = 0.25  # nt_async: slippage_ticks 1
    assert len(nt_prices) == len(paper_prices) and all(
        abs(n - p) <= sim_slip + 1e-9 for (n,), p in zip(nt_prices, paper_prices, strict=True)), \
        "NinjaTrader's stop and target fill where the paper broker's do (less its slippage, plus the simulator's)"
    assert all(round(n * 4) == n * 4 for (n,) in nt_prices), "NinjaTrader's exits on the tick grid"
    # any other paper exit (session end, breach) is one CLOSEPOSITION; the tiny run may have none (every
    # position out by its stop or target): test_ctrl_c_closes_... sends one for --on-exit flatten
    closes = [r for r, _ in paper_exits if r not in nt_exits]
    assert Counter(line.split(";")[0] for line in nt.received)["CLOSEPOSITION"] == len(closes)
    assert nt.position() == 0 and nt.log == [], "nothing refused, nothing left"
    status = rows(journal, "SELECT snapshot FROM account ORDER BY id DESC LIMIT 1")[0][0]
    assert '"broker_position": 0' in status


def test_each_change_ninjatrader_reads_is_journaled_with_its_price_when_stops_move(mirrored):
    _, _, nt, journal = mirrored
    sent = [(r[10], float(r[7] or 0) or float(r[6])) for r in (line.split(";") for line in nt.received)
            if r[0] == "CHANGE"]
    assert sent, "the tiny run moves a stop or a target (break-even, trailing) at least once"
    journaled = rows(journal, "SELECT order_id, price FROM order_changes ORDER BY id")
    assert journaled == sent, "one journal row per CHANGE, same order and price, in the order sent"
    for order_id, price in rows(journal, "SELECT c.order_id, CASE c.price_field WHEN 'stop_price' THEN o.stop_price "
                                         "ELSE o.limit_price END FROM order_changes c JOIN orders o USING (order_id) "
                                         "WHERE c.id IN (SELECT MAX(id) FROM order_changes GROUP BY order_id)"):
        assert price == [p for oid, p in sent if oid == order_id][-1], "the order row holds its last price"


def test_entries_halt_with_broker_rejected_when_ninjatrader_rejects_an_entry(tiny, tmp_path):
    run, csv, _ = tiny
    nt = start_sim(tmp_path / "NinjaTrader 8")
    nt.reject_next("no market data")
    ex = sim_executor(run, tmp_path / "j.sqlite", nt)
    ex.run_feed(SimFeed(ReplayFeed(csv), nt))
    ex.close()
    nt.stop()
    assert ex.summary.halted == "broker:rejected"
    assert "entries halted (broker:rejected)" in format_status(snapshot(ex)), "the status line says why"
    assert len(placed(nt, "MARKET")) == 1, "no entry is sent after the rejection"
    halt = rows(tmp_path / "j.sqlite", "SELECT time_ns, message FROM errors WHERE location = 'halt'")
    assert len(halt) == 1 and "rejected" in halt[0][1]
    assert rows(tmp_path / "j.sqlite", "SELECT code FROM errors WHERE location = 'broker'")[0][0] == "broker:rejected"
    later = rows(tmp_path / "j.sqlite", f"SELECT COUNT(*) FROM orders WHERE intent = 'entry' AND bar_time_ns >= "
                                        f"{halt[0][0]}")[0][0]
    assert later == 0
    codes = rows(tmp_path / "j.sqlite", f"SELECT rule_codes FROM decisions WHERE bar_time_ns >= {halt[0][0]}")
    assert any("broker:rejected" in c[0] for c in codes), "decisions say why entries are refused"


def test_a_ninjatrader_folder_removed_mid_run_is_named_missing_and_halts_entries(tiny, tmp_path):
    run, csv, _ = tiny
    nt = FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)
    ex = executor(run, tmp_path / "j.sqlite", nt)

    class Vanishing(NTFeed):
        """NinjaTrader's outgoing/ disappears after the first trade (a drive unmounted, the folder moved)."""

        def __iter__(self):
            for bar in self.feed:
                if (self.nt.nt_dir / "outgoing").is_dir():
                    self.nt.process(fake_bar(bar))
                    if ex.broker.trades:
                        shutil.rmtree(self.nt.nt_dir / "outgoing")
                yield bar

    ex.run_feed(Vanishing(csv, nt))
    ex.close()
    assert ex.summary.halted == "broker:read_failed"
    halt = rows(tmp_path / "j.sqlite", "SELECT time_ns, code, message FROM errors WHERE location = 'halt'")
    assert len(halt) == 1 and halt[0][1] == "broker:read_failed"
    assert "NinjaTrader's outgoing\\ folder is missing" in halt[0][2] and "cannot write" not in halt[0][2]
    errors = rows(tmp_path / "j.sqlite", "SELECT code, message FROM errors WHERE location = 'broker'")
    assert len(errors) == 1 and errors[0][0] == "broker:read_failed", "journaled once, not on every bar"
    later = rows(tmp_path / "j.sqlite", f"SELECT COUNT(*) FROM orders WHERE intent = 'entry' AND bar_time_ns > "
                                        f"{halt[0][0]}")[0][0]
    assert later == 0, "no entry after the halt"


def test_entries_halt_with_position_mismatch_when_ninjatrader_stops_reading(tiny, tmp_path):
    run, csv, _ = tiny
    nt = start_sim(tmp_path / "NinjaTrader 8")
    nt.disconnect()  # the OIFs pile up in incoming/: NinjaTrader stays flat while the paper side trades
    ex = sim_executor(run, tmp_path / "j.sqlite", nt, mismatch_bars=2)
    ex.run_feed(SimFeed(ReplayFeed(csv), nt))
    ex.close()
    nt.stop()
    assert nt.received == [] and list(nt.incoming.glob("oif*.txt")), "nothing read: the order files pile up"
    assert ex.summary.halted == "broker:position_mismatch"
    halt = rows(tmp_path / "j.sqlite", "SELECT time_ns, code, message FROM errors WHERE location = 'halt'")
    assert len(halt) == 1 and halt[0][1] == "broker:position_mismatch" and "for 3 bars" in halt[0][2]
    assert "no NinjaTrader position file for NQ 12-26 in Sim101 was found" in halt[0][2]
    assert "holds 0" not in halt[0][2], "no position file is not a position of 0"
    trades = ex.trade_log()
    long_enough = trades[trades["bars_held"] >= 3].iloc[0]  # NinjaTrader stays flat: each trade disagrees
    assert halt[0][0] == long_enough["entry_time"].value + 2 * 60 * 10**9, "halted on the 3rd bar of disagreement"
    assert not (trades["entry_time"] > long_enough["entry_time"]).any(), "no entry after the halt"
    assert any("halted" in n for n in ex.summary.notes)


@pytest.mark.parametrize("on_exit", ["flatten", "protect"])
def test_ctrl_c_closes_the_ninjatrader_position_when_on_exit_is_flatten(tiny, tmp_path, on_exit):
    run, csv, _ = tiny
    nt = start_sim(tmp_path / "NinjaTrader 8")
    ex = sim_executor(run, tmp_path / "j.sqlite", nt)
    in_position = []

    def interrupt() -> bool:
        in_position.append(bool(ex.broker.side))
        return len(in_position) > 2 and all(in_position[-2:])  # two bars into a position
    with pytest.raises(KeyboardInterrupt):
        ex.run_feed(SimFeed(ReplayFeed(csv), nt, interrupt=interrupt))
    assert nt.position() != 0
    ex.link.flat_retry_s = 1.0  # NinjaTrader reads the CLOSEPOSITION on its own thread meanwhile
    ex.stop(on_exit)
    ex.close()
    nt.settle()
    nt.stop()
    closes = [line for line in nt.received if line.startswith("CLOSEPOSITION")]
    if on_exit == "flatten":
        assert closes == [CLOSE_LINE] and nt.position() == 0
        assert rows(tmp_path / "j.sqlite", "SELECT COUNT(*) FROM orders WHERE intent = 'close'")[0][0] == 1
    else:
        assert closes == [] and nt.position() != 0
        assert {o.state for oid, o in nt.orders.items() if oid.endswith(("-SL", "-TP"))} >= {"WORKING"}


def test_restart_sends_each_order_once_when_killed_mid_replay_against_ninjatrader(tiny, mirrored, tmp_path):
    run, csv, _ = tiny
    nt = start_sim(tmp_path / "NinjaTrader 8")  # outlives the killed process, as NinjaTrader does
    bars = list(ReplayFeed(csv))
    journal = tmp_path / "j.sqlite"
    cmd = [sys.executable, "-m", "tests.live.nt_lockstep", "run", str(run), "--feed", f"replay:{csv}",
           "--split", "test", "--journal", str(journal), "--broker", "ninjatrader", "--nt-dir", str(nt.folder),
           "--nt-account", ACCOUNT, "--nt-instrument", INSTRUMENT,
           "--live-from", "2024-01-01 00:00"]  # before the file's first bar: every replayed bar is live
    processed = [-1]

    def drive(kill_after_entries: int | None) -> int | None:
        """Run the child in lockstep with the fake NinjaTrader; kill -9 it once it has sent that many entries."""
        to_test, from_child = os.pipe()
        to_child, from_test = os.pipe()
        env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + str(REPO),
               "NT_SYNC_W": str(from_child), "NT_SYNC_R": str(to_child)}
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                pass_fds=(from_child, to_child))
        os.close(from_child)
        os.close(to_child)
        with os.fdopen(to_test) as requests, os.fdopen(from_test, "w", buffering=1) as answers:
            for line in requests:
                i = int(line)
                while processed[0] < i:
                    processed[0] += 1
                    move_market(nt, bars[processed[0]])
                if kill_after_entries is not None and len(placed(nt, "MARKET")) >= kill_after_entries:
                    proc.kill()  # SIGKILL while the child waits for bar i, which NinjaTrader has seen
                    proc.wait()
                    return None
                answers.write("ok\n")
        err = proc.stderr.read().decode() if proc.stderr else ""
        assert proc.wait(timeout=120) == 0, err[-2000:]
        return 0

    assert drive(kill_after_entries=4) is None
    sent_before = placed(nt)
    assert 4 <= len(placed(nt, "MARKET")) < len(placed(mirrored[2], "MARKET"))
    drive(kill_after_entries=None)
    ids = placed(nt)
    assert [i for i, n in Counter(ids).items() if n > 1] == [], "no order id is placed twice"
    assert ids[:len(sent_before)] == sent_before
    assert untagged(journal, ids) == untagged(mirrored[3], placed(mirrored[2])), \
        "the restarted run sends what an uninterrupted one sends"
    paper = "SELECT order_id, qty, price, time_ns FROM fills WHERE source = 'paper' ORDER BY id"
    assert untagged(journal, rows(journal, paper)) == untagged(mirrored[3], rows(mirrored[3], paper))
    assert rows(journal, "SELECT code FROM errors WHERE location = 'halt'") == []
    nt.settle()
    nt.stop()
    assert nt.position() == 0


@pytest.mark.parametrize("what", ["account", "instrument", "nt dir", "incoming", "paper"])
def test_run_names_the_option_and_fix_when_ninjatrader_options_are_wrong(tiny, tmp_path, capsys, what):
    from hybrid_trader.cli.main import main

    run, csv, _ = tiny
    nt_dir = tmp_path / "NinjaTrader 8"
    (nt_dir / "outgoing").mkdir(parents=True)
    if what != "incoming":
        (nt_dir / "incoming").mkdir()
    opts = {"--broker": "ninjatrader", "--nt-dir": str(nt_dir), "--nt-account": ACCOUNT,
            "--nt-instrument": INSTRUMENT}
    if what in ("account", "instrument"):
        del opts[f"--nt-{what}"]
    if what == "nt dir":
        opts["--nt-dir"] = str(tmp_path / "missing")
    if what == "paper":
        opts["--broker"] = "paper"
    args = [str(run), "--feed", f"replay:{csv}", "--journal", str(tmp_path / "j.sqlite")]
    assert main(["run", *args, *[x for kv in opts.items() for x in kv]]) == 2
    err = capsys.readouterr().err
    named = {"account": "--nt-account", "instrument": "--nt-instrument", "nt dir": "--nt-dir",
             "incoming": "incoming", "paper": "--broker ninjatrader"}[what]
    assert named in err and "fix:" in err
    assert not (tmp_path / "j.sqlite").exists(), "nothing is started on a bad option"


def test_restart_from_snapshot_sends_what_an_uninterrupted_run_sends_when_stopped_against_ninjatrader(
        tiny, mirrored, tmp_path):
    run, csv, _ = tiny
    nt = start_sim(tmp_path / "NinjaTrader 8")
    journal = tmp_path / "j.sqlite"
    bars = list(ReplayFeed(csv))
    cut = int(len(bars) * 0.8)
    first = sim_executor(run, journal, nt)
    first.run_feed(SimFeed(bars[:cut], nt))
    first.close()  # the process stops here (as after a kill): no flatten, nothing more sent
    sent_before = placed(nt)
    ex = sim_executor(run, journal, nt)
    assert ex.snapshots.restored_ns is not None, ex.notes  # taken while the mirror was flat

    def restarted():  # the journal's bars again (NinjaTrader's market saw them already), then the rest live
        yield from bars[:cut]
        yield from SimFeed(bars[cut:], nt)
    ex.run_feed(restarted())
    ex.close()
    nt.settle()
    nt.stop()
    ids = placed(nt)
    assert [i for i, n in Counter(ids).items() if n > 1] == [], "no order id is placed twice"
    assert ids[:len(sent_before)] == sent_before
    assert untagged(journal, ids) == untagged(mirrored[3], placed(mirrored[2]))
    paper = "SELECT order_id, qty, price, time_ns FROM fills WHERE source = 'paper' ORDER BY id"
    assert untagged(journal, rows(journal, paper)) == untagged(mirrored[3], rows(mirrored[3], paper))
    assert rows(journal, "SELECT code FROM errors WHERE location = 'halt'") == []
