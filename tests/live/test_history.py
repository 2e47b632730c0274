"""History is never traded: bars before the live point only warm the features; late and future bars send nothing."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run
from hybrid_trader.live.executor import Executor, ExecutorOptions
from hybrid_trader.live.feeds import Bar, ReplayFeed
from hybrid_trader.live.ninjatrader import NinjaTraderBridge

from .fake_ninjatrader import FakeNinjaTrader
from .test_executor import assert_same_trades
from .test_executor_ninjatrader import ACCOUNT, INSTRUMENT, NTFeed, placed, rows

ET = "America/New_York"
LIVE_FROM = pd.Timestamp("2024-01-16 09:00", tz=ET)
"""The tiny run's first test day (2024-01-16), before its window opens; ten trading days of history before it."""


class LiveClock:
    """The wall clock of a run started at :data:`LIVE_FROM` on a file of history, then fed closed bars as a platform
    writes them: each arrives ``lag_s`` after its end (negative: the computer's clock is behind the bars')."""

    def __init__(self, lag_s: float, slow: tuple[int, int] | None = None, slow_lag_s: float = 200.0) -> None:
        self.lag_s = lag_s
        self.slow = slow
        """Bars with a start in ``[slow[0], slow[1])`` (ns) arrive ``slow_lag_s`` after their end."""
        self.slow_lag_s = slow_lag_s
        self.now = LIVE_FROM.timestamp()

    def __call__(self) -> float:
        return self.now

    def follow(self, bars: Iterable[Bar]) -> Iterator[Bar]:
        for bar in bars:
            assert bar.time is not None
            end = bar.time.timestamp() + 60.0
            if end > LIVE_FROM.timestamp():
                slow = self.slow is not None and self.slow[0] <= bar.time.value < self.slow[1]
                self.now = end + (self.slow_lag_s if slow else self.lag_s)
            yield bar


def nt_executor(run: Path, journal: Path, nt: FakeNinjaTrader, clock: LiveClock, **kw) -> Executor:
    bridge = NinjaTraderBridge(nt.nt_dir, ACCOUNT, INSTRUMENT, sleep=lambda s: None)
    return Executor(run, journal,
                    ExecutorOptions(market="NQ", bar_minutes=1, live_from=LIVE_FROM,
                                    max_bar_age_s=90.0), bridge=bridge, clock=clock, **kw)


def recent_days(csv: Path, out: Path, since: str = "2024-01-12 18:00") -> Path:
    """The tiny run's bars from ``since`` on (fewer bars: no parity with evaluate needed)."""
    frame = pd.read_csv(csv)
    frame[frame["timestamp"] >= since].to_csv(out, index=False)
    return out


def test_a_fresh_journal_sends_nothing_for_history_and_then_trades_as_evaluate_when_fed_history_then_live_bars(
        tiny, tmp_path):
    run, csv, market = tiny
    nt = FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)
    clock = LiveClock(lag_s=1.0)
    journal = tmp_path / "j.sqlite"
    ex = nt_executor(run, journal, nt, clock)  # --split all: every day of the feed would be traded
    seen_at_live: list[tuple[int, list[str]]] = []
    backwards: list[Bar] = []

    def feed() -> Iterator[Bar]:
        for bar in clock.follow(NTFeed(csv, nt)):
            assert bar.time is not None
            if bar.time >= LIVE_FROM and not seen_at_live:  # NinjaTrader has read all the history sent it
                seen_at_live.append((len(nt.received), sorted(p.name for p in nt.incoming.iterdir())))
            yield bar
            if bar.time == LIVE_FROM + pd.Timedelta(minutes=70):  # a stamp that goes backwards, on a live day
                backwards.append(Bar(bar.time - pd.Timedelta(minutes=30), bar.open, bar.high + 50, bar.low,
                                     bar.close, bar.volume))
                yield backwards[-1]
    ex.run_feed(feed())
    ex.close()
    assert seen_at_live == [(0, [])], "not one OIF for the ten days of history"
    history = sum(1 for b in ReplayFeed(csv) if b.time + pd.Timedelta(minutes=1) <= LIVE_FROM)
    assert ex.summary.history_bars == history > 10 * 1000
    assert rows(journal, "SELECT COUNT(*) FROM bars WHERE accepted = 1 AND reason = 'history'") == [(history,)]
    assert rows(journal, f"SELECT COUNT(*) FROM decisions WHERE bar_time_ns < {LIVE_FROM.value}") == [(0,)]
    assert rows(journal, f"SELECT COUNT(*) FROM orders WHERE bar_time_ns < {LIVE_FROM.value}") == [(0,)]
    out = evaluate_run(run, EvaluationRequest(split="test", seeds=1, market=market, quiet=True, ablation=False,
                                              out_dir=tmp_path / "eval"))
    expected = pd.read_csv(out.out_dir / "agent.trades.csv")
    assert len(expected) > 5
    assert_same_trades(ex.trade_log(), expected)  # the live days decide as evaluate's test days
    entries = [r[0] for r in rows(journal, "SELECT order_id FROM orders WHERE intent = 'entry' ORDER BY id")]
    assert placed(nt, "MARKET") == entries and all("-20240116T" in e or "-20240117T" in e for e in entries)
    assert ex.summary.rejected == 1 and ex.summary.late_bars == 0
    assert rows(journal, "SELECT reason FROM bars WHERE accepted = 0") == [("out-of-order",)]


