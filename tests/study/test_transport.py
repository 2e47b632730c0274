"""A trial's transport: paths resolved at the driver, its folder back as bytes, landed whole by the driver."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest

from hybrid_trader.run.config import DataConfig
from hybrid_trader.run.files import Manifest
from hybrid_trader.study.transport import (
    absolute_paths,
    carried,
    data_key,
    land_trial,
    pack,
    study_bars,
    unpack,
)
from hybrid_trader.study.trials import Trial, forget_markets, market_for, trial_task
from tests.study.test_study import TINY


def test_relative_data_paths_are_made_absolute_at_the_driver_and_keep_their_bars_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = {"base": {"data.path": "data/NQ.csv", "ppo.seed": 1},
            "variants": [{"name": "a", "set": {"data.pool": ["../ES.csv", "/abs/NQ2.csv"]}}, {"name": "b"}]}
    out = absolute_paths(spec)
    assert out["base"] == {"data.path": str(tmp_path / "data" / "NQ.csv"), "ppo.seed": 1}
    assert out["variants"][0]["set"]["data.pool"] == [str(tmp_path.parent / "ES.csv"), "/abs/NQ2.csv"]
    assert out["variants"][1]["set"] == {} and spec["base"]["data.path"] == "data/NQ.csv"  # the study's own untouched
    # the driver keys the bars it ships by the relative config, a trial looks them up by the absolute one
    assert data_key(DataConfig(path="data/NQ.csv")) == data_key(DataConfig(path=str(tmp_path / "data/NQ.csv")))
    assert data_key(DataConfig(path="data/NQ.csv")) != data_key(DataConfig(path="data/NQ.csv", bar_minutes=5))


def test_an_archive_reaching_outside_its_folder_is_refused(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(ValueError, match="escaped"):
        unpack(buf.getvalue(), tmp_path / "in")
    assert not (tmp_path / "escaped.txt").exists()


def test_the_driver_lands_a_returned_trial_whole_and_its_record_last(tmp_path):
    out = tmp_path / "study"
    old = out / "trials" / "a-s0-f0"
    (old / "p1").mkdir(parents=True)
    (old / "p1" / "model.zip").write_bytes(b"old model")
    (old / "stale.txt").write_text("from a failed attempt")
    work = tmp_path / "worker"
    (work / "p1").mkdir(parents=True)
    (work / "p1" / "model.zip").write_bytes(b"new model")
    (work / "p2").mkdir()
    (work / "p2" / "model.zip").write_bytes(b"p2")
    (work / "trial.json").write_text("the worker's own copy")
    folder = land_trial(out, "a-s0-f0", {"status": "finished", "seconds": 1.0}, pack(work, skip=("trial.json",)))
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "p1/model.zip", "p2/model.zip", "trial.json"]
    assert (folder / "p1" / "model.zip").read_bytes() == b"new model"
    assert json.loads((folder / "trial.json").read_text())["status"] == "finished"
    # a lost worker returns no files: the folder stays, the failure is recorded
    land_trial(out, "a-s0-f0", {"status": "failed", "error": "worker lost"}, None)
    assert (folder / "p2" / "model.zip").exists() and json.loads((folder / "trial.json").read_text())["status"] \
        == "failed"


def test_a_retry_carries_only_the_phases_an_earlier_attempt_finished(tmp_path):
    (tmp_path / "p1").mkdir()
    (tmp_path / "p1" / "model.zip").write_bytes(b"m")
    (tmp_path / "p2").mkdir()  # killed before its model
    (tmp_path / "p2" / "config.yaml").write_text("x")
    back = tmp_path / "back"
    unpack(carried(tmp_path), back)
    assert [p.relative_to(back).as_posix() for p in sorted(back.rglob("*"))] == ["p1", "p1/model.zip"]
    assert carried(tmp_path / "p2") is None


def test_a_trial_task_runs_from_the_shipped_bars_in_a_scratch_folder_it_removes(tmp_path, monkeypatch):
    """The data file is gone when the trial runs (as on a worker without it): the shipped bars are used."""
    from hybrid_trader.data.synthetic import generate_bars

    csv = tmp_path / "NQ_bars.csv"
    generate_bars(days=14, seed=2, edge=0.3).frame.rename_axis("timestamp").to_csv(csv)
    base = {**{k: v for k, v in TINY.items() if k != "data.synthetic_days"}, "data.path": str(csv),
            "data.bar_minutes": 3}
    spec = {"base": base, "seeds": [0], "variants": [{"name": "a", "set": {}}], "evaluate": {"verdict": "none"}}
    bars = study_bars([DataConfig(path=str(csv), bar_minutes=3)])
    csv.unlink()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    forget_markets()
    try:
        row, files = trial_task(spec, Trial("a", 0, 0), None, bars, str(tmp_path / "out" / "trials" / "a-s0-f0"))
    finally:
        forget_markets()
    assert row["status"] == "finished", row.get("error")
    assert not [n for n in os.listdir(tmp_path / "scratch") if n.startswith("hybrid-trader-trial-")]
    landed = land_trial(tmp_path / "out", "a-s0-f0", row, files)
    assert (landed / "p1" / "model.zip").exists()
    # its records name where it landed, not the worker's scratch folder, and their checksums still hold
    assert not [p for p in landed.rglob("*.json") if "hybrid-trader-trial-" in p.read_text()]
    results = json.loads((landed / "p1" / "eval" / "test" / "results.json").read_text())
    assert results["info"]["run_dir"] == str(landed / "p1")
    assert Manifest(landed / "p1" / "eval" / "test").problem(landed / "p1" / "eval" / "test" / "results.json") is None


def test_a_worker_kept_between_studies_builds_its_market_from_each_studys_own_load_of_a_file(tmp_path):
    """On a Ray its caller keeps, a worker outlives a study: a file rewritten before the next study is traded as
    that study loaded it, not as the market the worker built from the earlier load."""
    from hybrid_trader.data.synthetic import generate_bars
    from hybrid_trader.run.config import RunConfig

    csv = tmp_path / "NQ_bars.csv"
    config = RunConfig(data=DataConfig(path=str(csv)))
    markets = []
    forget_markets()
    try:
        for seed in (1, 2):  # the same path, other bars
            generate_bars(days=14, seed=seed).frame.rename_axis("timestamp").to_csv(csv)
            markets.append(market_for(config, study_bars([config.data])))
        again = market_for(config, {data_key(config.data): study_bars([config.data])[data_key(config.data)]})
    finally:
        forget_markets()
    first, second = (m.bars.frame["close"].to_numpy() for m in markets)
    assert not (len(first) == len(second) and (first == second).all())
    assert (again.bars.frame["close"].to_numpy() == second).all()  # a third load of the unchanged file: its bars
