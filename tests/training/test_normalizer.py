"""The lean normaliser (``training.normalizer``)."""

from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np
import pytest
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from hybrid_trader.run.market import Market
from hybrid_trader.training.advice_env import PartialVecNormalize
from hybrid_trader.training.normalizer import LeanVecNormalize, freeze_statistics, warmup_statistics
from hybrid_trader.training.runner import build_vec_env, make_model, train_run
from tests.training.conftest import env_fns, legal_actions, student_cfg


def test_running_normaliser_gives_vec_normalize_numbers_when_stepped(student_market):
    config = student_cfg(2)
    lean = LeanVecNormalize(DummyVecEnv(env_fns(student_market, config)))
    sb3 = VecNormalize(DummyVecEnv(env_fns(student_market, config)), norm_obs=True, norm_reward=False, clip_obs=10.0)
    rng = np.random.default_rng(2)
    np.testing.assert_array_equal(lean.reset(), sb3.reset())
    for _ in range(300):
        actions = legal_actions(sb3, rng)
        a, b = lean.step(actions), sb3.step(actions)
        np.testing.assert_array_equal(a[0], b[0])
        for info_a, info_b in zip(a[3], b[3], strict=True):
            if "terminal_observation" in info_b:
                np.testing.assert_array_equal(info_a["terminal_observation"], info_b["terminal_observation"])
    np.testing.assert_array_equal(lean.obs_rms.mean, sb3.obs_rms.mean)
    np.testing.assert_array_equal(lean.obs_rms.var, sb3.obs_rms.var)
    assert lean.obs_rms.count == sb3.obs_rms.count


def test_frozen_normaliser_never_moves_when_stepped(student_market):
    config = student_cfg(2)
    vec = LeanVecNormalize(DummyVecEnv(env_fns(student_market, config)), frozen=True)
    dim = vec.n_normalized
    mean, var = np.linspace(-1, 1, dim), np.linspace(0.5, 2, dim)
    vec.set_statistics(mean, var, 100.0)
    rng = np.random.default_rng(3)
    vec.reset()
    for _ in range(50):
        obs = vec.step(legal_actions(vec, rng))[0]
    np.testing.assert_array_equal(vec.obs_rms.mean, mean)
    np.testing.assert_array_equal(vec.obs_rms.var, var)
    raw = vec.get_original_obs()
    np.testing.assert_allclose(obs, np.clip((raw - mean) / np.sqrt(var + 1e-8), -10, 10), rtol=1e-6, atol=1e-6)


def test_prefix_normaliser_leaves_the_rest_as_it_is_when_frozen(student_market):
    vec = LeanVecNormalize(DummyVecEnv(env_fns(student_market, student_cfg(2))), n_normalized=200, frozen=True)
    vec.set_statistics(np.full(200, 5.0), np.full(200, 4.0), 1.0)
    raw = np.random.default_rng(4).normal(size=(3, vec.observation_space.shape[0])).astype(np.float32)
    out = vec.normalize_obs(raw)
    np.testing.assert_array_equal(out[:, 200:], raw[:, 200:])
    np.testing.assert_allclose(out[:, :200], (raw[:, :200] - 5.0) / 2.0, rtol=1e-5)
    np.testing.assert_allclose(vec.unnormalize_obs(out), raw, rtol=1e-5, atol=1e-5)


def test_frozen_normaliser_gives_the_bits_of_the_clip_formula_when_given_any_input(student_market):
    """float64 arithmetic then float32, as VecNormalize: bit for bit, float64 and NaN inputs included."""
    vec = LeanVecNormalize(DummyVecEnv(env_fns(student_market, student_cfg(2))), n_normalized=200, frozen=True)
    dim = vec.observation_space.shape[0]
    mean, var = np.linspace(-1, 1, 200), np.linspace(0.5, 2, 200)
    vec.set_statistics(mean, var, 1.0)
    raw = np.random.default_rng(6).normal(scale=20, size=(3, dim))
    raw[0, 3] = np.nan
    for obs in (raw, raw.astype(np.float32), raw[1]):
        x = np.array(obs, dtype=np.float32)
        want = x.copy()
        want[..., :200] = np.clip((x[..., :200] - mean) / np.sqrt(var + 1e-8), -10.0, 10.0)
        got = vec.normalize_obs(obs)
        assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
    other = RunningMeanStd(shape=(dim,))  # statistics replaced while frozen: noticed
    other.mean[:] = 2.0
    vec.obs_rms = other
    np.testing.assert_allclose(vec.normalize_obs(raw)[:, :200], np.clip(raw[:, :200] - 2.0, -10, 10), rtol=1e-5)


