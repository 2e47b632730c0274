"""``bench live-latency`` (``hybrid_trader.bench.live_latency``) on the tiny run: every live bar timed, each order
file timed from its bar's line, history never traded. (Here, beside the tiny run's fixture, not in tests/bench/.)"""

from __future__ import annotations

import json

import pytest

from hybrid_trader.bench.args import LiveLatencyArgs
from hybrid_trader.bench.live_latency import run
from hybrid_trader.errors import UserError
from hybrid_trader.live.feeds import FOLLOW_POLL_S, ReplayFeed

from .test_executor_ninjatrader import rows


def test_live_latency_times_each_live_bar_and_each_order_file_and_trades_no_history(tiny, tmp_path, capsys):
    run_dir, csv, _ = tiny
    assert run(LiveLatencyArgs(run_dir=str(run_dir), bars=str(csv), market="NQ", n_bars=60, interval_s=0.1,
                               out=str(tmp_path))) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert out[0].startswith("bar -> OIF visible: p50 ")
    assert result["live_bars"] == 60 and result["bar_to_decision_ms"]["n"] == 60
    assert result["follow_poll_s"] == FOLLOW_POLL_S, "the default polling of run --feed follow:"
    n = result["oifs"]
    assert n > 0 and result["bar_to_oif_ms"]["n"] == result["oif_write_ms"]["n"] == n, "the tiny run trades there"
    for key in ("bar_to_oif_ms", "bar_to_decision_ms", "feed_wait_ms", "decision_ms"):
        p = result[key]
        assert 0 <= p["p50"] <= p["p90"] <= p["p99"] <= p["max"], key
    assert result["bar_to_oif_ms"]["p50"] >= result["oif_write_ms"]["p50"], "the write is part of the whole"
    assert result["meets_target"] == (result["bar_to_oif_ms"]["p99"] <= 250.0)
    first_live = [b for b in ReplayFeed(csv)][result["history_bars"]].time_ns
    orders = rows(tmp_path / "journal.sqlite", "SELECT MIN(bar_time_ns), COUNT(*) FROM orders")
    assert orders[0][0] >= first_live, "no order for the history"
    assert result["oif_lines_read_by_nt"] >= n, "each order file reached the simulated NinjaTrader"


def test_live_latency_names_the_problem_when_the_bars_are_too_few(tiny, tmp_path):
    run_dir, csv, _ = tiny
    with pytest.raises(UserError, match="fewer than 100 bars of warm-up"):
        run(LiveLatencyArgs(run_dir=str(run_dir), bars=str(csv), warmup=100, n_bars=10**6, out=str(tmp_path)))
