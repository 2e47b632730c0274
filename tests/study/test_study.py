"""Studies on Ray: a small real study (2 workers), resumability, failures recorded, bad input refused."""

from __future__ import annotations

import json
import math
import os
import socket
from datetime import datetime, timedelta

import pandas as pd
import pytest
import yaml

from hybrid_trader.cli.main import main
from hybrid_trader.cli.study import EXIT_SOME_FAILED
from hybrid_trader.errors import UserError
from hybrid_trader.study.engine import run_study, trials_of
from hybrid_trader.study.spec import load_study
from hybrid_trader.study.stats import (
    bootstrap_ci,
    deflated_sharpe_ratio,
    expected_max_sharpe,
    fresh_day_comparison,
    paired_difference,
)

TINY = {"data.synthetic_days": 14, "ppo.total_timesteps": 256, "ppo.n_steps": 128, "ppo.batch_size": 128,
        "ppo.n_envs": 2, "ppo.n_epochs": 1, "train.validate_every": 0, "train.progress_bar": False,
        "train.checkpoint_every": 100_000}


def study_file(tmp_path, **over) -> str:
    spec = {"base": TINY, "seeds": [0, 1], "evaluate": {"split": "test", "seeds": 1},
            "variants": [{"name": "slow", "set": {"ppo.learning_rate": 1e-4}},
                         {"name": "fast", "set": {"ppo.learning_rate": 1e-3}}], **over}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    out = root / "out"
    prop = {"split": "test", "seeds": 1, "prop": {"pass_value": 1000.0},  # what a pass is worth, from the study file
            "fresh_days": True}
    summary = run_study(study_file(root, evaluate=prop), out, workers=2, progress=False, say=lambda s: None)
    return root, out, summary


def test_a_small_study_runs_every_trial_on_two_workers_and_tabulates_them(finished):
    _, out, summary = finished
    assert summary["trials"] == 4 and summary["finished"] == 4 and summary["failed"] == 0
    table = pd.read_parquet(out / "trials.parquet")
    assert sorted(table["trial"]) == ["fast-s0-f0", "fast-s1-f0", "slow-s0-f0", "slow-s1-f0"]
    assert table["Net PnL [$]"].notna().all()
    fast = summary["paired vs baseline"]["fast"]
    assert fast["pairs"] == 2 and not math.isnan(fast["Net PnL [$]"]["mean difference"])
    assert summary["timing"]["workers"] == 2 and summary["timing"]["wall_s"] > 0
    assert "Paired with the baseline" in (out / "report.html").read_text()
    # the prop-firm verdict of every trial (sequential attempts by default), summarised per variant
    assert table["Pass rate [%]"].between(0, 100).all() and (table["Attempts"] >= 1).all()
    assert "Pass rate [%] (flat)" in table.columns
    assert not math.isnan(summary["variants"]["fast"]["figures"]["Pass rate [%]"]["mean"])
    assert "Pass rate [%]" in fast
    # evaluate.prop.pass_value reaches every trial's verdict: pass rate x 1000 - the mean fee of an attempt
    fees = (167.0 + 80.0 * (table["Attempts"] - 1)) / table["Attempts"]
    expected = table["Pass rate [%]"] / 100.0 * 1000.0 - fees
    assert (table["Expected outcome per attempt [$]"] - expected).abs().max() < 1e-6
    # evaluate.fresh_days: each trial's days also traded from a fresh account, the figures a selection may name
    assert table["Net PnL, fresh days [$]"].notna().all() and (table["Breached days, fresh"] >= 0).all()
    assert (table["Mean day, fresh [$]"] * table["Days"] - table["Net PnL, fresh days [$]"]).abs().max() < 1e-6


def test_the_verdicts_fees_and_pass_value_are_part_of_the_identity_only_when_set(tmp_path):
    plain = load_study(study_file(tmp_path))
    same = load_study(study_file(tmp_path, evaluate={"split": "test", "seeds": 1, "prop": {}}))
    worth = load_study(study_file(tmp_path, evaluate={"split": "test", "seeds": 1, "prop": {"pass_value": 3000}}))
    assert plain.identity() == same.identity() != worth.identity()
    assert worth.evaluate.prop.pass_value == 3000
    with pytest.raises(UserError, match="pass_value"):
        load_study(study_file(tmp_path, evaluate={"prop": {"pass_value": -1}}))


def test_fresh_day_figures_are_part_of_the_identity_only_when_traded_and_named_only_then(tmp_path):
    plain = load_study(study_file(tmp_path))
    off = load_study(study_file(tmp_path, evaluate={"split": "test", "seeds": 1, "fresh_days": False}))
    fresh = load_study(study_file(tmp_path, evaluate={"split": "test", "seeds": 1, "fresh_days": True}))
    assert plain.identity() == off.identity() != fresh.identity()
    named = {"hypotheses": [{"name": "h", "variant": "fast", "against": "slow", "metric": "Mean day, fresh [$]"}]}
    with pytest.raises(UserError, match="fresh_days: true"):
        load_study(study_file(tmp_path, **named))
    assert load_study(study_file(tmp_path, evaluate={"fresh_days": True}, **named)).hypotheses[0].metric == \
        "Mean day, fresh [$]"


