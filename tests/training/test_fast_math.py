"""``ppo.fast_math``: LeanMaskablePPO's float-tolerance path against sb3-contrib's MaskablePPO on fixed data.

Tolerances: every difference starts at about one float32 ulp (numpy's tanh within 6e-8 of
torch's, fused Adam's last bit, numpy's matrix products summed in another order). After one
update (2 epochs of 4 minibatches: 8 Adam steps) the parameters differ by at most 3e-8 and
the gradients by 2.6e-8 (measured, phases 1 and 2); the tests allow ``rtol=1e-5, atol=1e-6``:
about 30 times that, and 300 times below one Adam step (``lr = 3e-4``), and check that the
update moved the parameters a hundred times further than the two paths are apart.
"""

from __future__ import annotations

import copy
import zipfile
from typing import Any

import numpy as np
import pytest
import torch as th
from sb3_contrib import MaskablePPO
from stable_baselines3.common.logger import configure

from hybrid_trader.agent.advice_block import N_FEATURES, OBS_ADVICE, OBS_ADVICE_PRESENT, PHASE3_OBS_DIM
from hybrid_trader.config import merge_overrides
from hybrid_trader.llm import build_advisor
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_market
from hybrid_trader.training import runner
from hybrid_trader.training.lean_backward import supports
from hybrid_trader.training.lean_forward import LeanForward, fast_tanh
from hybrid_trader.training.lean_ppo import LeanMaskablePPO
from hybrid_trader.training.runner import build_vec_env, make_model
from tests.training.conftest import student_cfg

TINY = {"data.synthetic_days": 12, "ppo.n_steps": 64, "ppo.batch_size": 64, "ppo.n_envs": 4, "ppo.n_epochs": 2,
        "ppo.total_timesteps": 256, "train.validate_every": 0, "ppo.normalizer_warmup_steps": 256}
RTOL, ATOL = 1e-5, 1e-6
BUFFER = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages", "returns",
          "action_masks")


@pytest.fixture(scope="module")
def market():
    return load_market(merge_overrides(RunConfig(), TINY).data, RunConfig().split)


def _model(market, phase: int, algo, fast_math: bool = False, **extra: Any):
    config = merge_overrides(RunConfig(), {**TINY, "env.phase": phase, "ppo.fast_math": fast_math, **extra})
    advisor = build_advisor(config.llm.in_run()) if phase == 3 else None
    venv = build_vec_env(market, config, market.sessions("train"), 4, 0, normalize=True, advisor=advisor)
    model, _ = make_model(config, venv, None, market, algo=algo)
    return model


def _one_rollout(model) -> None:
    """Collect one rollout (``learn`` with the update skipped): the buffer full, the parameters untouched."""
    train = model.train
    model.train = lambda: None
    model.learn(TINY["ppo.total_timesteps"])
    model.train = train


PHASE3 = {"llm": {"backend": "mock", "query": {"mode": "always"}}}  # advice on (nearly) every step


@pytest.mark.parametrize(("phase", "extra"), [
    (1, {}), (2, {}), (3, PHASE3), (3, {**PHASE3, "fusion.advice_input": False}),
    (3, {**PHASE3, "fusion.mode": "learned"})], ids=["1", "2", "3-constant", "3-no-advice-input", "3-learned"])
