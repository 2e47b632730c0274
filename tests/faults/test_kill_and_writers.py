"""kill -9 at several points of training, then resume; two writers at once; no half-made runs."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from stable_baselines3.common.callbacks import BaseCallback

from hybrid_trader.cli.main import main
from hybrid_trader.config import merge_overrides
from hybrid_trader.evaluation.runner import validation_fn
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.lock import FolderLock
from hybrid_trader.training.runner import TrainHooks, train_run
from tests.faults.helpers import fingerprint, kill9, log_steps, start_training, steps_done, train_args, wait_for


def _last_checkpoint(run) -> int:
    steps = [int(p.stem.split("_")[1]) for p in (run / "checkpoints").glob("step_*.zip")]
    return max(steps) if steps else -1


def test_resume_after_kill_9_drops_rows_past_the_checkpoint_and_never_goes_back(tmp_path, capsys):
    run = tmp_path / "run"
    proc = start_training(run, 100_000, "--set", "train.checkpoint_every=512")
    wait_for(proc, lambda: _last_checkpoint(run) >= 512
             and max(log_steps(run / "progress.jsonl")) > _last_checkpoint(run))
    kill9(proc)
    ckpt = _last_checkpoint(run)
    keep = {name: (run / name).read_bytes() for name in ("config.yaml", "split.json")}

    # killed again while resuming, at a later point
    proc = start_training(run, 100_000, "--resume", "--set", "train.checkpoint_every=512")
    wait_for(proc, lambda: _last_checkpoint(run) > ckpt)
    kill9(proc)
    ckpt = _last_checkpoint(run)

    target = ckpt + 512
    code = main(["train", "--out", str(run), "--resume", "--timesteps", str(target), "--quiet"])
    assert code == 0
    err = capsys.readouterr().err
    assert f"target recorded: 100,000 -> {target:,}" in err
    steps = log_steps(run / "progress.jsonl")
    assert steps == sorted(steps) and steps[-1] >= target
    assert {name: (run / name).read_bytes() for name in ("split.json",)} == {"split.json": keep["split.json"]}
    assert [p for p in (run / "tb").iterdir() if p.is_dir()] == []
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_kill_9_before_the_first_checkpoint_says_how_to_start_again(tmp_path, capsys):
    run = tmp_path / "run"
    proc = start_training(run, 100_000, "--set", "train.checkpoint_every=100000")
    wait_for(proc, lambda: steps_done(run) >= 0 and json.loads((run / "status.json").read_text())["state"] == "running")
    kill9(proc)
    before = fingerprint(run)
    fix = f"mv {run} {run}.failed && hybrid-trader train --config {run}.failed/config.yaml --out {run}"
    assert main(["train", "--out", str(run), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "no valid checkpoint to resume from: training stopped before its first checkpoint" in err and fix in err
    assert main(["train", *train_args(run, 256)[1:]]) == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and fix in err
    assert fingerprint(run) == before
    # the printed commands work
    shutil.move(run, f"{run}.failed")
    assert main(["train", "--config", f"{run}.failed/config.yaml", "--out", str(run), "--timesteps", "256",
                 "--quiet"]) == 0


def test_second_writer_is_refused_naming_the_pid_while_a_run_trains(tmp_path, capsys):
    run = tmp_path / "run"
    proc = start_training(run, 100_000)
    try:
        wait_for(proc, lambda: _last_checkpoint(run) >= 256)
        assert main(["train", "--out", str(run), "--resume", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"being written by another process (PID {proc.pid}: train)" in err and f"kill {proc.pid}" in err
        assert main(train_args(run, 256)) == 2
        assert "is not empty" in capsys.readouterr().err
        assert main(["diagnose", str(run)]) in (0, 1), "read-only commands still work"
        assert "Traceback" not in capsys.readouterr().err
    finally:
        kill9(proc)
    steps = log_steps(run / "progress.jsonl")
    assert steps == sorted(steps), "only one writer's rows"


def test_second_evaluation_into_the_same_folder_is_refused_naming_the_pid(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(train_args(run, 256, "--quiet")) == 0
    (run / "eval" / "test").mkdir(parents=True)
    with FolderLock(run / "eval" / "test", "evaluate test"):
        assert main(["evaluate", str(run), "--seeds", "1"]) == 2
    assert f"PID {os.getpid()}: evaluate test" in capsys.readouterr().err


def test_without_phase_a_new_run_is_phase_1_as_help_says(tmp_path, capsys):
    args = [a for a in train_args(tmp_path / "run", 256) if a not in ("--phase", "1")]
    assert main(args) == 0
    assert "phase 1 (no --phase given)" in capsys.readouterr().out
    assert "phase: 1" in (tmp_path / "run" / "config.yaml").read_text()


@pytest.mark.parametrize("setting,message", [
    ("env.rules=nope", "unknown rules preset 'nope'"),
    ("data.synthetic_days=2", "at least 6 sessions are needed"),
    ("env.account=1K", "account size '1K' does not exist"),
])
def test_errors_found_before_the_folder_leave_nothing_behind(tmp_path, capsys, setting, message):
    run = tmp_path / "run"
    assert main(train_args(run, 256, "--set", setting)) == 2
    assert message in capsys.readouterr().err
    assert not run.exists()
    assert main(train_args(run, 256, "--quiet")) == 0, "the same --out works afterwards"


class FailAt(BaseCallback):
    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.steps:
            raise RuntimeError("simulated crash")
        return True


def _tiny() -> RunConfig:
    return merge_overrides(RunConfig(), {"data.synthetic_days": 12, "ppo.n_steps": 128, "ppo.batch_size": 128,
                                         "ppo.n_envs": 2, "ppo.n_epochs": 1, "train.validate_every": 0,
                                         "train.checkpoint_every": 256, "train.progress_bar": False,
                                         "env.phase": 1, "ppo.total_timesteps": 1024})


def test_a_crash_before_the_first_checkpoint_removes_only_the_folder_it_created(tmp_path):
    with pytest.raises(RuntimeError):
        train_run(_tiny(), tmp_path / "new", quiet=True,
                  hooks=TrainHooks(extra_callbacks=[FailAt(100)], validation=validation_fn))
    assert not (tmp_path / "new").exists()
    (tmp_path / "given").mkdir()
    with pytest.raises(RuntimeError):
        train_run(_tiny(), tmp_path / "given", quiet=True, hooks=TrainHooks(extra_callbacks=[FailAt(100)]))
    assert (tmp_path / "given").is_dir(), "a folder this process did not create is never removed"


def test_a_crash_after_a_checkpoint_keeps_the_run_and_says_it_failed(tmp_path):
    with pytest.raises(RuntimeError):
        train_run(_tiny(), tmp_path / "run", quiet=True, hooks=TrainHooks(extra_callbacks=[FailAt(600)]))
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "failed" and (tmp_path / "run" / "checkpoints" / "step_000000512.zip").exists()