def test_a_window_open_at_the_live_point_is_not_traded_when_the_run_goes_live_mid_window(tiny, tmp_path):
    run, csv, _ = tiny
    mid = pd.Timestamp("2024-01-16 11:00", tz=ET)
    late_start = Executor(run, tmp_path / "mid.sqlite", ExecutorOptions(market="NQ", bar_minutes=1, live_from=mid))
    late_start.run_feed(ReplayFeed(csv))
    late_start.close()
    next_day = Executor(run, tmp_path / "day.sqlite",
                        ExecutorOptions(market="NQ", bar_minutes=1, trade_dates=[pd.Timestamp("2024-01-17")]))
    next_day.run_feed(ReplayFeed(csv))
    next_day.close()
    decisions = "SELECT bar_time_ns, action, probabilities, rule_codes FROM decisions ORDER BY id"
    got = rows(tmp_path / "mid.sqlite", decisions)
    assert got and pd.Timestamp(got[0][0], tz="UTC").tz_convert(ET) == pd.Timestamp("2024-01-17 09:30", tz=ET), \
        "nothing decided in the window open at 11:00; the next window from its first bar"
    assert got == rows(tmp_path / "day.sqlite", decisions)
    assert_same_trades(late_start.trade_log(), next_day.trade_log())


def test_run_follow_sends_no_order_for_the_files_history_when_the_journal_is_fresh(tiny, tmp_path, capsys):
    from hybrid_trader.cli.main import main

    run, csv, _ = tiny
    recent = recent_days(csv, tmp_path / "export.csv")
    nt = FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)
    nt_args = ["--broker", "ninjatrader", "--nt-dir", str(nt.nt_dir), "--nt-account", ACCOUNT,
               "--nt-instrument", INSTRUMENT]
    journal = tmp_path / "j.sqlite"
    assert main(["run", str(run), "--feed", f"follow:{recent}", "--idle-exit", "1", "--journal", str(journal),
                 "--json", *nt_args]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted(nt.incoming.iterdir()) == [], "no order file for the file's history (it all ended before now)"
    assert summary["history_bars"] == summary["bars"] > 3000 and summary["decisions"] == 0
    assert rows(journal, "SELECT COUNT(*) FROM bars WHERE reason = 'history'") == [(summary["bars"],)]
    assert main(["run", str(run), "--feed", f"replay:{recent}", "--journal", str(tmp_path / "r.sqlite"),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["trades"] > 0, \
        "the same bars replayed as a simulation are traded: only the live point kept them from NinjaTrader"


def test_run_follow_trades_no_stale_bar_when_bars_arrive_older_than_max_bar_age(tiny, tmp_path, capsys):
    from hybrid_trader.cli.main import main

    run, csv, _ = tiny
    recent = recent_days(csv, tmp_path / "export.csv")
    nt = FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)
    journal = tmp_path / "j.sqlite"
    args = ["run", str(run), "--feed", f"follow:{recent}", "--idle-exit", "1", "--journal", str(journal), "--json",
            "--live-from", "2024-01-16 09:00", "--broker", "ninjatrader", "--nt-dir", str(nt.nt_dir),
            "--nt-account", ACCOUNT, "--nt-instrument", INSTRUMENT]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    live = sum(1 for b in ReplayFeed(recent) if b.time + pd.Timedelta(minutes=1) > LIVE_FROM)
    assert summary["late_bars"] == live > 1000 and summary["decisions"] == 0 and summary["trades"] == 0
    assert summary["history_bars"] == summary["bars"] - live
    assert sorted(nt.incoming.iterdir()) == [], "no order for a stale bar"
    late = rows(journal, "SELECT accepted, message FROM bars WHERE reason = 'late'")
    assert len(late) == live and all(a == 1 and "(more than --max-bar-age 90 s)" in m for a, m in late)
    assert main(args) == 0, "restarted: the journal's verdicts hold for its bars"
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["late_bars"] == live and again["decisions"] == 0 and again["recovered_bars"] == summary["bars"]


def test_late_bars_make_no_decision_but_run_the_paper_stops_when_the_feed_lags_in_a_position(tiny, tmp_path):
    run, csv, _ = tiny
    recent = recent_days(csv, tmp_path / "export.csv")

    def trade(name: str, clock: LiveClock) -> Executor:
        ex = Executor(run, tmp_path / f"{name}.sqlite",
                      ExecutorOptions(market="NQ", bar_minutes=1, live_from=LIVE_FROM, max_bar_age_s=90.0), clock=clock)
        ex.run_feed(clock.follow(ReplayFeed(recent)))
        ex.close()
        return ex
    on_time = trade("on_time", LiveClock(lag_s=1.0))
    decided = dict(rows(tmp_path / "on_time.sqlite", "SELECT bar_time_ns, action FROM decisions"))
    # a trade held over bars whose decisions were all HOLD, closed by its stop or target: those bars may come late
    held = next(tr for tr in on_time.trade_log().itertuples()
                if tr.exit_reason in ("STOP", "TARGET") and tr.exit_time - tr.entry_time >= pd.Timedelta(minutes=3)
                and all(decided.get(t, 0) == 0 for t in range(tr.entry_time.value, tr.exit_time.value, 60 * 10**9)))
    span = (held.entry_time.value, held.exit_time.value)
    late = trade("late", LiveClock(lag_s=1.0, slow=span))
    n_late = (span[1] - span[0]) // (60 * 10**9)
    assert late.summary.late_bars == n_late and on_time.summary.late_bars == 0
    assert late.summary.decisions == on_time.summary.decisions - n_late, "no decision on a late bar"
    assert rows(tmp_path / "late.sqlite", f"SELECT COUNT(*) FROM decisions WHERE bar_time_ns >= {span[0]} AND "
                                          f"bar_time_ns < {span[1]}") == [(0,)]
    journaled = rows(tmp_path / "late.sqlite", "SELECT time_ns, accepted, message FROM bars WHERE reason = 'late'")
    assert [t for t, _, _ in journaled] == list(range(span[0], span[1], 60 * 10**9))
    assert all(a == 1 and "200 s before it arrived" in m for _, a, m in journaled)
    assert_same_trades(late.trade_log(), on_time.trade_log())  # the late bars' fills and stops still ran


def test_bars_from_the_future_are_refused_without_an_order_when_the_clock_is_behind(tiny, tmp_path):
    run, csv, _ = tiny
    recent = recent_days(csv, tmp_path / "export.csv")
    nt = FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)
    journal = tmp_path / "j.sqlite"
    ex = nt_executor(run, journal, nt, LiveClock(lag_s=-600.0))  # the computer's clock 10 minutes behind
    ex.run_feed(ex.live_point.clock.follow(NTFeed(recent, nt)))  # type: ignore[attr-defined]
    ex.close()
    live = sum(1 for b in ReplayFeed(recent) if b.time + pd.Timedelta(minutes=1) > LIVE_FROM)
    assert ex.summary.rejected == live > 1000 and ex.summary.decisions == 0
    assert nt.received == [] and sorted(nt.incoming.iterdir()) == []
    refused = rows(journal, "SELECT reason, message FROM bars WHERE accepted = 0")
    assert len(refused) == live and {r for r, _ in refused} == {"future"}
    assert "600 s after this computer's clock" in refused[0][1] and "not in sync" in refused[0][1]
    again = nt_executor(run, journal, nt, LiveClock(lag_s=1.0))  # a restart with the clock put right
    again.run_feed(again.live_point.clock.follow(ReplayFeed(recent)))  # type: ignore[attr-defined]
    again.close()
    assert again.summary.rejected == live and again.summary.decisions == 0, "the journal's refusals hold"


@pytest.mark.parametrize("args, message", [
    (["--live-from", "last tuesday"], "--live-from 'last tuesday' is not a time"),
    (["--live-from", "2024-03-10 02:30"], "does not name one US/Eastern time"),
    (["--max-bar-age", "90"], "--max-bar-age 90.0: a positive number of seconds, for a follow: feed"),
    (["--broker", "ninjatrader"], "--broker ninjatrader with a replay: feed needs --live-from"),
])
def test_run_refuses_a_live_point_it_cannot_read_when_given_or_missing(tiny, tmp_path, capsys, args, message):
    from hybrid_trader.cli.main import main

    run, csv, _ = tiny
    nt = FakeNinjaTrader(tmp_path / "NinjaTrader 8", ACCOUNT, INSTRUMENT)
    if "--broker" in args:
        args = [*args, "--nt-dir", str(nt.nt_dir), "--nt-account", ACCOUNT, "--nt-instrument", INSTRUMENT]
    code = main(["run", str(run), "--feed", f"replay:{csv}", "--journal", str(tmp_path / "j.sqlite"), *args])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "fix:" in err
    assert not (tmp_path / "j.sqlite").exists()
    assert sorted(nt.incoming.iterdir()) == []

