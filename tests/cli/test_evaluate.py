"""``hybrid-trader evaluate``: what it prints and keeps of the days traded from a fresh account."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from hybrid_trader.cli.main import main


def test_fresh_days_print_the_mean_days_beside_momentums_with_intervals_and_keep_each_day(tmp_path, tiny_trained,
                                                                                         capsys):
    source = tiny_trained[0]
    shutil.copytree(source.parent / "p1", tmp_path / "p1")  # evaluate writes RUN/eval: a copy of the session's run
    run = tmp_path / "p2"
    shutil.copytree(source, run)
    assert main(["evaluate", str(run), "--split", "test", "--seeds", "1", "--fresh-days"]) == 0
    out = capsys.readouterr().out
    results = json.loads((run / "eval" / "test" / "results.json").read_text())
    agent = next(s for s in results["strategies"] if s.get("extra", {}).get("role") == "agent")["extra"]
    days = agent["fresh_day_pnl"]
    assert len(days["dates"]) == len(days["agent"]) == len(days["momentum"]) == agent["fresh_days"]["Days, fresh"]
    assert sum(days["agent"]) == pytest.approx(agent["fresh_days"]["Net PnL, fresh days [$]"])
    assert days["dates"] == sorted(days["dates"])
    header = f"{len(days['dates'])} days ({days['dates'][0]} to {days['dates'][-1]}), each from a fresh account"
    assert header in out
    printed = {}
    for label in ("agent mean day [$]", "momentum mean day [$]", "agent - momentum, paired by day [$]"):
        line = next(x for x in out.splitlines() if x.strip().startswith(label))
        mean, low, high = (float(v.replace(",", "")) for v in re.findall(r"-?[\d,]+\.\d\d", line))
        assert low <= mean <= high, line
        printed[label] = mean
    assert printed["agent mean day [$]"] == pytest.approx(np.mean(days["agent"]), abs=0.006)
    assert printed["momentum mean day [$]"] == pytest.approx(np.mean(days["momentum"]), abs=0.006)
    assert printed["agent - momentum, paired by day [$]"] == pytest.approx(
        np.mean(days["agent"]) - np.mean(days["momentum"]), abs=0.006)
