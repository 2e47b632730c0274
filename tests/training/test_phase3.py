"""Phase 3: the hybrid agent is correct by construction.

* it starts as exactly the phase 2 policy;
* PPO stays on-policy: the stored log-probabilities are those of the fused distribution;
* the training rollouts themselves produce the LLM statistics;
* Ctrl-C leaves a checkpoint and no thread or process behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch as th

from hybrid_trader.agent.advice_block import N_FEATURES, OBS_ADVICE, OBS_ADVICE_PRESENT, PHASE3_OBS_DIM
from hybrid_trader.config import merge_overrides
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run
from hybrid_trader.llm import build_advisor
from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_market
from hybrid_trader.run.models import load_model
from hybrid_trader.training.policy import AdviceFreeFeatures
from hybrid_trader.training.runner import build_vec_env, make_model, train_run
from tests.training.conftest import train_phase2

TINY = {"data.synthetic_days": 12, "data.synthetic_edge": 0.3, "ppo.n_steps": 128, "ppo.batch_size": 128,
        "ppo.n_envs": 2, "ppo.n_epochs": 2, "train.validate_every": 0, "train.progress_bar": False,
        "train.checkpoint_every": 1_000_000}
MOCK = {"backend": "mock", "query": {"mode": "always"}}


def cfg(phase: int, steps: int = 256, **extra) -> RunConfig:
    return merge_overrides(RunConfig(), {**TINY, "env.phase": phase, "ppo.total_timesteps": steps,
                                         "llm": MOCK, **extra})


@pytest.fixture(scope="module")
def market():
    c = cfg(1)
    return load_market(c.data, c.split)


@pytest.fixture(scope="module")
def phase2_run(tmp_path_factory, market):
    return train_phase2(tmp_path_factory.mktemp("runs"), cfg, market, 512)


@pytest.mark.parametrize("advice_input", [True, False])
def test_phase3_starts_as_exactly_the_phase2_policy_when_initialised(market, phase2_run, advice_input):
    from sb3_contrib import MaskablePPO

    p2 = MaskablePPO.load(phase2_run / "model.zip")
    with open(phase2_run / "vecnormalize.pkl", "rb") as f:
        import pickle

        vec2 = pickle.load(f)
    config = cfg(3, **{"fusion.advice_input": advice_input})
    advisor = build_advisor(config.llm.in_run())
    venv = build_vec_env(market, config, market.sessions("train"), 2, 0, normalize=True, advisor=advisor)
    try:
        model, notes = make_model(config, venv, init=phase2_run, market=market)
        width = PHASE3_OBS_DIM if advice_input else N_FEATURES
        assert any(f"228 -> {width} inputs (new ones zero)" in n for n in notes)
        venv.training = False  # keep the carried-over statistics fixed while walking
        obs = venv.reset()
        masks = np.stack(venv.env_method("action_masks"))
        for _ in range(30):  # walk into varied states, with advice present
            obs, *_ = venv.step(np.zeros(2, dtype=int))
            masks = np.stack(venv.env_method("action_masks"))
        raw = venv.get_original_obs()
        assert raw.shape == (2, PHASE3_OBS_DIM)
        # Without advice (a row without advice is all zero: the prior reads the probabilities, not the presence
        # flag, so zeroing the flag alone leaves the prior of an answer that arrived in time), the phase 3
        # distribution equals the phase 2 one on the same 228 values.
        raw_no_advice = raw.copy()
        raw_no_advice[:, OBS_ADVICE] = 0.0
        obs3 = venv.normalize_obs(raw_no_advice)
        obs2 = vec2.normalize_obs(raw[:, :228])
        with th.no_grad():
            d3 = model.policy.get_distribution(th.as_tensor(obs3), action_masks=masks).distribution.probs
            d2 = p2.policy.get_distribution(th.as_tensor(obs2), action_masks=masks).distribution.probs
            v3 = model.policy.predict_values(th.as_tensor(obs3))
            v2 = p2.policy.predict_values(th.as_tensor(obs2))
        np.testing.assert_allclose(d3.numpy(), d2.numpy(), atol=1e-6)
        np.testing.assert_allclose(v3.numpy(), v2.numpy(), atol=1e-5)
    finally:
        venv.close()


@pytest.mark.parametrize(("mode", "advice_input"), [("constant", True), ("learned", True), ("constant", False)])
def test_stored_log_probs_equal_recomputed_ones_when_advice_shapes_the_policy(market, phase2_run, mode,
                                                                              advice_input):
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.utils import obs_as_tensor

    # Advice that arrives late still counts (any age): on a loaded machine the advisor's thread may answer only after
    # a numpy rollout of 128 steps is long past max_age_steps (once: 0% of the steps advised, once 27%).
    config = cfg(3, **{"fusion.mode": mode, "fusion.advice_input": advice_input})
    config.llm.batching.max_age_steps = 1_000_000
    advisor = build_advisor(config.llm.in_run())
    venv = build_vec_env(market, config, market.sessions("train"), 2, 0, normalize=True, advisor=advisor)
    try:
        model, _ = make_model(config, venv, init=phase2_run, market=market)
        if mode == "learned":
            # a gate as after some training: its trust varies from state to state
            with th.no_grad():
                th.manual_seed(0)
                model.policy.gate.out.weight.normal_(0.0, 1.0)
        model._setup_learn(256, callback=None)
        callback = CallbackList([])
        callback.init_callback(model)
        for _ in range(6):  # rollouts until one has enough advised steps (each new episode waits for its first answer)
            assert model.collect_rollouts(venv, callback, model.rollout_buffer, 128, use_masking=True)
            buf = model.rollout_buffer
            obs = buf.observations.reshape(-1, PHASE3_OBS_DIM)
            advised = obs[:, OBS_ADVICE_PRESENT] > 0.5
            if advised.sum() >= 64:
                break
        assert advised.sum() >= 64, "the mock advisor (query always) should advise a good part of the steps"
        actions = th.as_tensor(buf.actions.reshape(-1))
        masks = buf.action_masks.reshape(len(actions), -1)
        with th.no_grad():
            _, log_prob, _ = model.policy.evaluate_actions(obs_as_tensor(obs, "cpu"), actions, action_masks=masks)
            np.testing.assert_allclose(log_prob.numpy(), buf.log_probs.reshape(-1), atol=1e-5)
            if not advice_input:  # the network reads no advice: the RL logits ignore the block, the prior not
                other = obs.copy()
                other[:, OBS_ADVICE] = other[::-1, OBS_ADVICE]
                np.testing.assert_array_equal(model.policy.rl_logits(obs_as_tensor(other, "cpu")).numpy(),
                                              model.policy.rl_logits(obs_as_tensor(obs, "cpu")).numpy())
            if mode == "learned":
                trust = model.policy.trust(obs_as_tensor(obs, "cpu"),
                                           model.policy.rl_logits(obs_as_tensor(obs, "cpu")), th.as_tensor(masks))
                assert trust[advised].std() > 1e-3, "the gate's trust should vary across states"
            # The prior is really inside the distribution: without it the log-probabilities differ.
            model.policy.llm_weight = 0.0
            model.policy.gate = None
            _, rl_only, _ = model.policy.evaluate_actions(obs_as_tensor(obs, "cpu"), actions, action_masks=masks)
        assert np.abs(rl_only.numpy() - buf.log_probs.reshape(-1))[advised].max() > 1e-3
    finally:
        venv.close()


@pytest.fixture(scope="module")
def phase3_run(tmp_path_factory, market, phase2_run):
    config = cfg(3, 512, llm={"backend": "mock", "query": {"mode": "selective", "interval": 5, "cooldown": 2}})
    out = tmp_path_factory.mktemp("p3") / "p3"
    train_run(config, out, init=phase2_run, market=market, quiet=True)
    return out


def test_phase3_run_keeps_its_narrow_network_when_trained_without_advice_input(tmp_path, market, phase2_run,
                                                                               phase3_run):
    config = cfg(3, 256, **{"fusion.advice_input": False})
    out = tmp_path / "p3-prior-only"
    train_run(config, out, init=phase2_run, market=market, quiet=True)
    policy = load_model(RunDir(out), out / "model.zip").policy
    assert isinstance(policy.features_extractor, AdviceFreeFeatures) and not policy.advice_input
    assert policy.mlp_extractor.policy_net[0].weight.shape[1] == N_FEATURES
    ev = evaluate_run(out, EvaluationRequest(split="test", seeds=1, quiet=True, ablation=False))
    assert ev.metrics["agent"]["Days"] >= 1
    with pytest.raises(UserError, match="fusion.advice_input"):  # from a run that read the advice
        train_run(config, tmp_path / "narrower", init=phase3_run, market=market, quiet=True)


def test_phase3_verdict_is_refused_when_the_advisor_is_not_the_student(phase3_run):
    with pytest.raises(UserError, match="student") as err:
        evaluate_run(phase3_run, EvaluationRequest(split="test", seeds=1, quiet=True, verdict="sequential"))
    assert "this advisor is the mock back end" in str(err.value)


def test_phase3_training_logs_llm_statistics_from_its_rollouts(phase3_run):
    rows = [json.loads(line) for line in (phase3_run / "progress.jsonl").read_text().splitlines()]
    rollout_rows = [r for r in rows if "llm/query_rate_pct" in r]
    assert rollout_rows, "no rollout logged LLM statistics"
    last = rollout_rows[-1]
    assert last["llm/total_queries"] > 0
    assert 5.0 < last["llm/query_rate_pct"] <= 100.0
    assert last["llm/configured_query_rate_pct"] == pytest.approx(20.0)
    assert last["confidence/llm_avg"] > 0.1
    assert 0.0 < last["confidence/rl_avg"] <= 1.0
    assert 0.0 < last["fusion/agreement_pct"] <= 100.0
    assert last["fusion/override_pct"] >= 0.0
    assert 0.0 <= last["llm/advice_age_mean_steps"] <= last["llm/max_advice_age_steps"]
    assert "fusion/override_pct" in last and "llm/advised_pct" in last
    assert (phase3_run / "llm.yaml").exists()


def test_evaluate_phase3_reports_llm_statistics_samples_and_ablation(phase3_run):
    from hybrid_trader.evaluation.report import write_report

    out = evaluate_run(phase3_run, EvaluationRequest(split="test", seeds=2, quiet=True))
    llm = out.extra["llm"]
    assert llm["LLM queries"] > 0 and llm["Advised decisions [%]"] > 0
    assert set(out.extra["ablation"]) == {"hybrid (RL + LLM)", "RL only (llm_weight 0)"}
    ablation = json.loads((phase3_run / "eval" / "ablation.json").read_text())
    assert ablation["hybrid (RL + LLM)"]["Trades"] == out.metrics["agent"]["Trades"]
    results = json.loads((out.out_dir / "results.json").read_text())
    agent = next(s for s in results["strategies"] if s["role"] == "agent")
    assert agent["extra"]["sample_decisions"], "sample decisions with the advice are recorded"
    assert {"rl_action", "llm_action", "executed", "rule"} <= set(agent["extra"]["sample_decisions"][0])
    html = write_report(phase3_run).read_text()
    assert "Ablation" in html and "LLM" in html and "Sample decisions" in html


def test_evaluate_explains_the_first_sample_decisions_when_asked(phase3_run, tmp_path):
    from hybrid_trader.evaluation.report import write_report
    from hybrid_trader.evaluation.results import EXPLAINED_BY_KEY, REASONING_KEY

    out = evaluate_run(phase3_run, EvaluationRequest(split="test", seeds=1, quiet=True, ablation=False, explain=2,
                                                     explain_llm="mock", out_dir=tmp_path / "eval"))
    figures = out.extra["explained"]
    assert figures["explained"] == 2 and figures["decision_parsed_pct"] == figures["all_four_steps_pct"] == 100.0
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    samples = next(s for s in results["strategies"] if s["role"] == "agent")["extra"]["sample_decisions"]
    assert [REASONING_KEY in s for s in samples[:3]] == [True, True, False]
    assert samples[0][REASONING_KEY]["decision"] and "mock" in samples[0][EXPLAINED_BY_KEY]
    html = write_report(phase3_run, tmp_path / "eval", split="test").read_text()
    assert html.count('<tr class="cot">') == 2


def test_evaluate_refuses_to_explain_when_the_run_is_not_phase3(phase2_run):

    with pytest.raises(UserError, match="phase 3"):
        evaluate_run(phase2_run, EvaluationRequest(split="test", seeds=1, quiet=True, explain=2))


def test_evaluate_phase3_with_seed_rules_when_strategy_rules(phase3_run):

    out = evaluate_run(phase3_run, EvaluationRequest(split="test", seeds=1, quiet=True, strategy="rules",
                                                     ablation=False))
    used = out.extra["llm"]["Fusion rules used"]
    assert set(used) <= {"AGREEMENT", "RL_HIGH_CONFIDENCE", "LLM_HIGH_CONFIDENCE", "CONFIDENCE_WEIGHTED",
                         "UNCERTAINTY_HOLD", "RL_ONLY"}
    assert sum(used.values()) > 0


def test_sigint_during_phase3_training_saves_checkpoint_and_leaves_nothing_behind(tmp_path, phase2_run):
    psutil = pytest.importorskip("psutil")
    out = tmp_path / "p3"
    cmd = [sys.executable, "-m", "hybrid_trader.cli.main", "train", "--phase", "3", "--init", str(phase2_run),
           "--llm", "mock", "--out", str(out), "--timesteps", "5000000", "--quiet",
           "--set", "data.synthetic_days=12", "--set", "ppo.n_steps=128", "--set", "ppo.batch_size=128",
           "--set", "ppo.n_envs=2", "--set", "ppo.vec_env=subproc", "--set", "train.validate_every=0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            progress = out / "progress.jsonl"
            if progress.exists() and progress.read_text().count("\n") >= 2:
                break
            if proc.poll() is not None:
                pytest.fail(f"training exited early: {proc.communicate()}")
            time.sleep(0.5)
        else:
            pytest.fail("training never logged a rollout")
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "subproc environments should be running"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "terminate called" not in stderr and "Traceback" not in stderr, stderr
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "interrupted"
    assert (out / status["last_checkpoint"]).exists()
    time.sleep(1.0)
    alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"processes left behind: {alive}"


def test_phase3_with_a_leaning_llm_fits_the_calibration_in_its_init_run_or_says_raw(student_p2, tmp_path,
                                                                                    monkeypatch):
    from functools import partial

    from hybrid_trader.advise.calibrate import advice_calibration
    from hybrid_trader.run.calibration import calibration_path
    from hybrid_trader.training.advisor_setup import keep_calibration, make_advisor
    from tests.llm import make_mock_lean
    from tests.training.conftest import student_cfg

    make_mock_lean(monkeypatch)
    p2 = tmp_path / "p2"
    shutil.copytree(student_p2, p2, ignore=shutil.ignore_patterns("advice"))
    config = student_cfg(3, 256, **{"llm.backend": "mock"})
    said: list[str] = []
    advisor, _ = make_advisor(config, said.append, (tmp_path / "p3", p2), partial(advice_calibration, calibrate=False))
    assert advisor.answerer.batch_calibration is None and not calibration_path(p2).exists()
    assert any("raw (not calibrated" in s for s in said), said
    advisor.close()
    said.clear()
    advisor, _ = make_advisor(config, said.append, (tmp_path / "p3", p2), advice_calibration)
    assert advisor.answerer.batch_calibration is not None and calibration_path(p2).is_file()
    assert any("fitting the batch calibration of mock" in s for s in said), said
    (tmp_path / "p3").mkdir()
    keep_calibration(advisor, tmp_path / "p3")  # the phase 3 run keeps the means it trains with
    assert calibration_path(tmp_path / "p3").read_bytes() == calibration_path(p2).read_bytes()
    advisor.close()
