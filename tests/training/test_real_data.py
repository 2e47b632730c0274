"""Phases 1 and 2 train and evaluate on the real ES sample (vendor clock ET + 5 h) without error."""

from __future__ import annotations

import json

from hybrid_trader.cli.main import main

from ..conftest import ES_1MIN, shared_file


def test_phase1_and_phase2_train_and_evaluate_on_real_es_bars(tmp_path, capsys):
    data = str(shared_file(ES_1MIN))
    common = ["--data", data, "--time-shift", "-5", "--timesteps", "8192", "--quiet",
              "--set", "train.validate_every=0", "--set", "ppo.n_steps=1024"]
    assert main(["train", "--phase", "1", "--out", str(tmp_path / "p1"), *common]) == 0
    assert main(["train", "--phase", "2", "--init", str(tmp_path / "p1"), "--out", str(tmp_path / "p2"), *common]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "p2"), "--seeds", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["dates"][1] == "2025-11-14"  # the last ES session is the last test day
    agent = data["metrics"]["agent"]
    assert agent["Days"] >= 5 and "Apex verdict" in agent
    split = json.loads((tmp_path / "p2" / "split.json").read_text())
    assert split["train"][1] <= split["val"][0] <= split["test"][0]
    assert "time_shift: -5" in (tmp_path / "p2" / "config.yaml").read_text()
