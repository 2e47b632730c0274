"""Saving and loading strategy results (hybrid_trader.evaluation.results)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pandas.testing as pdt
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.results import (
    TRADE_COLUMNS,
    StrategyResult,
    empty_trades,
    load_results,
    metrics_table,
    save_results,
    slugify,
)
from tests.evaluation.fakes import fake_results, golden_result, synthetic_prices, t


def test_save_then_load_gives_back_identical_results(tmp_path):
    prices = synthetic_prices(n_days=2, bars_per_day=30)
    results = fake_results(prices, n_random=2)
    results[0].breach_time = t("2024-03-05 10:00")
    save_results(results, prices, tmp_path)
    loaded, px, metrics = load_results(tmp_path)
    assert (px.index == prices.index).all() and (px.to_numpy() == prices.to_numpy()).all()
    assert [r.name for r in loaded] == [r.name for r in results]
    for a, b in zip(results, loaded):
        pdt.assert_frame_equal(a.trades, b.trades, check_dtype=True)
        pdt.assert_series_equal(a.equity, b.equity, check_freq=False)
        assert (a.position.to_numpy() == b.position.to_numpy()).all()
        assert a.initial_balance == b.initial_balance
        assert a.breach_time == b.breach_time and a.target_hit_time == b.target_hit_time
        assert a.extra == b.extra
    assert str(loaded[0].equity.index.tz) == "America/New_York"
    assert loaded[0].breach_time == t("2024-03-05 10:00")


def test_saved_files_are_readable_csv_and_json(tmp_path):
    prices = synthetic_prices(n_days=1, bars_per_day=20)
    save_results(fake_results(prices, n_random=1), prices, tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "agent.trades.csv" in names and "random_seed_0.curve.csv" in names and "prices.csv" in names
    header = (tmp_path / "agent.trades.csv").read_text().splitlines()[0]
    assert header == ",".join(TRADE_COLUMNS)
    first_curve = (tmp_path / "agent.curve.csv").read_text().splitlines()[1]
    assert first_curve.startswith("2024-03-04 09:30:00-05:00,")
    index = json.loads((tmp_path / "results.json").read_text())
    assert index["strategies"][0]["role"] == "agent" and index["strategies"][1]["role"] == "baseline"


def test_metrics_json_aggregates_seed_groups_and_uses_null_and_inf(tmp_path):
    prices = synthetic_prices(n_days=2, bars_per_day=30)
    results = fake_results(prices, n_random=3)
    save_results(results, prices, tmp_path)
    text = (tmp_path / "metrics.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text)
    assert list(data) == ["agent", "flat", "momentum", "random"]
    assert data["random"]["Seeds"] == 3
    assert set(data["random"]["Net PnL [$]"]) == {"mean", "std", "n"}
    assert data["flat"]["Win rate [%]"] is None
    loaded = load_results(tmp_path).metrics
    assert math.isnan(loaded["flat"]["Win rate [%]"])


def test_metrics_table_keeps_group_column_where_it_first_appears():
    prices = synthetic_prices(n_days=1, bars_per_day=20)
    res = fake_results(prices, n_random=2)
    res = [res[3], res[0], res[4]]  # random seed 0, agent, random seed 1
    assert list(metrics_table(res)) == ["random", "agent"]


def test_save_results_rejects_duplicate_names(tmp_path):
    r = golden_result()
    with pytest.raises(ValueError, match="unique"):
        save_results([r, golden_result()], r.equity, tmp_path)
    assert slugify("random (seed 3)") == "random_seed_3"


def test_load_results_explains_what_to_run_when_missing(tmp_path):
    with pytest.raises(UserError, match="hybrid-trader evaluate"):
        load_results(tmp_path / "eval" / "test")
    (tmp_path / "results.json").write_text("{broken")
    with pytest.raises(UserError, match="not valid JSON") as info:
        load_results(tmp_path)
    assert "row 1" in info.value.render()


def test_empty_trade_table_round_trips(tmp_path):
    idx = pd.DatetimeIndex([t("2024-01-02 10:00"), t("2024-01-02 10:01")])
    r = StrategyResult("flat", pd.DataFrame(), pd.Series(50_000.0, index=idx), pd.Series(0, index=idx), 50_000.0)
    assert list(r.trades.columns) == list(TRADE_COLUMNS)
    save_results([r], r.equity, tmp_path)
    back = load_results(tmp_path).results[0]
    assert len(back.trades) == 0 and list(back.trades.columns) == list(empty_trades().columns)


def test_strategy_result_rejects_missing_trade_columns():
    r = golden_result()
    with pytest.raises(ValueError, match="lack columns"):
        StrategyResult("x", r.trades.drop(columns=["net_pnl"]), r.equity, r.position, 1.0)