def test_warmup_statistics_read_only_training_days_when_later_days_change(student_market):
    """No look-ahead: the fit is the same when every bar after the training days is different."""
    config = student_cfg(2)
    before = warmup_statistics(student_market, config)
    bars = student_market.bars
    first_later = student_market.sessions("val").start
    cut = int(bars.session_bounds[first_later, 0])
    features = student_market.features
    bar, llm_market = features.bar.copy(), features.llm_market.copy()
    bar[cut:], llm_market[cut:] = 123.0, -7.0
    changed = Market(bars, replace(features, bar=bar, llm_market=llm_market), student_market.split)
    after = warmup_statistics(changed, config)
    np.testing.assert_array_equal(before.mean, after.mean)
    np.testing.assert_array_equal(before.var, after.var)
    assert np.isfinite(before.var).all() and (before.var > 0).any()


def test_freeze_statistics_keeps_the_earlier_runs_and_fits_the_rest_when_wider(student_market):
    vec = LeanVecNormalize(DummyVecEnv(env_fns(student_market, student_cfg(2))))
    dim = vec.n_normalized
    src = LeanVecNormalize(DummyVecEnv(env_fns(student_market, student_cfg(2))), n_normalized=200)
    src.set_statistics(np.full(200, 2.0), np.full(200, 3.0), 50.0)
    src.obs_rms.var[7] = 0.0  # an input that never varied in the earlier run
    fitted = RunningMeanStd(shape=(dim,))
    fitted.mean[:], fitted.var[:], fitted.count = 1.0, 9.0, 10.0
    refit = freeze_statistics(vec, src, lambda: fitted)
    assert refit == [7] and vec.frozen
    assert vec.obs_rms.mean[0] == 2.0 and vec.obs_rms.var[0] == 3.0
    assert vec.obs_rms.mean[7] == 2.0 and vec.obs_rms.var[7] == pytest.approx(9.0 + 1.0)  # about the old constant
    assert vec.obs_rms.mean[dim - 1] == 1.0 and vec.obs_rms.var[dim - 1] == 9.0
    with pytest.raises(ValueError, match=f"fitted for inputs 200..{dim - 1}"):
        freeze_statistics(vec, src, None)


def test_saved_normaliser_normalises_the_same_when_loaded(student_market, tmp_path):
    vec = LeanVecNormalize(DummyVecEnv(env_fns(student_market, student_cfg(2))), n_normalized=100, frozen=True)
    vec.set_statistics(np.full(100, 1.5), np.full(100, 2.0), 7.0)
    path = tmp_path / "vecnormalize.pkl"
    vec.save(str(path))
    loaded = VecNormalize.load(str(path), DummyVecEnv(env_fns(student_market, student_cfg(2))))
    assert isinstance(loaded, LeanVecNormalize) and loaded.frozen and loaded.n_normalized == 100
    raw = np.random.default_rng(5).normal(size=(2, loaded.observation_space.shape[0])).astype(np.float32)
    np.testing.assert_array_equal(loaded.normalize_obs(raw), vec.normalize_obs(raw))


def test_old_phase3_normaliser_loads_when_pickled_before(student_market):
    """Runs trained before saved ``PartialVecNormalize`` objects (no cached values): they still normalise."""
    old = PartialVecNormalize(DummyVecEnv(env_fns(student_market, student_cfg(2))), n_normalized=200)
    state = old.__getstate__()
    state.pop("_std", None)
    restored = PartialVecNormalize.__new__(PartialVecNormalize)
    restored.__setstate__(pickle.loads(pickle.dumps(state)))
    raw = np.full((1, old.observation_space.shape[0]), 3.0, dtype=np.float32)
    np.testing.assert_array_equal(restored.normalize_obs(raw), old.normalize_obs(raw))


@pytest.mark.parametrize("normalizer", ["frozen", "running"])
def test_training_keeps_its_normaliser_setting_when_it_trains(student_market, tmp_path, normalizer):
    config = student_cfg(2, 256, **{"ppo.normalizer": normalizer})
    train_run(config, tmp_path / "run", market=student_market, quiet=True)
    saved = VecNormalize.load(str(tmp_path / "run" / "vecnormalize.pkl"),
                              DummyVecEnv(env_fns(student_market, config)))
    assert isinstance(saved, LeanVecNormalize)
    fitted = warmup_statistics(student_market, config)
    if normalizer == "frozen":  # the warm-up fit, unchanged by training
        np.testing.assert_array_equal(saved.obs_rms.mean, fitted.mean)
    else:  # SB3's running statistics: moved by the training steps
        assert not np.array_equal(saved.obs_rms.mean, fitted.mean)
        assert saved.obs_rms.count > config.ppo.total_timesteps * 0.5


def test_make_model_fits_the_normaliser_on_training_days_when_there_is_no_init(student_market):
    config = student_cfg(2)
    venv = build_vec_env(student_market, config, student_market.sessions("train"), 2, 0, normalize=True)
    try:
        make_model(config, venv, market=student_market)
        assert venv.frozen
        np.testing.assert_array_equal(venv.obs_rms.mean, warmup_statistics(student_market, config).mean)
    finally:
        venv.close()
    no_market = build_vec_env(student_market, replace(config), student_market.sessions("train"), 2, 0,
                              normalize=True)
    try:
        with pytest.raises(ValueError, match="fitted"):
            make_model(config, no_market)
    finally:
        no_market.close()
