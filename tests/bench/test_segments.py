"""``SegmentTimer``: where training's time goes, per segment and per vector step."""

from __future__ import annotations

import pickle

import pytest
import torch
from stable_baselines3.common.callbacks import CallbackList

from hybrid_trader.bench.segments import (
    BACKWARD,
    DISTRIBUTION,
    EPISODES,
    LOGGING,
    LOSS_GRADS,
    POLICY_FORWARD,
    ROLLOUT,
    ROLLOUT_LOOP,
    ROLLOUT_PARTS,
    STUDENT,
    UPDATE,
    UPDATE_FORWARD,
    UPDATE_LOOP,
    UPDATE_PARTS,
    SegmentTimer,
    compare,
    format_comparison,
)
from hybrid_trader.config import merge_overrides
from hybrid_trader.run.config import RunConfig
from hybrid_trader.training import lean_backward, lean_ppo, vec_env
from hybrid_trader.training.callbacks import EnvTimeCallback
from hybrid_trader.training.runner import TrainHooks, train_run
from tests.training.conftest import student_cfg

TINY = {"data.synthetic_days": 8, "ppo.n_steps": 64, "ppo.batch_size": 64, "ppo.n_envs": 2, "ppo.n_epochs": 1,
        "ppo.total_timesteps": 256, "train.validate_every": 0, "train.progress_bar": False,
        "train.checkpoint_every": 1_000_000}


def test_segments_add_up_and_leave_nothing_wrapped_when_training_ends(tmp_path):
    backward, clip = torch.Tensor.backward, torch.nn.utils.clip_grad_norm_
    timer, env_timer = SegmentTimer(), EnvTimeCallback()  # as the bench runs them: both wrap the VecEnv
    status = train_run(merge_overrides(RunConfig(), TINY), tmp_path / "run", quiet=True,
                       hooks=TrainHooks(extra_callbacks=[env_timer, timer]))
    table = timer.table()
    assert timer.vector_steps == status["total_timesteps"] // 2
    us = {name: row["us_per_step"] for name, row in table.items()}
    assert {ROLLOUT, UPDATE, POLICY_FORWARD, "VecNormalize", "DummyVecEnv", "other", *ROLLOUT_PARTS,
            *UPDATE_PARTS, ROLLOUT_LOOP, UPDATE_LOOP, LOGGING} - {EPISODES} <= set(us)
    # fast_math (the default) decides in numpy and computes a plain MLP's loss and gradients by hand: no
    # distribution object, autograd forward or backward
    by_hand = (DISTRIBUTION, UPDATE_FORWARD, BACKWARD)
    assert all(row["seconds"] > 0 for name, row in table.items() if name not in ("other", EPISODES, *by_hand))
    assert table[LOSS_GRADS]["seconds"] > 0 and all(table[k]["seconds"] == 0 for k in by_hand)
    # the rollout's and the update's parts are disjoint: with their loops' own time they make up the whole
    rollout_parts = sum(table[k]["seconds"] for k in (*ROLLOUT_PARTS, "VecNormalize", "DummyVecEnv", ROLLOUT_LOOP)
                        if k in table)
    assert rollout_parts == pytest.approx(table[ROLLOUT]["seconds"], abs=1e-3)
    assert table[ROLLOUT_LOOP]["seconds"] > 0 and table[UPDATE_LOOP]["seconds"] > 0
    assert sum(table[k]["seconds"] for k in (*UPDATE_PARTS, UPDATE_LOOP)) == \
        pytest.approx(table[UPDATE]["seconds"], abs=1e-3)
    # the VecEnv layers are exclusive: together they are the outermost layer's inclusive time
    layers = sum(table[name]["seconds"] for name in ("VecNormalize", "DummyVecEnv"))
    assert layers == pytest.approx(timer.seconds["VecNormalize"], abs=1e-3)
    assert us[ROLLOUT] > us[POLICY_FORWARD] and us[ROLLOUT] > layers * 1e6 / timer.vector_steps - 1.0
    assert table[ROLLOUT]["seconds"] + table[UPDATE]["seconds"] + table["other"]["seconds"] == \
        pytest.approx(timer.learn_seconds, abs=1e-3)
    # both timers' wrappers are gone: the model and the VecEnv pickle again
    venv = timer.training_env
    while venv is not None:
        assert not {"step_wait", "step_async", "env_method"} & set(vars(venv))
        venv = getattr(venv, "venv", None)
    assert not {"collect_rollouts", "train", "rollout_forward", "_update_info_buffer"} & set(vars(timer.model))
    assert not {"forward", "evaluate_actions"} & set(vars(timer.model.policy))
    assert not {"add", "_get_samples", "compute_returns_and_advantage"} & set(vars(timer.model.rollout_buffer))
    assert "step" not in vars(timer.model.policy.optimizer)
    # the patched functions are the originals again
    assert torch.Tensor.backward is backward and torch.nn.utils.clip_grad_norm_ is clip
    assert "on_step" not in vars(CallbackList) and lean_ppo.rollout_masks is vec_env.rollout_masks
    assert lean_ppo.loss_and_grads is lean_backward.loss_and_grads
    pickle.dumps(timer.training_env)


def test_the_environments_time_leaves_out_the_advice_layer_in_phase_3(tmp_path, student_market, student_p2):
    timer, env_timer = SegmentTimer(), EnvTimeCallback()
    train_run(student_cfg(3, 256), tmp_path / "p3", init=student_p2, market=student_market, quiet=True,
              hooks=TrainHooks(extra_callbacks=[env_timer, timer]))
    table = timer.table()
    advice = table["AdvisorVecEnv"]["seconds"] + table[STUDENT]["seconds"]  # the layer's own, the student's forward
    assert env_timer.advice_seconds > 0 and env_timer.advice_seconds == pytest.approx(advice, rel=0.25, abs=2e-3)
    assert env_timer.env_seconds + env_timer.advice_seconds == pytest.approx(env_timer.seconds["env"])
    environments = table["VecNormalize"]["seconds"] + table["DummyVecEnv"]["seconds"]
    assert env_timer.env_seconds == pytest.approx(environments, rel=0.25, abs=2e-3)
    venv = timer.training_env
    while venv is not None:  # every wrapper gone again
        assert not {"step_wait", "step_async", "env_method"} & set(vars(venv))
        venv = getattr(venv, "venv", None)


def test_compare_when_given_runs_of_both_phases_gives_medians_and_the_extra():
    p2 = [{"rollout": {"us_per_step": 100.0}}, {"rollout": {"us_per_step": 110.0}}, {"rollout": {"us_per_step": 90.0}}]
    p3 = [{"rollout": {"us_per_step": 150.0}, "student forward": {"us_per_step": 20.0}},
          {"rollout": {"us_per_step": 130.0}, "student forward": {"us_per_step": 30.0}},
          {"rollout": {"us_per_step": 140.0}, "student forward": {"us_per_step": 25.0}}]
    rows = compare(p2, p3)
    assert rows["rollout"] == {"phase2_us": 100.0, "phase3_us": 140.0, "extra_us": 40.0}
    assert rows["student forward"] == {"phase2_us": 0.0, "phase3_us": 25.0, "extra_us": 25.0}
    text = format_comparison(rows)
    assert "+40.0" in text and "student forward" in text.splitlines()[2]
