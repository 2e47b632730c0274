"""Golden values of the many-comparison statistics: scipy's and arch's own results, published examples, PBO's known
answers, and the true number of trials of the Deflated Sharpe Ratio."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from arch.bootstrap import SPA, StepM

from hybrid_trader.study.attempts import count_attempts, record_attempt
from hybrid_trader.study.hypotheses import HypothesisSpec
from hybrid_trader.study.multiple_tests import (
    cscv_blocks,
    leave_one_out_range,
    many_comparisons,
    pbo_cscv,
    robust_figures,
    spa_stepm,
    wilcoxon_p,
)
from hybrid_trader.study.summary import deflated_best

# scipy.stats.wilcoxon's documented example (Fisher's height differences of 15 pairs of plants)
FISHER = [6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75]


def test_wilcoxon_gives_the_published_p_values():
    assert wilcoxon_p(FISHER) == pytest.approx(0.041259765625, abs=1e-12)
    assert wilcoxon_p(FISHER, "greater") == pytest.approx(0.0206298828125, abs=1e-12)
    assert wilcoxon_p([0.0, 0.0]) == 1.0 and np.isnan(wilcoxon_p([]))


def test_leave_one_out_range_and_median_show_the_month_that_makes_the_mean():
    assert leave_one_out_range([1.0, 2.0, 3.0, 10.0]) == (2.0, 5.0)  # without 10: 2; without 1: 15/3
    got = robust_figures([1.0, 2.0, 3.0, 10.0], paired=True)
    assert got["median"] == 2.5 and got["leave-one-pair-out mean low"] == 2.0
    assert got["Wilcoxon signed-rank p (two-sided)"] == pytest.approx(0.125)  # 4 positive pairs, exact: 2/16


def test_cscv_keeps_the_most_days_with_at_least_eight_blocks():
    assert cscv_blocks(1000) == 10 and cscv_blocks(63) == 12 and cscv_blocks(64) == 16
    assert cscv_blocks(10) == 4 and cscv_blocks(3) == 0


def test_pbo_of_a_hand_made_reversal_is_one_and_of_a_steady_winner_zero():
    """Two blocks of two days: A leads in the first half and trails in the second, B the reverse. Each split picks
    the in-sample leader, which is last out of sample: PBO 1. A steady winner is never below the median: PBO 0."""
    a = [1.0, 2.0, -2.0, -1.0]
    b = [-1.0, -2.0, 1.0, 2.0]
    reversal = pbo_cscv(np.column_stack([a, b]), blocks=2)
    assert reversal["pbo"] == 1.0 and reversal["splits"] == 2 and reversal["median logit"] == pytest.approx(
        np.log((1 / 3) / (2 / 3)))
    steady = pbo_cscv(np.column_stack([[1.0, 2.0, 1.5, 2.5], [-1.0, -2.0, -1.5, -2.5]]), blocks=2)
    assert steady["pbo"] == 0.0


def test_pbo_is_about_half_for_noise_and_about_zero_with_one_dominant_strategy():
    noise = [pbo_cscv(np.random.default_rng(s).normal(size=(160, 10)), blocks=8)["pbo"] for s in range(30)]
    assert np.mean(noise) == pytest.approx(0.5, abs=0.1)  # the IS best ranks uniformly out of sample
    m = np.random.default_rng(1).normal(size=(160, 10))
    m[:, 4] += 0.8
    assert pbo_cscv(m)["pbo"] < 0.02


def rows_for(series: dict, momentum: dict) -> list[dict]:
    """Finished trials from ``series[(variant, seed, fold)]`` (daily returns), each fold's test days dated."""
    out = []
    for (v, seed, fold), x in series.items():
        dates = [str(d.date()) for d in pd.bdate_range(f"2024-{2 * fold + 1:02d}-01", periods=len(x))]  # disjoint
        out.append({"variant": v, "seed": seed, "fold": fold, "trial": f"{v}-s{seed}-f{fold}", "status": "finished",
                    "daily_returns": list(x), "daily_dates": dates, "momentum daily_returns": list(momentum[fold])})
    return out


