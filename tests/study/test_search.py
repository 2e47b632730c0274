"""Searches on Ray Tune: Optuna + ASHA on synthetic data, stopped trials recorded, resume, a malformed space refused,
and the nested walk-forward's selection blind to the test days."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from hybrid_trader.config import ConfigError
from hybrid_trader.data.synthetic import generate_bars
from hybrid_trader.errors import UserError
from hybrid_trader.run.config import SplitConfig
from hybrid_trader.run.market import make_split
from hybrid_trader.study.engine import run_study
from hybrid_trader.study.search import fold_end_idle
from hybrid_trader.study.search_results import (
    FRESH_TEST,
    fold_label,
    selection_of,
    summarize_search,
    write_search_report,
)
from hybrid_trader.study.space import parse_dimension, points
from hybrid_trader.study.spec import load_study
from tests.study.test_study import TINY, study_file

QUIET = {"progress": False, "say": lambda s: None}
SEARCH = {**TINY, "ppo.total_timesteps": 1024, "train.validate_every": 256, "train.validation_sessions": 2}
"""Four validations a trial: ASHA's rungs at 256 and 768 steps."""


def search_file(tmp_path, name="study.yaml", **over) -> str:
    spec = {"base": SEARCH, "seeds": [0], "variants": [{"name": "a", "set": {}}], "search": "optuna",
            "scheduler": "asha", "samples": 4, "sample_seed": 0, "evaluate": {"split": "test", "seeds": 1},
            "space": {"ppo.learning_rate": {"loguniform": [1e-5, 1e-2]}, "ppo.gamma": {"uniform": [0.9, 0.999]}},
            **over}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    root = tmp_path_factory.mktemp("search")
    path = search_file(root)
    summary = run_study(path, root / "out", workers=1, **QUIET)  # one at a time: which trials ASHA stops is fixed
    return root, path, root / "out", summary


def test_an_optuna_asha_search_records_stopped_trials_with_their_step_and_tests_the_selection_once(searched):
    _, _, out, summary = searched
    table = pd.read_parquet(out / "trials.parquet")
    assert len(table) == summary["trials"] == 4 and summary["failed"] == 0
    stopped = table[table["status"] == "stopped"]
    assert len(stopped) >= 1 and summary["stopped"] == len(stopped)  # ASHA stopped some, none dropped
    assert (stopped["steps"] < 1024).all() and stopped["val/net_pnl_per_day"].notna().all()
    finished = table[table["status"] == "finished"]
    assert len(finished) >= 1 and (finished["steps"] == 1024).all()
    assert summary["trial-steps"] < 4 * 1024  # what ASHA saved
    # the points are Optuna's draws within the space, recorded per trial
    assert table["param ppo.learning_rate"].between(1e-5, 1e-2).all()
    assert table["param ppo.gamma"].between(0.9, 0.999).all()
    # the selection: the finished trial best on validation, and only it evaluated on the test days
    fold = summary["folds"][0]
    best = finished.loc[finished["Net PnL [$]"].idxmax(), "trial"]
    assert fold["selected"] == best and fold["test"]["Net PnL [$]"] is not None
    assert table.loc[table["trial"] != best, "test Net PnL [$]"].isna().all()
    assert (out / "trials" / best / "p1" / "eval" / "test").is_dir()
    assert summary["deflated sharpe"]["trials"] == 4  # every trial tried, stopped ones included
    attempts = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert sorted(a["status"] for a in attempts) == sorted(table["status"])
    assert "search" in (out / "report.html").read_text()
    timing = summary["timing"]  # the workers' idle time: Tune's own per trial, and at the fold's end
    assert timing["trials"] == 4 and timing["fold_end_idle_s"] >= 0
    assert timing["tune_overhead_pct"] + timing["fold_end_idle_pct"] == pytest.approx(timing["worker_idle_pct"],
                                                                                     abs=0.11)


