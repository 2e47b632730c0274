"""Train MaskablePPO on the trading environment: phases 1 and 2 (phase 3 adds the advisor).

``train_run`` owns one run directory::

    RUN_DIR/config.yaml          resolved configuration
    RUN_DIR/split.json           the sessions (and dates) of train / val / test
    RUN_DIR/model.zip            final model (sb3 zip, includes the optimizer state)
    RUN_DIR/vecnormalize.pkl     observation normalisation fitted on the training split
    RUN_DIR/checkpoints/         step_XXXXXXXXX.zip (+ _vecnormalize.pkl), the newest few
    RUN_DIR/tb/                  TensorBoard events (PPO and trading metrics)
    RUN_DIR/progress.jsonl       the same metrics, one JSON object per update
    RUN_DIR/validation.jsonl     periodic train/validation results
    RUN_DIR/status.json          running / finished / interrupted, steps done
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_trader.config import load_yaml_config, save_config
from hybrid_trader.errors import UserError
from hybrid_trader.training.config import RunConfig
from hybrid_trader.training.market import Market, env_factory, load_market


def default_run_dir(config: RunConfig, root: str | Path = "runs") -> Path:
    """``runs/p<phase>-<market>-<data>-s<seed>-<time>``: a run is named by what it is."""
    data = Path(config.data.path).stem if config.data.path else f"synthetic-e{config.data.synthetic_edge:g}"
    market = config.env.market or config.data.market
    if market is None and config.data.path:
        from hybrid_trader.data.loader import guess_market

        market = guess_market(Path(config.data.path))
    market = market or "NQ"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"p{config.env.phase}-{market}-{data}-s{config.ppo.seed}-{stamp}"


def find_model(run_dir: Path) -> tuple[Path, Path | None]:
    """The final model of a run, else its newest checkpoint, with its normalisation file."""
    run_dir = Path(run_dir)
    if (run_dir / "model.zip").exists():
        vec = run_dir / "vecnormalize.pkl"
        return run_dir / "model.zip", vec if vec.exists() else None
    ckpts = sorted((run_dir / "checkpoints").glob("step_*.zip"))
    if not ckpts:
        raise UserError(
            f"{run_dir} has no model.zip and no checkpoint",
            fix="point at a run directory made by 'hybrid-trader train' (it may have stopped before its first checkpoint)",
        )
    vec = Path(str(ckpts[-1].with_suffix("")) + "_vecnormalize.pkl")
    return ckpts[-1], vec if vec.exists() else None


def load_run_config(run_dir: Path) -> RunConfig:
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise UserError(f"{run_dir} has no config.yaml", fix="point at a run directory made by 'hybrid-trader train'")
    return load_yaml_config(path, RunConfig)


def build_vec_env(market: Market, config: RunConfig, sessions, n_envs: int, seed: int, *, normalize: bool,
                  training: bool = True, wrap=None, advisor=None):
    """Vectorised, monitored (and optionally normalised) environments over ``sessions``.

    Phase 3 (``advisor`` given): the advisor wrapper appends the advice to each
    observation, and only the 261 features are normalised.
    """
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecMonitor, VecNormalize

    subproc = config.ppo.vec_env == "subproc" and n_envs > 1
    risk = config.risk if config.env.phase == 3 else None
    fns = [env_factory(market, config.env, sessions, seed + i, ignore_sigint=subproc, wrap=wrap, risk=risk)
           for i in range(n_envs)]
    if subproc:
        method = "fork" if sys.platform.startswith("linux") else "spawn"
        venv = SubprocVecEnv(fns, start_method=method)
    else:
        venv = DummyVecEnv(fns)
    venv = VecMonitor(venv)
    if advisor is not None:
        from hybrid_trader.training.advice_env import AdvisorVecEnv, PartialVecNormalize

        venv = AdvisorVecEnv(venv, advisor, market, max_age=advisor.config.batching.max_age_steps)
        if normalize:
            venv = PartialVecNormalize(venv, norm_obs=True, norm_reward=False, clip_obs=10.0, training=training)
        return venv
    if normalize:
        venv = VecNormalize(venv, norm_obs=True, norm_reward=False, clip_obs=10.0, training=training)
    return venv


def make_validation_fn(market: Market, config: RunConfig):
    """Deterministic policy over the last days of train and of validation -> logged figures."""
    from hybrid_trader.evaluation.metrics import compute_metrics
    from hybrid_trader.evaluation.policies import AgentPolicy
    from hybrid_trader.evaluation.runner import evaluation_env, run_policy

    k = config.train.validation_sessions
    parts = {"train": list(market.sessions("train"))[-k:], "val": list(market.sessions("val"))[:k]}

    def evaluate(model) -> dict:
        out = {}
        for name, sessions in parts.items():
            if not sessions:
                continue
            env = evaluation_env(market, config.env, sessions)
            result = run_policy(AgentPolicy(model, model.get_vec_normalize_env()), env)
            m = compute_metrics(result)
            days = max(m.get("Days", len(sessions)) or 1, 1)
            out[f"{name}/net_pnl_per_day"] = float(m["Net PnL [$]"]) / days
            out[f"{name}/sharpe"] = _finite(m.get("Sharpe (ann.)"))
            out[f"{name}/trades"] = int(m["Trades"])
        return out

    return evaluate


def _finite(x: Any) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if np.isfinite(x) else None


def make_model(config: RunConfig, venv, init: Path | None = None):
    """A new MaskablePPO for ``config`` on ``venv``, initialised from the run ``init`` if given.

    Returns ``(model, notes)`` where ``notes`` says which layers were adapted.
    """
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import VecNormalize

    from hybrid_trader.training.transfer import transfer_normalization, transfer_weights

    ppo = config.ppo
    hyper = dict(
        learning_rate=ppo.learning_rate, n_steps=ppo.n_steps, batch_size=ppo.batch_size, n_epochs=ppo.n_epochs,
        gamma=ppo.gamma, gae_lambda=ppo.gae_lambda, clip_range=ppo.clip_range, ent_coef=ppo.ent_coef,
        vf_coef=ppo.vf_coef, max_grad_norm=ppo.max_grad_norm, target_kl=ppo.target_kl,
    )
    policy: Any = "MlpPolicy"
    policy_kwargs: dict[str, Any] = {"net_arch": list(ppo.net_arch)}
    if config.env.phase == 3:
        from hybrid_trader.training.policy import HybridMaskablePolicy

        policy = HybridMaskablePolicy
        policy_kwargs["llm_weight"] = config.fusion.llm_weight
    model = MaskablePPO(policy, venv, seed=ppo.seed, device=ppo.device, verbose=0, policy_kwargs=policy_kwargs,
                        **hyper)
    notes: list[str] = []
    if init is not None:
        src_path, src_vec = find_model(Path(init))
        src = MaskablePPO.load(src_path, device=ppo.device)
        notes = transfer_weights(src.policy, model.policy)
        if src_vec is not None and isinstance(venv, VecNormalize):
            with open(src_vec, "rb") as f:
                transfer_normalization(pickle.load(f), venv)
    return model, notes


def train_run(
    config: RunConfig,
    run_dir: Path,
    *,
    init: Path | None = None,
    resume: bool = False,
    market: Market | None = None,
    extra_callbacks: list | None = None,
    quiet: bool = False,
) -> dict:
    """Train (or resume) one run. Returns the final status dict; raises KeyboardInterrupt after saving."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.logger import Logger, TensorBoardOutputFormat
    from stable_baselines3.common.vec_env import VecNormalize

    from hybrid_trader.training.callbacks import (
        CheckpointCallback, FreezeBodyCallback, JsonlWriter, StopOnSignal, TradingMetricsCallback, ValidationCallback,
        write_status,
    )
    run_dir = Path(run_dir)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    config.validate()
    if resume:
        if not (run_dir / "status.json").exists():
            raise UserError(f"--resume: {run_dir} has no status.json", fix="resume a run directory made by 'hybrid-trader train'")
        ckpt, vec_path = find_model(run_dir)
        status = json.loads((run_dir / "status.json").read_text())
        if status.get("state") == "finished" and status.get("total_timesteps", 0) >= config.ppo.total_timesteps:
            say(f"{run_dir} already finished {status['total_timesteps']:,} steps; nothing to resume")
            return status
    else:
        if run_dir.exists() and any(run_dir.iterdir()):
            raise UserError(f"run directory {run_dir} is not empty",
                            fix="choose another --out, or add --resume to continue the run in it")
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(config, run_dir / "config.yaml", header=f"hybrid-trader run configuration (phase {config.env.phase})")

    market = market or load_market(config.data, config.split)
    split_info = {**market.split.to_dict(), "dates": {
        name: [str(market.bars.session_dates[r.start]), str(market.bars.session_dates[r.stop - 1])] if len(r) else None
        for name in ("train", "val", "test") for r in [market.sessions(name)]}}
    (run_dir / "split.json").write_text(json.dumps(split_info, indent=2))
    say(market.describe())

    ppo = config.ppo
    import torch

    torch.set_num_threads(ppo.torch_threads)
    # Checking every action distribution's arguments costs about a third of a policy step
    # (measured: training ~10% faster without); the network's outputs are finite by
    # construction and masked logits are handled by MaskableCategorical.
    torch.distributions.Distribution.set_default_validate_args(ppo.validate_distributions)
    phase3 = config.env.phase == 3
    advisor = None
    if phase3:
        from hybrid_trader.llm import build_advisor

        llm_config = config.llm_config()
        advisor = build_advisor(llm_config)
        (run_dir / "llm.yaml").write_text(_yaml_dump(llm_config.to_dict()))
        say(f"LLM advisor: {llm_config.backend} back end, {llm_config.mode} mode, query {llm_config.query.mode}, "
            f"llm_weight {config.fusion.llm_weight}")
    venv = build_vec_env(market, config, market.sessions("train"), ppo.n_envs, ppo.seed,
                         normalize=ppo.normalize_observations, advisor=advisor)
    try:
        if resume:
            model = MaskablePPO.load(ckpt, env=venv, device=ppo.device)
            if vec_path is not None and isinstance(venv, VecNormalize):
                saved = VecNormalize.load(str(vec_path), venv.venv)
                venv.obs_rms = saved.obs_rms
            say(f"resuming {run_dir} from {ckpt.name} at step {model.num_timesteps:,}")
        else:
            model, notes = make_model(config, venv, init)
            if init is not None:
                write_status(run_dir, init=str(init), init_notes=notes)
                say(f"initialised from {init}: " + ("; ".join(notes) or "same shapes"))

        logger = Logger(folder=str(run_dir), output_formats=[
            TensorBoardOutputFormat(str(run_dir / "tb")), JsonlWriter(run_dir / "progress.jsonl")])
        model.set_logger(logger)

        checkpoints = CheckpointCallback(run_dir, config.train.checkpoint_every, config.train.keep_checkpoints)
        callbacks = [TradingMetricsCallback(), checkpoints]
        if phase3:
            from hybrid_trader.training.hybrid_stats import HybridStatsCallback

            _find_wrapper(venv).follow(model.policy)  # the query policy reads the RL confidence of its decisions
            callbacks.append(HybridStatsCallback(_find_wrapper(venv), config.llm_config()))
        if config.train.validate_every > 0 and len(market.sessions("val")):
            callbacks.append(ValidationCallback(run_dir, config.train.validate_every, make_validation_fn(market, config)))
        if init is not None and config.train.freeze_body_steps > 0:
            callbacks.append(FreezeBodyCallback(config.train.freeze_body_steps))
        callbacks += list(extra_callbacks or [])

        remaining = max(ppo.total_timesteps - model.num_timesteps, 0)
        write_status(run_dir, state="running", phase=config.env.phase, target_timesteps=ppo.total_timesteps,
                     total_timesteps=int(model.num_timesteps), final_model=None, pid=os.getpid())
        stop = StopOnSignal().install()  # Ctrl-C / SIGTERM end the run at the next step, cleanly
        started = time.perf_counter()
        start_steps = model.num_timesteps
        try:
            model.learn(total_timesteps=remaining, callback=CallbackList([stop, *callbacks]), log_interval=1,
                        reset_num_timesteps=not resume, progress_bar=config.train.progress_bar and not quiet)
            if stop.requested is not None:
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            checkpoints.model = model  # in case training stopped before the callback was initialised
            path = checkpoints.save()
            logger.dump(model.num_timesteps)
            status = write_status(run_dir, state="interrupted", total_timesteps=int(model.num_timesteps))
            say(f"\ninterrupted at step {model.num_timesteps:,}: checkpoint {path}; continue with --resume")
            raise
        finally:
            stop.restore()
        elapsed = time.perf_counter() - started
        logger.dump(model.num_timesteps)
        checkpoints.save()
        model.save(run_dir / "model.zip")
        if isinstance(venv, VecNormalize):
            venv.save(str(run_dir / "vecnormalize.pkl"))
        steps = model.num_timesteps - start_steps
        status = write_status(
            run_dir, state="finished", total_timesteps=int(model.num_timesteps), final_model="model.zip",
            wall_seconds=round(elapsed, 1), steps_per_second=round(steps / elapsed, 1) if elapsed > 0 else None,
        )
        logger.close()
        say(f"trained {steps:,} steps in {elapsed:.0f} s ({status['steps_per_second']} steps/s) -> {run_dir}")
        return status
    finally:
        venv.close()


def _find_wrapper(venv):
    """The AdvisorVecEnv inside a wrapper stack."""
    from hybrid_trader.training.advice_env import AdvisorVecEnv

    while not isinstance(venv, AdvisorVecEnv):
        venv = venv.venv
    return venv


def _yaml_dump(data: dict) -> str:
    import yaml

    return "# Resolved LLM advisor configuration of this run.\n" + yaml.safe_dump(data, sort_keys=False)

