"""Always-on phase 3: the distilled student advises every decision, in one batched forward per step."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from hybrid_trader.agent.advice_block import ADVICE, N_FEATURES, OBS_ADVICE, OBS_ADVICE_PRESENT
from hybrid_trader.errors import UserError
from hybrid_trader.llm import build_advisor
from hybrid_trader.llm.backends.student_backend import load_student
from hybrid_trader.training.runner import build_vec_env, train_run, with_default_student
from tests.training.conftest import student_cfg


def test_every_decision_is_advised_by_the_student_when_backend_is_student(student_market, student_p2):
    config = with_default_student(student_cfg(3), student_p2)
    advisor = build_advisor(config.llm.in_run())
    venv = build_vec_env(student_market, config, student_market.sessions("train"), 2, 0, normalize=True,
                         advisor=advisor)
    calls = []
    try:
        inner = venv.venv
        into = inner.advise_into
        inner.advise_into = lambda obs, masks, out: (calls.append(obs.shape), into(obs, masks, out))[1]
        venv.reset()
        rng = np.random.default_rng(0)
        student = load_student(config.llm.student.path)
        for _ in range(40):
            masks = np.stack(venv.env_method("action_masks"))
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            venv.step(actions)
            raw = venv.get_original_obs()
            assert (raw[:, OBS_ADVICE_PRESENT] == 1.0).all()
            block = raw[:, OBS_ADVICE]
            assert (block[:, ADVICE.age] == 0).all()
            # the block is the student's answer on the raw (unnormalised) features and the legal actions
            masks = np.stack(venv.env_method("action_masks"))
            probs, conf = student.advise(raw[:, :student.obs_dim], masks)
            np.testing.assert_allclose(block[:, ADVICE.probs], probs, atol=1e-6)
            np.testing.assert_allclose(block[:, ADVICE.confidence], conf, atol=1e-6)
            assert (block[:, ADVICE.probs][~masks] == 0).all()
        assert calls and all(shape == (2, N_FEATURES) for shape in calls)  # one forward for both environments
        assert len(calls) == 41  # reset + 40 steps
        assert inner.answered == inner.total_steps == 82
    finally:
        venv.close()


def test_phase3_with_the_student_logs_a_query_rate_of_100_when_trained(tmp_path, student_market, student_p2):
    out = tmp_path / "p3"
    train_run(student_cfg(3, 512), out, init=student_p2, market=student_market, quiet=True)
    rows = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "llm/query_rate_pct" in r]
    assert logged
    for r in logged:
        assert r["llm/query_rate_pct"] == pytest.approx(100.0)
        assert r["llm/advised_pct"] == pytest.approx(100.0)
        assert r["llm/configured_query_rate_pct"] == 100.0
        assert r["llm/advice_age_mean_steps"] == 0.0
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["llm"]["student"]["path"] == str(student_p2 / "advice" / "student.pt")


def test_phase3_refuses_a_student_of_another_layout_when_names_differ(student_market, student_p2, monkeypatch):
    config = with_default_student(student_cfg(3), student_p2)
    advisor = build_advisor(config.llm.in_run())
    monkeypatch.setattr(advisor.backend.student, "layout_hash", "0000000000000000")
    with pytest.raises(UserError, match="another observation layout"):
        build_vec_env(student_market, config, student_market.sessions("train"), 2, 0, normalize=True, advisor=advisor)
    assert advisor.backend.student.obs_dim < N_FEATURES  # the student reads the 228-value prefix


def test_learned_fusion_trains_its_gate_and_logs_the_trust_when_run_with_the_student(tmp_path, student_market,
                                                                                    student_p2):
    from sb3_contrib import MaskablePPO

    out = tmp_path / "p3"
    train_run(student_cfg(3, 512, **{"fusion.mode": "learned", "fusion.llm_weight": 0.3, "fusion.w_max": 1.0}), out,
              init=student_p2, market=student_market, quiet=True)
    rows = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "fusion/gate_mean" in r]
    assert len(logged) == 2  # one per rollout
    assert logged[0]["fusion/gate_mean"] == pytest.approx(0.3, abs=1e-5)  # the first rollout: the constant prior
    assert 0.0 <= logged[-1]["fusion/gate_mean"] <= 1.0 and logged[-1]["fusion/gate_std"] >= 0.0
    assert any(k.startswith("fusion/trust_trend_") for k in logged[-1])
    assert any(k.startswith("fusion/trust_vol_") for k in logged[-1])
    model = MaskablePPO.load(out / "model.zip")
    assert model.policy.fusion_mode == "learned"
    # PPO's update moved the gate away from its zero-initialised last layer
    assert model.policy.gate.out.weight.abs().sum().item() > 0


def test_phase3_verdict_is_measured_with_the_student_when_evaluated_with_verdict(tmp_path, student_market,
                                                                                  student_p2):
    from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run

    out = tmp_path / "p3"
    train_run(student_cfg(3, 256), out, init=student_p2, market=student_market, quiet=True)
    ev = evaluate_run(out, EvaluationRequest(split="test", seeds=1, market=student_market, quiet=True, ablation=False,
                                             verdict="rolling"))
    figures = ev.extra["prop_verdict"]["figures"]
    assert set(figures) == {"agent", "flat", "random (seed 0)", "momentum"}
    days = len(student_market.sessions("test"))
    for name, f in figures.items():  # rolling: one attempt started on each test day, for the hybrid as for the rest
        assert f["Attempts"] == days, name
        assert f["Pass rate [%]"] + f["Breach rate [%]"] <= 100.0
    assert figures["flat"]["Pass rate [%]"] == 0.0 == figures["flat"]["Breach rate [%]"]


def test_evaluation_advises_every_decision_and_reports_the_trust_when_fusion_is_learned(tmp_path, student_market,
                                                                                      student_p2):
    from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run
    from hybrid_trader.evaluation.report import write_report

    out = tmp_path / "p3"
    train_run(student_cfg(3, 256, **{"fusion.mode": "learned"}), out, init=student_p2, market=student_market,
              quiet=True)
    ev = evaluate_run(out, EvaluationRequest(split="test", seeds=1, market=student_market, quiet=True))
    llm = ev.extra["llm"]
    rate = [v for k, v in llm.items() if "query rate" in k.lower() and "configured" not in k.lower()]
    assert rate and rate[0] == pytest.approx(100.0)
    assert llm["Fusion mode"] == "learned"
    trust = ev.extra["trust"]
    assert 0.0 <= trust["fusion/gate_mean"] <= 1.0 and any(k.startswith("fusion/trust_trend_") for k in trust)
    assert set(ev.extra["ablation"]) == {"hybrid (RL + LLM)", "RL only (llm_weight 0)"}
    html = write_report(out).read_text()
    assert "When the agent trusts the LLM" in html
    assert any(f"{bucket} trend" in html for bucket in ("down", "flat", "up"))


def test_environments_report_their_masks_only_when_the_student_advises_without_a_teacher(student_market, student_p2):
    config = with_default_student(student_cfg(3), student_p2)
    venv = build_vec_env(student_market, config, student_market.sessions("train"), 2, 0, normalize=False,
                         advisor=build_advisor(config.llm.in_run()))
    try:
        assert venv.masks_only
        venv.reset()
        venv.step(np.zeros(2, dtype=np.int64))
        for info in venv.venv.buf_infos:  # the vectorised environment recorded the masks: the infos carry nothing
            assert "advisor_mask" not in info and "advisor_account" not in info
        assert (venv.venv.masks == np.stack(venv.env_method("action_masks"))).all()
    finally:
        venv.close()


@pytest.mark.parametrize("mode", ["constant", "learned"])
def test_stored_log_probs_equal_recomputed_ones_when_the_student_advises_every_step(student_market, student_p2,
                                                                                    mode):
    import torch as th
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.utils import obs_as_tensor

    from hybrid_trader.training.hybrid_stats import HybridStatsCallback
    from hybrid_trader.training.runner import make_model

    config = with_default_student(student_cfg(3, **{"fusion.mode": mode}), student_p2)
    venv = build_vec_env(student_market, config, student_market.sessions("train"), 2, 0, normalize=True,
                         advisor=build_advisor(config.llm.in_run()))
    try:
        model, _ = make_model(config, venv, init=student_p2, market=student_market)
        if mode == "learned":  # a gate as after some training: its trust varies from state to state
            with th.no_grad():
                th.manual_seed(0)
                model.policy.gate.out.weight.normal_(0.0, 1.0)
        venv.venv.follow(model.policy)
        assert not model.policy.record_decisions  # nothing reads a per-step record beside the student alone
        stats = HybridStatsCallback(venv.venv, config.llm.in_run())
        model._setup_learn(256, callback=None)
        callback = CallbackList([stats])
        callback.init_callback(model)
        assert model.collect_rollouts(venv, callback, model.rollout_buffer, 128, use_masking=True)
        buf = model.rollout_buffer
        obs = buf.observations.reshape(-1, buf.observations.shape[-1])
        assert (obs[:, OBS_ADVICE_PRESENT] == 1.0).all()
        actions = th.as_tensor(buf.actions.reshape(-1))
        masks = buf.action_masks.reshape(len(actions), -1)
        with th.no_grad():
            _, log_prob, _ = model.policy.evaluate_actions(obs_as_tensor(obs, "cpu"), actions, action_masks=masks)
            np.testing.assert_allclose(log_prob.numpy(), buf.log_probs.reshape(-1), atol=1e-5)
            # the statistics read the logits each step computed: the same as the policy's own, again
            rl_logits = model.policy.rl_logits(obs_as_tensor(obs, "cpu")).numpy()
        decisions = stats.decisions()
        assert decisions is not None and len(stats._log) == 128
        np.testing.assert_allclose(decisions[1], rl_logits, atol=1e-5)
        assert (decisions[5] is not None) is (mode == "learned")
    finally:
        venv.close()
