"""Executor snapshots: a restart from one decides, orders and books exactly as an uninterrupted replay."""

from __future__ import annotations

import itertools
import json
import pickle
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.data import generate_bars, load_bars
from hybrid_trader.errors import UserError
from hybrid_trader.features import compute_features
from hybrid_trader.features.incremental import IncrementalFeatures
from hybrid_trader.features.names import RAW_NAMES
from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import ReplayFeed
from hybrid_trader.live.journal import Journal
from hybrid_trader.live.snapshot import SNAPSHOT_FORMAT
from tests.conftest import shared_file as real_file

ROWS = {
    "decisions": "SELECT bar_time_ns, action, probabilities, advice, rule_codes FROM decisions ORDER BY bar_time_ns",
    "orders": "SELECT order_id, bar_time_ns, intent, side, qty, state, note FROM orders ORDER BY order_id",
    "fills": "SELECT fill_id, order_id, qty, price, time_ns FROM fills ORDER BY fill_id",
    "account": "SELECT bar_time_ns, status, snapshot FROM account ORDER BY bar_time_ns, id",
    "bars": "SELECT time_ns, open, high, low, close, volume, accepted FROM bars ORDER BY time_ns",
}


def executor(run: Path, csv: Path, journal: Path) -> tuple[Executor, ReplayFeed]:
    feed = ReplayFeed(csv)
    ex = Executor(run, journal,
                  ExecutorOptions(trade_dates=split_dates(run, "test"), market=feed.bars.market,
                                  bar_minutes=feed.bars.bar_minutes))
    return ex, feed


def replay(run: Path, csv: Path, journal: Path, bars: int | None = None) -> Executor:
    """Replay the CSV into ``journal`` (the first ``bars`` only: a process that stopped there)."""
    ex, feed = executor(run, csv, journal)
    ex.run_feed(feed if bars is None else itertools.islice(feed, bars))
    ex.close()
    return ex


def rows(journal: Path) -> dict[str, list[tuple]]:
    db = sqlite3.connect(journal)
    try:
        return {name: db.execute(sql).fetchall() for name, sql in ROWS.items()}
    finally:
        db.close()


def snapshot_time(journal: Path) -> int:
    with Journal(journal) as j:
        row = j.last_snapshot()
    assert row is not None
    return row[0]


@pytest.fixture(scope="module")
def whole(tiny_replayed):
    """An uninterrupted replay of the tiny run's bars (the session's): (its journal's rows, its trade log, its
    summary)."""
    journal, ex = tiny_replayed
    return rows(journal), ex.trade_log(), ex.summary


@pytest.fixture(scope="module")
def stopped_once(tiny, tmp_path_factory) -> tuple[Path, int]:
    """A journal whose process stopped after 80% of the bars (with a snapshot before), and the bars fed; each test
    restarts or changes its own copy (``stopped``)."""
    run, csv, _ = tiny
    n = int(len(ReplayFeed(csv).bars) * 0.8)
    journal = tmp_path_factory.mktemp("stopped") / "stopped.sqlite"
    replay(run, csv, journal, bars=n)
    return journal, n


def stopped(once: tuple[Path, int], tmp_path: Path) -> tuple[Path, int]:
    """The test's own copy of ``stopped_once``'s journal, and the bars fed."""
    journal, n = once
    return Path(shutil.copyfile(journal, tmp_path / "stopped.sqlite")), n


def test_restart_from_snapshot_decides_as_uninterrupted_replay_when_stopped_mid_replay(stopped_once, tiny, whole,
                                                                                       tmp_path):
    run, csv, _ = tiny
    journal, n = stopped(stopped_once, tmp_path)
    taken = snapshot_time(journal)
    ex, feed = executor(run, csv, journal)
    assert ex.snapshots.restored_ns == taken
    restored = ex.summary.bars
    assert 0 < restored < n
    ex.run_feed(feed)
    ex.close()
    expected_rows, expected_trades, expected_summary = whole
    assert rows(journal) == expected_rows  # decisions with their probabilities, orders, fills, account, bars
    pd.testing.assert_frame_equal(ex.trade_log(), expected_trades)
    assert (ex.summary.trades, ex.summary.net_pnl, ex.summary.balance, ex.summary.decisions) == (
        expected_summary.trades, expected_summary.net_pnl, expected_summary.balance, expected_summary.decisions)
    assert ex.summary.bars == expected_summary.bars
    assert ex.notes == expected_summary.notes  # nothing said of the snapshot


def tampered(journal: Path, sql: str) -> Path:
    """``journal`` after one statement that damages it (as a crash, a disk or a hand could)."""
    db = sqlite3.connect(journal)
    db.execute(sql)
    db.commit()
    db.close()
    return journal


