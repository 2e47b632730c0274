"""data.pool: training on several files or markets, each with its own contract, without look-ahead."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.config import merge_overrides
from hybrid_trader.data.synthetic import generate_bars
from hybrid_trader.errors import UserError
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_market
from hybrid_trader.training.runner import build_vec_env, train_run

TINY = {"ppo.n_steps": 64, "ppo.batch_size": 64, "ppo.n_envs": 2, "ppo.n_epochs": 1, "ppo.total_timesteps": 256,
        "ppo.normalizer_warmup_steps": 256, "train.validate_every": 0, "train.progress_bar": False,
        "train.checkpoint_every": 1_000_000, "data.tz": "America/New_York"}


def write(tmp_path, market: str, days: int, start: str, seed: int):
    frame = generate_bars(days, seed=seed, market=market, start=start).frame
    path = tmp_path / f"{market}_{start}.csv"
    frame.tz_convert("America/New_York").tz_localize(None).to_csv(path, index_label="timestamp")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool")
    return {"nq": write(root, "NQ", 20, "2024-03-01", 1), "es": write(root, "ES", 30, "2024-02-01", 2),
            "es_late": write(root, "ES", 10, "2024-06-03", 3)}


def cfg(files, *pool: str, **extra) -> RunConfig:
    return merge_overrides(RunConfig(), {**TINY, "data.path": str(files["nq"]),
                                         "data.pool": [str(files[p]) for p in pool], "env.phase": 2, **extra})


def test_pooled_days_end_before_the_first_validation_day_when_loaded(files):
    config = cfg(files, "es")
    market = load_market(config.data, config.split, pool=True)
    (es,) = market.pool
    assert es.bars.market == "ES" and market.bars.market == "NQ"
    first_val = market.bars.session_dates[market.sessions("val").start]
    train = es.sessions("train")
    assert es.bars.session_dates[train.stop - 1] < first_val
    assert train.stop == int(np.sum(np.asarray(es.bars.session_dates) < first_val))
    assert len(es.sessions("val")) == len(es.sessions("test")) == 0
    assert "pooled: " in market.describe()
    assert load_market(config.data, config.split).pool == []  # evaluation never loads the pool


def test_environments_trade_each_files_own_contract_when_pooled(files):
    config = cfg(files, "es", **{"ppo.n_envs": 4})
    market = load_market(config.data, config.split, pool=True)
    venv = build_vec_env(market, config, market.sessions("train"), 4, 0, normalize=False)
    try:
        symbols = [env.contract.symbol for env in venv.unwrapped.envs]
        assert symbols == ["NQ", "ES", "NQ", "ES"]
        es_env = venv.unwrapped.envs[1]
        assert es_env.bars is market.pool[0].bars
    finally:
        venv.close()


def test_pooled_run_trains_and_records_the_pool_when_trained(files, tmp_path):
    status = train_run(cfg(files, "es"), tmp_path / "run", market=None, quiet=True)
    assert status["state"] == "finished"
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert str(files["es"]) in saved


def test_pool_is_refused_when_a_file_has_no_day_before_validation(files):
    config = cfg(files, "es_late")
    with pytest.raises(UserError, match="no trading day before") as err:
        load_market(config.data, config.split, pool=True)
    assert str(files["es_late"]) in str(err.value)


@pytest.mark.parametrize("extra, match", [
    ({"ppo.n_envs": 1}, "ppo.n_envs to 2"),
    ({"env.phase": 3, "llm.backend": "mock"}, "phase 3"),
    ({"env.market": "NQ"}, "env.market"),
])
def test_pool_is_refused_when_the_run_cannot_hold_it(files, tmp_path, extra, match):
    with pytest.raises(UserError, match=match):
        train_run(cfg(files, "es", **extra), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run" / "model.zip").exists()


def test_a_study_worker_keeps_the_pool_when_it_reuses_a_market(files):
    """Each trial of a study asks its worker for the market; the second ask must train on the pool too."""
    from hybrid_trader.study.trials import market_for

    config = cfg(files, "es")
    first, again = market_for(config), market_for(config)
    assert len(first.pool) == 1 and len(again.pool) == 1
    other_fold = merge_overrides(config, {"split.train": 0.6, "split.val": 0.2, "split.test": 0.2})
    assert len(market_for(other_fold).pool) == 1
    plain = cfg(files)
    assert market_for(plain).pool == [] and market_for(plain).pool == []