def test_the_idle_time_at_a_folds_end_counts_the_workers_free_after_its_last_trial_started():
    # two workers; fold 0: trials [0, 10] and [1, 4], then [4, 6] starts last (at 4); its search ends at 11:
    # from 4 to 11 the workers could give 14 s, its trials ran 6 (4 to 10) + 2 (4 to 6): 6 s idle
    spans = [(0, 0.0, 10.0), (0, 1.0, 4.0), (0, 4.0, 6.0), (1, 12.0, 20.0), (1, 12.5, 20.5)]
    windows = {0: (0.0, 11.0), 1: (11.5, 21.0)}
    assert fold_end_idle(spans, windows, 2) == pytest.approx(6.0 + (2 * 8.5 - 7.5 - 8.0))  # fold 1: 1.5 s
    assert fold_end_idle([(0, 0.0, 5.0), (0, 5.0, 10.0)], {0: (0.0, 11.0)}, 1) == pytest.approx(1.0)  # one worker
    assert fold_end_idle([], windows, 2) == 0.0


def test_a_rerun_skips_finished_and_stopped_trials_and_optuna_proposes_only_the_missing_ones(searched, monkeypatch):
    root, path, out, first = searched

    def boom(*a, **k):
        raise AssertionError("no trial may run again")

    monkeypatch.setattr("hybrid_trader.study.search._run_tune", boom)
    again = run_study(path, out, workers=1, **QUIET)
    assert again["folds"] == first["folds"] and again["trials"] == 4
    monkeypatch.undo()
    gone = next(p for p in sorted((out / "trials").iterdir()) if json.loads((p / "trial.json").read_text())["status"]
                == "stopped")
    (gone / "trial.json").unlink()  # as if the study was interrupted before this trial ended
    before = {p.name: (p / "trial.json").read_text() for p in (out / "trials").iterdir() if (p / "trial.json").exists()}
    resumed = run_study(path, out, workers=1, **QUIET)
    assert resumed["trials"] == 4 and resumed["timing"]["trials"] == 1  # one new proposal, the rest kept
    for name, text in before.items():
        assert (out / "trials" / name / "trial.json").read_text() == text or name == first["folds"][0]["selected"]


@pytest.mark.parametrize(("space", "match"), [
    ({"ppo.learnig_rate": {"loguniform": [1e-5, 1e-3]}}, "Did you mean"),
    ({"ppo.learning_rate": {"loguniform": [1e-3, 1e-5]}}, "low bound must be below"),
    ({"ppo.learning_rate": {"loguniform": [0, 1e-3]}}, "above 0"),
    ({"ppo.learning_rate": {"normal": [0, 1]}}, "not a distribution"),
    ({"ppo.n_steps": {"randint": [64.5, 128]}}, "must be integers"),
    ({"ppo.n_steps": {"choice": []}}, "not a list"),
    ({"ppo.learning_rate": [1e-5, 1e-3]}, "not one distribution"),
    ({"ppo.learning_rate": {"uniform": [-1.0, 1.0]}}, "learning_rate"),  # a value the config itself refuses
    ({"data.bar_minutes": {"randint": [1, 5]}}, "data key takes a choice"),
])
def test_a_malformed_space_is_refused_naming_the_key_and_the_fix(tmp_path, space, match):
    with pytest.raises((UserError, ConfigError), match=match) as err:
        load_study(search_file(tmp_path, space=space))
    text = str(err.value)
    assert "space" in text and getattr(err.value, "fix", None)


@pytest.mark.parametrize(("over", "match"), [
    ({"space": {}}, "need a search space"),
    ({"search": "grid", "scheduler": "none"}, "grid takes choices only"),
    ({"seeds": [0, 1]}, "one seed"),
    ({"hypotheses": [{"name": "h", "variant": "a", "against": "b", "metric": "Net PnL [$]"}],
      "variants": [{"name": "a", "set": {}}, {"name": "b", "set": {}}]}, "judges no hypotheses"),
    ({"base": {**SEARCH, "train.validate_every": 0}}, "validate_every is 0"),
    ({"select": {"metric": "profit"}}, "not a figure"),
    ({"select": {"metric": "Net PnL, fresh days [$]"}}, "evaluate: {fresh_days: true}"),
    ({"reduction_factor": 1}, "1/reduction_factor"),
    ({"grace_period": 300}, "a multiple of train.validate_every"),
    ({"scheduler": "none", "reduction_factor": 2}, "reduction_factor sets ASHA's rungs"),
])
def test_a_search_the_study_cannot_run_is_refused(tmp_path, over, match):
    with pytest.raises((UserError, ConfigError), match=match):
        load_study(search_file(tmp_path, **over))