def test_restart_by_full_replay_decides_as_from_snapshot_when_the_snapshot_is_removed(stopped_once, tiny, whole,
                                                                                      tmp_path):
    run, csv, _ = tiny
    journal = tampered(stopped(stopped_once, tmp_path)[0], "DELETE FROM snapshots")
    ex, feed = executor(run, csv, journal)
    assert ex.snapshots.restored_ns is None
    ex.run_feed(feed)
    ex.close()
    assert rows(journal) == whole[0]


@pytest.mark.parametrize(("change", "note"), [
    (f"UPDATE snapshots SET key = replace(key, '\"format\": {SNAPSHOT_FORMAT}', '\"format\": 0')",
     "another run, model, configuration or program version (format)"),
    ("UPDATE snapshots SET state = x'00ff00'", "could not be read"),
    ("UPDATE snapshots SET state = zeroblob(64)", "could not be read"),
])
def test_snapshot_is_replaced_by_full_replay_when_foreign_or_corrupt(stopped_once, tiny, whole, tmp_path, change,
                                                                    note):
    run, csv, _ = tiny
    journal, _ = stopped(stopped_once, tmp_path)
    db = sqlite3.connect(journal)
    db.execute(change)
    db.commit()
    db.close()
    ex, feed = executor(run, csv, journal)
    assert ex.snapshots.restored_ns is None
    assert any(note in n and "the whole history was replayed" in n for n in ex.notes), ex.notes
    ex.run_feed(feed)
    ex.close()
    assert rows(journal) == whole[0]


def test_restart_refuses_feed_when_it_lacks_the_snapshots_bar(stopped_once, tiny, tmp_path):
    run, csv, _ = tiny
    journal, _ = stopped(stopped_once, tmp_path)
    taken = pd.Timestamp(snapshot_time(journal), tz="UTC").tz_convert("America/New_York").tz_localize(None)
    frame = pd.read_csv(csv)
    other = tmp_path / "other.csv"
    frame[pd.to_datetime(frame["timestamp"]) != taken].to_csv(other, index=False)
    ex, feed = executor(run, other, journal)
    with pytest.raises(UserError, match="not the one the journal .* snapshotted .*missing"):
        ex.run_feed(feed)
    ex.close()


def test_snapshot_not_taken_when_the_bars_are_replayed_from_the_journal(stopped_once, tiny, tmp_path):
    run, csv, _ = tiny
    journal, _ = stopped(stopped_once, tmp_path)
    first = snapshot_time(journal)
    ex, feed = executor(run, csv, journal)
    journaled = ex.journal.last_time("bars")
    assert journaled is not None and first < journaled
    bars = list(feed)
    ex.run_feed(b for b in bars if b.time_ns is not None and b.time_ns <= journaled)  # replayed bars only
    ex.close()
    assert snapshot_time(journal) == first


def _features(bars, inc: IncrementalFeatures | None, start: int, stop: int):
    inc = inc or IncrementalFeatures(bars.market, bars.bar_minutes)
    out = []
    cols = zip(bars.frame.index.asi8[start:stop], bars.open[start:stop], bars.high[start:stop],
               bars.low[start:stop], bars.close[start:stop], bars.volume[start:stop])
    for ts, o, h, lo, c, v in cols:
        out.append(inc.append(int(ts), o, h, lo, c, v))
    return inc, out


@pytest.mark.parametrize("prices", ["kept", "from-the-journal"])
@pytest.mark.parametrize("source", ["synthetic-5min", "real-nq-1min"])
def test_features_restored_from_a_snapshot_equal_batch_when_pickled_mid_history(source, prices):
    bars = generate_bars(12, seed=3, bar_minutes=5) if source == "synthetic-5min" else \
        load_bars(real_file("NQ_1min_2023-11_eastern.csv"))
    fs = compute_features(bars)
    cut = len(bars) * 2 // 3
    inc, before = _features(bars, None, 0, cut)
    if prices == "kept":
        restored = pickle.loads(pickle.dumps(inc))
        restored.reopen()
    else:  # as live.snapshot takes it: the prices left to the journal, the derived series cut to their look-back
        inc.keep_for_snapshot()
        restored = pickle.loads(pickle.dumps(inc))
        assert restored.c.missing == cut and restored.atr_hist.missing > 0
        with pytest.raises(ValueError, match="no prices"):
            pickle.loads(pickle.dumps(inc)).reopen()
        restored.reopen({"o": bars.open[:cut], "h": bars.high[:cut], "lo": bars.low[:cut], "c": bars.close[:cut],
                         "v": bars.volume[:cut]})
    _, after = _features(bars, restored, cut, len(bars))
    got = before + after
    np.testing.assert_array_equal(np.stack([r.bar for r in got]), fs.bar)
    np.testing.assert_array_equal(np.stack([r.llm_market for r in got]), fs.llm_market)
    np.testing.assert_array_equal(np.array([r.atr for r in got]), fs.atr)
    for k in RAW_NAMES:
        np.testing.assert_array_equal(np.array([r.raw[k] for r in got]), fs.raw[k], err_msg=k)
    assert restored.warmup == fs.warmup


