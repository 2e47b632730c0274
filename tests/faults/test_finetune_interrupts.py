"""Issue 24, case 4 and the NaN loss: fine-tuning resumes exactly after Ctrl-C as after kill -9.

Before: a Ctrl-C arriving inside a step left the optimiser stepped (or the sampler advanced)
with the step uncounted, and saved that as the checkpoint: the resumed history differed.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.finetune.lora import FinetuneConfig, Trainer
from hybrid_trader.finetune.pipeline import finetune_run
from hybrid_trader.hindsight.labels import LabelConfig
from tests.finetune.conftest import gemma_dir, make_run, tiny_model  # noqa: F401 - session fixtures used here

TINY = dict(lr=1e-2, rank=4, batch=4, eval_every=2, checkpoint_every=2, val_examples=8, seed=3)
LABELS = LabelConfig(horizon=30)


def losses(result) -> list[float]:
    return [row["train_loss"] for row in result.history if "train_loss" in row]


@pytest.mark.parametrize("interrupt", ["ctrl_c", "kill"])
def test_resume_is_exact_when_interrupted_inside_a_step(tmp_path, tiny_model, monkeypatch, interrupt):  # noqa: F811
    straight, _, _ = finetune_run(make_run(tmp_path / "straight", str(tiny_model)), FinetuneConfig(steps=6, **TINY),
                                  LABELS, progress=False)
    run = make_run(tmp_path / "cut", str(tiny_model))
    real_step = Trainer.step
    calls = {"n": 0}

    def step_then_signal(self, rows):
        loss = real_step(self, rows)  # the optimiser has stepped: a signal now lands inside the step
        calls["n"] += 1
        if calls["n"] == 3:
            if interrupt == "ctrl_c":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                raise SystemExit("killed")  # kill -9: nothing after this line of the step runs
        return loss

    monkeypatch.setattr(Trainer, "step", step_then_signal)
    if interrupt == "ctrl_c":
        cut, _, _ = finetune_run(run, FinetuneConfig(steps=6, **TINY), LABELS, progress=False)
        assert cut.interrupted and cut.step == 3
    else:
        with pytest.raises(SystemExit):
            finetune_run(run, FinetuneConfig(steps=6, **TINY), LABELS, progress=False)
    monkeypatch.setattr(Trainer, "step", real_step)
    resumed, _, _ = finetune_run(run, FinetuneConfig(steps=6, **TINY), LABELS, resume=True, progress=False)
    assert resumed.step == 6
    np.testing.assert_allclose(losses(resumed), losses(straight), rtol=1e-5)


def test_a_nan_loss_stops_finetuning_naming_the_step(tmp_path, tiny_model, monkeypatch):  # noqa: F811
    run = make_run(tmp_path / "run", str(tiny_model))
    real_step = Trainer.step
    calls = {"n": 0}

    def diverging(self, rows):
        calls["n"] += 1
        return float("nan") if calls["n"] == 2 else real_step(self, rows)

    monkeypatch.setattr(Trainer, "step", diverging)
    with pytest.raises(UserError, match="loss is nan at step 2"):
        finetune_run(run, FinetuneConfig(steps=4, **TINY), LABELS, progress=False)


def test_an_infinite_learning_rate_is_refused_before_training():
    with pytest.raises(UserError, match="lr inf must be a finite number > 0"):
        FinetuneConfig(lr=float("inf"))
