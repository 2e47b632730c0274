"""Golden tests of the metrics (hybrid_trader.evaluation.metrics): every number computed by hand.

The example (tests/evaluation/fakes.py, GOLDEN_BARS and GOLDEN_TRADES): initial balance
50,000 $, 14 bars over 4 Globex trading days, 4 trades.

    day         bars  closing equity  daily PnL   daily return r = PnL / 50,000
    2024-01-02   4      50,500          +500        +0.010
    2024-01-03   4      50,250          -250        -0.005
    2024-01-04   3      51,250         +1000        +0.020   (includes the 2024-01-03 18:00 bar)
    2024-01-05   3      51,000          -250        -0.005
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from hybrid_trader.evaluation.metrics import (
    METRIC_KEYS,
    aggregate_seeds,
    compute_metrics,
    daily_pnl,
    drawdown,
    format_metric,
    metrics_from_json,
    metrics_to_json,
    probabilistic_sharpe_ratio,
    trading_date_of,
)
from hybrid_trader.evaluation.results import StrategyResult, empty_trades
from tests.evaluation.fakes import GOLDEN_BARS, golden_result, t, trades_frame

ABS = 1e-9


def phi(x: float) -> float:
    """Standard normal CDF."""
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


@pytest.fixture
def m():
    return compute_metrics(golden_result())


def test_golden_pnl_and_return(m):
    # Net PnL = last equity - initial = 51,000 - 50,000 = 1,000 $ (= sum of daily PnL 500 - 250 + 1000 - 250)
    assert m["Net PnL [$]"] == pytest.approx(1000.0, abs=ABS)
    # Return = 100 * 1,000 / 50,000 = 2 %
    assert m["Return [%]"] == pytest.approx(2.0, abs=ABS)
    # Gross = 505 - 245 + 1005 - 245 = 1,020 $; costs = 4 * 5 = 20 $
    assert m["Gross PnL [$]"] == pytest.approx(1020.0, abs=ABS)
    assert m["Costs [$]"] == pytest.approx(20.0, abs=ABS)


def test_golden_daily_pnl_uses_globex_trading_date():
    days = daily_pnl(golden_result().equity, 50_000.0)
    assert [d.strftime("%Y-%m-%d") for d in days.index] == ["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"]
    assert days.tolist() == [500.0, -250.0, 1000.0, -250.0]


def test_golden_sharpe_and_sortino(m):
    # r = [0.010, -0.005, 0.020, -0.005]; mean = 0.020 / 4 = 0.005
    # deviations = [0.005, -0.010, 0.015, -0.010]; squares sum = (25 + 100 + 225 + 100)e-6 = 450e-6
    # std (ddof 1) = sqrt(450e-6 / 3) = sqrt(150e-6); daily SR = 0.005 / sqrt(150e-6) = sqrt(25 / 150) = 1/sqrt(6)
    # Sharpe (ann.) = sqrt(1/6) * sqrt(252) = sqrt(42) = 6.48074069840786
    assert m["Sharpe (ann.)"] == pytest.approx(math.sqrt(42), rel=1e-12)
    assert m["Sharpe (ann.)"] == pytest.approx(6.48074069840786, rel=1e-12)
    # downside deviation = sqrt(mean(min(r, 0)^2)) = sqrt((0 + 25e-6 + 0 + 25e-6) / 4) = sqrt(12.5e-6)
    # daily Sortino = 0.005 / sqrt(12.5e-6) = sqrt(25 / 12.5) = sqrt(2); annualised sqrt(2 * 252) = sqrt(504)
    assert m["Sortino (ann.)"] == pytest.approx(math.sqrt(504), rel=1e-12)
    assert m["Sortino (ann.)"] == pytest.approx(22.4499443206436, rel=1e-12)


def test_golden_probabilistic_sharpe_ratio(m):
    # In units of 0.005 the deviations are [1, -2, 3, -2]; central moments (population):
    #   m2 = (1 + 4 + 9 + 4) / 4 = 4.5, m3 = (1 - 8 + 27 - 8) / 4 = 3, m4 = (1 + 16 + 81 + 16) / 4 = 28.5
    # skewness g3 = m3 / m2^1.5 = 3 / 4.5^1.5 = 0.314269680527354
    # kurtosis g4 = m4 / m2^2 = 28.5 / 20.25 = 1.407407407407407 (non-excess)
    # SR = 1/sqrt(6) = 0.408248290463863 (daily), n = 4
    # PSR = Phi(SR * sqrt(n - 1) / sqrt(1 - g3 * SR + (g4 - 1) / 4 * SR^2))
    #     = Phi(0.707106781186548 / sqrt(1 - 0.128300059 + 0.016975309))
    #     = Phi(0.707106781186548 / 0.942695736) = Phi(0.750090146) = 0.7733998
    g3 = 3 / 4.5**1.5
    g4 = 28.5 / 20.25
    sr = 1 / math.sqrt(6)
    z = sr * math.sqrt(3) / math.sqrt(1 - g3 * sr + (g4 - 1) / 4 * sr**2)
    assert z == pytest.approx(0.750090146, abs=1e-8)
    assert m["PSR [%]"] == pytest.approx(100 * phi(z), rel=1e-12)
    assert m["PSR [%]"] == pytest.approx(77.33998, abs=1e-4)


def test_psr_of_normal_returns_matches_the_plain_sharpe_test():
    # Symmetric returns [-1, 1] repeated: g3 = 0, g4 = 1 (two-point distribution), so the root is 1
    # and PSR = Phi(SR * sqrt(n - 1)) with SR = mean / std.
    r = np.array([0.02, -0.01] * 10)  # mean 0.005, deviations +-0.015, std (ddof 1) = 0.015 * sqrt(20 / 19)
    sr = 0.005 / (0.015 * math.sqrt(20 / 19))
    assert probabilistic_sharpe_ratio(r) == pytest.approx(phi(sr * math.sqrt(19)), rel=1e-12)
    assert probabilistic_sharpe_ratio(-r) == pytest.approx(1 - phi(sr * math.sqrt(19)), rel=1e-12)
    assert math.isnan(probabilistic_sharpe_ratio([0.01]))
    assert math.isnan(probabilistic_sharpe_ratio([0.01, 0.01, 0.01]))


def test_golden_drawdown(m):
    # running peak (initial 50,000 included): the deepest drops are 50,500 -> 50,150 (350 $)
    # and 51,250 -> 50,800 (450 $). Max drawdown = 450 $, in % = 450 / 51,250 * 100 = 0.878048780...
    # (the first one is 350 / 50,500 = 0.693 %)
    assert m["Max drawdown [$]"] == pytest.approx(450.0, abs=ABS)
    assert m["Max drawdown [%]"] == pytest.approx(450 / 51_250 * 100, rel=1e-12)
    dd = drawdown(golden_result().equity, 50_000.0)
    assert dd.iloc[6] == pytest.approx(350.0) and dd.iloc[0] == 0.0 and (dd >= 0).all()


def test_golden_trade_statistics(m):
    # net PnL per trade: +500, -250, +1000, -250
    assert m["Trades"] == 4 and m["Long trades"] == 2 and m["Short trades"] == 2
    assert m["Win rate [%]"] == pytest.approx(50.0)           # 2 winners / 4 trades
    assert m["Profit factor"] == pytest.approx(3.0)           # (500 + 1000) / (250 + 250)
    assert m["Avg trade [$]"] == pytest.approx(250.0)         # 1000 / 4
    assert m["Avg holding [bars]"] == pytest.approx(1.5)      # (2 + 2 + 1 + 1) / 4
    # positions at bar close: 6 of 14 bars non-zero -> 42.857 %
    assert m["Exposure [%]"] == pytest.approx(600 / 14, rel=1e-12)
    assert m["Best day [$]"] == 1000.0 and m["Worst day [$]"] == -250.0
    assert m["Days"] == 4


def test_golden_apex_verdict_neither_without_events(m):
    assert m["Apex verdict"] == "neither" and m["Breach day"] is None and m["Target day"] is None


def test_apex_breach_day_is_the_globex_trading_date():
    m = compute_metrics(golden_result(breach_time=t("2024-01-03 18:30")))
    assert m["Apex verdict"] == "breached"
    assert m["Breach day"] == "2024-01-04"  # 18:30 ET belongs to the next trading day
    assert trading_date_of(t("2024-01-03 17:59")) == "2024-01-03"


def test_apex_passed_only_when_target_comes_before_breach():
    both = golden_result(breach_time=t("2024-01-03 10:00"), target_hit_time=t("2024-01-02 10:00"))
    assert compute_metrics(both)["Apex verdict"] == "passed"
    late = golden_result(breach_time=t("2024-01-02 10:00"), target_hit_time=t("2024-01-03 10:00"))
    assert compute_metrics(late)["Apex verdict"] == "breached"
    m = compute_metrics(golden_result(target_hit_time=t("2024-01-04 09:31")))
    assert m["Apex verdict"] == "passed" and m["Target day"] == "2024-01-04"


def test_metrics_have_labelled_keys_in_documented_order(m):
    assert list(m) == list(METRIC_KEYS)


def _flat(n_days: int = 3) -> StrategyResult:
    idx = pd.DatetimeIndex([t(f"2024-01-0{d + 2} 10:00") for d in range(n_days)])
    return StrategyResult("flat", empty_trades(), pd.Series(50_000.0, index=idx), pd.Series(0, index=idx), 50_000.0)


def test_no_trades_gives_undefined_ratios_written_as_null():
    m = compute_metrics(_flat())
    assert m["Trades"] == 0 and m["Net PnL [$]"] == 0.0 and m["Exposure [%]"] == 0.0
    for key in ("Win rate [%]", "Profit factor", "Avg trade [$]", "Avg holding [bars]", "Sharpe (ann.)",
                "Sortino (ann.)", "PSR [%]"):
        assert math.isnan(m[key]), key
    assert m["Max drawdown [$]"] == 0.0 and m["Max drawdown [%]"] == 0.0
    js = json.loads(json.dumps(metrics_to_json(m), allow_nan=False))
    assert js["Win rate [%]"] is None and js["Profit factor"] is None
    assert math.isnan(metrics_from_json(js)["Win rate [%]"])
    assert format_metric("Win rate [%]", m["Win rate [%]"]) == "-"


def test_profit_factor_without_losses_is_inf_written_as_string():
    r = golden_result()
    r.trades = trades_frame([tuple(row) for row in r.trades.itertuples(index=False) if row.net_pnl > 0])
    m = compute_metrics(r)
    assert m["Profit factor"] == math.inf and m["Win rate [%]"] == 100.0
    js = metrics_to_json(m)
    assert js["Profit factor"] == "inf"
    assert metrics_from_json(js)["Profit factor"] == math.inf
    assert format_metric("Profit factor", m["Profit factor"]) == "inf"


def test_sortino_is_inf_when_no_day_loses():
    idx = pd.DatetimeIndex([t("2024-01-02 10:00"), t("2024-01-03 10:00"), t("2024-01-04 10:00")])
    r = StrategyResult("up", empty_trades(), pd.Series([50_100.0, 50_300.0, 50_400.0], index=idx),
                       pd.Series(0, index=idx), 50_000.0)
    m = compute_metrics(r)
    assert m["Sortino (ann.)"] == math.inf
    # daily r = [0.002, 0.004, 0.002]: mean 0.008/3, std (ddof 1) = sqrt(((-2/3)^2 + (4/3)^2 + (-2/3)^2) / 2) * 1e-3
    sd = math.sqrt(((2 / 3) ** 2 + (4 / 3) ** 2 + (2 / 3) ** 2) / 2) * 1e-3
    assert m["Sharpe (ann.)"] == pytest.approx((0.008 / 3) / sd * math.sqrt(252), rel=1e-12)


def test_aggregate_seeds_gives_mean_and_std():
    a = compute_metrics(golden_result())
    b = dict(a, **{"Net PnL [$]": 3000.0, "Profit factor": float("nan"), "Apex verdict": "breached",
                   "Breach day": "2024-01-04"})
    c = dict(a, **{"Net PnL [$]": 2000.0})
    agg = aggregate_seeds([a, b, c])
    assert agg["Seeds"] == 3
    # Net PnL: 1000, 3000, 2000 -> mean 2000, std (ddof 1) = sqrt((1e6 + 1e6 + 0) / 2) = 1000
    assert agg["Net PnL [$]"] == {"mean": 2000.0, "std": 1000.0, "n": 3}
    # Profit factor: 3, NaN, 3 -> NaN skipped: mean 3, std 0, n 2
    assert agg["Profit factor"] == {"mean": 3.0, "std": 0.0, "n": 2}
    assert agg["Apex verdict"] == {"counts": {"neither": 2, "breached": 1}}
    assert agg["Breach day"] == {"counts": {"none": 2, "2024-01-04": 1}}
    assert format_metric("Net PnL [$]", agg["Net PnL [$]"]) == "2,000.00 ± 1,000.00"
    one = aggregate_seeds([a])
    assert one["Net PnL [$]"]["n"] == 1 and math.isnan(one["Net PnL [$]"]["std"])
    json.dumps(metrics_to_json(agg), allow_nan=False)


def test_metrics_refuse_naive_timestamps():
    idx = pd.DatetimeIndex([pd.Timestamp(b[0]) for b in GOLDEN_BARS])
    with pytest.raises(ValueError, match="tz-aware"):
        StrategyResult("x", empty_trades(), pd.Series(1.0, index=idx), pd.Series(0, index=idx), 1.0)


def test_apex_verdict_is_the_accounts_when_result_carries_account_state():
    r = golden_result(breach_time=t("2024-01-03 10:00"))
    r.extra["account"] = {"status": "BREACHED", "verdict": "passed", "events": []}
    assert compute_metrics(r)["Apex verdict"] == "passed"  # read, not recomputed from the times