def test_one_fast_update_matches_maskable_ppo_to_float_tolerance(market, phase, extra):
    """Phase 3: sb3-contrib's MaskablePPO with the project's HybridMaskablePolicy (autograd through the prior and
    the gate) against the gradients by hand."""
    ref = _model(market, phase, MaskablePPO, **extra)
    _one_rollout(ref)
    fast = _model(market, phase, LeanMaskablePPO, fast_math=True, **extra)
    assert fast.fast_math and supports(LeanForward.of(fast.policy, fast_math=True))  # the gradients by hand
    if extra.get("fusion.mode") == "learned":  # a gate as after some training: its gradients are not all zero
        with th.no_grad():
            th.manual_seed(0)
            ref.policy.gate.out.weight.normal_(0.0, 1.0)
    before = copy.deepcopy(ref.policy.state_dict())
    fast.policy.load_state_dict(before)
    for key in BUFFER:  # the same fixed data
        getattr(fast.rollout_buffer, key)[...] = getattr(ref.rollout_buffer, key)
    fast.rollout_buffer.full, fast.rollout_buffer.generator_ready = True, False
    fast.set_logger(configure(None, []))
    fast._current_progress_remaining = ref._current_progress_remaining
    for model in (ref, fast):
        np.random.seed(7)  # the minibatches' permutation
        model.train()
    assert fast.policy.optimizer.param_groups[0]["fused"] is True  # Adam's fused CPU kernel
    logs = [{k: v for k, v in m.logger.name_to_value.items() if k.startswith("train/")} for m in (ref, fast)]
    assert logs[0].keys() == logs[1].keys()
    for key, value in logs[0].items():  # losses, clip fraction, approx KL, explained variance
        assert logs[1][key] == pytest.approx(value, rel=RTOL, abs=ATOL), key
    moved, apart = 0.0, 0.0
    for (name, pa), pb in zip(ref.policy.named_parameters(), fast.policy.parameters(), strict=True):
        assert th.allclose(pa.grad, pb.grad, rtol=RTOL, atol=ATOL), name  # the last minibatch's gradients
        assert th.allclose(pa, pb, rtol=RTOL, atol=ATOL), name
        moved = max(moved, float((pa.detach() - before[name]).abs().max()))
        apart = max(apart, float((pa.detach() - pb.detach()).abs().max()))
    assert moved > 100 * apart  # the update moved the parameters far more than the two paths differ
    for sa, sb in zip(ref.policy.optimizer.state_dict()["state"].values(),
                      fast.policy.optimizer.state_dict()["state"].values(), strict=True):
        for k in ("exp_avg", "exp_avg_sq"):
            assert th.allclose(sa[k], sb[k], rtol=RTOL, atol=ATOL * 1e-3 if k == "exp_avg_sq" else ATOL), k


def test_fast_rollout_decisions_match_the_torch_forward(market):
    model = _model(market, 2, LeanMaskablePPO, fast_math=True)
    fast, exact = LeanForward.of(model.policy, fast_math=True), LeanForward.of(model.policy)
    assert fast is not None and fast.numpy is not None and exact is not None and exact.numpy is None
    gen = np.random.default_rng(1)
    obs = th.as_tensor(gen.standard_normal((64, 228)).astype(np.float32))
    masks = gen.random((64, 6)) > 0.4
    masks[:, 0] = True
    for m in (masks, None):
        with th.no_grad():
            th.manual_seed(5)
            a, v, lp = fast(obs, m)
            th.manual_seed(5)
            ea, ev, elp = exact(obs, m)
        assert th.equal(a, ea)  # the same draws from torch's generator
        assert v.shape == ev.shape and lp.shape == elp.shape
        assert th.allclose(v, ev, rtol=RTOL, atol=ATOL) and th.allclose(lp, elp, rtol=RTOL, atol=ATOL)
        if m is not None:
            assert m[np.arange(64), a.numpy()].all()