def test_spa_and_stepm_equal_arch_on_each_variants_daily_pnl_averaged_over_seeds():
    rng = np.random.default_rng(7)
    days, shift = 30, {"rl-only": 0.0, "good": 0.01, "noise": 0.0}
    series = {(v, s, f): rng.normal(shift[v], 0.01, days) for v in shift for s in (0, 1) for f in (0, 1)}
    momentum = {f: rng.normal(0.0, 0.01, days) for f in (0, 1)}
    got = many_comparisons(list(shift), "rl-only", rows_for(series, momentum))
    assert got["days"] == 60 and got["trials used"] == 12

    def daily(v):  # the variant's daily P&L: mean of its seeds, fold 0's days then fold 1's
        return np.concatenate([(series[(v, 0, f)] + series[(v, 1, f)]) / 2 for f in (0, 1)])

    bench = -daily("rl-only")
    models = -np.column_stack([daily("good"), daily("noise")])
    spa = SPA(bench, models, reps=1000, bootstrap="stationary", studentize=True, seed=0)
    spa.compute()
    mine = got["against rl-only (baseline variant)"]
    assert mine["SPA p-value (consistent)"] == spa.pvalues["consistent"]
    assert mine["SPA p-value (lower)"] == spa.pvalues["lower"] and mine["SPA p-value (upper)"] == spa.pvalues["upper"]
    stepm = StepM(bench, pd.DataFrame(models, columns=["good", "noise"]), size=0.05, seed=0)
    stepm.compute()
    assert mine["StepM superior at 0.05"] == list(stepm.superior_models) == ["good"]
    mom = got["against momentum"]
    assert mom["models"] == ["rl-only", "good", "noise"] and mom["StepM superior at 0.05"] == ["good"]
    # PBO: one strategy per variant x seed over both folds' days, CSCV as pbo_cscv computes it
    matrix = np.column_stack([np.concatenate([series[(v, s, 0)], series[(v, s, 1)]]) for v in shift for s in (0, 1)])
    assert got["PBO"]["pbo"] == pbo_cscv(matrix)["pbo"] and got["PBO"]["strategies"] == 6


def test_too_few_common_days_are_reported_not_tested():
    series = {(v, 0, 0): np.zeros(5) for v in ("a", "b")}
    got = many_comparisons(["a", "b"], "a", rows_for(series, {0: np.zeros(5)}))
    assert "5 common test days" in got["reason"] and "PBO" not in got


def test_the_dsr_counts_every_trial_the_folder_ran_failed_and_rerun_ones_included(tmp_path):
    record_attempt(tmp_path, {"trial": "a-s0-f0", "status": "failed", "error": "boom"})
    record_attempt(tmp_path, {"trial": "a-s0-f0", "status": "finished"})  # the same trial, tried again
    record_attempt(tmp_path, {"trial": "b-s0-f0", "status": "finished"})
    records = [{"trial": "a-s0-f0", "status": "finished"}, {"trial": "b-s0-f0", "status": "finished"},
               {"trial": "c-s0-f0", "status": "finished"},  # ran before the log existed
               {"trial": "d-s0-f0", "status": "missing"}]
    assert count_attempts(tmp_path, records) == {"attempts": 4, "logged": 3, "recorded before the log": 1}
    rng = np.random.default_rng(0)
    rows = [{"trial": f"t{i}", "daily_returns": list(rng.normal(0.001 * i, 0.01, 60))} for i in range(3)]
    few, many = deflated_best(rows), deflated_best(rows, tried=40)
    assert few["trials"] == 3 and many["trials"] == 40 and many["dsr"] < few["dsr"]


