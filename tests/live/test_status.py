"""The executor's live status line: what it shows, and when it is written."""

from __future__ import annotations

import io
import math
import re

import pandas as pd
import pytest

from hybrid_trader.calendar import EASTERN
from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import ReplayFeed
from hybrid_trader.live.status import StatusPrinter, StatusSnapshot, format_status, snapshot


def replay_with(printer: StatusPrinter, run, csv, journal) -> Executor:
    feed = ReplayFeed(csv)
    ex = Executor(run, journal,
                  ExecutorOptions(trade_dates=split_dates(run, "test"), market=feed.bars.market,
                                  bar_minutes=feed.bars.bar_minutes))
    ex.run_feed(feed, on_bar=printer.update)
    printer.finish(ex)
    ex.close()
    return ex


def test_status_line_shows_position_pnl_threshold_and_reasons_when_long():
    s = StatusSnapshot(time=pd.Timestamp("2024-03-28 10:41", tz=EASTERN), position=2, entry_price=18342.25,
                       unrealized_pnl=115.0, day_pnl=240.0, net_pnl=1310.5, to_threshold=2190.0, status="active",
                       last_action="HOLD", last_codes=("fusion:agree", "veto:near_threshold"), advisor="student",
                       bars=1204, decisions=96, trades=7)
    assert format_status(s) == (
        "2024-03-28 10:41 ET  LONG 2 @ 18342.25  open +115.00  day +240.00  net +1,310.50  to threshold 2,190.00"
        "  | HOLD [fusion:agree, veto:near_threshold]  | advisor student  | 1,204 bars 96 decisions 7 trades"
        "  | active")


def test_status_line_says_flat_and_waiting_when_nothing_was_decided():
    s = StatusSnapshot(time=None, position=0, entry_price=math.nan, unrealized_pnl=0.0, day_pnl=0.0, net_pnl=0.0,
                       to_threshold=2500.0, status="active", last_action="-", last_codes=(), advisor="none (phase 2)",
                       bars=0, decisions=0, trades=0)
    line = format_status(s)
    assert line.startswith("waiting for the first decision  FLAT  day +0.00")
    assert "| 0 bars 0 decisions" in line
    assert "to threshold 2,500.00" in line and "advisor none (phase 2)" in line


def test_status_line_counts_the_history_and_late_bars_when_some_were_not_traded():
    s = StatusSnapshot(time=None, position=0, entry_price=math.nan, unrealized_pnl=0.0, day_pnl=0.0, net_pnl=0.0,
                       to_threshold=2500.0, status="active", last_action="-", last_codes=(), advisor="none (phase 2)",
                       bars=9120, decisions=0, trades=0, history=9100, late=3)
    assert "| 9,120 bars (9,100 history, 3 late) 0 decisions 0 trades  |" in format_status(s)


def test_status_is_logged_once_per_change_when_the_stream_is_not_a_terminal(tiny, tmp_path):
    run, csv, _ = tiny
    out = io.StringIO()
    printer = StatusPrinter(out, tty=False)
    ex = replay_with(printer, run, csv, tmp_path / "j.sqlite")
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == printer.lines >= 1
    assert len(lines) < ex.summary.decisions  # only changes, not every decision
    counts = [int(re.search(r"([\d,]+) trades", line).group(1).replace(",", "")) for line in lines]
    assert counts == sorted(counts) and counts[-1] == ex.summary.trades
    assert len(set(counts)) >= ex.summary.trades * 0.9  # a line as (nearly) every trade closes
    final = snapshot(ex)
    assert final.net_pnl == pytest.approx(ex.summary.net_pnl)
    assert final.to_threshold == pytest.approx(ex.account.balance - ex.account.threshold)


def test_status_is_redrawn_in_place_and_ended_with_a_newline_when_the_stream_is_a_terminal(tiny, tmp_path):
    run, csv, _ = tiny
    out = io.StringIO()
    printer = StatusPrinter(out, tty=True, interval_s=0.0)
    ex = replay_with(printer, run, csv, tmp_path / "j.sqlite")
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert printer.lines == text.count("\r") > ex.summary.decisions  # every bar redrawn with no throttle
    assert text.rstrip().rsplit("\r", 1)[-1].strip() == format_status(snapshot(ex))