@pytest.mark.parametrize("advice_input", [True, False])
def test_fast_phase3_rollout_decisions_match_the_torch_forward(market, advice_input):
    """Phase 3 with the constant prior decides in numpy: the same draws, values and log-probabilities (float
    tolerance) and the same RL logits left for the policy's decision records as the torch forward with its hooks."""
    model = _model(market, 3, LeanMaskablePPO, fast_math=True, **PHASE3, **{"fusion.advice_input": advice_input})
    policy = model.policy
    fast, exact = LeanForward.of(policy, fast_math=True), LeanForward.of(policy)
    assert fast is not None and fast.numpy is not None and exact is not None and exact.numpy is None
    gen = np.random.default_rng(1)
    obs = np.zeros((64, PHASE3_OBS_DIM), np.float32)
    obs[:, :N_FEATURES] = gen.standard_normal((64, N_FEATURES))
    advised = gen.random(64) < 0.7
    obs[advised, OBS_ADVICE.start:OBS_ADVICE.start + 6] = gen.dirichlet(np.ones(6) * 0.5, advised.sum())
    obs[advised, OBS_ADVICE_PRESENT] = 1.0
    obs_t = th.as_tensor(obs)
    masks = gen.random((64, 6)) > 0.4
    masks[:, 0] = True
    for m in (masks, None):
        records = []
        for forward in (fast, exact):
            policy.decision_log = []
            with th.no_grad():
                th.manual_seed(5)
                records.append((*forward(obs_t, m), policy.decision_log[0][0]))
        (a, v, lp, rl), (ea, ev, elp, erl) = records
        assert th.equal(a, ea)  # the same draws from torch's generator
        for ours, theirs in ((v, ev), (lp, elp), (rl, erl)):
            assert ours.shape == theirs.shape and th.allclose(ours, theirs, rtol=RTOL, atol=ATOL)
        with th.no_grad():  # the prior is in the decision: without it the log-probabilities differ
            policy.llm_weight, weight = 0.0, policy.llm_weight
            th.manual_seed(5)
            rl_only = fast(obs_t, m)[2]
            policy.llm_weight = weight
        assert float((rl_only - lp)[th.as_tensor(advised)].abs().max()) > 1e-2