def test_snapshot_is_replaced_by_full_replay_when_the_journal_lacks_its_bars(stopped_once, tiny, whole,
                                                                             tmp_path):
    run, csv, _ = tiny
    journal = tampered(stopped(stopped_once, tmp_path)[0], "DELETE FROM bars WHERE id = (SELECT MIN(id) FROM bars "
                                                   "WHERE accepted = 1)")
    ex, feed = executor(run, csv, journal)
    assert ex.snapshots.restored_ns is None
    assert any("could not be read (ValueError" in n for n in ex.notes), ex.notes
    ex.run_feed(feed)
    ex.close()
    got, expected = rows(journal), whole[0]
    assert {k: v for k, v in got.items() if k != "bars"} == {k: v for k, v in expected.items() if k != "bars"}


def test_snapshot_size_when_taken_holds_no_price_history(stopped_once, tmp_path):
    journal, n = stopped(stopped_once, tmp_path)
    db = sqlite3.connect(journal)
    size = db.execute("SELECT length(state) FROM snapshots").fetchone()[0]
    db.close()
    assert n > 500 and size < 60 * n, "the prices stay in the journal's bars: the snapshot does not grow with them"


def test_snapshot_keeps_the_format_3_layout_when_taken_through_the_public_methods(stopped_once, tmp_path):
    """The parts are saved through public methods (``TradingCore.state``, ``Executor.day_state``,
    ``ExecutorSummary.counts``) into the layout format 3 always had: a journal snapshotted before keeps restoring."""
    journal, _ = stopped(stopped_once, tmp_path)
    db = sqlite3.connect(journal)
    key, blob = db.execute("SELECT key, state FROM snapshots ORDER BY id DESC").fetchone()
    db.close()
    state = pickle.loads(blob)
    assert json.loads(key)["format"] == SNAPSHOT_FORMAT == 3
    assert list(state) == ["features", "gate", "bars", "feature_rows", "broker", "account", "core", "executor",
                           "summary"]
    assert list(state["core"]) == ["n_actions", "mask", "t", "last_entry", "equity_now", "veto_counts", "veto_steps",
                                   "decision_steps", "invalid_actions"]
    assert list(state["executor"]) == ["_date", "_day_open", "_day_done", "_pending", "_entry_id", "_trades_seen",
                                       "last_decision"]
    assert list(state["summary"]) == ["bars", "rejected", "decisions", "history_bars", "late_bars"]
    assert state["core"]["n_actions"] == 6 and state["summary"]["bars"] > 0 and state["executor"]["_date"] is not None


@pytest.fixture(scope="module")
def student_p3(student_p2, student_market, tmp_path_factory):
    """A phase 3 run advised by its student, and its bars as an ET CSV."""
    from hybrid_trader.training.runner import train_run
    from tests.training.conftest import student_cfg

    root = tmp_path_factory.mktemp("snapshot_p3")
    train_run(student_cfg(3, 256), root / "p3", init=student_p2, market=student_market, quiet=True)
    csv = root / "bars.csv"
    student_market.bars.frame.tz_convert("America/New_York").tz_localize(None).to_csv(csv, index_label="timestamp")
    return root / "p3", csv


def test_phase3_restart_from_snapshot_decides_as_uninterrupted_replay_when_the_student_advises(student_p3, tmp_path):
    run, csv = student_p3
    whole_journal = tmp_path / "whole.sqlite"
    expected = replay(run, csv, whole_journal)
    journal = tmp_path / "stopped.sqlite"
    replay(run, csv, journal, bars=int(len(ReplayFeed(csv).bars) * 0.8))
    taken = snapshot_time(journal)  # read before the executor holds the journal's writer lock
    ex, feed = executor(run, csv, journal)
    assert ex.snapshots.restored_ns == taken, ex.notes
    ex.run_feed(feed)
    ex.close()
    got = rows(journal)
    assert got == rows(whole_journal)  # the fused probabilities, the student's advice and the veto's codes included
    assert any(json.loads(a) for (_, _, _, a, _) in got["decisions"] if a), "the student advised"
    pd.testing.assert_frame_equal(ex.trade_log(), expected.trade_log())
