"""The executor's numpy policy cache: the same decisions without torch, rebuilt when it does not fit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hybrid_trader.live.fast_policy import NumpyAgentPolicy
from hybrid_trader.live.policy_cache import LazyAgent, cache_key, cache_path, executor_policy
from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.model_files import final_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test its own user cache (the policy caches' folder), so none reads another's file."""
    monkeypatch.setenv("HYBRID_TRADER_CACHE", str(tmp_path / "cache"))


def cached_file(run: Path) -> Path:
    """Where the executor keeps ``run``'s numpy policy."""
    rd = RunDir(run)
    config = rd.load_config(RunConfig)
    return cache_path(cache_key(rd, *final_model(rd, config.ppo.normalize_observations)))


def policies(run: Path):
    """(the policy built from torch, the cache it wrote, the policy read back from the cache)."""
    rd = RunDir(run)
    config = rd.load_config(RunConfig)
    cached_file(run).unlink(missing_ok=True)
    built, torch_model = executor_policy(rd, config)
    assert torch_model.loaded and cached_file(run).is_file()
    cached, lazy = executor_policy(rd, config)
    return built, cached, lazy


def observations(policy: NumpyAgentPolicy, n: int = 300) -> np.ndarray:
    dim = policy.actor.spec[0][0].shape[0]
    return np.random.default_rng(0).normal(0, 3, size=(n, dim)).astype(np.float32)


def test_cached_policy_decides_as_the_torch_built_one_when_read_back(tiny):
    run = tiny[0]
    built, cached, lazy = policies(run)
    assert isinstance(cached.policy, NumpyAgentPolicy) and isinstance(cached.policy.agent, LazyAgent)
    assert not lazy.loaded, "a cache that fits needs no torch model"
    masks = np.random.default_rng(1).random((300, 6)) < 0.7
    masks[:, 0] = True
    for obs, mask in zip(observations(built.policy), masks):
        np.testing.assert_array_equal(cached.policy.agent.normalize(obs), built.policy.agent.normalize(obs))
        np.testing.assert_array_equal(cached.policy.logits(obs), built.policy.logits(obs))
        assert cached.policy(obs, mask, None) == built.policy(obs, mask, None)
        np.testing.assert_array_equal(cached.policy.last_probs, built.policy.last_probs)


def test_cached_policy_asks_torch_when_the_best_logits_tie(tiny, monkeypatch):
    run = tiny[0]
    built, cached, lazy = policies(run)
    monkeypatch.setattr("hybrid_trader.live.fast_policy.TIE_GAP", 1e9)  # every decision is a near-tie
    obs = observations(built.policy, 5)
    mask = np.ones(6, dtype=bool)
    got = [cached.policy(o, mask, None) for o in obs]
    assert lazy.loaded and cached.policy.fallbacks == 5
    assert got == [built.policy.agent(o, mask, None) for o in obs]
    np.testing.assert_array_equal(cached.policy.last_probs, built.policy.agent.last_probs)  # torch's, journaled


def test_cache_is_rebuilt_with_a_note_when_made_from_another_model_or_damaged(tiny):
    run = tiny[0]
    rd = RunDir(run)
    config = rd.load_config(RunConfig)
    policies(run)
    good = cached_file(run).read_bytes()
    for damaged in (b"not a zip file", good[: len(good) // 2]):
        cached_file(run).write_bytes(damaged)
        live, torch_model = executor_policy(rd, config)
        assert torch_model.loaded and any("could not be read" in n for n in live.notes), live.notes
        assert cached_file(run).read_bytes() == good, "written again"
    with np.load(cached_file(run)) as z:
        other = {k: z[k] for k in z.files}
    other["key"] = np.array(str(other["key"]).replace("model.zip ", "model.zip 00"))
    np.savez(cached_file(run), **other)
    live, torch_model = executor_policy(rd, config)
    assert torch_model.loaded and any("made from another model" in n for n in live.notes), live.notes


def test_restart_imports_no_torch_when_the_cache_fits(tiny, tmp_path):
    run, csv, _ = tiny
    policies(run)
    code = ("import sys, itertools\n"
            "from hybrid_trader.live.executor import Executor, ExecutorOptions\n"
            "from hybrid_trader.live.feeds import ReplayFeed\n"
            f"feed = ReplayFeed({str(csv)!r})\n"
            f"ex = Executor({str(run)!r}, {str(tmp_path / 'j.sqlite')!r}, ExecutorOptions(market=feed.bars.market,\n"
            "              bar_minutes=feed.bars.bar_minutes))\n"
            "ex.run_feed(feed)\n"
            "assert ex.summary.decisions > 0\n"
            "print(sorted(m for m in ('torch', 'stable_baselines3', 'sb3_contrib') if m in sys.modules))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
