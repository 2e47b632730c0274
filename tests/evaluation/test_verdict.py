"""The prop-firm verdict: golden figures of a series of attempts, and attempts run through the environment."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from hybrid_trader.data import generate_bars
from hybrid_trader.env import EnvConfig
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.policies import FlatPolicy, MomentumPolicy
from hybrid_trader.evaluation.verdict import (
    Attempt,
    VerdictConfig,
    prop_verdict,
    small_sample_warning,
    verdict_figures,
    wilson_interval,
)
from hybrid_trader.features import compute_features


def test_figures_when_two_of_four_attempts_pass_match_hand_computed_values():
    attempts = [Attempt(0, 3, "passed"), Attempt(1, 5, "passed"), Attempt(2, 2, "breached"), Attempt(3, 30, "neither")]
    f = verdict_figures(attempts, VerdictConfig(evaluation_fee=100.0, reset_fee=50.0, pass_value=1000.0))
    assert f["Attempts"] == 4 and f["Pass rate [%]"] == 50.0 and f["Breach rate [%]"] == 25.0
    assert f["Median days to pass"] == 4.0 and f["Median days to breach"] == 2.0
    fees = 100.0 + 3 * 50.0
    assert f["Expected outcome per attempt [$]"] == pytest.approx(0.5 * 1000.0 - fees / 4)
    assert f["Fees per pass [$]"] == pytest.approx(fees / 2)


def test_attempts_the_data_cut_short_are_counted_as_censored_and_warned_about():
    attempts = [Attempt(0, 3, "passed"), Attempt(1, 30, "neither"), Attempt(2, 4, "neither", censored=True),
                Attempt(3, 2, "breached")]
    f = verdict_figures(attempts, VerdictConfig())
    assert f["Censored [%]"] == 25.0 and f["Pass rate [%]"] == 25.0  # still counted in the rates: lower bounds
    said = small_sample_warning(f, days=33)
    assert "1 of 4 attempt(s) ran out of data before --max-days" in said and "lower bounds" in said


def test_rolling_attempts_near_the_data_end_are_censored_and_full_length_ones_are_not(market):
    sessions = range(len(market.bars.session_bounds))
    flat = prop_verdict(FlatPolicy, market, EnvConfig(phase=1), sessions, VerdictConfig(max_days=3))
    n = int(flat["Attempts"])
    assert flat["Censored [%]"] == pytest.approx(100.0 * 2 / n)  # the last two start fewer than 3 days from the end
    assert "2 of" in small_sample_warning(flat, n)


def test_figures_without_a_pass_leave_the_pass_medians_undefined():
    f = verdict_figures([Attempt(0, 1, "breached")], VerdictConfig())
    assert math.isnan(f["Median days to pass"]) and math.isnan(f["Fees per pass [$]"])
    assert f["Expected outcome per attempt [$]"] == -167.0


@pytest.fixture(scope="module")
def market():
    bars = generate_bars(days=8, seed=4, market="NQ")
    return SimpleNamespace(bars=bars, features=compute_features(bars))


def test_rolling_attempts_start_every_day_and_sequential_ones_after_each_end(market):
    sessions = range(len(market.bars.session_bounds))
    flat = prop_verdict(FlatPolicy, market, EnvConfig(phase=1), sessions, VerdictConfig(max_days=3))
    assert flat["Pass rate [%]"] == 0.0 and flat["Breach rate [%]"] == 0.0
    days = flat["Attempts"]
    one_after_another = prop_verdict(FlatPolicy, market, EnvConfig(phase=1), sessions, VerdictConfig(max_days=3),
                                     mode="sequential")
    assert one_after_another["Attempts"] == math.ceil(days / 3)  # each flat attempt runs its 3 days
    momentum = prop_verdict(MomentumPolicy, market, EnvConfig(phase=1), sessions, VerdictConfig(max_days=3),
                            mode="sequential")
    assert 1 <= momentum["Attempts"] <= days  # a breach never ends the series: the next attempt starts
    assert momentum["Pass rate [%]"] + momentum["Breach rate [%]"] <= 100.0


def test_bad_fees_and_days_are_refused():
    with pytest.raises(UserError, match="evaluation_fee"):
        VerdictConfig(evaluation_fee=-1.0)
    with pytest.raises(UserError, match="max_days"):
        VerdictConfig(max_days=0)


def test_demo_headline_names_the_best_baseline_when_momentum_leads():
    from hybrid_trader.cli.demo import headline_line

    net = "Net PnL [$]"
    line = headline_line({"agent": {net: 100.0}, "flat": {net: 0.0}, "random": {net: -50.0},
                          "momentum": {net: 300.0}}, ("2024-01-02", "2024-02-01"))
    assert "does not beat the best baseline, momentum $300" in line and "flat $0" in line


def test_the_wilson_interval_and_the_small_sample_warning():
    low, high = wilson_interval(0, 2)
    assert low == 0.0 and high == pytest.approx(3.8416 / 5.8416)  # z^2 / (n + z^2) for no success
    assert wilson_interval(15, 30) == pytest.approx((0.3315, 0.6685), abs=1e-4)
    assert small_sample_warning({"Attempts": 30.0, "Pass rate [%]": 50.0}, 30) is None
    warning = small_sample_warning({"Attempts": 4.0, "Pass rate [%]": 25.0}, 4)
    assert warning is not None and "4 attempt(s) over 4 trading day(s)" in warning and "1/4" in warning
