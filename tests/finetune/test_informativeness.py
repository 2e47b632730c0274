"""Informativeness metrics and controls: hand-checkable values, intervals, the logistic control learns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hybrid_trader.finetune.informativeness import (
    LogisticControl,
    forward_returns,
    ic_difference,
    informativeness,
    label_dependence,
    majority_probs,
    spearman,
)
from hybrid_trader.study.stats import bootstrap_statistic


def dist(rows):
    p = np.zeros((len(rows), 6))
    p[:, :3] = rows
    return p


def test_spearman_matches_rank_correlation_when_ties_are_present():
    x = np.array([1.0, 2.0, 2.0, 3.0, 5.0])
    assert spearman(x, x ** 3) == pytest.approx(1.0)
    assert spearman(x, -x) == pytest.approx(-1.0)
    # ranks of x: 1, 2.5, 2.5, 4, 5; of y: 5, 4, 3, 2, 1 -> Pearson of the ranks
    rx, ry = np.array([1, 2.5, 2.5, 4, 5]), np.array([5, 4, 3, 2, 1.0])
    assert spearman(x, np.array([5, 4, 3, 2, 1.0])) == pytest.approx(np.corrcoef(rx, ry)[0, 1])
    assert math.isnan(spearman(np.ones(5), x))


def test_informativeness_scores_a_perfect_advisor_when_it_knows_the_label():
    rng = np.random.default_rng(0)
    label = rng.choice([0, 1, 2], size=200)
    ret = np.where(label == 1, 1.0, np.where(label == 2, -1.0, 0.0)) + rng.normal(0, 0.1, 200)
    perfect = dist(np.eye(3)[label] * 0.9 + 0.1 / 3)
    out = informativeness(perfect, label, ret, draws=200)
    assert out["Balanced accuracy [%]"][0] == pytest.approx(100.0)
    assert out["IC (Spearman)"][0] > 0.8 and out["IC (Spearman)"][1] > 0.7
    const = informativeness(majority_probs(label, 200), label, ret, draws=200)
    assert const["Balanced accuracy [%]"][0] == pytest.approx(100 / 3) and math.isnan(const["IC (Spearman)"][0])
    assert const["Brier score"][0] > out["Brier score"][0]


def test_bootstrap_statistic_brackets_the_value_when_resampling():
    x = np.random.default_rng(1).normal(2.0, 1.0, 300)
    value, low, high = bootstrap_statistic(lambda i: float(np.median(x[i])), len(x), draws=300)
    assert low < value < high and high - low < 0.5
    assert math.isnan(bootstrap_statistic(lambda i: 1.0, 0)[0])


def test_logistic_control_learns_a_signal_when_one_number_carries_the_label():
    rng = np.random.default_rng(2)
    label = rng.choice([0, 1, 2], size=600)
    x = rng.normal(size=(600, 4))
    x[:, 1] += np.where(label == 1, 2.0, np.where(label == 2, -2.0, 0.0))
    x[rng.random(600) < 0.05, 3] = np.nan  # missing numbers are filled with the training mean
    model = LogisticControl().fit(x[:400], label[:400])
    p = model.predict(x[400:])
    assert np.allclose(p.sum(axis=1), 1.0) and (p[:, 3:] == 0).all()
    acc = (p[:, :3].argmax(axis=1) == label[400:]).mean()
    assert acc > 0.6


def test_label_dependence_is_zero_when_the_advice_is_a_function_of_the_trend():
    trend = np.array([2, 1, 0, -1, -2] * 20)
    advice = dist(np.eye(3)[np.where(trend > 0, 1, np.where(trend < 0, 2, 0))])
    dep = label_dependence(advice, advice, trend)
    assert dep["H(advice | trend label) [bits]"] == pytest.approx(0.0)
    assert dep["Agreement with the trend rule [%]"] == 100.0 and dep["H(advice) [bits]"] > 1.0


def test_forward_returns_stop_at_the_session_end_when_the_horizon_runs_past_it():
    close = np.array([100.0, 101.0, 102.0, 200.0, 210.0])
    session = np.array([0, 0, 0, 1, 1])
    r = forward_returns(close, session, np.array([0, 1, 3]), horizon=10)
    assert np.allclose(r, np.log([102 / 100, 102 / 101, 210 / 200]))


def test_ic_difference_when_paired_is_tighter_than_either_ic_and_signs_the_better_advisor():
    rng = np.random.default_rng(1)
    ret = rng.normal(0, 1, 300)
    good = dist(np.c_[np.full(300, 0.2), 0.4 + 0.1 * np.tanh(ret), 0.4 - 0.1 * np.tanh(ret)])
    noisy_score = np.tanh(ret + rng.normal(0, 2, 300))
    noisy = dist(np.c_[np.full(300, 0.2), 0.4 + 0.1 * noisy_score, 0.4 - 0.1 * noisy_score])
    value, low, high = ic_difference(good, noisy, ret, draws=300)
    ic_good = informativeness(good, np.zeros(300, int), ret, draws=300)["IC (Spearman)"]
    ic_noisy = informativeness(noisy, np.zeros(300, int), ret, draws=300)["IC (Spearman)"]
    assert value == pytest.approx(ic_good[0] - ic_noisy[0])
    assert low > 0 and low <= value <= high
    assert ic_difference(good, good, ret, draws=50) == (0.0, 0.0, 0.0)
