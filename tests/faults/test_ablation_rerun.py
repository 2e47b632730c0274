"""Issue 24, case 3 and the ablation's bad input: a rerun never records settings it did not run.

Before: a rerun with other steps or another student reused the finished runs and wrote the new
settings into ablation.json and the report; run paths were relative to the working directory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.ablation import run_ablation


@pytest.fixture(scope="module")
def ablation(tmp_path_factory, student_p2):
    out = tmp_path_factory.mktemp("abl") / "out"
    run_ablation(student_p2, out, timesteps=256, seeds=(0,), split="test", say=lambda s: None)
    return out


def test_rerun_with_other_steps_is_refused_naming_the_setting_when_runs_exist(ablation, student_p2, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(ablation, out)
    before = (out / "ablation.json").read_text()
    with pytest.raises(UserError,
                       match="(?s)trained with other settings.*ppo.total_timesteps: the run has 256, given 512"):
        run_ablation(student_p2, out, timesteps=512, seeds=(0,), split="test", say=lambda s: None)
    assert (out / "ablation.json").read_text() == before  # nothing claims the new settings


def test_rerun_with_another_student_is_refused_naming_it(ablation, student_p2, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(ablation, out)
    other = tmp_path / "other.pt"
    shutil.copy(student_p2 / "advice" / "student.pt", other)
    with pytest.raises(UserError, match="llm.student.path"):
        run_ablation(student_p2, out, timesteps=256, seeds=(0,), split="test", student=str(other),
                     say=lambda s: None)


def test_recorded_paths_are_absolute_when_given_relative(ablation, student_p2, tmp_path, monkeypatch):
    shutil.copytree(ablation, tmp_path / "out")
    monkeypatch.chdir(tmp_path)
    run_ablation(student_p2, Path("out"), timesteps=256, seeds=(0,), split="test", say=lambda s: None)
    saved = json.loads((tmp_path / "out" / "ablation.json").read_text())
    assert Path(saved["p2_run"]).is_absolute() and Path(saved["student"]).is_absolute()


@pytest.mark.parametrize("args, message", [
    (["--ablation-steps", "0"], "--ablation-steps 0: give 1 or more"),
    (["--ablation", "{run}"], "is a run directory"),
    (["--ablation", "{file}"], "is a file, not a folder"),
])
def test_bad_ablation_options_are_exit_2_with_the_fix(student_p2, tmp_path, capsys, args, message):
    (tmp_path / "f.txt").write_text("x")
    args = [a.format(run=student_p2, file=tmp_path / "f.txt") for a in args]
    if "--ablation" not in args:
        args += ["--ablation", str(tmp_path / "abl")]
    assert main(["evaluate", str(student_p2), *args]) == 2
    assert message in capsys.readouterr().err