def test_the_space_is_part_of_the_identity_and_a_plain_study_keeps_its_own(tmp_path):
    a = load_study(search_file(tmp_path))
    b = load_study(search_file(tmp_path, name="b.yaml", space={"ppo.learning_rate": {"loguniform": [1e-5, 1e-3]}}))
    c = load_study(search_file(tmp_path, name="c.yaml", scheduler="none"))
    d = load_study(search_file(tmp_path, name="d.yaml", select={"metric": "Sharpe (ann.)"}))
    assert len({a.identity(), b.identity(), c.identity(), d.identity()}) == 4
    # a study without a space: the identity the code before searches gave it (folders made then stay valid)
    assert load_study(study_file(tmp_path)).identity() == "6b9ee38f1a9a8dd2"
    # a search with ASHA's defaults: the identity it had before they could be set; other values, another study
    assert a.identity() == "9ac25a8df43c53c9"
    assert load_study(search_file(tmp_path, name="e.yaml", reduction_factor=3, grace_period=0)).identity() == \
        a.identity()
    others = {load_study(search_file(tmp_path, name=f"{k}.yaml", **{k: v})).identity()
              for k, v in (("reduction_factor", 2), ("grace_period", 512))}
    assert len(others | {a.identity()}) == 3


def test_an_environment_the_space_reaches_is_checked_before_ray_starts(tmp_path, monkeypatch):
    monkeypatch.setattr("hybrid_trader.study.search._run_tune", lambda *a, **k: pytest.fail("Ray started"))
    path = search_file(tmp_path, search="grid", scheduler="none", space={"env.contracts": {"choice": [1, 100]}})
    with pytest.raises(UserError, match=r"study space \(env.contracts: 100, variant a\).*limit") as err:
        run_study(path, tmp_path / "out", workers=1, **QUIET)
    assert err.value.fix


def test_random_points_are_seeded_per_fold_and_grid_points_are_every_combination(tmp_path):
    spec = load_study(search_file(tmp_path, search="random", scheduler="none", samples=5))
    assert points(spec, 0) == points(spec, 0) != points(spec, 1) and len(points(spec, 0)) == 5
    grid = load_study(search_file(tmp_path, name="g.yaml", search="grid", scheduler="none",
                                  space={"ppo.gamma": {"choice": [0.9, 0.99]}, "ppo.n_epochs": {"choice": [1, 2, 3]}},
                                  variants=[{"name": "a", "set": {}}, {"name": "b", "set": {}}]))
    assert len(points(grid, 0)) == 12 and {p["variant"] for p in points(grid, 0)} == {"a", "b"}
    assert parse_dimension("k", {"randint": [1, 4]}).extremes() == [1, 3]


def test_the_example_search_loads_and_optuna_sees_its_choices_as_indexes():
    from pathlib import Path

    from hybrid_trader.study.space import decode, encode, tune_space

    spec = load_study(Path(__file__).resolve().parents[2] / "examples" / "studies" / "nq_search.yaml")
    assert (spec.search, spec.scheduler, spec.samples, spec.folds) == ("optuna", "asha", 24, 3)
    space = tune_space(spec)
    assert space["ppo.net_arch"].categories == [0, 1, 2]  # Optuna's categories are scalars; the lists come back
    point = {"ppo.learning_rate": 1e-4, "ppo.ent_coef": 1e-3, "ppo.gamma": 0.99, "ppo.n_steps": 1024,
             "ppo.net_arch": [256, 256], "env.target_atr": 3, "env.reward": "sharpe", "data.bar_minutes": 5}
    assert encode(spec, point)["ppo.net_arch"] == 2 and decode(spec, encode(spec, point)) == point


def test_the_example_searchs_control_differs_only_by_its_scheduler():
    from pathlib import Path

    from hybrid_trader.config import to_dict

    folder = Path(__file__).resolve().parents[2] / "examples" / "studies"
    asha, control = (to_dict(load_study(folder / n)) for n in ("nq_search.yaml", "nq_search_no_asha.yaml"))
    assert (asha.pop("scheduler"), control.pop("scheduler")) == ("asha", "none")
    assert {**asha, "name": None} == {**control, "name": None}


