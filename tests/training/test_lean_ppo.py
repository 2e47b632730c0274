"""LeanMaskablePPO learns exactly what sb3-contrib's MaskablePPO learns: same seed, same bits."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch as th
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.distributions import MaskableCategorical
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, EveryNTimesteps

from hybrid_trader.config import merge_overrides
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_market
from hybrid_trader.training import runner
from hybrid_trader.training.lean_forward import LeanForward, LeanMaskableCategoricalDistribution
from hybrid_trader.training.lean_ppo import LeanMaskablePPO, locals_updater
from hybrid_trader.training.runner import build_vec_env, make_model
from tests.training.conftest import student_cfg

TINY = {"data.synthetic_days": 12, "ppo.n_steps": 64, "ppo.batch_size": 64, "ppo.n_envs": 4, "ppo.n_epochs": 2,
        "ppo.total_timesteps": 512, "train.validate_every": 0,
        "ppo.normalizer_warmup_steps": 256, "ppo.fast_math": False}


@pytest.fixture(scope="module")
def market():
    return load_market(merge_overrides(RunConfig(), TINY).data, RunConfig().split)


class _Record:
    """Every rollout's buffer arrays and every update's logged losses of one model."""

    def __init__(self) -> None:
        self.buffers: list[dict[str, np.ndarray]] = []
        self.logs: list[dict[str, float]] = []


def _train(cls, market, phase: int, record: _Record):
    config = merge_overrides(RunConfig(), {**TINY, "env.phase": phase})
    venv = build_vec_env(market, config, market.sessions("train"), 4, 0, normalize=True)
    model, _ = make_model(config, venv, None, market, algo=cls)
    original_train = model.train

    def train() -> None:
        buf = model.rollout_buffer
        record.buffers.append({k: np.array(getattr(buf, k)) for k in (
            "observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages", "returns",
            "action_masks")})
        original_train()
        record.logs.append({k: v for k, v in model.logger.name_to_value.items() if k.startswith("train/")})

    model.train = train
    model.learn(config.ppo.total_timesteps)
    venv.close()
    return model


@pytest.mark.parametrize("phase", [1, 2])
def test_lean_ppo_trains_bit_for_bit_as_maskable_ppo_on_the_same_seed(market, phase):
    old, new = _Record(), _Record()
    a = _train(MaskablePPO, market, phase, old)
    b = _train(LeanMaskablePPO, market, phase, new)
    assert isinstance(b.policy.action_dist, LeanMaskableCategoricalDistribution)
    assert len(old.buffers) == len(new.buffers) == 2
    for ra, rb in zip(old.buffers, new.buffers, strict=True):
        for key in ra:  # actions, log-probabilities, values, GAE: every bit
            assert np.array_equal(ra[key], rb[key]), key
    assert old.logs == new.logs  # losses, clip fraction, approx KL, explained variance
    for (name, pa), pb in zip(a.policy.state_dict().items(), b.policy.state_dict().values(), strict=True):
        assert th.equal(pa, pb), name
    for sa, sb in zip(a.policy.optimizer.state_dict()["state"].values(),
                      b.policy.optimizer.state_dict()["state"].values(), strict=True):
        assert all(th.equal(sa[k], sb[k]) for k in sa)


def test_lean_distribution_matches_maskable_categorical_values_and_gradients():
    gen = th.Generator().manual_seed(3)
    raw = th.randn(32, 6, generator=gen, requires_grad=True)
    masks = th.rand(32, 6, generator=gen) > 0.4
    masks[:, 0] = True
    actions = th.stack([th.multinomial(m.float(), 1)[0] for m in masks])
    for m in (masks, None):
        ref = MaskableCategorical(logits=raw)
        ref.apply_masking(m)
        lean = LeanMaskableCategoricalDistribution(6).proba_distribution(raw)
        lean.apply_masking(m)
        assert th.equal(ref.logits, lean.logits) and th.equal(ref.probs, lean.distribution.probs)
        out_ref = ref.log_prob(actions).sum() + ref.entropy().sum()
        out_new = lean.log_prob(actions).sum() + lean.entropy().sum()
        assert th.equal(out_ref, out_new)
        g_ref, = th.autograd.grad(out_ref, raw)
        g_new, = th.autograd.grad(out_new, raw)
        assert th.equal(g_ref, g_new)
        th.manual_seed(9)
        s_ref = ref.sample()
        th.manual_seed(9)
        assert th.equal(s_ref, lean.sample())
        assert th.equal(th.argmax(ref.probs, dim=1), lean.mode())


def test_lean_model_saves_in_maskable_ppo_format_and_loads_back(tmp_path, market):
    model = _train(LeanMaskablePPO, market, 1, _Record())
    model.save(tmp_path / "m.zip")
    plain = MaskablePPO.load(tmp_path / "m.zip")
    lean = LeanMaskablePPO.load(tmp_path / "m.zip")
    assert isinstance(lean.policy.action_dist, LeanMaskableCategoricalDistribution)
    for pa, pb in zip(plain.policy.state_dict().values(), model.policy.state_dict().values(), strict=True):
        assert th.equal(pa, pb)


def test_phase3_with_the_student_trains_bit_for_bit_as_maskable_ppo(tmp_path, monkeypatch, student_market, student_p2):
    """The phase 3 policy (its own forward, the prior) on LeanMaskablePPO's distribution and buffer: same bits."""
    config = student_cfg(3, 256, **{"ppo.fast_math": False})
    lean = runner.train_run(config, tmp_path / "lean", init=student_p2, market=student_market, quiet=True)
    monkeypatch.setattr(runner, "LeanMaskablePPO", MaskablePPO)
    plain = runner.train_run(config, tmp_path / "plain", init=student_p2, market=student_market, quiet=True)
    assert lean["total_timesteps"] == plain["total_timesteps"] == 256
    assert LeanForward.of(LeanMaskablePPO.load(tmp_path / "lean" / "model.zip").policy) is not None  # the lean path
    a = MaskablePPO.load(tmp_path / "lean" / "model.zip")
    b = MaskablePPO.load(tmp_path / "plain" / "model.zip")
    for (name, pa), pb in zip(a.policy.state_dict().items(), b.policy.state_dict().values(), strict=True):
        assert th.equal(pa, pb), name

    def rows(run):
        return [{k: v for k, v in json.loads(line).items() if k.startswith(("train/", "llm/", "fusion/", "trading/"))}
                for line in (tmp_path / run / "progress.jsonl").read_text().splitlines()]

    assert rows("lean") == rows("plain") and any("train/loss" in r for r in rows("lean"))


