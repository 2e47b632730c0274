"""Flat by the deadline, whatever happens (``live.deadline``): the flat-by time by the wall clock with no bar, a
stalled feed, the feed's end, an exception, NinjaTrader refusing the close, a kill between the journal's commit and
the CLOSEPOSITION file; the OIF sequence asserted against the fake NinjaTrader folder. SIGTERM: tests/faults."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.calendar import CME_CALENDAR, early_closes
from hybrid_trader.env.account import PropFirmAccount
from hybrid_trader.env.config import EnvConfig
from hybrid_trader.env.day_window import DayWindow
from hybrid_trader.env.rules import get_rules
from hybrid_trader.live import deadline
from hybrid_trader.live.deadline import FlatGuard, flat_by_time
from hybrid_trader.live.executor_journal import EXIT_MANUAL
from hybrid_trader.live.feeds import ReplayFeed

from .fake_ninjatrader import FakeBar, FakeNinjaTrader
from .test_executor_ninjatrader import ACCOUNT, INSTRUMENT, executor, fake_bar, rows

CLOSE_LINE = f"CLOSEPOSITION;{ACCOUNT};{INSTRUMENT};;;;;;;;;;"


# ---------------------------------------------------------------------------- the calendar
def window(trade_end: str = "17:00", calendar: str = CME_CALENDAR) -> DayWindow:
    return DayWindow.of(EnvConfig(trade_end=trade_end, calendar=calendar), PropFirmAccount(get_rules()))


def test_flat_by_moves_before_the_cme_early_close_the_day_after_thanksgiving():
    # exchange_calendars' CME equity calendar: 2024-11-29 closes 13:00 ET, not 17:00; Christmas has no session
    assert early_closes()[np.datetime64("2024-11-29")] == 13 * 60
    assert np.datetime64("2024-12-25") not in early_closes()
    assert flat_by_time("2024-11-29", window()).tz_convert("America/New_York") == \
        pd.Timestamp("2024-11-29 12:59", tz="America/New_York")
    # a regular day (and one across the DST change): 16:59 ET
    for day in ("2024-11-26", "2024-11-04", "2024-07-15"):
        assert flat_by_time(day, window()).tz_convert("America/New_York") == \
            pd.Timestamp(f"{day} 16:59", tz="America/New_York")
    # a window that ends earlier keeps its end unless the early close comes first
    assert flat_by_time("2024-11-29", window("15:30")).tz_convert("America/New_York").hour == 12
    assert flat_by_time("2024-11-26", window("15:30")).tz_convert("America/New_York") == \
        pd.Timestamp("2024-11-26 15:30", tz="America/New_York")
    # no calendar: the regular flat-by time
    assert flat_by_time("2024-11-29", window(calendar="")).tz_convert("America/New_York") == \
        pd.Timestamp("2024-11-29 16:59", tz="America/New_York")


# ---------------------------------------------------------------------------- an executor holding a position
class Holding:
    """The tiny run's bars mirrored to the fake NinjaTrader until the executor has held a position for two bars;
    then it ends (or raises ``error``)."""

    def __init__(self, csv: Path, nt: FakeNinjaTrader, error: Exception | None = None) -> None:
        self.csv, self.nt, self.error, self.ex = csv, nt, error, None
        self.held = 0

    def __iter__(self):
        for bar in ReplayFeed(self.csv):
            self.nt.process(fake_bar(bar))
            yield bar
            self.held = self.held + 1 if self.ex.broker.side else 0
            if self.held >= 2:
                if self.error is not None:
                    raise self.error
                return


def holding(tiny, tmp_path, error=None, **kw):
    """``(executor, fake NinjaTrader, feed)``: the NinjaTrader read between CLOSEPOSITION retries."""
    run, csv, _ = tiny
    nt = FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)
    ex = executor(run, tmp_path / "j.sqlite", nt, **kw)
    feed = Holding(csv, nt, error)
    feed.ex = ex
    ex.link.flat_retries, ex.link.flat_retry_s = 2, 0.0
    ex.link.sleep = lambda s: nt.process(FakeBar(*[ex.bars.close[-1]] * 4))  # NinjaTrader reads meanwhile
    return ex, nt, feed


def flat_rows(journal: Path) -> list[tuple]:
    return rows(journal, "SELECT code FROM errors WHERE location = 'flat' ORDER BY id")


def assert_flattened(ex, nt, journal: Path, code: str) -> None:
    """Paper and NinjaTrader flat, the trade closed MANUAL_EXIT, the OIFs: the bracketed entry, then CLOSEPOSITION
    with the bracket's cancels, once."""
    assert ex.broker.side == 0 and nt.position == 0
    assert ex.broker.trades[-1].exit_reason == EXIT_MANUAL
    assert flat_rows(journal) == [(code,)]
    assert rows(journal, "SELECT code FROM errors WHERE location = 'stop'") == [("stop:flatten",)]
    commands = [line.split(";")[0] for line in nt.received]
    last_place = max(i for i, c in enumerate(commands) if c == "PLACE")
    assert commands[last_place - 2:last_place + 1] == ["PLACE"] * 3, "entry, stop, target in one OIF"
    assert nt.received[last_place + 1:] == [CLOSE_LINE, *[line for line in nt.received[last_place + 2:]
                                                          if line.startswith("CANCEL")]]
    assert nt.received.count(CLOSE_LINE) == 1
    assert rows(journal, "SELECT state FROM orders WHERE intent = 'close'") == [("filled",)]


