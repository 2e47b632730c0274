"""Every run file truncated or deleted in turn, then evaluate or resume: a named error or a said fallback.

Each case asserts the exit code, the message, and that nothing else in the run changed.
"""

from __future__ import annotations

import shutil

import pytest

from hybrid_trader.cli.main import main
from tests.faults.helpers import fingerprint, log_steps, train_args


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run: checkpoints at 256, 512 and 768 steps, model.zip, vecnormalize.pkl."""
    run = tmp_path_factory.mktemp("finished") / "run"
    assert main(train_args(run, 768, "--quiet")) == 0
    return run


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def _damage(path, how: str) -> None:
    if how == "delete":
        path.unlink()
    else:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


EVALUATE = ["evaluate", "{run}", "--seeds", "1"]
RESUME = ["train", "--out", "{run}", "--resume", "--timesteps", "1024", "--quiet"]

ERRORS = [
    ("model.zip", "truncate", EVALUATE, ["model.zip", "damaged", "fix:"]),
    ("model.zip", "delete", EVALUATE, ["model.zip", "missing", "fix:"]),
    ("vecnormalize.pkl", "truncate", EVALUATE, ["vecnormalize.pkl", "damaged", "fix:"]),
    ("vecnormalize.pkl", "delete", EVALUATE, ["vecnormalize.pkl", "normalisation file missing", "wrong results"]),
    ("config.yaml", "truncate", EVALUATE, ["config.yaml", "damaged"]),
    ("config.yaml", "delete", EVALUATE, ["has no config.yaml"]),
    ("manifest.json", "truncate", EVALUATE, ["manifest.json", "damaged", "delete"]),
    ("status.json", "truncate", RESUME, ["status.json", "damaged"]),
    ("status.json", "delete", RESUME, ["has no status.json"]),
    ("split.json", "truncate", RESUME, ["split.json", "damaged"]),
    ("config.yaml", "truncate", RESUME, ["config.yaml", "damaged"]),
]


@pytest.mark.parametrize("name,how,command,expected", ERRORS, ids=[f"{e[0]}-{e[1]}-{e[2][0]}" for e in ERRORS])
def test_damaged_file_is_a_named_exit_2_error_when_loaded(run, capsys, name, how, command, expected):
    _damage(run / name, how)
    before = fingerprint(run)
    assert main([a.format(run=run) for a in command]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, (text, err)
    assert fingerprint(run) == before, "nothing else in the run was changed"


@pytest.mark.parametrize("damaged", ["step_000000768.zip", "step_000000768_vecnormalize.pkl"])
def test_resume_falls_back_to_the_newest_valid_checkpoint_when_the_newest_is_damaged(run, capsys, damaged):
    _damage(run / "checkpoints" / damaged, "truncate")
    assert main([a.format(run=run) for a in RESUME]) == 0
    out = capsys.readouterr().err
    assert "skipping damaged checkpoints" in out and damaged.split("_vec")[0].removesuffix(".zip") in out
    assert "resuming from the newest valid checkpoint, step_000000512.zip (step 512)" in out
    steps = log_steps(run / "progress.jsonl")
    assert steps == sorted(steps) and steps[-1] >= 1024
    assert steps.count(768) == 1, "the rows the damaged checkpoint's run wrote past step 512 were dropped"


def test_resume_without_any_valid_checkpoint_says_how_to_start_again(run, capsys):
    for p in (run / "checkpoints").iterdir():
        _damage(p, "truncate")
    before = fingerprint(run)
    assert main([a.format(run=run) for a in RESUME]) == 2
    err = capsys.readouterr().err
    assert "no valid checkpoint" in err
    assert f"mv {run} {run}.failed && hybrid-trader train --config {run}.failed/config.yaml --out {run}" in err
    assert fingerprint(run) == before


def test_resume_drops_a_log_line_cut_short_when_the_writer_was_killed(run, capsys):
    with open(run / "progress.jsonl", "a") as f:
        f.write('{"time/total_timesteps": 10')
    assert main([a.format(run=run) for a in RESUME]) == 0
    steps = log_steps(run / "progress.jsonl")
    assert steps == sorted(steps) and steps[-1] >= 1024