class _SeesLocals(BaseCallback):
    """Records what a callback reads from ``self.locals`` on each step."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple] = []

    def _on_step(self) -> bool:
        loc = self.locals
        self.seen.append((int(loc["n_steps"]), loc["actions"].tolist(), loc["rewards"].tolist(),
                          loc["dones"].tolist(), len(loc["infos"])))
        return True


def test_callbacks_see_the_same_locals_each_step_as_with_maskable_ppo(market):
    """The rollout updates a callback tree's shared locals dict once a step (``locals_updater``): every callback
    still reads that step's values, as under sb3-contrib's MaskablePPO."""
    seen = []
    for cls in (MaskablePPO, LeanMaskablePPO):
        config = merge_overrides(RunConfig(), {**TINY, "env.phase": 2, "ppo.total_timesteps": 256})
        venv = build_vec_env(market, config, market.sessions("train"), 4, 0, normalize=True)
        model, _ = make_model(config, venv, None, market, algo=cls)
        first, second = _SeesLocals(), _SeesLocals()
        model.learn(config.ppo.total_timesteps, callback=[first, second])
        venv.close()
        assert first.seen == second.seen and len(first.seen) == 64
        seen.append(first.seen)
    assert seen[0] == seen[1]


def test_locals_updater_updates_once_only_where_the_tree_shares_one_dict():
    class _Model:
        num_timesteps = 0

    def started(callback):
        for cb in (callback, *getattr(callback, "callbacks", ()), *filter(None, [getattr(callback, "callback", None)])):
            cb.model = _Model()
        callback.on_training_start({}, {})
        return callback

    plain = started(CallbackList([_SeesLocals(), _SeesLocals()]))
    assert locals_updater(plain) == plain.locals.update
    plain.locals.update({"x": 1})
    assert all(cb.locals["x"] == 1 for cb in plain.callbacks)
    event = started(EveryNTimesteps(10, _SeesLocals()))  # a child with a dict of its own
    assert locals_updater(event) == event.update_locals

    class _Own(_SeesLocals):
        def update_locals(self, locals_):
            super().update_locals({**locals_, "own": True})

    custom = started(CallbackList([_SeesLocals(), _Own()]))
    assert locals_updater(custom) == custom.update_locals
