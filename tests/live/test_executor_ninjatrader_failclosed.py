"""``run --broker ninjatrader`` fails closed: what NinjaTrader's files do not vouch for halts entries at once, with a
reason code, and a position that is unknown or not the paper broker's is closed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import ReplayFeed
from hybrid_trader.live.ninjatrader import NinjaTraderBridge

from .fake_ninjatrader import FakeNinjaTrader
from .test_executor_ninjatrader import ACCOUNT, INSTRUMENT, fake_bar, placed, rows

CLOSE = f"CLOSEPOSITION;{ACCOUNT};{INSTRUMENT};;;;;;;;;;"


def run_until_halted(tiny, tmp_path: Path, *, after: Callable[[Executor, FakeNinjaTrader], None] | None = None,
                     before: Callable[[FakeNinjaTrader], None] | None = None, **bridge_kw) -> tuple[Executor,
                                                                                                     FakeNinjaTrader]:
    """The tiny run's test days against a fake NinjaTrader (``before`` set up first, ``after`` run after each bar
    NinjaTrader processed), stopped 5 decisions after entries halted."""
    run, csv, _ = tiny
    nt = FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)
    if before is not None:
        before(nt)
    bridge = NinjaTraderBridge(nt.nt_dir, ACCOUNT, INSTRUMENT, sleep=lambda s: None, **bridge_kw)
    ex = Executor(run, tmp_path / "j.sqlite",
                  ExecutorOptions(trade_dates=split_dates(run, "test"), market="NQ", bar_minutes=1), bridge=bridge)

    def feed():
        halted_at: int | None = None
        for bar in ReplayFeed(csv):
            nt.process(fake_bar(bar))
            if after is not None:
                after(ex, nt)
            yield bar
            if ex.link.halted and halted_at is None:
                halted_at = ex.summary.decisions
            if halted_at is not None and ex.summary.decisions >= halted_at + 5:
                return

    ex.run_feed(feed())
    ex.close()
    nt.process(fake_bar(bar_of(ex)))  # NinjaTrader reads what the last bar wrote
    return ex, nt


def bar_of(ex: Executor):
    class Last:
        open = high = low = close = float(ex.bars.close[-1])
    return Last


def halts(tmp_path: Path) -> list[tuple]:
    return rows(tmp_path / "j.sqlite", "SELECT time_ns, code, message FROM errors WHERE location = 'halt'")


def entries_after(tmp_path: Path, tns: int) -> int:
    return rows(tmp_path / "j.sqlite", f"SELECT COUNT(*) FROM orders WHERE intent = 'entry' AND bar_time_ns > {tns}"
                )[0][0]


def hold(qty: int) -> Callable[[FakeNinjaTrader], None]:
    def setup(nt: FakeNinjaTrader) -> None:  # a position left in the account (by hand, another program)
        nt.position, nt.avg_price, nt._position_dirty = qty, 17000.0, True
        nt._flush()
    return setup


def test_a_position_ninjatrader_holds_and_the_paper_broker_does_not_halts_at_once_and_is_closed(tiny, tmp_path):
    ex, nt = run_until_halted(tiny, tmp_path, before=hold(1))
    assert ex.summary.halted == "broker:unexpected_position"
    [(tns, code, message)] = halts(tmp_path)
    assert "holds 1 contract(s) of NQ 12-26 in Sim101 that the paper position (0) does not" in message
    assert placed(nt, "MARKET") == [], "no entry stacks on the leftover position"
    assert [line for line in nt.received if line.startswith("CLOSEPOSITION")] == [CLOSE] and nt.position == 0
    assert rows(tmp_path / "j.sqlite", "SELECT order_id, side, qty, order_type FROM orders WHERE intent = 'close'"
                ) == [(f"flatten-{tns}", "SELL", 1, "CLOSEPOSITION")]


def test_an_entry_over_the_contract_limit_with_ninjatraders_position_is_refused(tiny, tmp_path):
    run, _, _ = tiny
    probe = Executor(run, tmp_path / "probe.sqlite", ExecutorOptions(market="NQ", bar_minutes=1))
    limit = probe.rules.max_contracts
    probe.close()
    ex, nt = run_until_halted(tiny, tmp_path, before=hold(-limit))
    assert ex.summary.halted == "broker:contract_limit"
    [(tns, _, message)] = halts(tmp_path)
    assert f"holds {-limit} contract(s)" in message and f"the rules' {limit} contracts" in message
    codes = rows(tmp_path / "j.sqlite", f"SELECT rule_codes FROM decisions WHERE bar_time_ns >= {tns}")
    assert codes and all("broker:contract_limit" in c[0] for c in codes), "each refused decision says why"
    assert placed(nt, "MARKET") == [] and nt.position == 0, "refused, and the position is closed"


def corrupt_position_once(write: Callable[[FakeNinjaTrader], None]) -> Callable[[Executor, FakeNinjaTrader], None]:
    done = []

    def after(ex: Executor, nt: FakeNinjaTrader) -> None:
        if not done and ex.broker.side != 0 and nt.position != 0:
            done.append(True)
            write(nt)
    return after


def assert_flattened_after_halt(ex: Executor, nt: FakeNinjaTrader, tmp_path: Path, code: str) -> str:
    assert ex.summary.halted == code
    [(tns, _, message)] = halts(tmp_path)
    assert entries_after(tmp_path, tns) == 0, "no entry after the halt"
    assert CLOSE in nt.received and nt.position == 0, "the position it can no longer see is closed"
    assert rows(tmp_path / "j.sqlite", "SELECT order_id FROM orders WHERE order_type = 'CLOSEPOSITION'"
                )[0][0] == f"flatten-{tns}"
    return message


def test_an_unreadable_position_file_halts_and_flattens_when_the_paper_broker_holds_a_position(tiny, tmp_path):
    def comma(nt: FakeNinjaTrader) -> None:  # a comma-decimal Windows locale
        nt.position_file.write_text(f"{'LONG' if nt.position > 0 else 'SHORT'};1;21000,25\n")
    ex, nt = run_until_halted(tiny, tmp_path, after=corrupt_position_once(comma))
    message = assert_flattened_after_halt(ex, nt, tmp_path, "broker:read_failed")
    assert "'21000,25'" in message
    [(run_id,)] = rows(tmp_path / "j.sqlite", "SELECT value FROM identity WHERE key = 'run_id'")
    entries = [r[0] for r in rows(tmp_path / "j.sqlite", "SELECT order_id FROM orders WHERE intent = 'entry'")]
    assert entries and all(e.startswith(f"{ACCOUNT}-{run_id}-") for e in entries), "ids name account and run"


def test_a_position_file_gone_after_a_ninjatrader_restart_is_unknown_and_flattened(tiny, tmp_path):
    def restart(nt: FakeNinjaTrader) -> None:  # NinjaTrader restarts: outgoing/ is emptied
        for path in nt.outgoing.iterdir():
            path.unlink()
    ex, nt = run_until_halted(tiny, tmp_path, after=corrupt_position_once(restart))
    message = assert_flattened_after_halt(ex, nt, tmp_path, "broker:position_unknown")
    assert "unknown, not flat" in message


def test_a_disconnected_connection_file_halts_entries_before_any_is_sent(tiny, tmp_path):
    def disconnected(nt: FakeNinjaTrader) -> None:
        (nt.outgoing / "Rithmic.txt").write_text("DISCONNECTED\n")
    ex, nt = run_until_halted(tiny, tmp_path, before=disconnected, connection="Rithmic")
    assert ex.summary.halted == "broker:disconnected"
    assert "Rithmic.txt reads DISCONNECTED" in halts(tmp_path)[0][2]
    assert placed(nt) == []


def test_an_order_file_ninjatrader_never_reads_is_withdrawn_and_halts_entries(tiny, tmp_path):
    ex, nt = run_until_halted(tiny, tmp_path, before=FakeNinjaTrader.disconnect, ack_timeout_s=0.0)
    assert ex.summary.halted == "broker:withdrawn"
    [first] = rows(tmp_path / "j.sqlite", "SELECT order_id, state FROM orders WHERE intent = 'entry'")
    assert first[1] == "withdrawn"
    assert not [p for p in nt.incoming.iterdir() if p.name.endswith(f"_{first[0]}.txt")], "its file is gone"
    codes = rows(tmp_path / "j.sqlite", "SELECT DISTINCT code FROM errors WHERE location = 'broker'")
    assert ("broker:withdrawn",) in codes


@pytest.mark.parametrize(("option", "value", "named"), [
    ("--nt-ack-timeout", "0", "--nt-ack-timeout must be a positive number"),
    ("--nt-ack-timeout", "nan", "--nt-ack-timeout must be a positive number"),
    ("--nt-connection", "a/b", "--nt-connection: not a connection name"),
])
def test_run_names_the_option_when_the_ack_timeout_or_connection_is_wrong(tiny, tmp_path, capsys, option, value,
                                                                          named):
    from hybrid_trader.cli.main import main

    run, csv, _ = tiny
    nt = FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)
    args = [str(run), "--feed", f"replay:{csv}", "--journal", str(tmp_path / "j.sqlite"), "--broker", "ninjatrader",
            "--nt-dir", str(nt.nt_dir), "--nt-account", ACCOUNT, "--nt-instrument", INSTRUMENT, option, value]
    assert main(["run", *args]) == 2
    err = capsys.readouterr().err
    assert named in err and "fix:" in err
    assert not (tmp_path / "j.sqlite").exists()
