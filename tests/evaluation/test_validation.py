"""Training's periodic validation (``evaluation.runner.validation_fn``) in every phase."""

from __future__ import annotations

import json

import pytest

from hybrid_trader.config import merge_overrides
from hybrid_trader.evaluation.runner import validation_fn
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_market
from hybrid_trader.training.runner import TrainHooks, train_run

TINY = {"data.synthetic_days": 12, "ppo.n_steps": 128, "ppo.batch_size": 128, "ppo.n_envs": 2, "ppo.n_epochs": 1,
        "train.progress_bar": False, "train.checkpoint_every": 1_000_000, "train.validation_sessions": 2,
        "llm": {"backend": "mock", "query": {"mode": "always"}}}


def cfg(phase: int, validate_every: int) -> RunConfig:
    return merge_overrides(RunConfig(), {**TINY, "env.phase": phase, "ppo.total_timesteps": 256,
                                         "train.validate_every": validate_every})


@pytest.fixture(scope="module")
def market():
    c = cfg(1, 0)
    return load_market(c.data, c.split)


def test_validation_when_phase3_trains_runs_the_hybrid_policy_without_advice(tmp_path, market):
    # phase 3 observations are 261 features + the advice block: a phase 1-2 policy wrapper
    # would reject them (the bug this guards against: validation crashed phase 3 runs)
    train_run(cfg(1, 0), tmp_path / "p1", market=market, quiet=True)
    train_run(cfg(2, 0), tmp_path / "p2", init=tmp_path / "p1", market=market, quiet=True)
    c3 = cfg(3, 128)
    train_run(c3, tmp_path / "p3", init=tmp_path / "p2", market=market, quiet=True,
              hooks=TrainHooks(validation=validation_fn))
    rows = [json.loads(line) for line in (tmp_path / "p3" / "validation.jsonl").read_text().splitlines()]
    assert [r["time/total_timesteps"] for r in rows] == [128, 256]
    assert all(isinstance(r["val/trades"], int) and "val/net_pnl_per_day" in r for r in rows)


def test_fresh_validation_scores_each_day_from_a_fresh_account_as_run_fresh_days_does(tmp_path, market):
    """``train.validation_account: fresh``: the validation's figures are run_fresh_days' on the same sessions, with
    the model as it is at that validation; carried: the one account's, as ``evaluate`` runs it."""
    from hybrid_trader.evaluation.metrics import compute_metrics
    from hybrid_trader.evaluation.policies import AgentPolicy
    from hybrid_trader.evaluation.runner import evaluation_env, run_fresh_days, run_policy

    seen: list[tuple[dict, dict, dict]] = []

    def checking(market_, config):
        evaluate = validation_fn(market_, config)
        val = list(market_.sessions("val"))[:config.train.validation_sessions]

        def run(model):
            row = evaluate(model)
            policy = lambda: AgentPolicy(model, model.get_vec_normalize_env())  # noqa: E731
            fresh = run_fresh_days(policy, market_, config.env, val)
            carried = compute_metrics(run_policy(policy(), evaluation_env(market_, config.env, val)))
            seen.append((row, fresh, carried))
            return row

        return run

    for account in ("fresh", "carried"):
        c = merge_overrides(cfg(1, 128), {"train.validation_account": account, "data.synthetic_days": 12})
        train_run(c, tmp_path / account, market=market, quiet=True, hooks=TrainHooks(validation=checking))
    assert len(seen) == 4
    for row, fresh, _ in seen[:2]:
        assert row["val/net_pnl_per_day"] == pytest.approx(fresh["Mean day, fresh [$]"])
        assert row["val/trades"] == fresh["Trades, fresh"]
    for row, _, carried in seen[2:]:
        assert row["val/net_pnl_per_day"] == pytest.approx(carried["Net PnL [$]"] / carried["Days"])
        assert row["val/trades"] == carried["Trades"]
