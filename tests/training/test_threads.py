"""``ppo.update_threads``: the update's loss and gradients on two threads, the rest of training on one."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.logger import configure

from hybrid_trader.config import ConfigError, merge_overrides
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_market
from hybrid_trader.training import lean_ppo, threads
from hybrid_trader.training.lean_ppo import LeanMaskablePPO
from hybrid_trader.training.runner import build_vec_env, make_model

# 512 rows a minibatch, as training's default: matrix products large enough for torch to split them over threads
ROWS = {"data.synthetic_days": 12, "ppo.n_steps": 128, "ppo.batch_size": 512, "ppo.n_envs": 4, "ppo.n_epochs": 4,
        "ppo.total_timesteps": 512, "train.validate_every": 0, "ppo.normalizer_warmup_steps": 256,
        "ppo.fast_math": True}


@pytest.fixture(scope="module")
def market():
    return load_market(merge_overrides(RunConfig(), ROWS).data, RunConfig().split)


def _model(market, update_threads: int) -> LeanMaskablePPO:
    config = merge_overrides(RunConfig(), {**ROWS, "ppo.update_threads": update_threads})
    venv = build_vec_env(market, config, market.sessions("train"), 4, 0, normalize=True)
    model, _ = make_model(config, venv, None, market)
    return model


def test_an_update_on_two_threads_gives_one_threads_parameters_and_restores_the_count(market, monkeypatch):
    one, two = _model(market, 1), _model(market, 2)
    assert (one.update_threads, two.update_threads) == (1, 2)
    train = one.train
    one.train = lambda: None  # type: ignore[method-assign]
    one.learn(ROWS["ppo.total_timesteps"])  # a full rollout buffer, the parameters untouched
    one.train = train  # type: ignore[method-assign]
    before = copy.deepcopy(one.policy.state_dict())
    two.policy.load_state_dict(before)
    for key in ("observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages",
                "returns", "action_masks"):
        getattr(two.rollout_buffer, key)[...] = getattr(one.rollout_buffer, key)
    two.rollout_buffer.full, two.rollout_buffer.generator_ready = True, False
    two.set_logger(configure(None, []))
    two._current_progress_remaining = one._current_progress_remaining
    seen: list[int] = []
    by_hand = lean_ppo.loss_and_grads
    monkeypatch.setattr(lean_ppo, "loss_and_grads", lambda *a: (seen.append(th.get_num_threads()), by_hand(*a))[1])
    th.set_num_threads(1)
    for model in (one, two):
        np.random.seed(7)  # the minibatches' permutation
        model.train()
        assert th.get_num_threads() == 1  # Adam, clipping and the next rollout on the process's own count
    assert seen[:4] == [1] * 4 and seen[4:7] == [2, 1, 2]  # 4 epochs of one 512-row minibatch: warm-up, probes
    assert seen[7] in {1, 2} and two._threads is not None and two._threads.chosen == seen[4:]
    moved = 0.0
    for (name, pa), pb in zip(one.policy.named_parameters(), two.policy.parameters(), strict=True):
        assert th.allclose(pa, pb, rtol=1e-5, atol=1e-6), name  # measured: at most 1.5e-8 apart (fast_math's tolerance)
        moved = max(moved, float((pa.detach() - before[name]).abs().max()))
    assert moved > 1e-5  # the update did move them


def test_thread_chooser_keeps_two_threads_while_faster_and_drops_back_when_the_core_is_taken():
    chooser = threads.ThreadChooser(2)
    chooser.begin(1)
    ms = {2: 2.2e-3, 1: 3.5e-3}  # a free machine: two threads 1.6 times faster
    chooser.record(chooser.next_count(), 9e-3)  # the warm-up starts the threads: not timed
    for _ in range(4):
        count = chooser.next_count()
        chooser.record(count, ms[count])
    assert chooser.chosen == [2, 1, 2, 2, 2]
    chooser.record(2, 6.0e-3)  # one slow minibatch (over 1.5 times the one-thread probe) is not enough
    assert chooser.next_count() == 2
    chooser.record(2, 6.0e-3)  # two in a row: another process took the second core
    assert chooser.next_count() == 1
    for _ in range(threads.ThreadChooser.REST):  # the next updates rest on one thread, no probe
        chooser.begin(1)
        assert [chooser.next_count(), chooser.next_count()] == [1, 1]
        chooser.record(1, 3.5e-3)
    chooser.begin(1)  # then a probe, which finds the core still taken
    for seconds in (0.2, 3.6e-3, 0.12, 3.5e-3):
        chooser.record(chooser.next_count(), seconds)
    assert chooser.chosen == [2, 1, 2, 1]
    for _ in range(threads.ThreadChooser.REST):
        chooser.begin(1)
        assert chooser.next_count() == 1
    chooser.begin(1)
    assert chooser.next_count() == 2  # and probes again


def test_update_threads_auto_takes_two_cpus_only_where_openmp_spins_and_the_environment_allows(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "_spins", True)
    assert threads.update_threads_for("auto") == 2
    assert threads.update_threads_for("auto", model_in_process=True) == 1  # a local LLM in this process (phase 3)
    assert threads.update_threads_for(1) == 1 and threads.update_threads_for(3) == 3  # a number is itself
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a Ray study worker
    assert threads.update_threads_for("auto") == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(threads, "_spins", False)  # woken from sleep for each product, two threads are slower
    assert threads.update_threads_for("auto") == 1
    monkeypatch.setattr(threads, "_spins", True)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert threads.update_threads_for("auto") == 1


@pytest.mark.parametrize("value", [0, -1, "two", 1.5])
def test_update_threads_when_neither_auto_nor_a_positive_count_is_a_config_error(value):
    with pytest.raises(ConfigError, match="update_threads"):
        merge_overrides(RunConfig(), {"ppo.update_threads": value})


def _child(code: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **(env or {})}, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_prepare_openmp_spins_for_this_process_only_and_keeps_a_users_choice():
    code = """
        import json, os, sys
        from hybrid_trader.training import threads
        before = os.environ.get("OMP_WAIT_POLICY")
        spins = threads.prepare_openmp(sys.argv[1] if len(sys.argv) > 1 else None)
        print(json.dumps({"spins": spins, "torch": "torch" in sys.modules, "before": before,
                          "after": os.environ.get("OMP_WAIT_POLICY"), "auto_spins": threads.openmp_spins()}))
    """
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                         env=env, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"spins": True, "torch": True, "before": None, "after": None, "auto_spins": True}
    got = _child(code, {"OMP_WAIT_POLICY": "PASSIVE"})  # the CLI's default is put back for child processes
    assert got["spins"] and got["after"] == "PASSIVE"
    chosen = subprocess.run([sys.executable, "-c", textwrap.dedent(code), "passive"], capture_output=True,
                            text=True, timeout=120, env=env, check=True).stdout
    assert json.loads(chosen.strip().splitlines()[-1])["spins"] is False  # the user's choice is kept


def test_release_idle_threads_stops_openmp_spinning_through_the_rollout():
    """With the threads spinning, the second one burns a core after a two-thread product until released."""
    got = _child("""
        import json, time
        from hybrid_trader.training import threads
        threads.prepare_openmp(None)
        import torch
        def idle_cpu():  # this process's CPU seconds while its main thread sleeps 0.5 s
            start = time.process_time(); time.sleep(0.5); return time.process_time() - start
        torch.set_num_threads(2)
        a = torch.randn(512, 512)
        for _ in range(20):
            a @ a
        torch.set_num_threads(1)
        spinning = idle_cpu()
        released = threads.release_idle_threads()
        after = idle_cpu()
        torch.set_num_threads(2)
        ok = bool(torch.isfinite(a @ a).all())  # the threads start again
        torch.set_num_threads(1)
        print(json.dumps({"spinning": spinning, "released": released, "after": after, "ok": ok}))
    """)
    if not got["released"]:
        pytest.skip("torch's OpenMP has no omp_pause_resource_all here (not GNU OpenMP)")
    assert got["ok"] and got["after"] < 0.05
    assert got["spinning"] > got["after"]  # it did spin before (less than 0.5 s on a busy machine)
