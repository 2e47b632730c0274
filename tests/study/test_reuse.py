"""``study --reuse OTHER``: the trials a new study shares with another study's folder are copied, not run again,
each only when it is the very computation the new study would run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from hybrid_trader.errors import UserError
from hybrid_trader.study.engine import run_study
from hybrid_trader.study.fingerprint import code_label, code_version
from hybrid_trader.study.reuse import reuse_into
from tests.study.conftest import QUIET


def _with(path, tmp_path, name="study.yaml", **change):
    """The tiny study's file with ``change`` applied (``variants`` replaced, other keys set), written anew."""
    spec = yaml.safe_load(Path(path).read_text())
    spec.update(change)
    new = tmp_path / name
    new.write_text(yaml.safe_dump(spec))
    return str(new), spec


def test_a_variant_added_to_a_finished_study_runs_alone_and_the_shared_trials_are_copied(tiny, tmp_path):
    _, path, old = tiny
    spec = yaml.safe_load(Path(path).read_text())
    study, _ = _with(path, tmp_path, variants=spec["variants"] + [{"name": "mid", "set": {"ppo.learning_rate": 5e-4}}])
    out = tmp_path / "bigger"
    said: list[str] = []
    taken = reuse_into(study, out, old, say=said.append)
    assert sorted(t.slug for t in taken) == ["fast-s0-f0", "slow-s0-f0"]
    assert "reused 2 of 3 trials" in said[0] and "mid-s0-f0: not finished there" in said[0]
    summary = run_study(study, out, workers=1, progress=False, say=said.append)
    assert any("2 finished before, 1 to run" in line for line in said)  # (the fixture may hold confirmations too)
    assert summary["finished"] == 3 and summary["reused"] == 2
    new, before = pd.read_parquet(out / "trials.parquet"), pd.read_parquet(old / "trials.parquet")
    for slug in ("fast-s0-f0", "slow-s0-f0"):  # the same figures, to the bit
        assert new.set_index("trial").loc[slug, "Net PnL [$]"] == before.set_index("trial").loc[slug, "Net PnL [$]"]
        record = json.loads((out / "trials" / slug / "trial.json").read_text())
        assert record["reused_from"] == str(old / "trials" / slug)
        # the copy's records name its own folder, never the old one
        for f in (out / "trials" / slug).rglob("*.json"):
            if f.name != "trial.json":
                assert str(old) not in f.read_text(), f
    attempts = [json.loads(x) for x in (out / "attempts.jsonl").read_text().splitlines()]
    assert sorted(a["trial"] for a in attempts) == ["fast-s0-f0", "mid-s0-f0", "slow-s0-f0"]  # the DSR counts 3
    assert sum(1 for a in attempts if a.get("reused_from")) == 2
    assert summary["deflated sharpe"]["trials"] == 3


def test_a_trial_of_another_configuration_machine_or_evaluation_is_not_reused(tiny, tmp_path):
    _, path, old = tiny
    spec = yaml.safe_load(Path(path).read_text())
    fast = [{**v, "set": {"ppo.learning_rate": 2e-3}} if v["name"] == "fast" else v for v in spec["variants"]]
    study, _ = _with(path, tmp_path, variants=fast)
    said: list[str] = []
    taken = reuse_into(study, tmp_path / "other-config", old, say=said.append)
    assert [t.slug for t in taken] == ["slow-s0-f0"]
    assert "fast-s0-f0: phase 1 configuration differs (ppo.learning_rate)" in said[0]
    # a trial that ran on another machine: its fingerprint names another CPU
    src = tmp_path / "elsewhere"
    shutil.copytree(old, src)
    record = json.loads((src / "trials" / "slow-s0-f0" / "trial.json").read_text())
    record["fingerprint"]["cpu"] = "another CPU"
    (src / "trials" / "slow-s0-f0" / "trial.json").write_text(json.dumps(record))
    said.clear()
    taken = reuse_into(path, tmp_path / "other-machine", src, say=said.append)
    assert [t.slug for t in taken] == ["fast-s0-f0"] and "another machine" in said[0]
    # a trial that ran with other code: its record names another commit
    src = tmp_path / "other-commit"
    shutil.copytree(old, src)
    record = json.loads((src / "trials" / "slow-s0-f0" / "trial.json").read_text())
    assert record["code"] == code_version()  # every trial records the code that computed it
    record["code"] = {**record["code"], "commit": "0" * 40}
    (src / "trials" / "slow-s0-f0" / "trial.json").write_text(json.dumps(record))
    said.clear()
    taken = reuse_into(path, tmp_path / "other-code", src, say=said.append)
    assert [t.slug for t in taken] == ["fast-s0-f0"]
    assert f"slow-s0-f0: ran with other code ({code_label(record['code'])}; here" in said[0]
    # another evaluation: none of its trials is this study's
    study, _ = _with(path, tmp_path, name="eval.yaml", evaluate={"split": "val", "seeds": 1})
    with pytest.raises(UserError, match="evaluate differ"):
        reuse_into(study, tmp_path / "other-eval", old, say=said.append)
    with pytest.raises(UserError, match="own folder"):
        reuse_into(path, old, old, say=said.append)


def test_reuse_never_writes_into_a_folder_of_another_study(tiny, tmp_path):
    _, path, old = tiny
    study, _ = _with(path, tmp_path, seeds=[1])
    with pytest.raises(UserError, match="holds another study"):
        reuse_into(study, old, tmp_path, **{k: v for k, v in QUIET.items() if k == "say"})


def test_a_reused_trials_confirmations_come_with_it_and_a_failed_one_does_not(tiny, tmp_path):
    _, path, old = tiny
    src = tmp_path / "first"
    shutil.copytree(old, src, ignore=shutil.ignore_patterns("confirm-*"))
    later = src / "confirm-later"
    (later / "trials").mkdir(parents=True)
    (later / "confirm.json").write_text(json.dumps({"path": "/data/later.csv", "sha256": "abc"}))
    evaluation = str(src / "trials" / "fast-s0-f0" / "p1" / "eval" / "later-1234" / "all")
    (later / "trials" / "fast-s0-f0.json").write_text(json.dumps({"trial": "fast-s0-f0", "status": "finished",
                                                                  "evaluation": evaluation}))
    (later / "trials" / "slow-s0-f0.json").write_text(json.dumps({"trial": "slow-s0-f0", "status": "failed"}))
    out = tmp_path / "again"
    said: list[str] = []
    reuse_into(path, out, src, say=said.append)
    copied = json.loads((out / "confirm-later" / "trials" / "fast-s0-f0.json").read_text())
    assert copied["evaluation"] == str(out / "trials" / "fast-s0-f0" / "p1" / "eval" / "later-1234" / "all")
    assert not (out / "confirm-later" / "trials" / "slow-s0-f0.json").exists()  # evaluated again by --confirm
    assert json.loads((out / "confirm-later" / "confirm.json").read_text())["sha256"] == "abc"
    assert "1 confirmation(s)" in said[-1]
    said.clear()
    reuse_into(path, out, src, say=said.append)  # again: nothing new to take
    assert said == [f"reused 0 of 0 trials from {src}"]