def test_the_wall_clock_guard_flattens_at_the_flat_by_time_when_no_bar_comes(tiny, tmp_path):
    ex, nt, feed = holding(tiny, tmp_path)
    ex.run_feed(feed)
    assert ex.broker.side != 0 and nt.position != 0
    last = pd.Timestamp(ex.bars.time_ns[-1], tz="UTC")
    now = [last.timestamp() + 60.0]
    guard = FlatGuard(ex, clock=lambda: now[0], poll_s=0.01)
    due = guard.deadline_of(ex.bars.time_ns[-1])
    end = (ex.window.end + 18 * 60) % 1440  # the window's end (the run's trade_end, before Apex's 16:59)
    assert due.tz_convert("America/New_York").strftime("%H:%M") == f"{end // 60:02d}:{end % 60:02d}"
    assert guard.check() is None and ex.broker.side != 0, "before the flat-by time: nothing"
    guard.start()
    try:
        now[0] = due.timestamp() + 1.0  # the clock passes 16:59 ET; no bar arrives
        until = time.monotonic() + 10.0
        while not guard.fired and time.monotonic() < until:
            time.sleep(0.01)
    finally:
        guard.close()
    assert guard.fired == [deadline.CODE_DEADLINE]
    assert_flattened(ex, nt, tmp_path / "j.sqlite", deadline.CODE_DEADLINE)
    assert guard.check() is None, "flat: nothing more"
    ex.close()


def test_the_wall_clock_judges_a_position_of_old_bars_only_when_they_are_recent(tiny, tmp_path):
    ex, nt, feed = holding(tiny, tmp_path)
    ex.run_feed(feed)
    due = FlatGuard(ex).deadline_of(ex.bars.time_ns[-1]).timestamp()
    next_evening = due + 2 * 3600.0  # 18:00 ET: the clock's trading date is the next one, the position still late
    old_file = due + 30 * 86_400.0  # a month-old file followed as if live (a simulation): not the clock's business
    assert FlatGuard(ex, clock=lambda: old_file).check() is None and ex.broker.side != 0
    assert FlatGuard(ex, clock=lambda: next_evening).check() == deadline.CODE_DEADLINE
    assert ex.broker.side == 0
    ex.close()


def test_a_stalled_feed_flattens_after_stall_after_seconds_without_a_bar(tiny, tmp_path):
    ex, nt, feed = holding(tiny, tmp_path)
    ex.run_feed(feed)
    now = [1000.0]
    guard = FlatGuard(ex, clock=lambda: now[0], deadline=False, stall_after_s=30.0)
    guard.bar_arrived()
    now[0] = 1029.0
    assert guard.check() is None
    now[0] = 1031.0
    assert guard.check() == deadline.CODE_STALL
    assert_flattened(ex, nt, tmp_path / "j.sqlite", deadline.CODE_STALL)
    ex.close()


def test_the_feed_end_flattens(tiny, tmp_path):
    ex, nt, feed = holding(tiny, tmp_path)
    FlatGuard(ex, deadline=False).run(feed)
    assert_flattened(ex, nt, tmp_path / "j.sqlite", deadline.CODE_FEED_END)
    assert ex.summary.trades == len(ex.broker.trades), "the summary counts the flattening trade"
    ex.close()


def test_an_exception_escaping_the_loop_flattens_then_propagates(tiny, tmp_path):
    ex, nt, feed = holding(tiny, tmp_path, error=RuntimeError("the feed's disk went away"))
    with pytest.raises(RuntimeError, match="disk went away"):
        FlatGuard(ex, deadline=False).run(feed)
    assert_flattened(ex, nt, tmp_path / "j.sqlite", deadline.CODE_EXCEPTION)
    ex.close()


