"""Every trial records the machine and libraries it ran on; the summary says when trials ran on several."""

from __future__ import annotations

import json

import pandas as pd
import torch

from hybrid_trader.study.fingerprint import fingerprint, fingerprint_summary, make_deterministic


def test_the_fingerprint_names_cpu_libraries_threads_and_determinism():
    before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    try:
        make_deterministic(threads=1)
        fp = fingerprint()
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1])
    assert fp["torch_threads"] == 1 and fp["deterministic_algorithms"] is True
    assert fp["cpu"] and fp["torch_cpu_capability"] and fp["python"].startswith("3.")
    assert {"torch", "numpy", "stable-baselines3", "sb3-contrib", "gymnasium"} <= set(fp["libraries"])
    assert fp["libraries"]["torch"] == torch.__version__ and len(fp["id"]) == 12


def test_the_summary_warns_when_trials_ran_on_different_fingerprints():
    fp = fingerprint()
    other = {**fp, "torch_cpu_capability": "AVX2", "id": "0123456789ab"}
    rows = [{"status": "finished", "fingerprint": fp}, {"status": "finished", "fingerprint": fp},
            {"status": "finished", "fingerprint": other}, {"status": "finished"}]
    out = fingerprint_summary(rows)
    assert out["distinct"] == 3 and out["by id"][fp["id"]]["trials"] == 2
    assert "torch_cpu_capability" in out["warning"] and "1 trial(s) recorded none" in out["warning"]
    assert "warning" not in fingerprint_summary(rows[:2])


def test_each_trial_of_a_study_records_its_fingerprint(tiny):
    _, _, out = tiny
    record = json.loads((out / "trials" / "slow-s0-f0" / "trial.json").read_text())
    fp = record["fingerprint"]
    assert fp["torch_threads"] == 1 and fp["deterministic_algorithms"] is True  # set in the trial's worker
    assert set(pd.read_parquet(out / "trials.parquet")["fingerprint"]) == {fp["id"]}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fingerprints"]["distinct"] == 1 and "warning" not in summary["fingerprints"]


def test_the_code_version_names_the_package_and_its_commit_when_in_a_checkout():
    import re

    from hybrid_trader.study.fingerprint import code_label, code_version

    code = code_version()
    assert code["version"] and code_label(code).startswith(code["version"])
    assert code["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", code["commit"])
    assert code["changes"] is None or re.fullmatch(r"[0-9a-f]{12}", code["changes"])
    assert code_label(None) is None
