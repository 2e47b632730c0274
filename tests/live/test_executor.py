"""The executor: the same trades as ``evaluate`` on the run's test days, and restarts that lose nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.actions import ACTION_NAMES
from hybrid_trader.env.account import AccountStatus
from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run
from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import ReplayFeed
from hybrid_trader.live.journal import Journal

REPO = Path(__file__).resolve().parents[2]
COMPARED = ["entry_time", "exit_time", "side", "entry_price", "exit_price", "net_pnl", "exit_reason"]


def replay(run: Path, csv: Path, journal: Path) -> Executor:
    feed = ReplayFeed(csv)
    ex = Executor(run, journal,
                  ExecutorOptions(trade_dates=split_dates(run, "test"), market=feed.bars.market,
                                  bar_minutes=feed.bars.bar_minutes))
    ex.run_feed(feed)
    ex.close()  # the journal's writer lock released: the tests open it again
    return ex


def fills(journal: Path) -> list[tuple]:
    """The journal's fills, read without a write lock (the executor may hold it)."""
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=30.0)
    try:
        return db.execute("SELECT o.order_id, o.side, f.qty, f.price, f.time_ns FROM fills f "
                          "JOIN orders o USING (order_id) ORDER BY f.id").fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []
    finally:
        db.close()


def assert_same_trades(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert len(got) == len(expected)
    for col in ("entry_time", "exit_time"):
        assert [str(t) for t in got[col]] == [str(pd.Timestamp(t)) for t in expected[col]], col
    for col in ("side", "exit_reason"):
        assert got[col].tolist() == expected[col].tolist(), col
    for col in ("entry_price", "exit_price", "net_pnl"):
        np.testing.assert_allclose(got[col].to_numpy(float), expected[col].to_numpy(float), rtol=0, atol=1e-9)


def bars_in(journal: Path) -> int:
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=30.0)
    try:
        return int(db.execute("SELECT COUNT(*) FROM bars").fetchone()[0])
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0
    finally:
        db.close()


def test_replay_makes_evaluations_trades_when_fed_the_runs_test_days(tiny, tiny_replayed):
    run, csv, market = tiny
    journal, ex = tiny_replayed  # replay(run, csv, journal), once per session
    out = evaluate_run(run, EvaluationRequest(split="test", seeds=1, market=market, quiet=True, ablation=False))
    expected = pd.read_csv(out.out_dir / "agent.trades.csv")
    got = ex.trade_log()
    assert len(expected) > 5, "the tiny run must trade for the comparison to mean anything"
    assert_same_trades(got, expected)
    assert ex.summary.net_pnl == pytest.approx(out.metrics["agent"]["Net PnL [$]"], abs=1e-6)
    # every trade is in the journal: one entry and one exit fill each, at the trades' prices
    rows = fills(journal)
    assert len(rows) == 2 * len(expected)
    np.testing.assert_allclose([r[3] for r in rows[1::2]], expected["exit_price"].to_numpy(float), atol=1e-9)


def test_decisions_carry_probabilities_and_reason_codes_when_journaled(tiny_replayed):
    journal, ex = tiny_replayed  # replay(run, csv, journal), once per session
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    rows = db.execute("SELECT action, probabilities, rule_codes, latency_ms FROM decisions").fetchall()
    assert len(rows) == ex.summary.decisions > 0
    codes = set()
    for action, probs, rule_codes, latency in rows:
        p = json.loads(probs)
        assert abs(sum(p.values()) - 1.0) < 1e-4 and p[ACTION_NAMES[action]] == max(p.values())
        codes.update(json.loads(rule_codes))
        assert latency > 0
    assert "window:after_last_entry" in codes
    assert ex.summary.account_status == AccountStatus.BREACHED.value, "the tiny run breaches on its test days"
    assert f"account:{AccountStatus.BREACHED.value}" in codes, "entries refused after the breach say why"
    statuses = [r[0] for r in db.execute("SELECT status FROM account ORDER BY id")]
    assert statuses[-1] == ex.summary.account_status


