"""Outcome metrics of scoring-mode distributions against hindsight labels, checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.finetune.evaluate import METRICS, label_baselines, llm_eval_table, outcome_metrics


def test_metrics_match_hand_computation_when_two_of_three_answers_are_right():
    probs = np.array([
        [0.8, 0.1, 0.1, 0, 0, 0],  # HOLD, label HOLD: right
        [0.1, 0.6, 0.1, 0, 0, 0],  # mass 0.8 -> BUY 0.75, label BUY: right
        [0.5, 0.25, 0.25, 0, 0, 0],  # HOLD, label SELL: wrong
    ])
    m = outcome_metrics(probs, np.array([0, 1, 2]), label_coverage=0.5)
    assert m["Accuracy [%]"] == pytest.approx(200 / 3)
    assert m["Balanced accuracy [%]"] == pytest.approx(200 / 3)
    assert m["Log-loss [nats]"] == pytest.approx(-(np.log(0.8) + np.log(0.75) + np.log(0.25)) / 3)
    brier = ((0.2**2 + 0.01 + 0.01) + (0.125**2 + 0.25**2 + 0.125**2) + (0.25 + 0.0625 + 0.75**2)) / 3
    assert m["Brier score"] == pytest.approx(brier)
    assert m["Name coverage"] == pytest.approx((1.0 + 0.8 + 1.0) / 3)
    assert m["Label coverage [%]"] == 50.0
    assert (m["Advised HOLD [%]"], m["Advised BUY [%]"], m["Advised SELL [%]"]) == pytest.approx((200 / 3, 100 / 3, 0))
    # ECE: bins 0.8 (right), 0.75->bin 7 (right), 0.5 (wrong): |0.8-1| + |0.75-1| + |0.5-0|, each weight 1/3
    assert m["ECE [%]"] == pytest.approx(100 * (0.2 + 0.25 + 0.5) / 3)


def test_constant_answer_scores_a_third_of_balanced_accuracy_when_labels_are_mixed():
    probs = np.tile([0.9, 0.05, 0.05, 0, 0, 0], (6, 1))
    label = np.array([0, 0, 0, 0, 1, 2])
    m = outcome_metrics(probs, label)
    assert m["Accuracy [%]"] == pytest.approx(100 * 4 / 6)
    assert m["Balanced accuracy [%]"] == pytest.approx(100 / 3)
    assert label_baselines(label)["Majority accuracy [%]"] == pytest.approx(100 * 4 / 6)


def test_table_when_formatted_has_one_row_per_metric_and_a_column_per_model():
    m = outcome_metrics(np.tile([0.5, 0.3, 0.2, 0, 0, 0], (2, 1)), np.array([0, 1]))
    text = llm_eval_table({"base": m, "fine-tuned": m})
    lines = text.splitlines()
    assert len(lines) == len(METRICS) + 1 and "fine-tuned" in lines[0] and lines[-1].split()[-1] == "2"
