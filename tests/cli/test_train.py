"""``hybrid-trader train``: what a new run takes from its ``--init`` run."""

from __future__ import annotations

from pathlib import Path

from hybrid_trader.cli.main import build_parser
from hybrid_trader.cli.train import data_from_init, resolve_config
from hybrid_trader.env import EnvConfig
from hybrid_trader.run.config import DataConfig, RunConfig
from hybrid_trader.run.rundir import RunDir


def phase1_run(tmp_path: Path) -> tuple[Path, Path]:
    """A phase 1 run folder (its config only) trained on a Chicago CSV."""
    csv = tmp_path / "NQ_bars.csv"
    csv.write_text("timestamp,open,high,low,close,volume\n")
    run = tmp_path / "p1"
    run.mkdir()
    config = RunConfig(data=DataConfig(path=str(csv), tz="America/Chicago"), env=EnvConfig(phase=1))
    RunDir(run).save_config(config, header="phase 1 test run")
    return run, csv


def resolved(argv: list[str], init: Path):
    args = build_parser().parse_args(["train", "--phase", "2", "--init", str(init), *argv])
    return data_from_init(args, resolve_config(args), init)


def test_new_phase_trains_on_the_init_runs_data_when_the_command_names_none(tmp_path, capsys):
    run, csv = phase1_run(tmp_path)
    config = resolved([], run)
    assert config.data.path == str(csv) and config.data.tz == "America/Chicago" and config.env.phase == 2
    assert f"data and split from --init {run}: {csv}" in capsys.readouterr().out


def test_new_phase_keeps_its_own_data_when_the_command_names_some(tmp_path):
    run, _ = phase1_run(tmp_path)
    other = tmp_path / "ES_bars.csv"
    assert resolved(["--data", str(other)], run).data.path == str(other)
    assert resolved(["--tz", "UTC"], run).data.path is None  # the synthetic market, as asked by the flags given
    (tmp_path / "c.yaml").write_text("data:\n  synthetic_days: 20\n")
    assert resolved(["--config", str(tmp_path / "c.yaml")], run).data.path is None


def test_a_new_split_keeps_the_init_runs_bars_and_says_so(tmp_path, capsys):
    run, csv = phase1_run(tmp_path)
    config = resolved(["--set", "split.folds=3", "--set", "split.fold=1"], run)
    assert config.data.path == str(csv) and config.data.tz == "America/Chicago"  # the init run's bars and options
    assert (config.split.folds, config.split.fold) == (3, 1)  # the new split
    out = capsys.readouterr().out
    assert f"data from --init {run}: {csv}, with the new split (folds 3, fold 1, shares 0.7/0.15/0.15)" in out
    (tmp_path / "s.yaml").write_text("split:\n  unit: month\n  train_months: 2\n")
    config = resolved(["--config", str(tmp_path / "s.yaml")], run)
    assert config.data.path == str(csv) and (config.split.unit, config.split.train_months) == ("month", 2)
    assert "with the new split (2+1+1 months per fold)" in capsys.readouterr().out
