"""BrokerLink against the fake NinjaTrader's files, bar by bar: how long positions may differ, and the
CLOSEPOSITION that make_flat never piles up while NinjaTrader has not read the last one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hybrid_trader.env.broker import EXIT_STOP, Broker
from hybrid_trader.live.broker_halts import (
    CODE_EXIT_PENDING,
    CODE_FLAT_FAILED,
    CODE_FLAT_RETRY,
    CODE_MISMATCH,
    CODE_RESUMED,
)
from hybrid_trader.live.broker_link import BrokerLink
from hybrid_trader.live.journal import Journal
from tests.live.fake_ninjatrader import FakeNinjaTrader
from tests.live.test_ninjatrader import bar, bridge_for, nt  # noqa: F401 (the fixture)

IDENTITY = {"run": "/runs/nq", "run_tag": "nq", "model": "m", "config": "c", "market": "NQ"}


def broker() -> Broker:
    return Broker(contracts=1, point_value=20.0, commission_per_side=0.0, slippage_points=0.0, tick_size=0.25,
                  stop_atr=1.0, target_atr=2.0, trail_atr=0.0)


def set_position(nt: FakeNinjaTrader, signed: int) -> None:  # noqa: F811
    side = "LONG" if signed > 0 else "SHORT" if signed < 0 else "FLAT"
    nt.position_file.write_text(f"{side};{abs(signed)};{21000 if signed else 0}\n")


def halts(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    rows = [code for (code,) in db.execute("SELECT code FROM errors WHERE location = 'halt' ORDER BY id")]
    db.close()
    return rows


def test_reports_that_lag_every_change_by_a_bar_hold_entries_a_bar_and_never_add_up_to_a_mismatch(nt, tmp_path):  # noqa: F811
    """Back-to-back one-bar trades, NinjaTrader's position file a bar behind each change: each mismatch lasts one
    bar and none halts for good. Before, the count ran on across trades: paper 1 / NinjaTrader 0, then paper 0 /
    NinjaTrader 1 (within the grace of NinjaTrader's own stop), then paper -1 / NinjaTrader 0 made 3 bars > 2 and
    halted. While NinjaTrader still shows the position its own stop should have closed, no entry is allowed
    (``broker:exit_pending``: the stop may not have filled there, and an entry would double the position); the bar
    after it reports the exit, entries are allowed again."""
    set_position(nt, 0)
    paper = [0] + [1, 0, 0, -1, 0, 0] * 3
    with Journal(tmp_path / "j.sqlite", writer="test") as j:
        j.claim(IDENTITY)
        link = BrokerLink(bridge_for(nt), j, broker(), mismatch_bars=2)
        for t, qty in enumerate(paper):
            if t:
                set_position(nt, paper[t - 1])  # NinjaTrader's file shows the previous bar's position
                if qty and not paper[t - 1]:
                    assert link.halted == "", f"entry refused at bar {t}"
                    link.entry(f"e{t}", qty, 1, 21000.0, 10.0, t)
                elif paper[t - 1] and not qty:
                    link.exit(EXIT_STOP, t)  # its stop: NinjaTrader takes it with its own OCO stop
                link.flush(live=False)
            link.check(t, qty, replayed=False)
            exited = t > 1 and paper[t - 1] != 0 and qty == 0
            assert link.halted == (CODE_EXIT_PENDING if exited else ""), f"bar {t}: {link.halted!r}"
    assert halts(tmp_path / "j.sqlite") == [CODE_EXIT_PENDING, CODE_RESUMED] * 6


def test_the_same_mismatch_for_more_than_mismatch_bars_bars_in_a_row_still_halts(nt, tmp_path):  # noqa: F811
    set_position(nt, 0)
    with Journal(tmp_path / "j.sqlite", writer="test") as j:
        j.claim(IDENTITY)
        link = BrokerLink(bridge_for(nt), j, broker(), mismatch_bars=2)
        link.check(1, 0, replayed=False)
        for t in (2, 3, 4):  # paper long, NinjaTrader never filled: bars 2 and 3 within the 2 allowed
            assert link.halted == ""
            link.check(t, 1, replayed=False)
        assert link.halted == CODE_MISMATCH
    assert halts(tmp_path / "j.sqlite") == [CODE_MISMATCH]


def flat_link(nt: FakeNinjaTrader, j: Journal) -> BrokerLink:  # noqa: F811
    """A link whose paper long of 1 NinjaTrader holds too (its entry's bracket filled)."""
    link = BrokerLink(bridge_for(nt), j, broker(), mismatch_bars=2)
    link.check(1, 0, replayed=False)
    link.entry("e0", 1, 1, 21000.0, 10.0, 1)
    link.flush(live=True)
    nt.process(bar(21000, 21001, 20999, 21000))  # the MARKET entry fills
    link.check(2, 1, replayed=False)
    assert link.broker_position == 1
    return link


def close_lines(nt: FakeNinjaTrader) -> int:  # noqa: F811
    return sum(p.read_text().count("CLOSEPOSITION") for p in nt.incoming.glob("oif*.txt"))


def test_make_flat_waits_for_ninjatrader_to_read_its_closeposition_before_sending_another(nt, tmp_path):  # noqa: F811
    with Journal(tmp_path / "j.sqlite", writer="test") as j:
        j.claim(IDENTITY)
        link = flat_link(nt, j)
        link.flat_retries, waits = 3, []

        def slow_ninjatrader(seconds: float) -> None:  # NinjaTrader reads incoming/ only after the second wait
            waits.append(seconds)
            assert close_lines(nt) == 1, "a second CLOSEPOSITION while the first was still unread"
            if len(waits) == 2:
                nt.process(bar(21000, 21001, 20999, 21000))
        link.sleep = slow_ninjatrader
        assert link.make_flat(3) is True
        assert len(waits) == 2 and close_lines(nt) == 0 and nt.position == 0
        retry = [m for _, c, m in j.errors_at("broker") if c == CODE_FLAT_RETRY]
        assert len(retry) == 1 and "waits unread in incoming/, not sent again (1 of 3)" in retry[0]


def test_make_flat_that_ninjatrader_never_reads_halts_naming_the_unread_file(nt, tmp_path):  # noqa: F811
    with Journal(tmp_path / "j.sqlite", writer="test") as j:
        j.claim(IDENTITY)
        link = flat_link(nt, j)
        link.flat_retries, link.sleep = 2, (lambda s: None)
        assert link.make_flat(3) is False
        assert close_lines(nt) == 1, "one CLOSEPOSITION written, none piled up behind it"
        [message] = [m for _, c, m in j.errors_at("broker") if c == CODE_FLAT_FAILED]
        assert "was never read: is the ATI enabled?" in message
    assert halts(tmp_path / "j.sqlite") == [CODE_FLAT_FAILED]


def test_make_flat_sends_again_once_ninjatrader_has_read_a_close_it_did_not_carry_out(nt, tmp_path):  # noqa: F811
    with Journal(tmp_path / "j.sqlite", writer="test") as j:
        j.claim(IDENTITY)
        link = flat_link(nt, j)
        nt.refuse_close(1)
        link.flat_retries = 3
        link.sleep = lambda s: nt.process(bar(21000, 21001, 20999, 21000))
        assert link.make_flat(3) is True
        retry = [m for _, c, m in j.errors_at("broker") if c == CODE_FLAT_RETRY]
        assert [("sent again" in m) for m in retry] == [True]
    assert nt.position == 0


def test_a_fill_price_derived_from_the_8_decimal_average_is_booked_on_the_tick_grid(nt, tmp_path):  # noqa: F811
    """1 at 21000.25 then 2 at 21000.5: NinjaTrader's file holds the average 21000.41666667, so the second fill's
    own price derives as 21000.500000005; booked 21000.5. The average itself is never snapped."""
    with Journal(tmp_path / "j.sqlite", writer="test") as j:
        j.claim(IDENTITY)
        link = BrokerLink(bridge_for(nt), j, broker())
        j.record_order("e1", 1, "entry", "BUY", 3, state="sent")
        link.bridge.enter("e1", "BUY", 3, stop_price=20990, target_price=21030)
        state = nt.outgoing / "e1.txt"
        state.write_text("PARTFILLED;1;21000.25\n")
        link.check(2, 3, replayed=False)
        state.write_text("FILLED;3;21000.41666667\n")
        link.check(3, 3, replayed=False)
    db = sqlite3.connect(tmp_path / "j.sqlite")
    booked = db.execute("SELECT qty, price FROM fills WHERE source = 'broker' ORDER BY id").fetchall()
    db.close()
    assert booked == [(1, 21000.25), (2, 21000.5)]
