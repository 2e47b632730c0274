"""``hybrid-trader report JOURNAL.sqlite`` (``live.journal_report``): what a run did, from its journal."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.errors import UserError
from hybrid_trader.live.journal import Journal, OrderPrices
from hybrid_trader.live.journal_read import read_journal
from hybrid_trader.live.journal_report import is_journal, journal_trades, write_journal_report

T0 = pd.Timestamp("2024-03-04 09:30", tz="America/New_York")


def minute(k: int) -> pd.Timestamp:
    return T0 + pd.Timedelta(minutes=k)


@pytest.fixture
def journal(tmp_path):
    path = tmp_path / "journal.sqlite"
    with Journal(path) as j:
        for k in range(12):
            j.record_bar(minute(k), (100 + k, 101 + k, 99 + k, 100.5 + k, 10))
            j.record_decision(minute(k), 1 if k == 2 else 0, [0.7, 0.2, 0.1, 0, 0, 0],
                              rule_codes=["veto:DAILY_LOSS"] if k == 9 else [], latency_ms=0.5 + k / 10)
            j.record_account(minute(k), "active", {"balance": 50_000.0, "equity": 50_000.0 + 5 * k,
                                                   "threshold": 47_500.0 + k})
        j.record_bar(minute(5), (1, 1, 1, 1, 1), accepted=False, reason="DUPLICATE", message="bar 09:35 again")
        j.record_order("e1", minute(2), "entry", "BUY", 1, state="filled")
        j.record_fill("e1", 1, 102.75, minute(3), fill_id="e1")
        j.record_order("x1", minute(6), "exit", "SELL", 1, state="filled", note="TARGET")
        j.record_fill("x1", 1, 106.25, minute(6), fill_id="x1")
        j.record_order("e2", minute(7), "entry", "SELL", 1, state="filled")
        j.record_fill("e2", 1, 107.0, minute(7), fill_id="e2")
        j.record_order("x2", minute(9), "exit", "BUY", 1, state="filled", note="STOP")
        j.record_fill("x2", 1, 108.5, minute(9), fill_id="x2")
        j.record_error("broker", "order x3 rejected: no margin", minute(10))
    return path


def test_trades_pair_entry_and_exit_fills_when_read_from_a_journal(journal):
    trades = journal_trades(read_journal(journal))
    assert list(trades["side"]) == [1, -1]
    assert list(trades["pnl_points"]) == pytest.approx([3.5, -1.5])
    assert list(trades["exit_reason"]) == ["TARGET", "STOP"]
    assert trades["entry_time"].iloc[0] == minute(3)


def test_report_counts_history_and_late_bars_apart_when_some_were_not_traded(journal, tmp_path):
    with Journal(journal) as j:
        for k in range(-3, 0):
            j.record_bar(minute(k), (100, 101, 99, 100.5, 10), reason="history")
        j.record_bar(minute(12), (100, 101, 99, 100.5, 10), reason="late", message="ended 200 s before it arrived")
    html = write_journal_report(journal).read_text()
    assert "history (features only, never traded)</th><td>3</td>" in html.replace("\n", "")
    assert "late (no decision)</th><td>1</td>" in html.replace("\n", "")


def test_report_shows_trades_account_decisions_and_refusals_when_written(journal):
    html = write_journal_report(journal, static=True).read_text()
    assert (journal.parent / "journal.report.html").is_file()
    assert html.count("data:image/png;base64,") == 2  # price with trades; account
    assert "<script" not in html
    interactive = write_journal_report(journal).read_text()
    assert interactive.count('class="chart-spec"') == 1 and "data:image/png" not in interactive
    for text in ("TARGET", "STOP", "+3.50", "-1.50", "veto:DAILY_LOSS", "DUPLICATE", "bar 09:35 again",
                 "no margin", "distance to the threshold", "p99", "BUY"):
        assert text in html, text


def test_report_command_writes_the_journal_report_when_given_a_journal(journal, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(journal), "--out", str(out)]) == 0
    assert f"report: {out}" in capsys.readouterr().out and out.is_file()
    assert is_journal(journal) and not is_journal(tmp_path / "nope.sqlite")


def test_a_file_that_is_not_a_journal_is_refused_naming_it(tmp_path):
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(UserError, match="not a journal") as err:
        read_journal(other)
    assert str(other) in str(err.value)
    with pytest.raises(UserError, match="journal not found"):
        read_journal(tmp_path / "missing.sqlite")


def test_an_empty_journal_reports_without_figures_when_nothing_happened(tmp_path):
    path = tmp_path / "empty.sqlite"
    Journal(path).close()
    html = write_journal_report(path).read_text()
    assert "No decision was journaled" in html and "data:image/png" not in html
    assert 'class="chart-spec"' not in html and "<script" not in html  # nothing to chart: no plotly.js either


def test_journal_chart_holds_each_round_trip_and_an_entry_hovers_its_decision(journal, tmp_path):
    from tests.evaluation.browser import CHART_PROBE, open_with_probe

    page = write_journal_report(journal, tmp_path / "j.html")
    probe, _ = open_with_probe(page, CHART_PROBE, tmp_path, "--virtual-time-budget=60000")
    assert probe["state"] == "ready" and probe["errs"] == [], probe
    kinds = {t["kind"]: t for t in probe["charts"]["journal-chart"]}
    trades = journal_trades(read_journal(journal))
    assert kinds["entry"]["n"] == len(trades) == 2 and kinds["exit"]["codes"] == ["TARGET", "STOP"]
    assert kinds["entry"]["codes"] == ["BUY", "SELL"]  # the decision journaled at the entry order's bar, else its side
    hover = probe["hover"]["journal-chart"]
    assert "reason: TARGET" in hover["exit"]
    assert "reason: BUY" in hover["entry"] and "policy: HOLD 0.70, BUY 0.20, SELL 0.10" in hover["entry"]
    assert {"equity", "balance", "threshold", "candles"} <= set(kinds)


def test_stop_moves_are_read_and_drawn_when_the_journal_has_them(tmp_path):
    path = tmp_path / "moves.sqlite"
    with Journal(path) as j:
        for k in range(6):
            j.record_bar(minute(k), (100 + k, 101 + k, 99 + k, 100.5 + k, 10))
        j.record_order("e1", minute(1), "entry", "BUY", 1, state="filled")
        j.record_fill("e1", 1, 101.25, minute(1), fill_id="e1")
        j.record_order("s1", minute(1), "stop", "SELL", 1, prices=OrderPrices("STOPMARKET", stop_price=98.0),
                       state="accepted")
        j.record_change("s1", minute(3), "stop_price", 101.25)  # moved to break-even
    tables = read_journal(path)
    moves = tables["order_changes"]
    assert list(moves["order_id"]) == ["s1"] and list(moves["price"]) == [101.25]
    html = write_journal_report(path).read_text()
    assert "MOVE_STOP" in html and "stop/target moves" in html
