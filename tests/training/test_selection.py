"""train.select: best_val and train.early_stop_patience (``training.selection``)."""

from __future__ import annotations

import json

import pytest

from hybrid_trader.config import ConfigError
from hybrid_trader.run import RunDir
from hybrid_trader.training.runner import TrainHooks, train_run
from hybrid_trader.training.selection import METRIC
from tests.training.conftest import student_cfg


def scripted(values: list[float], seen: list[int]):
    """A validation factory whose n-th validation reports ``values[n]`` as the validation P&L per day."""

    def factory(market, config):
        def evaluate(model):
            seen.append(int(model.num_timesteps))
            return {METRIC: values[min(len(seen) - 1, len(values) - 1)], "val/trades": 1}

        return evaluate

    return factory


def cfg(steps: int = 1024, **extra):
    return student_cfg(2, steps, **{"train.validate_every": 256, **extra})


def test_best_val_keeps_the_model_of_the_best_validation_when_later_ones_are_worse(student_market, tmp_path):
    seen: list[int] = []
    run_dir = tmp_path / "run"
    status = train_run(cfg(**{"train.select": "best_val"}), run_dir, market=student_market, quiet=True,
                       hooks=TrainHooks(validation=scripted([1.0, 5.0, 2.0, 3.0], seen)))
    assert seen == [256, 512, 768, 1024]
    run = RunDir(run_dir)
    assert status["selected_step"] == 512 and status["best_val"] == {"step": 512, METRIC: 5.0}
    assert run.model_path.read_bytes() == run.best_model_path.read_bytes()
    assert run.vecnormalize_path.read_bytes() == run.best_vecnormalize_path.read_bytes()
    last = run.checkpoints()[-1]
    assert last.step == 1024 and last.model.read_bytes() != run.model_path.read_bytes()
    run.verified(run.model_path, fix="")  # the manifest records the selected model


def test_last_is_kept_when_select_is_last(student_market, tmp_path):
    seen: list[int] = []
    status = train_run(cfg(), tmp_path / "run", market=student_market, quiet=True,
                       hooks=TrainHooks(validation=scripted([1.0, 5.0, 2.0, 3.0], seen)))
    run = RunDir(tmp_path / "run")
    assert "selected_step" not in status and status["best_val"]["step"] == 512
    assert not run.best_model_path.exists()
    assert status["total_timesteps"] == 1024


def test_training_stops_early_when_validation_stops_improving(student_market, tmp_path):
    seen: list[int] = []
    status = train_run(cfg(2048, **{"train.early_stop_patience": 2}), tmp_path / "run", market=student_market,
                       quiet=True, hooks=TrainHooks(validation=scripted([3.0, 1.0, 2.0, 9.0], seen)))
    assert seen == [256, 512, 768]
    assert status["early_stopped"] is True and status["total_timesteps"] < 2048
    assert json.loads(RunDir(tmp_path / "run").best_path.read_text())["since"] == 2


def test_resume_goes_on_from_the_best_so_far_when_continued(student_market, tmp_path):
    run_dir = tmp_path / "run"
    first: list[int] = []
    train_run(cfg(512, **{"train.select": "best_val"}), run_dir, market=student_market, quiet=True,
              hooks=TrainHooks(validation=scripted([4.0, 1.0], first)))
    again: list[int] = []
    status = train_run(cfg(1024, **{"train.select": "best_val"}), run_dir, resume=True, market=student_market,
                       quiet=True, hooks=TrainHooks(validation=scripted([2.0, 3.0], again)))
    assert again == [768, 1024]
    assert status["selected_step"] == 256  # the first run's best (4.0) was never beaten


@pytest.mark.parametrize("field, value", [("select", "best_val"), ("early_stop_patience", 3)])
def test_selection_is_refused_when_nothing_validates(field, value):
    with pytest.raises(ConfigError, match="validate_every"):
        student_cfg(2, 256, **{f"train.{field}": value, "train.validate_every": 0})
