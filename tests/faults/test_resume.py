"""Resume you can predict: contradicting options refused, targets recorded, finished runs left alone,
results of an older model marked stale."""

from __future__ import annotations

import json
import shutil

import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.config import load_yaml_config
from hybrid_trader.run.config import RunConfig
from tests.faults.helpers import fingerprint, log_steps, train_args


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run = tmp_path_factory.mktemp("finished") / "run"
    assert main(train_args(run, 512, "--quiet")) == 0
    assert main(["evaluate", str(run), "--seeds", "1"]) == 0
    return run


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def test_resume_refuses_each_contradicting_option_naming_it_when_given(run, capsys):
    before = fingerprint(run)
    code = main(["train", "--out", str(run), "--resume", "--phase", "2", "--seed", "7", "--n-envs", "3",
                 "--set", "ppo.gamma=0.9", "--timesteps", "1024"])
    assert code == 2
    err = capsys.readouterr().err
    for text in ("env.phase: the run has 1, given 2", "ppo.seed: the run has 0, given 7",
                 "ppo.n_envs: the run has 2, given 3", "ppo.gamma: the run has 0.99, given 0.9"):
        assert text in err, (text, err)
    assert "total_timesteps" not in err
    assert fingerprint(run) == before


def test_resume_refuses_other_data_when_given(run, tmp_path, capsys):
    bars = tmp_path / "NQ_other.csv"
    bars.write_text("timestamp,open,high,low,close,volume\n")
    assert main(["train", "--out", str(run), "--resume", "--data", str(bars)]) == 2
    assert f"data.path: the run has None, given '{bars}'" in capsys.readouterr().err


def test_resume_of_a_finished_run_changes_nothing_when_no_larger_target_is_given(run, capsys):
    before = fingerprint(run)
    assert main(["train", "--out", str(run), "--resume", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "already finished 512 steps" in err and "nothing changed" in err and "--timesteps N" in err
    assert fingerprint(run) == before


def test_new_target_is_recorded_and_old_results_marked_stale_when_resumed(run, capsys):
    old_results = (run / "eval" / "test" / "results.json").read_bytes()
    assert main(["train", "--out", str(run), "--resume", "--timesteps", "1024", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "target recorded: 512 -> 1,024" in err and "marked stale" in err
    assert load_yaml_config(run / "config.yaml", RunConfig).ppo.total_timesteps == 1024
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["target_timesteps"] == 1024 and status["total_timesteps"] >= 1024
    assert (run / "eval" / "test" / "STALE.json").exists()
    assert (run / "eval" / "test" / "results.json").read_bytes() == old_results, "kept, marked, not lost"
    steps = log_steps(run / "progress.jsonl")
    assert steps == sorted(steps) and steps[-1] >= 1024
    assert [p for p in (run / "tb").iterdir() if p.is_dir()] == [], "one TensorBoard run, no new run folder"

    # a later --resume does not train on to the old target, nor retrain the finished run
    model = (run / "model.zip").read_bytes()
    assert main(["train", "--out", str(run), "--resume", "--quiet"]) == 0
    assert "already finished" in capsys.readouterr().err
    assert (run / "model.zip").read_bytes() == model

    # the report of a stale evaluation evaluates the new model first, saying so
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "evaluation of an older model" in out and "evaluating it first" in out
    assert not (run / "eval" / "test" / "STALE.json").exists()
    info = json.loads((run / "eval" / "test" / "results.json").read_text())["info"]
    assert info["model_sha256"] == json.loads((run / "manifest.json").read_text())["files"]["model.zip"]["sha256"]


def test_resumed_tensorboard_purges_events_past_the_checkpoint_when_continued(run):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    assert main(["train", "--out", str(run), "--resume", "--timesteps", "768", "--quiet"]) == 0
    files = sorted((run / "tb").glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
    assert len(files) == 2
    starts = [e for e in EventFileLoader(str(files[-1])).Load() if e.HasField("session_log")]
    assert starts and starts[0].session_log.status == starts[0].session_log.START and starts[0].step == 512


def test_a_run_trained_on_a_relative_data_path_is_used_from_any_directory_when_it_moves_on(tmp_path, monkeypatch,
                                                                                         capsys):
    from hybrid_trader.data.synthetic import generate_bars

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    generate_bars(12, seed=5).frame.tz_convert("America/New_York").tz_localize(None).to_csv(
        project / "NQ_bars.csv", index_label="timestamp")
    run = tmp_path / "runs" / "r"
    monkeypatch.chdir(project)
    assert main(train_args(run, 256, "--quiet", "--data", "NQ_bars.csv")) == 0
    saved = load_yaml_config(run / "config.yaml", RunConfig)
    assert saved.data.path == str(project / "NQ_bars.csv")  # recorded absolute
    monkeypatch.chdir(elsewhere)
    assert main(["evaluate", str(run), "--seeds", "1"]) == 0  # found from another directory
    own = run / "eval" / "test" / "results.json"
    assert own.exists()
    # the same file named by a relative path is the run's own data: not a conflict, not another folder
    monkeypatch.chdir(project)
    capsys.readouterr()
    assert main(["train", "--out", str(run), "--resume", "--data", "NQ_bars.csv", "--timesteps", "512",
                 "--quiet"]) == 0
    assert main(["evaluate", str(run), "--data", "NQ_bars.csv", "--seeds", "1"]) == 0
    assert f"results: {run / 'eval' / 'test'}" in capsys.readouterr().out
    assert sorted(p.name for p in (run / "eval").iterdir()) == ["test"]
