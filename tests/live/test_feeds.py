"""Feeds: replay, follow (partial lines, rotation, truncation), the bar gate, and --feed specs."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data import generate_bars, load_bars
from hybrid_trader.errors import UserError
from hybrid_trader.live.bar_gate import BarGate
from hybrid_trader.live.feeds import Bar, FollowFeed, ReplayFeed, open_feed, parse_feed_spec
from tests.conftest import shared_file as real_file

ET = "America/New_York"
HEADER = "Date,Time,Open,High,Low,Close,Volume\n"


def _csv(tmp_path: Path, days: int = 2) -> Path:
    bars = generate_bars(days, seed=5)
    path = tmp_path / "nq.csv"
    frame = bars.frame.copy()
    frame.index = frame.index.tz_localize(None)
    frame.to_csv(path, index_label="timestamp")
    return path


def _line(ts: str, o: float = 100.0, h: float = 101.0, lo: float = 99.0, c: float = 100.5, v: float = 10) -> str:
    day, clock = ts.split(" ")
    return f"{day},{clock},{o},{h},{lo},{c},{v}\n"


def _bar(ts: str, o: float = 100.0, h: float = 101.0, lo: float = 99.0, c: float = 100.5, v: float = 10.0) -> Bar:
    return Bar(pd.Timestamp(ts, tz=ET), o, h, lo, c, v)


# ---- replay -------------------------------------------------------------------------------------


def test_replay_yields_loader_bars_in_order_when_unpaced(tmp_path: Path) -> None:
    path = _csv(tmp_path)
    bars = load_bars(path)
    got = list(ReplayFeed(path))
    assert len(got) == len(bars)
    assert [b.time for b in got[:3]] == list(bars.frame.index[:3])
    np.testing.assert_array_equal([b.close for b in got], bars.close)
    assert got[0].time is not None and str(got[0].time.tz) == ET


def test_replay_keeps_only_given_sessions_when_restricted(tmp_path: Path) -> None:
    path = _csv(tmp_path, days=3)
    bars = load_bars(path)
    second = bars.session_dates[1]
    feed = ReplayFeed(path, sessions=[str(second)])
    assert len(feed) == int((bars.trading_date == second).sum())
    assert all(b.time is not None for b in feed)
    with pytest.raises(UserError, match="none of the 1 requested trading dates") as err:
        ReplayFeed(path).restrict(["1999-01-04"])
    assert str(path) in str(err.value)


def test_replay_paces_bars_when_speed_given_and_stops_on_event(tmp_path: Path) -> None:
    path = _csv(tmp_path, days=1)
    feed = ReplayFeed(path, speed=600.0)  # 1-min bars at 600x: 0.1 s apart
    start = time.monotonic()
    got = []
    for bar in feed:
        got.append(bar)
        if len(got) == 4:
            feed.stop.set()
    elapsed = time.monotonic() - start
    assert len(got) == 4
    assert 0.28 <= elapsed < 2.0
    with pytest.raises(UserError, match="speed"):
        ReplayFeed(path, speed=0.0)


# ---- follow -------------------------------------------------------------------------------------


def test_follow_waits_for_partial_line_when_newline_missing(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(HEADER + _line("2024-01-02 09:30") + "2024-01-02,09:31,100,101,99,10")
    feed = FollowFeed(path, 0.01)
    first = feed.poll()
    assert [b.time for b in first] == [pd.Timestamp("2024-01-02 09:30", tz=ET)]
    assert feed.poll() == []
    with open(path, "a") as fh:
        fh.write("0.75,12\n")
    done = feed.poll()
    assert len(done) == 1 and done[0].close == 100.75 and done[0].line == 3
    assert done[0].time == pd.Timestamp("2024-01-02 09:31", tz=ET)


def test_follow_skips_seen_bars_when_file_rotated(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(HEADER + _line("2024-01-02 09:30") + _line("2024-01-02 09:31"))
    feed = FollowFeed(path, 0.01)
    assert len(feed.poll()) == 2
    new = tmp_path / "export.new"
    new.write_text(HEADER + _line("2024-01-02 09:30") + _line("2024-01-02 09:31") + _line("2024-01-02 09:32"))
    os.replace(new, path)  # another inode, same name: a platform re-exporting the file
    got = feed.poll()
    assert [b.time for b in got] == [pd.Timestamp("2024-01-02 09:32", tz=ET)]
    assert feed.skipped == 2 and feed.reopened == 1


def test_follow_rereads_from_start_when_file_truncated(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(HEADER + "".join(_line(f"2024-01-02 09:{m}") for m in range(30, 40)))
    feed = FollowFeed(path, 0.01)
    assert len(feed.poll()) == 10
    with open(path, "w") as fh:  # same inode, shorter: truncated and restarted
        fh.write(HEADER + _line("2024-01-02 09:39") + _line("2024-01-02 09:40"))
    got = feed.poll()
    assert [b.time for b in got] == [pd.Timestamp("2024-01-02 09:40", tz=ET)]
    assert feed.skipped == 1


def test_follow_iteration_ends_when_stopped_or_idle(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(HEADER + _line("2024-01-02 09:30"))
    start = time.monotonic()
    assert len(list(FollowFeed(path, 0.02, timeout_s=0.2))) == 1
    assert time.monotonic() - start < 3.0
    stop = threading.Event()
    feed = FollowFeed(path, 0.02, stop=stop)

    def append_then_stop() -> None:
        time.sleep(0.1)
        with open(path, "a") as fh:
            fh.write(_line("2024-01-02 09:31"))
        time.sleep(0.2)
        stop.set()

    writer = threading.Thread(target=append_then_stop)
    writer.start()
    got = list(feed)
    writer.join()
    assert [b.time for b in got] == [pd.Timestamp("2024-01-02 09:30", tz=ET), pd.Timestamp("2024-01-02 09:31", tz=ET)]


def test_follow_gives_a_last_line_left_without_its_newline_when_it_ends_idle(tmp_path: Path) -> None:
    """The writer stopped without ending its last line: at the idle exit it is a bar, not dropped."""
    path = tmp_path / "export.csv"
    path.write_text(HEADER + _line("2024-01-02 09:30") + _line("2024-01-02 09:31").rstrip("\n"))
    got = list(FollowFeed(path, 0.01, timeout_s=0.2))
    assert [b.time for b in got] == [pd.Timestamp("2024-01-02 09:30", tz=ET), pd.Timestamp("2024-01-02 09:31", tz=ET)]


def test_follow_gives_every_new_bar_of_a_file_rewritten_in_place_with_its_last_bars(tmp_path: Path) -> None:
    """A platform re-exporting its last three bars each minute into the same file (same inode, same size): each new
    bar once, none skipped (before: read on from the old offset, the new bars never came out)."""
    path = tmp_path / "export.csv"
    path.write_text(HEADER + "".join(_line(f"2024-01-02 10:0{m}") for m in range(3)))
    feed = FollowFeed(path, 0.01)
    got = [b.time.strftime("%H:%M") for b in feed.poll() if b.time is not None]
    for newest in range(3, 6):
        with open(path, "r+") as fh:
            fh.truncate(0)
            fh.write(HEADER + "".join(_line(f"2024-01-02 10:0{m}") for m in range(newest - 2, newest + 1)))
        got += [b.time.strftime("%H:%M") for b in feed.poll() if b.time is not None]
    assert got == ["10:00", "10:01", "10:02", "10:03", "10:04", "10:05"]
    assert feed.reopened == 3 and feed.skipped == 6


def test_follow_gives_again_a_bar_revised_in_a_rewritten_file_for_the_gate_to_refuse(tmp_path: Path) -> None:
    """A rewrite whose old bar was corrected by the vendor: the unchanged bar is skipped, the revised one comes out
    again (the gate refuses it as a duplicate, with its row: a correction is never dropped without a word)."""
    path = tmp_path / "export.csv"
    path.write_text(HEADER + _line("2024-01-02 10:00") + _line("2024-01-02 10:01"))
    feed = FollowFeed(path, 0.01)
    assert len(feed.poll()) == 2
    with open(path, "r+") as fh:
        fh.truncate(0)
        fh.write(HEADER + _line("2024-01-02 10:00") + _line("2024-01-02 10:01", c=100.75) + _line("2024-01-02 10:02"))
    got = feed.poll()
    assert [(b.time.strftime("%H:%M"), b.close) for b in got if b.time is not None] == [("10:01", 100.75),
                                                                                         ("10:02", 100.5)]
    assert feed.skipped == 1


def _append(path: Path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def test_follow_counts_idle_time_from_the_last_bar_done_when_the_consumer_is_slow(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(HEADER + _line("2024-01-02 09:30") + _line("2024-01-02 09:31"))
    got, idle = [], []
    feed = FollowFeed(path, 0.02, timeout_s=0.5)
    feed.on_idle = lambda: idle.append(len(got))
    for bar in feed:
        got.append(bar.time)
        if len(got) == 2:  # a slow bar (the executor catching up): longer than the idle timeout
            time.sleep(0.6)
            later = threading.Timer(0.15, _append, (path, _line("2024-01-02 09:32")))
            later.start()
    later.join()
    assert got[-1] == pd.Timestamp("2024-01-02 09:32", tz=ET), "the line written after the slow bar is read"
    assert idle and idle[0] == 2, "on_idle is called when the file holds no new line, after the bars came out"


def test_follow_rejects_line_when_it_would_flip_date_format(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(HEADER + "01/02/2024,09:30,100,101,99,100.25,10\n")
    feed = FollowFeed(path, 0.01)
    assert feed.poll()[0].time == pd.Timestamp("2024-01-02 09:30", tz=ET)  # MM/DD, as data check reads it
    with open(path, "a") as fh:
        fh.write("01/02/2024,09:31,100,101,99,100.5,10\n13/02/2024,09:32,100,101,99,100.5,10\nxx,yy,1,2,3,4,5\n")
    got = feed.poll()
    assert got[0].time == pd.Timestamp("2024-01-02 09:31", tz=ET)
    assert got[1].time is None and got[2].time is None
    gate = BarGate(market="NQ")
    verdicts = [gate.check(b) for b in got]
    assert verdicts[0] is None
    assert verdicts[1] is not None and verdicts[1].code == "bad-timestamp" and "13/02/2024" in verdicts[1].message
    assert verdicts[2] is not None and verdicts[2].code == "bad-timestamp" and "line 5" in verdicts[2].message


def test_follow_raises_user_error_when_header_lacks_columns(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text("Date,Time,Open,High,Low,Last\n2024-01-02,09:30,1,2,0.5,1.5\n")
    with pytest.raises(UserError, match="missing column") as err:
        FollowFeed(path, 0.01).poll()
    assert str(path) in str(err.value) and "volume" in str(err.value)


# ---- the gate -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bar", "code"),
    [
        (_bar("2024-01-02 09:30", h=98.0, lo=99.0, o=98.5, c=98.5), "high-below-low"),
        (_bar("2024-01-02 09:30", c=102.0), "open-close-outside"),
        (_bar("2024-01-02 09:30", lo=0.0, o=0.0, c=0.0), "non-positive-price"),
        (_bar("2024-01-02 09:30", v=-3.0), "negative-volume"),
        (_bar("2024-01-02 09:30", c=math.nan), "bad-price"),
        (_bar("2024-01-02 09:30", v=math.inf), "bad-volume"),
        (_bar("2024-01-02 09:30", c=100.3), "off-tick-grid"),
        (Bar(None, 1, 2, 0.5, 1.5, 1, raw="garbage"), "bad-timestamp"),
    ],
)
def test_gate_rejects_bar_with_code_when_row_rule_fails(bar: Bar, code: str) -> None:
    gate = BarGate(market="NQ")
    verdict = gate.check(bar)
    assert verdict is not None and verdict.code == code and verdict.message
    assert gate.last_time_ns is None and gate.counts == {code: 1}


def test_gate_rejects_duplicate_and_earlier_bars_when_streaming() -> None:
    gate = BarGate(market="NQ")
    assert gate.check(_bar("2024-01-02 09:31")) is None
    dup = gate.check(_bar("2024-01-02 09:31", c=100.75))
    earlier = gate.check(_bar("2024-01-02 09:30"))
    assert dup is not None and dup.code == "duplicate-timestamp"
    assert earlier is not None and earlier.code == "out-of-order"
    assert gate.check(_bar("2024-01-02 09:32")) is None
    assert gate.last_time_ns == pd.Timestamp("2024-01-02 09:32", tz=ET).value


def test_gate_calls_a_bar_late_but_keeps_it_when_the_clock_is_past_its_end() -> None:
    now = pd.Timestamp("2024-01-02 09:32:05", tz=ET).timestamp()
    gate = BarGate(market="NQ", late_after_s=30.0)
    assert gate.check(_bar("2024-01-02 09:31"), now) is None and gate.late(_bar("2024-01-02 09:31"), now) is None
    now += 120
    bar = _bar("2024-01-02 09:32")
    assert gate.check(bar, now) is None, "a late bar still warms the features: not refused"
    late = gate.late(bar, now)  # ended 65 s before the clock
    assert late is not None and late.code == "late" and "65 s" in late.message and "--max-bar-age 30" in late.message
    assert BarGate(market="NQ").late(bar, now + 10_000) is None, "no late_after_s: never late (replays)"


def test_gate_refuses_a_bar_from_the_future_when_the_clock_is_behind_the_bars() -> None:
    now = pd.Timestamp("2024-01-02 09:32:03", tz=ET).timestamp()
    gate = BarGate(market="NQ")
    assert gate.check(_bar("2024-01-02 09:31"), now) is None  # ends 3 s ahead: within the tolerance
    ahead = gate.check(_bar("2024-01-02 09:40"), now)
    assert ahead is not None and ahead.code == "future" and "not in sync" in ahead.message and "537 s" in ahead.message
    assert gate.last_time_ns == pd.Timestamp("2024-01-02 09:31", tz=ET).value, "a refused bar is not the last one"
    assert gate.check(_bar("2024-01-02 09:40")) is None, "without the clock (a replay) the rule is off"


def test_gate_skips_tick_grid_when_bars_are_back_adjusted() -> None:
    bars = load_bars(real_file("NQ_5min_2024Q1_chicago_adjusted.csv"), tz="CT")
    gate = BarGate.for_bars(bars)
    assert not gate.check_tick_grid and gate.bar_minutes == 5
    rejected = [gate.check(Bar(t, o, h, lo, c, v)) for t, o, h, lo, c, v in zip(
        bars.frame.index[:500], bars.open, bars.high, bars.low, bars.close, bars.volume)]
    assert all(r is None for r in rejected)
    assert BarGate.for_bars(generate_bars(1)).check_tick_grid


# ---- --feed ------------------------------------------------------------------------------------


def test_parse_feed_spec_reads_scheme_path_and_speed_when_valid(tmp_path: Path) -> None:
    path = _csv(tmp_path, days=1)
    assert parse_feed_spec(f"replay:{path}").speed is None
    spec = parse_feed_spec(f"replay:{path}:60")
    assert (spec.scheme, spec.path, spec.speed) == ("replay", path, 60.0)
    follow = parse_feed_spec(f"follow:{tmp_path / 'not_yet.csv'}")
    assert follow.scheme == "follow" and follow.speed is None
    assert isinstance(open_feed(f"replay:{path}:1000"), ReplayFeed)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("kafka:topic", "unknown feed"),
        ("bars.csv", "unknown feed"),
        ("replay:", "names no file"),
        ("replay:{dir}/missing.csv", "does not exist"),
        ("replay:{file}:fast", "is not a number"),
        ("replay:{file}:-2", "must be positive"),
        ("follow:{dir}/no/such/folder/x.csv", "folder of the followed file"),
    ],
)
def test_parse_feed_spec_raises_user_error_when_spec_is_bad(tmp_path: Path, spec: str, message: str) -> None:
    path = _csv(tmp_path, days=1)
    text = spec.format(dir=tmp_path, file=path)
    with pytest.raises(UserError, match=message) as err:
        parse_feed_spec(text)
    assert "fix:" in str(err.value)
    if "missing.csv" in text:
        assert str(tmp_path / "missing.csv") in str(err.value)


@pytest.mark.parametrize(
    "values",
    [(100.0, 101.0, 99.0, 100.5, 10.0), (100.0, 100.0, 100.0, 100.0, 0.0), (99.0, 101.0, 99.0, 101.0, 1.0),
     (101.5, 101.0, 99.0, 100.0, 1.0), (100.0, 101.0, 99.0, 98.0, 1.0), (100.0, 101.0, 0.0, 100.0, 1.0),
     (100.0, math.inf, 99.0, 100.0, 1.0), (100.0, 101.0, 99.0, 100.0, math.nan), (100.0, 101.0, 99.0, 100.0, -1.0),
     (-1.0, 101.0, -2.0, 100.0, 1.0), (100.0, 98.0, 99.0, 100.0, 1.0)],
)
def test_gate_row_verdict_equals_check_table_when_fast_path_taken(values: tuple, monkeypatch) -> None:
    import hybrid_trader.live.bar_gate as bar_gate

    bar = _bar("2024-01-02 09:30", *values)
    fast = BarGate(market="NQ", check_tick_grid=False).check(bar)
    monkeypatch.setattr(bar_gate, "_plainly_valid", lambda bar: False)
    table = BarGate(market="NQ", check_tick_grid=False).check(bar)
    assert (fast is None) == (table is None)
    assert fast is None or table is None or (fast.code, fast.message) == (table.code, table.message)