def test_restart_continues_without_duplicates_when_killed_mid_replay(tiny, tiny_replayed, tmp_path):
    run, csv, _ = tiny
    whole = Path(shutil.copyfile(tiny_replayed[0], tmp_path / "whole.sqlite"))  # replay(run, csv, whole)
    journal = tmp_path / "killed.sqlite"
    cmd = [sys.executable, "-m", "hybrid_trader.cli.main", "run", str(run), "--feed", f"replay:{csv}",
           "--split", "test", "--broker", "paper", "--journal", str(journal), "--no-status"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline:  # kill -9 once some trades of the test days are journaled
        if journal.exists() and len(fills(journal)) >= 10:
            break
        if proc.poll() is not None:
            pytest.fail(f"the executor ended before it was killed: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(fills(journal))
    assert 10 <= killed_at < len(fills(whole))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert fills(journal) == fills(whole)
    with Journal(journal) as j, Journal(whole) as w:
        assert j.count("orders") == w.count("orders")
        assert j.count("decisions") == w.count("decisions")
        assert j.count("bars") == w.count("bars")


def test_executor_refuses_journal_when_it_belongs_to_another_run(tiny, tiny_replayed, tmp_path):
    run, csv, _ = tiny
    journal = Path(shutil.copyfile(tiny_replayed[0], tmp_path / "j.sqlite"))  # replay(run, csv, journal)
    with Journal(journal) as j:  # a fill the replay never makes
        j.record_order("other-1", 0, "entry", "BUY", 1, state="sent")
        j.record_fill("other-1", 1, 100.0, 0, fill_id="other-1")
    extended = tmp_path / "more.csv"
    frame = pd.read_csv(csv)
    last = pd.Timestamp(frame["timestamp"].iloc[-1])
    extra = frame.iloc[-1:].copy()
    extra["timestamp"] = str(last + pd.Timedelta(minutes=1))
    pd.concat([frame, extra]).to_csv(extended, index=False)
    from hybrid_trader.errors import UserError

    with pytest.raises(UserError, match="holds a position of 1"):
        replay(run, extended, journal)


def test_ctrl_c_exits_130_with_summary_when_interrupted(tiny, tmp_path):
    run, csv, _ = tiny
    journal = tmp_path / "j.sqlite"
    cmd = [sys.executable, "-m", "hybrid_trader.cli.main", "run", str(run), "--feed", f"replay:{csv}:600",
           "--split", "test", "--journal", str(journal), "--json", "--on-exit", "flatten"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline and not (journal.exists() and bars_in(journal) >= 20):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["interrupted"] is True and summary["bars"] >= 20


def test_phase3_replay_makes_evaluations_trades_when_advised_by_the_student(student_p2, student_market, tmp_path):
    from hybrid_trader.training.runner import train_run
    from tests.training.conftest import student_cfg

    p3 = tmp_path / "p3"
    train_run(student_cfg(3, 256), p3, init=student_p2, market=student_market, quiet=True)
    csv = tmp_path / "bars.csv"
    student_market.bars.frame.tz_convert("America/New_York").tz_localize(None).to_csv(csv, index_label="timestamp")
    ex = replay(p3, csv, tmp_path / "journal.sqlite")
    # the account's consistency note may come with the run's trades; no other (an RL-only notice: the advisor failed)
    assert [n for n in ex.notes if not n.startswith("consistency")] == [], "the run's student advises"
    out = evaluate_run(p3, EvaluationRequest(split="test", seeds=1, market=student_market, quiet=True, ablation=False))
    expected = pd.read_csv(out.out_dir / "agent.trades.csv")
    assert len(expected) > 5
    assert_same_trades(ex.trade_log(), expected)
    db = sqlite3.connect(tmp_path / "journal.sqlite")
    advised = db.execute("SELECT COUNT(*) FROM decisions WHERE advice IS NOT NULL").fetchone()[0]
    assert advised == ex.summary.decisions, "every phase 3 decision is advised by the student"


@pytest.mark.parametrize("what", ["run", "feed", "journal folder"])
def test_run_command_names_the_path_and_fix_when_an_input_is_missing(tiny, tmp_path, capsys, what):
    from hybrid_trader.cli.main import main

    run, csv, _ = tiny
    args = {"run": [str(tmp_path / "no-run"), "--feed", f"replay:{csv}", "--journal", str(tmp_path / "j.sqlite")],
            "feed": [str(run), "--feed", f"replay:{tmp_path / 'no.csv'}", "--journal", str(tmp_path / "j.sqlite")],
            "journal folder": [str(run), "--feed", f"replay:{csv}", "--journal", str(tmp_path / "no" / "j.sqlite")]}
    assert main(["run", *args[what]]) == 2
    err = capsys.readouterr().err
    missing = {"run": "no-run", "feed": "no.csv", "journal folder": str(tmp_path / "no")}[what]
    assert missing in err and "fix:" in err


def test_day_ends_at_the_last_bar_that_came_when_the_windows_last_bars_are_missing(tiny, tmp_path):
    run, csv, market = tiny
    frame = pd.read_csv(csv)
    times = pd.to_datetime(frame["timestamp"])
    first_test_day = pd.Timestamp(split_dates(run, "test")[0])
    gap = (times.dt.normalize() == first_test_day) & (times.dt.strftime("%H:%M") >= "15:30") & \
        (times.dt.strftime("%H:%M") < "16:00")
    assert gap.sum() == 30
    gapped = tmp_path / "gapped.csv"
    frame[~gap].to_csv(gapped, index=False)
    journal = tmp_path / "journal.sqlite"
    ex = replay(run, gapped, journal)
    out = evaluate_run(run, EvaluationRequest(split="test", seeds=1, data_overrides={"path": str(gapped)}, quiet=True,
                                              ablation=False, out_dir=tmp_path / "eval"))
    assert_same_trades(ex.trade_log(), pd.read_csv(out.out_dir / "agent.trades.csv"))
    db = sqlite3.connect(journal)
    errors = [r[0] for r in db.execute("SELECT message FROM errors WHERE location = 'window'")]
    assert len(errors) == 1 and "15:29" in errors[0]


def test_a_day_with_a_few_bars_in_its_window_is_traded_by_evaluate_as_by_the_executor(tiny, tmp_path):
    run, csv, market = tiny
    frame = pd.read_csv(csv)
    times = pd.to_datetime(frame["timestamp"])
    day = pd.Timestamp(split_dates(run, "test")[0])
    hhmm = times.dt.strftime("%H:%M")
    cut = (times.dt.normalize() == day) & (hhmm >= "09:36") & (hhmm < "16:00")  # the feed lost the day from 09:36
    short = tmp_path / "short.csv"
    frame[~cut].to_csv(short, index=False)
    ex = replay(run, short, tmp_path / "journal.sqlite")
    out = evaluate_run(run, EvaluationRequest(split="test", seeds=1, data_overrides={"path": str(short)}, quiet=True,
                                              ablation=False, out_dir=tmp_path / "eval"))
    assert_same_trades(ex.trade_log(), pd.read_csv(out.out_dir / "agent.trades.csv"))
    curve = pd.read_csv(out.out_dir / "agent.curve.csv")
    kept = [t[11:16] for t in curve["time"] if t.startswith(day.strftime("%Y-%m-%d"))]
    assert kept == ["09:30", "09:31", "09:32", "09:33", "09:34", "09:35"]  # six bars: a trading day of evaluate too


def test_an_early_close_of_the_calendar_ends_the_replays_window_where_evaluate_ends_it(tiny, tmp_path):
    # the validation days hold 2024-01-15 (Martin Luther King Day), which the CME calendar closes at 13:00 ET
    run, csv, market = tiny
    feed = ReplayFeed(csv)
    ex = Executor(run, tmp_path / "journal.sqlite",
                  ExecutorOptions(trade_dates=split_dates(run, "val"), market=feed.bars.market,
                                  bar_minutes=feed.bars.bar_minutes))
    ex.run_feed(feed)
    ex.close()
    out = evaluate_run(run, EvaluationRequest(split="val", seeds=1, market=market, quiet=True, ablation=False,
                                              out_dir=tmp_path / "eval"))
    got = ex.trade_log()
    assert_same_trades(got, pd.read_csv(out.out_dir / "agent.trades.csv"))
    curve = pd.read_csv(out.out_dir / "agent.curve.csv")
    day = [t[11:16] for t in curve["time"] if t.startswith("2024-01-15")]
    assert day and day[-1] == "12:58", "the window ends a minute before the 13:00 close, as the flat-by time does"
    late = [str(t) for t in got["exit_time"] if str(t).startswith("2024-01-15") and str(t)[11:16] > "12:58"]
    assert not late