def test_the_summary_and_report_carry_the_tests_with_their_labels(tmp_path):
    from hybrid_trader.study.report import write_study_report
    from hybrid_trader.study.spec import StudySpec, VariantSpec
    from hybrid_trader.study.summary import summarize_study

    rng = np.random.default_rng(3)
    shift = {"rl-only": 0.0, "good": 0.01}
    series = {(v, s, f): rng.normal(shift[v], 0.01, 20) for v in shift for s in (0, 1, 2) for f in (0, 1)}
    rows = rows_for(series, {f: rng.normal(0.0, 0.01, 20) for f in (0, 1)})
    for r in rows:
        r["Net PnL [$]"] = 50_000 * sum(r["daily_returns"])
    spec = StudySpec(variants=[VariantSpec("rl-only"), VariantSpec("good")], seeds=[0, 1, 2], folds=2,
                     hypotheses=[HypothesisSpec("good-wins", "good", "rl-only")])
    summary = summarize_study(spec, rows, attempts={"attempts": 15})
    assert summary["deflated sharpe"]["trials"] == 15 and summary["hypotheses"][0]["verdict"] == "supported"
    mc = summary["many comparisons"]
    assert mc["against rl-only (baseline variant)"]["StepM superior at 0.05"] == ["good"]
    assert mc["PBO"]["strategies"] == 6 and 0.0 <= mc["PBO"]["pbo"] <= 1.0
    good = summary["variants"]["good"]["figures"]["Net PnL [$]"]
    assert good["leave-one-trial-out mean low"] <= good["mean"] <= good["leave-one-trial-out mean high"]
    assert 0 < summary["paired vs baseline"]["good"]["Net PnL [$]"]["Wilcoxon signed-rank p (two-sided)"] < 0.05
    html = write_study_report(tmp_path, spec, summary, pd.DataFrame(rows)).read_text()
    for text in ("Pre-registered hypotheses", "good-wins", "SPA p (consistent)", "PBO:", "leave-one-out mean"):
        assert text in html


def test_stepm_returns_every_model_where_arch_stops_on_models_all_superior_over_two_steps():
    # arch 8.0's StepM.compute loops while the last step's finds are fewer than k: two models found superior one
    # step each leave it running SPA on no model (ValueError); ours stops with both
    rng = np.random.default_rng(0)
    bench = rng.normal(0.0, 0.01, 60)
    for _ in range(200):
        a = bench + 0.006 + rng.normal(0, 0.01, 60)  # clearly better
        b = bench + 0.0025 + rng.normal(0, 0.01, 60)  # better, found once a is set aside
        models = pd.DataFrame(-np.column_stack([a, b]), columns=["a", "b"])
        try:
            StepM(-bench, models, size=0.05, reps=1000, bootstrap="stationary", studentize=True, seed=0).compute()
        except ValueError:
            break
    else:
        pytest.fail("no draw makes arch's StepM stop on an empty subset: the case is not exercised")
    assert spa_stepm(bench, np.column_stack([a, b]), ["a", "b"])["StepM superior at 0.05"] == ["a", "b"]
    dates = [str(d.date()) for d in pd.bdate_range("2024-01-01", periods=60)]
    rows = [{"variant": v, "seed": 0, "fold": 0, "trial": f"{v}-s0-f0", "status": "finished", "daily_returns": list(x),
             "daily_dates": dates, "momentum daily_returns": list(bench)} for v, x in (("a", a), ("b", b))]
    assert many_comparisons(["a", "b"], "a", rows)["against momentum"]["StepM superior at 0.05"] == ["a", "b"]


def test_a_confirmations_folds_trading_the_same_days_count_each_day_once():
    # in a confirmation every fold's model trades the same later days: one market day is one observation
    rng = np.random.default_rng(1)
    dates = [str(d.date()) for d in pd.bdate_range("2025-01-01", periods=30)]
    rows = [{"variant": v, "seed": s, "fold": f, "trial": f"{v}-s{s}-f{f}", "status": "finished",
             "daily_returns": list(rng.normal(0, 0.004, 30)), "daily_dates": dates,
             "momentum daily_returns": list(rng.normal(0, 0.004, 30))}
            for v in ("base", "cand") for f in range(3) for s in (0, 1)]
    out = many_comparisons(["base", "cand"], "base", rows)
    assert out["days"] == 30 and out["against base (baseline variant)"]["days"] == 30
    assert out["PBO"]["days"] <= 30


def test_days_of_rows_recorded_without_dates_stay_in_time_order(monkeypatch):
    import hybrid_trader.study.multiple_tests as mt

    fed = []
    monkeypatch.setattr(mt, "spa_stepm", lambda bench, models, names, **kw: fed.append(list(bench)) or {})
    rows = [{"variant": v, "seed": 0, "fold": 0, "trial": f"{v}-s0-f0", "status": "finished",
             "daily_returns": [float(i) for i in range(25)]} for v in ("a", "b")]  # each value its day's position
    mt.many_comparisons(["a", "b"], "a", rows)
    assert fed[0] == sorted(fed[0]), "position 10 must not come before 2"