def test_the_example_search_with_a_longer_grace_period_differs_only_by_its_validation_interval():
    from pathlib import Path

    from hybrid_trader.config import to_dict

    folder = Path(__file__).resolve().parents[2] / "examples" / "studies"
    asha, grace = (to_dict(load_study(folder / n)) for n in ("nq_search.yaml", "nq_search_grace90k.yaml"))
    assert (asha["base"].pop("train.validate_every"), grace["base"].pop("train.validate_every")) == (30000, 90000)
    assert {**asha, "name": None} == {**grace, "name": None}


def test_the_replayed_search_is_one_fold_of_the_example_as_a_random_search_without_a_scheduler():
    from pathlib import Path

    from hybrid_trader.config import to_dict

    folder = Path(__file__).resolve().parents[2] / "examples" / "studies"
    example, replay = (to_dict(load_study(folder / n)) for n in ("nq_search.yaml", "nq_search_replay.yaml"))
    differ = ("name", "folds", "search", "scheduler")
    assert [replay[k] for k in differ] == ["nq-search-replay", 1, "random", "none"]
    assert {k: v for k, v in example.items() if k not in differ} == {k: v for k, v in replay.items() if k not in differ}
    # its companions: the replay's best setting run for real, the whole month at every validation, and the month's
    # days each from a fresh account (validation and selection)
    asha, full, fresh = (to_dict(load_study(folder / n)) for n in ("nq_search_replay_asha.yaml",
                                                                    "nq_search_replay_fullval.yaml",
                                                                    "nq_search_replay_fresh.yaml"))
    assert (asha.pop("scheduler"), asha.pop("reduction_factor"), asha.pop("grace_period")) == ("asha", 2, 60_000)
    assert [d["base"].pop("train.validation_sessions") for d in (replay, asha, full, fresh)] == [5, 5, 23, 23]
    assert (fresh["base"].pop("train.validation_account"), fresh["select"].pop("metric"),
            fresh["evaluate"].pop("fresh_days")) == ("fresh", "Net PnL, fresh days [$]", True)
    for d in (replay, asha, full):
        d["select"].pop("metric")
        d["evaluate"].pop("fresh_days")
    mine = ("name", "scheduler", "reduction_factor", "grace_period")
    same = {k: v for k, v in replay.items() if k not in mine}
    for other in (asha, full, fresh):
        assert {k: v for k, v in other.items() if k not in mine} == same


def test_the_selection_reads_validation_figures_only(tmp_path):
    spec = load_study(search_file(tmp_path, select={"metric": "Max drawdown [$]", "mode": "min"}))
    rows = [{"trial": "c000-s0-f0", "fold": 0, "sample": 0, "status": "finished", "Max drawdown [$]": 900.0,
             "test": {"Max drawdown [$]": 10.0}},
            {"trial": "c001-s0-f0", "fold": 0, "sample": 1, "status": "finished", "Max drawdown [$]": 500.0,
             "test": {"Max drawdown [$]": 5000.0}},
            {"trial": "c002-s0-f0", "fold": 0, "sample": 2, "status": "stopped", "Max drawdown [$]": 1.0}]
    assert selection_of(spec, rows, 0)["trial"] == "c001-s0-f0"
    assert selection_of(spec, rows, 1) is None


@pytest.mark.parametrize(("over", "labels"), [
    ({"folds": 0, "base": {**SEARCH, "split.folds": 3, "split.fold": 2}}, ["0 (split.fold 2)"]),  # a later fold alone
    ({"folds": 2}, ["0", "1"]),  # the study's own folds are the data's
])
def test_a_searchs_folds_name_the_datas_fold_they_searched(tmp_path, over, labels):
    spec = load_study(search_file(tmp_path, **over))
    rows = [{"trial": f"c000-s0-f{k}", "fold": k, "sample": 0, "status": "finished", "variant": "a",
             "Net PnL [$]": 1.0, "test": {"Net PnL [$]": 2.0}} for k in range(len(labels))]
    summary = summarize_search(spec, rows, {k: f"c000-s0-f{k}" for k in range(len(labels))}, {"attempts": 1})
    assert [fold_label(f) for f in summary["folds"]] == labels
    assert [f["split fold"] for f in summary["folds"]] == ([2] if over["folds"] == 0 else [0, 1])
    report = write_search_report(tmp_path, spec, summary, pd.DataFrame(rows))
    assert all(f"<td>{label}</td>" in report.read_text() for label in labels)


