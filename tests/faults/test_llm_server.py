"""A phase 3 run evaluated against a broken LLM server: it stops waiting and says the result is RL-only."""

from __future__ import annotations

import pytest

from hybrid_trader.config import merge_overrides
from hybrid_trader.evaluation.diagnose import diagnose
from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_market
from hybrid_trader.training.runner import train_run
from tests.llm.fake_openai_server import FakeOpenAIServer

TINY = {"data.synthetic_days": 12, "ppo.n_steps": 128, "ppo.batch_size": 128, "ppo.n_envs": 2, "ppo.n_epochs": 1,
        "train.progress_bar": False, "train.checkpoint_every": 1_000_000, "train.validate_every": 0,
        "ppo.total_timesteps": 256, "llm": {"backend": "mock", "query": {"mode": "always"}}}


@pytest.fixture(scope="module")
def phase3_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    config = merge_overrides(RunConfig(), {**TINY, "env.phase": 1})
    market = load_market(config.data, config.split)
    train_run(config, root / "p1", market=market, quiet=True)
    for phase, init in ((2, "p1"), (3, "p2")):
        train_run(merge_overrides(config, {"env.phase": phase}), root / f"p{phase}", init=root / init,
                  market=market, quiet=True)
    return root / "p3"


def test_evaluate_when_the_server_drops_every_query_opens_the_circuit_and_says_rl_only(phase3_run, capsys):
    with FakeOpenAIServer("drop") as srv:
        out = evaluate_run(phase3_run, EvaluationRequest(quiet=True, llm_overrides={
            "backend": "openai", "check_on_start": False, "cache": {"enabled": False},
            "openai": {"base_url": srv.url, "retries": 0, "request_timeout_s": 2.0, "model": "fake-model"},
            "batching": {"circuit_errors": 3, "circuit_cooldown_s": 3600.0}}))
        sent = len(srv.requests)
    llm = out.extra["llm"]
    assert llm["llm/circuit_opened"] >= 1 and llm["llm/errors_connection"] >= 3
    assert sent <= 3 + 1  # the circuit stopped the queries: no request per decision
    assert "RL-only" in out.extra["llm_warning"]
    assert "WARNING: LLM advice was missing" in capsys.readouterr().err
    hybrid, rl_only = out.extra["ablation"]["hybrid (RL + LLM)"], out.extra["ablation"]["RL only (llm_weight 0)"]
    assert hybrid["Net PnL [$]"] == rl_only["Net PnL [$]"] and hybrid["Trades"] == rl_only["Trades"]
    codes = {f.code for f in diagnose(phase3_run).findings}
    assert "HYBRID_EQUALS_RL_ONLY" in codes
