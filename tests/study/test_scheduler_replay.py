"""Early stopping replayed on a finished search (``study.scheduler_replay``): Tune's ASHA decision for decision,
successive halving by hand, and a replay that predicts what a real ASHA search stops."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from ray.tune.schedulers.async_hyperband import _Bracket
from ray.tune.schedulers.trial_scheduler import TrialScheduler

from hybrid_trader.errors import UserError
from hybrid_trader.study.engine import run_study
from hybrid_trader.study.scheduler_replay import (
    REPLAY,
    Curve,
    _asha_continues,
    asha_rungs,
    replay_asha,
    replay_sha,
    replay_study,
)
from hybrid_trader.study.spec import load_study
from tests.study.test_search import QUIET, search_file


@pytest.mark.parametrize(("grace", "rf", "max_t"), [(30_000, 3, 606_210), (30_000, 2, 600_002), (90_000, 3, 600_002),
                                                     (256, 3, 2050), (150_000, 4, 600_002)])
def test_the_rungs_are_tunes_own(grace, rf, max_t):
    bracket = _Bracket(grace, max_t, rf, 0)
    assert asha_rungs(grace, rf, max_t) == sorted(int(m) for m, _ in bracket._rungs)


@pytest.mark.parametrize("seed", range(5))
def test_each_decision_is_tunes_on_the_same_reports_in_the_same_order(seed):
    """Random reports of 10 trials (NaN values, rungs jumped over, reports past the last rung), interleaved at
    random: the replay stops exactly the reports Tune's bracket stops."""
    rng = np.random.default_rng(seed)
    rf = [2, 3, 4][seed % 3]
    rungs = asha_rungs(100, rf, 2000)
    bracket = _Bracket(100, 2000, rf, 0)
    recorded: dict[int, list[float]] = {m: [] for m in rungs}
    pending = []
    for _ in range(10):
        steps = np.cumsum(rng.choice([50, 100, 150, 400], size=8))
        values = rng.normal(size=8)
        values[rng.random(8) < 0.1] = np.nan
        pending.append([(int(s), float(v)) for s, v in zip(steps, values, strict=True)])
    judged: dict[int, set[int]] = {t: set() for t in range(10)}
    stopped: set[int] = set()
    decisions = 0
    while live := [t for t in range(10) if pending[t] and t not in stopped]:
        t = int(rng.choice(live))  # a random interleaving; each trial's reports in its own order
        step, value = pending[t].pop(0)
        tune_says = bracket.on_result(SimpleNamespace(trial_id=str(t)), step, value)
        ours = _asha_continues(recorded, judged[t], rungs, step, value, rf)
        assert ours == (tune_says == TrialScheduler.CONTINUE), (t, step, value)
        decisions += 1
        if not ours:
            stopped.add(t)
    assert stopped and decisions > 20


def _curves(finals: list[float], series: list[list[float]], every: int = 100, seconds: float = 10.0) -> list[Curve]:
    steps = every * len(series[0])
    return [Curve({"trial": f"c{i:03d}-s0-f0", "sample": i, "fold": 0, "status": "finished", "steps": steps,
                   "seconds": seconds, "Net PnL [$]": final, "val/net_pnl_per_day": final / 20},
                  tuple((every * (k + 1), v) for k, v in enumerate(values)))
            for i, (final, values) in enumerate(zip(finals, series, strict=True))]


@pytest.fixture
def spec(tmp_path):
    return load_study(search_file(tmp_path, search="random", scheduler="none"))


def test_successive_halving_keeps_the_best_half_at_each_rung_and_counts_the_steps_of_the_stopped(spec):
    # four trials, a validation every 100 steps to 400; rungs (rf 2) at 100 and 200
    curves = _curves([10.0, 50.0, 30.0, 20.0],
                     [[1.0, 1.0, 1.0, 1.0], [0.0, 9.0, 9.0, 9.0], [3.0, 3.0, 3.0, 3.0], [2.0, 0.0, 0.0, 0.0]])
    out = replay_sha(spec, curves, [100, 200], 2)
    # at 100: c002 (3) and c003 (2) go on; at 200: c002 (3) goes on
    assert out.stopped == {"c000-s0-f0": 100, "c001-s0-f0": 100, "c003-s0-f0": 200}
    assert out.steps == 100 + 100 + 400 + 200 and out.full_steps == 1600
    assert (out.selected, out.control) == ("c002-s0-f0", "c001-s0-f0")  # the best at the end trailed at 100
    assert not out.kept
    flat = replay_sha(spec, _curves([5.0, 1.0], [[2.0, 2.0], [1.0, 1.0]]), [100], 2)
    assert flat.kept and flat.stopped == {"c001-s0-f0": 100} and flat.selected == flat.control == "c000-s0-f0"


