"""Walk-forward folds by calendar month (split.unit: month)."""

from __future__ import annotations

import pytest

from hybrid_trader.config import merge_overrides
from hybrid_trader.errors import UserError
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import make_split
from hybrid_trader.run.splits import month_folds

DATES_2024 = [f"2024-{m:02d}-{d:02d}" for m in range(1, 13) for d in (2, 9, 16, 23)]  # 4 sessions a month


def split_cfg(**keys):
    return merge_overrides(RunConfig(), {f"split.{k}": v for k, v in keys.items()}).split


def test_folds_train_six_months_validate_the_seventh_test_the_eighth_then_roll_by_a_month():
    folds = month_folds(DATES_2024, 6, 1, 1)
    assert len(folds) == 5  # tests in August .. December
    first = folds[0]
    assert (DATES_2024[first.train.start], DATES_2024[first.train.stop - 1]) == ("2024-01-02", "2024-06-23")
    assert [DATES_2024[i][:7] for i in first.val] == ["2024-07"] * 4
    assert [DATES_2024[i][:7] for i in first.test] == ["2024-08"] * 4
    assert DATES_2024[folds[1].train.start] == "2024-02-02" and DATES_2024[folds[-1].test.start] == "2024-12-02"
    for f in folds:  # never a test day before a training or validation day
        assert f.train.stop <= f.val.start and f.val.stop <= f.test.start


def test_make_split_picks_the_fold_when_unit_is_month():
    split = make_split(len(DATES_2024), split_cfg(unit="month", fold=2), DATES_2024)
    assert DATES_2024[split.test.start][:7] == "2024-10"


def test_more_folds_than_the_data_holds_are_refused_naming_how_many_fit():
    with pytest.raises(UserError, match="fit 5 fold"):
        make_split(len(DATES_2024), split_cfg(unit="month", folds=6, fold=5), DATES_2024)
    with pytest.raises(UserError, match="fit 0 fold"):
        make_split(8, split_cfg(unit="month"), DATES_2024[:8])


def test_month_counts_below_one_are_refused():
    with pytest.raises(UserError, match="split months"):
        split_cfg(unit="month", train_months=0)