def test_a_close_ninjatrader_refuses_is_retried_then_halts_loudly(tiny, tmp_path, capsys):
    ex, nt, feed = holding(tiny, tmp_path)
    ex.run_feed(feed)
    nt.refuse_close(99)
    FlatGuard(ex, deadline=False).flatten(deadline.CODE_FEED_END, "the feed ended")
    assert ex.broker.side == 0 and nt.position != 0
    assert nt.received.count(CLOSE_LINE) == 3, "the first CLOSEPOSITION and 2 retries (--flat-retries 2)"
    j = tmp_path / "j.sqlite"
    assert rows(j, "SELECT code FROM errors WHERE location = 'broker' ORDER BY id")[-3:] == [
        ("broker:flat_retry",), ("broker:flat_retry",), ("broker:flat_failed",)]
    assert rows(j, "SELECT code FROM errors WHERE location = 'halt'")[-1] == ("broker:flat_failed",)
    assert ex.link.halted == "broker:flat_failed"
    err = capsys.readouterr().err
    assert "HALTED [broker:flat_failed]" in err and "flatten it by hand" in err
    ex.close()


def test_a_close_refused_once_is_retried_until_flat(tiny, tmp_path):
    ex, nt, feed = holding(tiny, tmp_path)
    ex.run_feed(feed)
    nt.refuse_close(1)
    FlatGuard(ex, deadline=False).flatten(deadline.CODE_FEED_END, "the feed ended")
    assert nt.position == 0 and nt.received.count(CLOSE_LINE) == 2 and not ex.link.halted
    ex.close()


class Killed(BaseException):
    """kill -9 between the journal's commit of the CLOSEPOSITION and its file."""


def test_a_close_journaled_but_never_written_is_written_once_by_the_restart(tiny, tmp_path, monkeypatch):
    run, csv, _ = tiny
    ex, nt, feed = holding(tiny, tmp_path)
    ex.run_feed(feed)
    held, killed_at, received = nt.position, ex.bars.time_ns[-1], len(nt.received)

    def killed(order_id):
        raise Killed
    monkeypatch.setattr(ex.link.bridge, "close", killed)
    with pytest.raises(Killed):
        FlatGuard(ex, deadline=False).flatten(deadline.CODE_DEADLINE, "the flat-by time passed")
    ex.close()
    j = tmp_path / "j.sqlite"
    assert rows(j, "SELECT state FROM orders WHERE intent = 'close'") == [("sent",)], "journaled"
    nt.process(FakeBar(*[ex.bars.close[-1]] * 4))
    assert nt.position == held and len(nt.received) == received, "no file reached NinjaTrader"

    class AfterKill:  # the restart replays the journal's bars (NinjaTrader saw them), then goes on live
        def __iter__(self):
            for bar in ReplayFeed(csv):
                if bar.time_ns > killed_at:
                    nt.process(fake_bar(bar))
                yield bar
                if bar.time_ns > killed_at + 30 * 60 * 10**9:
                    return
    again = executor(run, j, nt)
    again.link.sleep = lambda s: nt.process(FakeBar(*[again.bars.close[-1]] * 4))
    again.run_feed(AfterKill())
    after = nt.received[received:]
    upto = next((i for i, line in enumerate(after) if line.startswith("PLACE")), len(after))
    assert after[:upto].count(CLOSE_LINE) == 1, "the restart writes the journaled CLOSEPOSITION exactly once"
    assert after[0] == CLOSE_LINE
    assert rows(j, "SELECT state FROM orders WHERE intent = 'close' ORDER BY id")[0] == ("filled",)
    assert not again.link.halted, "NinjaTrader and the paper position agree after it"
    again.close()


@pytest.mark.parametrize("args, message", [
    (["--stall-after", "30"], "--stall-after 30.0: a positive number of seconds, for a follow: feed"),
    (["--flat-retry-s", "0"], "--flat-retries 5 / --flat-retry-s 0.0"),
])
def test_run_names_the_flat_option_and_its_fix_when_it_is_wrong(tiny, tmp_path, capsys, args, message):
    from hybrid_trader.cli.main import main

    run, csv, _ = tiny
    assert main(["run", str(run), "--feed", f"replay:{csv}", "--journal", str(tmp_path / "j.sqlite"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "fix" in err.lower()
    assert not (tmp_path / "j.sqlite").exists(), "refused before the journal is made"
