"""A phase 3 run's LLM asked asynchronously by the executor: the contexts, the parity, the budget."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.account_state import AccountState
from hybrid_trader.agent.advised import AdvisedPolicy
from hybrid_trader.data.bars_so_far import BarsSoFar
from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run
from hybrid_trader.features.features_so_far import FeaturesSoFar
from hybrid_trader.features.incremental import IncrementalFeatures
from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import ReplayFeed
from hybrid_trader.live.journal_report import write_journal_report
from hybrid_trader.live.live_policy import CONTEXT_RAW_KEYS
from hybrid_trader.llm.context import context_from_market
from hybrid_trader.run.calibration import calibration_path
from tests.llm import make_mock_lean

from .test_executor import assert_same_trades


@pytest.fixture(scope="module")
def mock_p3(tmp_path_factory, student_p2, student_market):
    """A phase 3 run advised by the mock LLM (asked on every decision), and its bars as an ET CSV."""
    from hybrid_trader.training.runner import train_run
    from tests.training.conftest import student_cfg

    root = tmp_path_factory.mktemp("async")
    p3 = root / "p3"
    train_run(student_cfg(3, 256, **{"llm.backend": "mock"}), p3, init=student_p2, market=student_market,
              quiet=True)
    csv = root / "bars.csv"
    student_market.bars.frame.tz_convert("America/New_York").tz_localize(None).to_csv(csv, index_label="timestamp")
    return p3, csv, student_market


def replay(run, csv, journal, pace_s: float = 0.0, **kw) -> Executor:
    """Replay the test days; ``pace_s``: a pause after each decision bar (a live feed's pace)."""
    feed = ReplayFeed(csv)
    ex = Executor(run, journal,
                  ExecutorOptions(trade_dates=split_dates(run, "test"), market=feed.bars.market,
                                  bar_minutes=feed.bars.bar_minutes, **kw))
    seen = [0]

    def pace(executor: Executor) -> None:
        if executor.summary.decisions != seen[0]:
            seen[0] = executor.summary.decisions
            time.sleep(pace_s)

    ex.run_feed(feed, on_bar=pace if pace_s else None)
    ex.close()
    return ex


def test_live_contexts_equal_the_batch_contexts_when_built_bar_by_bar(student_market):
    bars, features = student_market.bars, student_market.features
    inc = IncrementalFeatures(bars.market, bars.bar_minutes)
    live_bars, live_rows = BarsSoFar(bars.market, bars.bar_minutes), FeaturesSoFar(raw_keys=CONTEXT_RAW_KEYS)
    account = AccountState(position=1, contracts=1, entry_price=float(bars.close[0]), unrealized_pnl=12.5)
    mask = np.ones(6, dtype=bool)
    times = bars.frame.index
    n = min(len(bars.close), 3000)
    for t in range(n):
        row = inc.append(int(times[t].value), bars.open[t], bars.high[t], bars.low[t], bars.close[t], bars.volume[t])
        live_bars.push(int(times[t].value), bars.open[t], bars.high[t], bars.low[t], bars.close[t], bars.volume[t])
        live_rows.push(row)
    for t in range(0, n, 97):
        assert context_from_market(live_bars, live_rows, t, account, mask) == \
            context_from_market(bars, features, t, account, mask), t


def test_async_replay_makes_evaluations_trades_when_the_budget_covers_the_models_answer(mock_p3, tmp_path):
    run, csv, market = mock_p3
    ex = replay(run, csv, tmp_path / "j.sqlite", llm="async", llm_budget_ms=5_000)
    assert isinstance(ex.policy, AdvisedPolicy) and ex.policy.asynchronous
    assert ex.policy.fresh == ex.policy.asked > 0, "each question answered inside the budget"
    out = evaluate_run(run, EvaluationRequest(split="test", seeds=1, market=market, quiet=True, ablation=False))
    expected = pd.read_csv(out.out_dir / "agent.trades.csv")
    assert len(expected) > 3
    assert_same_trades(ex.trade_log(), expected)
    assert ex.advisor_label == "mock async (ok)"


def test_async_decisions_never_wait_for_the_model_when_the_budget_is_zero(mock_p3, tmp_path):
    run, csv, _ = mock_p3
    slow = {"mock": {"latency_ms": 5.0}, "cache": {"enabled": False}}
    # bars 20 ms apart: an answer (5 ms) comes before the next decision bar, never inside its own decision
    ex = replay(run, csv, tmp_path / "j.sqlite", pace_s=0.02, llm="async", llm_budget_ms=0, llm_overrides=slow)
    policy = ex.policy
    assert policy.fresh == 0 and policy.asked > 0, "no decision waited for its own bar's answer"
    db = sqlite3.connect(tmp_path / "j.sqlite")
    advised = [json.loads(a) for (a,) in db.execute("SELECT advice FROM decisions WHERE advice IS NOT NULL")]
    assert advised, "answers asked on earlier bars advise later decisions"
    assert {a["backend"].split("+")[0] for a in advised} == {"mock"}
    assert len(advised) < ex.summary.decisions, "the first decision of the replay had no answer yet"


def test_executor_decides_rl_only_with_a_note_when_the_llm_is_off(mock_p3, tmp_path):
    run, csv, _ = mock_p3
    ex = replay(run, csv, tmp_path / "j.sqlite", llm="off")
    assert ex.advisor_label == "off (RL-only; llm.backend mock)"
    assert any("--advisor off" in note for note in ex.notes)
    db = sqlite3.connect(tmp_path / "j.sqlite")
    assert db.execute("SELECT COUNT(*) FROM decisions WHERE advice IS NOT NULL").fetchone()[0] == 0


def test_async_llm_with_a_lean_is_calibrated_first_or_journaled_raw_with_no_calibrate(mock_p3, tmp_path, monkeypatch):
    make_mock_lean(monkeypatch)
    src, csv, _ = mock_p3
    run = tmp_path / "p3"
    shutil.copytree(src, run)
    ex = replay(run, csv, tmp_path / "raw.sqlite", llm="async", llm_budget_ms=5_000, calibrate=False)
    assert ex.advisor_label.startswith("mock async, raw advice") and not calibration_path(run).exists()
    assert any("raw (not calibrated" in note for note in ex.notes)
    db = sqlite3.connect(tmp_path / "raw.sqlite")
    advised = [json.loads(a) for (a,) in db.execute("SELECT advice FROM decisions WHERE advice IS NOT NULL")]
    assert advised and {a["calibration"] for a in advised} == {"raw"}
    assert "RAW (not calibrated: --no-calibrate)" in write_journal_report(tmp_path / "raw.sqlite").read_text()
    ex = replay(run, csv, tmp_path / "cal.sqlite", llm="async", llm_budget_ms=5_000)
    assert calibration_path(run).is_file() and ex.advisor_label == "mock async (ok)"
    db = sqlite3.connect(tmp_path / "cal.sqlite")
    advised = [json.loads(a) for (a,) in db.execute("SELECT advice FROM decisions WHERE advice IS NOT NULL")]
    assert advised and {a["calibration"] for a in advised} == {"batch"}