def test_a_rerun_skips_finished_trials_and_a_failing_trial_is_recorded_without_stopping(finished, monkeypatch):
    root, out, _ = finished

    def boom(*a, **k):
        raise AssertionError("no trial may run again")

    monkeypatch.setattr("hybrid_trader.study.engine._run_on_ray", boom)
    again = run_study(str(root / "study.yaml"), out, workers=2, progress=False, say=lambda s: None)
    assert again["finished"] == 4


def test_a_trial_that_crashes_is_recorded_with_its_error_and_the_others_finish(tmp_path, capsys):
    """An LLM server that does not answer fails its trial at start-up (the variants' check before Ray starts no
    back end); the other trial finishes, and the study exits 3."""
    path = study_file(tmp_path, phases=[2, 3], seeds=[0], base={**TINY, "llm.backend": "mock"},
                      variants=[{"name": "ok", "set": {}},
                                {"name": "broken", "set": {"llm.backend": "openai",
                                                           "llm.openai.base_url": "http://127.0.0.1:1/v1"}}])
    code = main(["study", path, "--out", str(tmp_path / "out"), "--workers", "2", "--no-progress", "--json"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["finished"] == 1 and summary["failed"] == 1
    assert "cannot reach the LLM server" in summary["errors"][0]["error"]
    assert (tmp_path / "out" / "trials" / "broken-s0-f0" / "traceback.txt").exists()
    assert code == EXIT_SOME_FAILED == 3


def test_a_folder_of_another_study_is_refused_naming_what_differs(finished, tmp_path):
    root, out, _ = finished
    with pytest.raises(UserError, match="holds another study .*seeds"):
        run_study(study_file(tmp_path, seeds=[5]), out, workers=1, progress=False, say=lambda s: None)


@pytest.mark.parametrize("over, message", [
    ({"variants": [{"name": "a", "set": {"ppo.learning_rat": 1}}]}, "ppo.learning_rat"),
    ({"baseline": "nope"}, "'nope' is not a variant"),
    ({"colour": "red"}, "colour"),
    ({"folds": 40}, "folds do not fit the data"),
    ({"variants": [{"name": "a", "set": {"data.bar_minutes": 7}}]}, "data.bar_minutes: 7 minutes does not divide"),
    ({"variants": [{"name": "a", "set": {"env.reward": "sortino"}}]}, "env.reward: 'sortino' is not a reward"),
])
def test_bad_study_files_are_refused_before_any_trial(tmp_path, over, message):
    with pytest.raises(UserError, match=message):
        run_study(study_file(tmp_path, **over), tmp_path / "out", workers=1, progress=False, say=lambda s: None)
    assert not (tmp_path / "out" / "trials").exists()


def test_a_cluster_address_that_does_not_answer_is_a_clear_error(tmp_path, capsys):
    code = main(["study", study_file(tmp_path), "--out", str(tmp_path / "o"), "--address", "127.0.0.1:1",
                 "--no-progress"])
    assert code == 2 and "does not answer" in capsys.readouterr().err


def test_a_study_on_the_ray_its_caller_runs_keeps_that_ray_and_runs_its_workers_trials_at_a_time(tmp_path,
                                                                                                 local_ray):
    """The process's Ray (2 CPUs, tests/study/conftest.py) is kept, and a 1-worker study runs one trial at a time on
    it: the second trial starts after the first ended."""
    summary = run_study(study_file(tmp_path, seeds=[0]), tmp_path / "out", workers=1, progress=False,
                        say=lambda s: None)
    assert summary["finished"] == 2 and summary["timing"]["workers"] == 1 and local_ray.is_initialized()
    rows = sorted((json.loads(p.read_text()) for p in (tmp_path / "out" / "trials").glob("*/trial.json")),
                  key=lambda r: r["started"])
    first_end = datetime.fromisoformat(rows[0]["started"]) + timedelta(seconds=rows[0]["seconds"])
    assert datetime.fromisoformat(rows[1]["started"]) >= first_end - timedelta(milliseconds=20), rows


def test_a_study_given_no_workers_runs_as_many_trials_at_a_time_as_the_ray_its_caller_runs_has_cpus(
        tmp_path, local_ray, monkeypatch):
    """On a caller's Ray (2 CPUs here; a cluster's, joined from Python) the default is its CPUs, not the driver
    machine's cores (1, as patched)."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    summary = run_study(study_file(tmp_path, seeds=[0]), tmp_path / "out", progress=False, say=lambda s: None)
    assert summary["finished"] == 2 and summary["timing"]["workers"] == 2


def test_a_study_cannot_join_a_cluster_from_a_process_that_runs_ray_already(tmp_path, local_ray):
    with socket.socket() as answering:  # an address that answers: the refusal is Ray's, not the network's
        answering.bind(("127.0.0.1", 0))
        answering.listen()
        address = f"127.0.0.1:{answering.getsockname()[1]}"
        with pytest.raises(UserError, match="already runs Ray") as err:
            run_study(study_file(tmp_path), tmp_path / "out", address=address, progress=False, say=lambda s: None)
    assert "ray.shutdown()" in err.value.fix and local_ray.is_initialized()


def test_the_reward_is_a_study_dimension(tmp_path):
    spec = load_study(study_file(tmp_path, variants=[{"name": r, "set": {"env.reward": r}}
                                                     for r in ("pnl", "prop", "sharpe")]))
    rewards = {v.name: spec.run_config(v, 0, 0, 1).env.reward for v in spec.variants}
    assert rewards == {"pnl": "pnl", "prop": "prop", "sharpe": "sharpe"}


def test_random_search_draws_the_samples_asked_from_the_grid(tmp_path):
    spec = load_study(study_file(tmp_path, search="random", samples=3, seeds=[0, 1, 2]))
    trials = trials_of(spec)
    assert len(trials) == 3 and trials == trials_of(spec)  # seeded: the same draw every time


def test_statistics_match_hand_computed_values():
    mean, lo, hi = bootstrap_ci([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and 1.0 <= lo < 2.5 < hi <= 4.0
    assert paired_difference([3.0, 5.0], [1.0, 2.0])[0] == 2.5
    # E[max SR] for 10 trials of variance 0.04: 0.2 * ((1 - g) * 1.28155 + g * 1.78924)
    assert expected_max_sharpe(10, 0.04) == pytest.approx(0.31491966, abs=1e-7)
    # DSR of SR 0.3 over 250 days, skew -0.5, kurtosis 4, against it: Phi(-0.21337)
    assert deflated_sharpe_ratio(0.3, 250, -0.5, 4.0, 10, 0.04) == pytest.approx(0.41552096, abs=1e-7)


def test_fresh_days_are_compared_with_momentum_day_by_day():
    days = ["2024-08-01", "2024-08-02", "2024-08-05"]
    out = fresh_day_comparison(days, [100.0, -50.0, 250.0], [10.0, 20.0, -30.0])
    assert (out["days"], out["first"], out["last"]) == (3, "2024-08-01", "2024-08-05")
    assert out["agent mean day [$]"]["mean"] == 100.0 and out["momentum mean day [$]"]["mean"] == 0.0
    diff = out["agent - momentum, paired by day [$]"]  # 90, -70, 280: the pairs, not the two means' CIs
    assert diff["mean"] == 100.0 and -70.0 <= diff["ci_low"] < 100.0 < diff["ci_high"] <= 280.0
    assert (diff["ci_low"], diff["ci_high"]) == bootstrap_ci([90.0, -70.0, 280.0])[1:]
    with pytest.raises(ValueError, match="one each"):
        fresh_day_comparison(days, [1.0, 2.0], [1.0, 2.0, 3.0])


def test_study_json_prints_the_summary_last(finished, capsys):
    root, out, _ = finished
    assert main(["study", str(root / "study.yaml"), "--out", str(out), "--json", "--no-progress"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last)["finished"] == 4


def test_advisors_are_variants_when_a_study_trains_phase_3(tmp_path):
    """Phase 2 then phase 3 in each trial: the mock LLM against the trend-label rule (a control)."""
    path = study_file(tmp_path, phases=[2, 3], seeds=[0],
                      base={**TINY, "llm.query.mode": "always"},
                      variants=[{"name": "mock", "set": {"llm.backend": "mock"}},
                                {"name": "trend", "set": {"llm.backend": "trend_rule"}}])
    summary = run_study(path, tmp_path / "out", workers=2, progress=False, say=lambda s: None)
    assert summary["finished"] == 2, summary["errors"]
    table = pd.read_parquet(tmp_path / "out" / "trials.parquet")
    assert table["Net PnL [$]"].notna().all()
    for slug in ("mock-s0-f0", "trend-s0-f0"):
        config = yaml.safe_load((tmp_path / "out" / "trials" / slug / "p3" / "config.yaml").read_text())
        assert config["env"]["phase"] == 3 and config["llm"]["backend"] == slug.split("-")[0].replace(
            "trend", "trend_rule")
    assert "Pass rate [%]" not in table.columns or table["Pass rate [%]"].isna().all()  # phase 3: no verdict yet


@pytest.mark.parametrize("name", ["nq_select.yaml", "es_pool.yaml"])
def test_example_study_files_load_when_shipped(name):
    from pathlib import Path

    spec = load_study(Path(__file__).resolve().parents[2] / "examples" / "studies" / name)
    assert len(spec.variants) == 2 and spec.seeds == [0, 1, 2] and spec.folds == 3


def test_the_retrieval_study_is_the_llm_study_with_one_variant_and_two_hypotheses_more():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "examples" / "studies"
    first, more = (load_study(folder / n) for n in ("nq_does_llm_help.yaml", "nq_does_llm_help_retrieval.yaml"))
    assert more.variants[:-1] == first.variants and more.variants[-1].name == "gemma-retrieval"
    assert more.hypotheses[:-2] == first.hypotheses and len(more.hypotheses) == len(first.hypotheses) + 2
    assert (more.base, more.seeds, more.folds, more.phases, more.evaluate) == (first.base, first.seeds, first.folds,
                                                                               first.phases, first.evaluate)