def test_asha_on_one_worker_judges_each_trial_against_those_before_it(spec):
    # one worker: c000 first at every rung (nothing recorded: it goes on); c001 below c000 at 100 (rf 2: the median
    # of one value is that value): stopped; c002 above the median of (1, 0) at 100 and above c000's 1 at 200; c003
    # above the median of (1, 0, 3) at 100, then below the median of (1, 3) at 200: stopped there
    curves = _curves([10.0, 50.0, 30.0, 20.0],
                     [[1.0, 1.0, 1.0, 1.0], [0.0, 9.0, 9.0, 9.0], [3.0, 3.0, 3.0, 3.0], [1.5, 0.0, 0.0, 0.0]])
    out = replay_asha(spec, curves, [100, 200], 2, workers=1)
    assert out.stopped == {"c001-s0-f0": 100, "c003-s0-f0": 200}
    assert out.steps == 400 + 100 + 400 + 200
    assert out.selected == "c002-s0-f0" and out.control == "c001-s0-f0" and not out.kept


def test_the_replay_refuses_what_it_cannot_replay(tmp_path):
    path = search_file(tmp_path)  # scheduler: asha
    with pytest.raises(UserError, match="scheduler: none"):
        run = tmp_path / "out" / "trials" / "c000-s0-f0"
        run.mkdir(parents=True)
        (run / "trial.json").write_text(json.dumps({"trial": "c000-s0-f0", "status": "finished", "fold": 0,
                                                    "sample": 0, "steps": 10}))
        replay_study(path, tmp_path / "out")
    with pytest.raises(UserError, match="no trials to replay"):
        replay_study(search_file(tmp_path, name="n.yaml", scheduler="none"), tmp_path / "missing")


@pytest.mark.slow  # 75-110 s: a real ASHA search beside its replay (make test-slow)
def test_a_replayed_asha_stops_the_trials_a_real_asha_search_stops(tmp_path):
    """The same random search (the same points) run without a scheduler, replayed, and run with ASHA (reduction
    factor 2, the first rung at the second validation; one worker, so the order is fixed): the replay's stopped
    trials, their steps and the selection are the real search's."""
    control = search_file(tmp_path, name="control.yaml", search="random", scheduler="none", samples=5)
    run_study(control, tmp_path / "control", workers=1, **QUIET)
    record = replay_study(control, tmp_path / "control", workers=1)
    assert json.loads((tmp_path / "control" / REPLAY).read_text()) == record
    asha = search_file(tmp_path, name="asha.yaml", search="random", scheduler="asha", samples=5, reduction_factor=2,
                       grace_period=512)
    summary = run_study(asha, tmp_path / "asha", workers=1, **QUIET)
    table = pd.read_parquet(tmp_path / "asha" / "trials.parquet")
    stopped = table[table["status"] == "stopped"]
    real = {str(t): int(s) for t, s in zip(stopped["trial"], stopped["steps"], strict=True)}
    setting = next(s for s in record["settings"]
                   if (s["scheduler"], s["reduction_factor"], s["grace_period"]) == ("asha", 2, 512))
    replayed = setting["per_fold"]["0"]
    assert real and replayed["stopped"] == real
    assert replayed["selected"] == summary["folds"][0]["selected"]
    assert replayed["steps"] == summary["trial-steps"]
    assert record["trials"] == 5 and len(record["settings"]) == 2 * 3 * 4
    for s in record["settings"]:
        assert 0.0 <= s["saved_pct"] <= 100.0 and s["folds"] == 1
    assert all(r is None or -1.0 <= r <= 1.0 for r in record["rung_spearman"]["0"].values())
    assert not math.isnan(replayed["control_value"])
