"""A study never exits 0 when a trial failed, and a variant a trial would refuse is refused before Ray starts."""

from __future__ import annotations

import json

import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.cli.study import EXIT_ALL_FAILED
from hybrid_trader.errors import UserError
from hybrid_trader.study.engine import run_study
from hybrid_trader.study.trials import _MARKETS, TRIALS
from tests.study.test_study import study_file


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("Ray must not start for a study refused before its trials")

    monkeypatch.setattr("hybrid_trader.study.engine._ray_init", refuse)


@pytest.mark.parametrize("sets, message, key", [
    ({"env.contracts": 100}, "exceeds the apex-legacy/50K limit", "env.contracts: 100 (variant bad)"),
    ({"split.train": 0.98, "split.val": 0.01, "split.test": 0.01}, "cannot be split", "split.val: 0.01 (variant bad)"),
    ({"data.path": "/no/such/NQ_bars.csv"}, "not found", "data.path: '/no/such/NQ_bars.csv' (variant bad)"),
])
def test_a_variant_a_trial_would_refuse_is_refused_before_ray_naming_the_variant_and_key(tmp_path, no_ray, sets,
                                                                                          message, key):
    path = study_file(tmp_path, variants=[{"name": "ok", "set": {}}, {"name": "bad", "set": sets}])
    with pytest.raises(UserError) as err:
        run_study(path, tmp_path / "out", workers=1, progress=False, say=lambda s: None)
    text = str(err.value)
    assert "study variant bad (phase 1)" in text and message in text and key in text, text
    assert not (tmp_path / "out" / TRIALS).exists()
    assert not _MARKETS, "the driver keeps no market once the variants are checked"


def _fail_every_trial(spec, todo, out, workers, address, progress, bars):
    """Ray's stand-in: every trial fails as a trial records a failure (trial.json with its error)."""
    for t in todo:
        folder = out / TRIALS / t.slug
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "trial.json").write_text(json.dumps({"variant": t.variant, "seed": t.seed, "fold": t.fold,
                                                       "trial": t.slug, "status": "failed",
                                                       "error": "RuntimeError: boom", "seconds": 0.0}))
    return {}


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_study_in_which_every_trial_failed_exits_with_its_own_code(tmp_path, monkeypatch, capsys, json_flag):
    monkeypatch.setattr("hybrid_trader.study.engine._run_on_ray", _fail_every_trial)
    code = main(["study", study_file(tmp_path), "--out", str(tmp_path / "out"), "--no-progress", *json_flag])
    assert code == EXIT_ALL_FAILED == 4
    err = capsys.readouterr().err
    assert "4 of 4 trial(s) did not finish" in err and "slow-s0-f0: RuntimeError: boom" in err