def test_fast_rollout_draws_follow_torch_multinomial_step_after_step(market):
    """The numpy rollout's sampling (argmax(p / q), q exponential draws) consumes torch's generator as
    ``torch.multinomial`` does: a run of decisions gives the same actions as multinomial on the same probabilities."""
    model = _model(market, 2, LeanMaskablePPO, fast_math=True)
    fast = LeanForward.of(model.policy, fast_math=True)
    assert fast is not None and fast.numpy is not None
    gen = np.random.default_rng(2)
    obs = [th.as_tensor(gen.standard_normal((4, 228)).astype(np.float32)) for _ in range(200)]
    th.manual_seed(11)
    with th.no_grad():
        ours = [fast(o, None)[0] for o in obs]
    th.manual_seed(11)
    with th.no_grad():
        theirs = []
        for o, a in zip(obs, ours, strict=True):
            _, dist = fast._latent(o, th.tanh)
            theirs.append(th.multinomial(dist.probs, 1, True).flatten())
            assert a.dtype == th.int64
    assert all(th.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert len({tuple(a.tolist()) for a in ours}) > 20  # the draws vary


def test_fast_tanh_values_and_gradients_match_torch():
    x = th.randn(512, 128, generator=th.Generator().manual_seed(2), requires_grad=True)
    y, ref = fast_tanh(x), th.tanh(x)
    assert (y - ref).abs().max() <= 1.2e-7
    g = th.randn(512, 128, generator=th.Generator().manual_seed(3))
    (gx,) = th.autograd.grad((y * g).sum(), x)
    (rx,) = th.autograd.grad((ref * g).sum(), x)
    assert th.allclose(gx, rx, rtol=0, atol=1e-6)
    with th.no_grad():
        assert (fast_tanh(x) - ref).abs().max() <= 1.2e-7
    assert th.equal(fast_tanh(x.double()), th.tanh(x.double()))  # not float32: torch's own


def test_fast_math_model_saves_in_maskable_ppo_format(tmp_path, market):
    model = _model(market, 2, LeanMaskablePPO, fast_math=True)
    model.learn(TINY["ppo.total_timesteps"])
    assert model.policy.optimizer.param_groups[0]["fused"] is True
    model.save(tmp_path / "m.zip")
    with zipfile.ZipFile(tmp_path / "m.zip") as z:
        assert "fast_math" not in z.read("data").decode()
    plain = MaskablePPO.load(tmp_path / "m.zip")
    assert not plain.policy.optimizer.param_groups[0]["fused"]  # the saved optimizer is Adam's default
    for pa, pb in zip(plain.policy.state_dict().values(), model.policy.state_dict().values(), strict=True):
        assert th.equal(pa, pb)
    assert LeanMaskablePPO.load(tmp_path / "m.zip").fast_math is False  # the run's setting decides (runner)


def test_phase3_with_the_student_trains_with_fast_math(tmp_path, student_market, student_p2):
    """Phase 3's policy (its own distribution: the prior) takes the fast update and the numpy rollout."""
    config = student_cfg(3, 256, **{"ppo.fast_math": True})
    runner.train_run(config, tmp_path / "p3", init=student_p2, market=student_market, quiet=True)
    model = LeanMaskablePPO.load(tmp_path / "p3" / "model.zip")
    lean = LeanForward.of(model.policy, fast_math=True)
    assert lean is not None and lean.numpy is not None and supports(lean)  # the constant prior: numpy, by hand
    assert all(th.isfinite(p).all() for p in model.policy.parameters())


def test_resume_takes_fast_math_from_the_resuming_config(tmp_path, market):
    """``fast_math`` is not saved with the model: ``--resume`` trains on with the setting it is given."""
    from stable_baselines3.common.callbacks import BaseCallback

    seen: list[tuple[bool, object]] = []

    class Seen(BaseCallback):
        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            model: Any = self.model
            seen.append((model.fast_math, model.policy.optimizer.param_groups[0].get("fused")))

    def config(fast_math: bool, steps: int) -> RunConfig:
        return merge_overrides(RunConfig(), {**TINY, "env.phase": 1, "ppo.fast_math": fast_math,
                                             "ppo.total_timesteps": steps, "train.progress_bar": False})

    run = tmp_path / "run"
    runner.train_run(config(False, 256), run, market=market, quiet=True,
                     hooks=runner.TrainHooks(extra_callbacks=[Seen()]))
    runner.train_run(config(True, 512), run, resume=True, market=market, quiet=True,
                     hooks=runner.TrainHooks(extra_callbacks=[Seen()]))
    assert seen[0] == (False, None) and seen[-1][0] is True
    assert LeanMaskablePPO.load(run / "model.zip").policy.optimizer.param_groups[0]["fused"] is None


@pytest.mark.parametrize("fast_math", [False, True])
def test_a_body_frozen_by_freeze_body_steps_does_not_move_while_the_head_learns(fast_math):
    # fast_math's gradients by hand cover every parameter: a frozen layer must get none, as autograd gives it
    from hybrid_trader.training.callbacks import FreezeBodyCallback

    th.set_num_threads(1)
    c = merge_overrides(RunConfig(), {"data.synthetic_days": 12, "ppo.n_steps": 128, "ppo.batch_size": 128,
                                      "ppo.n_envs": 2, "ppo.n_epochs": 2, "train.validate_every": 0,
                                      "train.progress_bar": False, "ppo.update_threads": 1, "env.phase": 1,
                                      "ppo.total_timesteps": 256, "ppo.fast_math": fast_math})
    market = load_market(c.data, c.split)
    venv = runner.build_vec_env(market, c, market.sessions("train"), 2, 0, normalize=True)
    model, _ = runner.make_model(c, venv, market=market)
    body = {k: v.detach().clone() for k, v in model.policy.mlp_extractor.state_dict().items()}
    head = model.policy.action_net.weight.detach().clone()
    model.learn(256, callback=FreezeBodyCallback(10_000))
    assert float((model.policy.action_net.weight - head).abs().max()) > 0
    moved = {k: float((v - body[k]).abs().max()) for k, v in model.policy.mlp_extractor.state_dict().items()}
    assert max(moved.values()) == 0.0, moved