def _bars_file(path, perturb: bool) -> list[str]:
    """14 synthetic days as a CSV; ``perturb``: the test days' prices moved (twice as far from their first open).
    Returns the test days."""
    bars = generate_bars(days=14, seed=3, edge=0.3)
    split = make_split(bars.n_sessions, SplitConfig(), bars.session_dates)
    test = np.isin(bars.session_id, list(split.part("test")))
    frame = bars.frame.copy()
    if perturb:
        cols = ["open", "high", "low", "close"]
        p0 = float(frame.loc[test, "open"].iloc[0])
        frame.loc[test, cols] = p0 + 2.0 * (frame.loc[test, cols] - p0)
    frame.rename_axis("timestamp").to_csv(path)
    return sorted({str(d) for d in np.asarray(bars.session_dates)[list(split.part("test"))]})


def test_the_test_days_never_inform_the_selection(tmp_path):
    """The same random search on the same bars but for its test days: the same trials, validation figures and
    selection; only the selection's test figures move."""
    summaries = []
    for perturb in (False, True):
        root = tmp_path / ("moved" if perturb else "plain")
        root.mkdir()
        test_days = _bars_file(root / "bars.csv", perturb)
        base = {**{k: v for k, v in SEARCH.items() if k != "data.synthetic_days"}, "data.path": str(root / "bars.csv"),
                "train.validate_every": 0, "env.reward_scale": 20.0}  # the default reads every day's ATR (below)
        path = search_file(root, base=base, search="random", scheduler="none", samples=2,
                           evaluate={"split": "test", "seeds": 1, "fresh_days": True},
                           select={"metric": "Net PnL, fresh days [$]", "mode": "max"})
        summaries.append((run_study(path, root / "out", workers=2, **QUIET),
                          pd.read_parquet(root / "out" / "trials.parquet")))
    (plain, t0), (moved, t1) = summaries
    assert plain["finished"] == moved["finished"] == 2
    assert plain["folds"][0]["selected"] == moved["folds"][0]["selected"]
    for col in ("Net PnL [$]", "val/net_pnl_per_day", "Trades", "Net PnL, fresh days [$]"):  # every trial's
        assert t0[col].tolist() == t1[col].tolist()  # validation, unchanged
    assert plain["folds"][0]["test"]["Net PnL [$]"] != moved["folds"][0]["test"]["Net PnL [$]"]
    assert test_days and not math.isnan(plain["selected on test"]["Net PnL [$]"]["mean"])
    # the selection's test days, each from a fresh account: every test day, beside momentum's, with CIs
    fresh, moved_fresh = (s[FRESH_TEST] for s in (plain, moved))
    assert fresh["days"] == len(test_days) and (fresh["first"], fresh["last"]) == (test_days[0], test_days[-1])
    agent, momentum = fresh["agent mean day [$]"], fresh["momentum mean day [$]"]
    assert agent["mean"] * fresh["days"] == pytest.approx(plain["folds"][0]["test"]["Net PnL, fresh days [$]"])
    assert fresh["agent - momentum, paired by day [$]"]["mean"] == pytest.approx(agent["mean"] - momentum["mean"])
    assert momentum["mean"] != moved_fresh["momentum mean day [$]"]["mean"]  # the moved days, traded fresh
    assert "Each test day from a fresh account" in (root / "out" / "report.html").read_text()


def test_confirm_and_replicate_refuse_a_search_naming_what_to_do_instead(tmp_path):
    from hybrid_trader.errors import UserError
    from hybrid_trader.study.confirm import confirm_study
    from hybrid_trader.study.replicate import replicate_study

    path = search_file(tmp_path)
    later = tmp_path / "later.csv"
    later.write_text("time,open,high,low,close,volume\n")
    with pytest.raises(UserError, match="is a search") as err:
        confirm_study(path, tmp_path / "out", later, progress=False, say=lambda s: None)
    assert "hybrid-trader evaluate" in str(err.value) and "--split all" in str(err.value)
    with pytest.raises(UserError, match="is a search") as err:
        replicate_study(path, tmp_path / "out", workers=1, progress=False, say=lambda s: None)
    assert "sample_seed" in str(err.value)
    assert not (tmp_path / "out").exists()  # refused before anything ran or was written
