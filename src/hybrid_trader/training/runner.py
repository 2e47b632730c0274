"""Train MaskablePPO on the trading environment: phases 1 and 2 (phase 3 adds the advisor).

``train_run`` owns one run directory; its layout and file rules are described once, in
:mod:`hybrid_trader.run.rundir`. Training does not evaluate: periodic validation is
passed in (``validation``: a factory ``(market, config) -> (model -> figures)``, built by
a higher layer, e.g. ``evaluation.runner.validation_fn``).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import yaml
from sb3_contrib import MaskablePPO
from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import SubprocVecEnv, VecEnv, VecMonitor, VecNormalize

from hybrid_trader.agent.advice_block import N_FEATURES
from hybrid_trader.config import to_dict
from hybrid_trader.data.loader import guess_market
from hybrid_trader.errors import UserError
from hybrid_trader.features.names import FEATURE_NAMES
from hybrid_trader.llm.backends import backend_spec
from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig, with_absolute_data, with_recorded_market
from hybrid_trader.run.files import check_writable
from hybrid_trader.run.market import Market, env_factory, load_market, training_markets
from hybrid_trader.run.models import (
    final_model,
    load_model,
    load_normalizer,
    newest_valid_checkpoint,
    restart_fix,
    save_model,
)
from hybrid_trader.run.pins import check_pins, pin_inputs
from hybrid_trader.run.rundir import LLM_CONFIG, SPLIT
from hybrid_trader.training.advice_env import AdvisorVecEnv, advice_layer
from hybrid_trader.training.advisor_setup import (
    CalibrationRule,
    keep_calibration,
    llm_inputs,
    make_advisor,
    make_teacher,
    with_absolute_inputs,
    with_default_student,
)
from hybrid_trader.training.callbacks import (
    CheckpointCallback,
    FreezeBodyCallback,
    JsonlWriter,
    RolloutProgressBar,
    StopOnSignal,
    TensorBoardContinued,
    TradingMetricsCallback,
    ValidationCallback,
)
from hybrid_trader.training.lean_ppo import LeanMaskablePPO
from hybrid_trader.training.normalizer import LeanVecNormalize, freeze_statistics, warmup_statistics
from hybrid_trader.training.policy import HybridMaskablePolicy
from hybrid_trader.training.selection import METRIC, BestKeeper
from hybrid_trader.training.threads import update_threads_for
from hybrid_trader.training.transfer import check_trained_before, transfer_normalization, transfer_weights
from hybrid_trader.training.vec_env import LeanDummyVecEnv

ValidationFactory = Callable[[Market, RunConfig], Callable[[Any], dict]]


@dataclass(frozen=True)
class TrainHooks:
    """What a caller plugs into a PPO run: its own callbacks, evaluation's periodic validation, phase 3's
    calibration rule (passed in: training never imports evaluation)."""

    extra_callbacks: Sequence[Any] = ()
    """SB3 callbacks after the run's own (tests: interrupt at a step, count, time)."""
    validation: ValidationFactory | None = None
    """Builds the periodic validation when ``train.validate_every`` > 0 (``evaluation.runner.validation_fn``)."""
    calibrate: CalibrationRule | None = None
    """Phase 3's rule for a leaning model's batch calibration
    (:func:`~hybrid_trader.training.advisor_setup.make_advisor`)."""


@dataclass(frozen=True)
class _Start:
    """Where the model's weights came from."""

    resumed_from: int | None
    """The checkpoint's step of a resumed run; None: a new run."""
    init: Path | str | None
    """The run a new run was initialised from (its body frozen for ``train.freeze_body_steps``); None: none."""


def _sayer(quiet: bool) -> Callable[..., None]:
    """``print`` (flushed), or nothing when ``quiet``."""
    return (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
"""Builds the periodic validation of a run: ``(market, config) -> (model -> {name: figure})``."""

RESUMABLE = ("ppo.total_timesteps", "train.progress_bar", "ppo.device", "ppo.torch_threads", "ppo.vec_env",
             "ppo.fast_math", "ppo.update_threads")
"""Settings ``--resume`` may change; any other difference from the run's config.yaml is refused."""


def default_run_dir(config: RunConfig, root: str | Path = "runs") -> Path:
    """``runs/p<phase>-<market>-<data>-s<seed>-<time>``: a run is named by what it is."""
    data = Path(config.data.path).stem if config.data.path else f"synthetic-e{config.data.synthetic_edge:g}"
    market = config.env.market or config.data.market
    if market is None and config.data.path:
        market = guess_market(Path(config.data.path))
    market = market or "NQ"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"p{config.env.phase}-{market}-{data}-s{config.ppo.seed}-{stamp}"


def find_model(run_dir: Path, normalize: bool = True) -> tuple[Path, Path | None]:
    """The final model of a run, else its newest checkpoint, with its normalisation file (checked)."""
    return final_model(RunDir(run_dir), normalize)


def load_run_config(run_dir: Path) -> RunConfig:
    """The run's config.yaml (a UserError when the folder is not a run)."""
    return RunDir(run_dir).load_config(RunConfig)


def build_vec_env(market: Market, config: RunConfig, sessions, n_envs: int, seed: int, *, normalize: bool,
                  advisor=None, teacher=None):
    """Vectorised, monitored (and optionally normalised) environments over ``sessions``.

    Normalisation is ``training.normalizer.LeanVecNormalize``: with ``ppo.normalizer:
    frozen`` its statistics never move, and :func:`make_model` (or
    the checkpoint, on resume) sets them; ``running``: SB3's running updates. Phase 3
    (``advisor`` given): the advisor wrapper appends the advice to each observation and
    only the 261 features are normalised; ``teacher``: the real LLM beside an always-on
    student (``training.teacher.TeacherLog``).
    """
    subproc = config.ppo.vec_env == "subproc" and n_envs > 1
    risk = config.risk if config.env.phase == 3 else None
    if market.pool and sessions == market.sessions("train"):  # data.pool: each environment on one market's days
        fns: list[Callable[[], gym.Env]] = [
            env_factory(m, config.env, m.sessions("train"), seed + i, ignore_sigint=subproc, risk=risk)
            for i, m in enumerate(training_markets(market, n_envs))]
    else:
        fns = [env_factory(market, config.env, sessions, seed + i, ignore_sigint=subproc, risk=risk)
               for i in range(n_envs)]
    venv: VecEnv
    if subproc:
        method = "fork" if sys.platform.startswith("linux") else "spawn"
        venv = VecMonitor(SubprocVecEnv(fns, start_method=method))
    else:
        venv = LeanDummyVecEnv(fns)  # monitored itself
    if advisor is not None:
        venv = AdvisorVecEnv(venv, advisor, market, max_age=advisor.config.batching.max_age_steps, teacher=teacher)
    frozen = config.ppo.normalizer == "frozen"
    if not normalize:
        return venv
    return LeanVecNormalize(venv, N_FEATURES if advisor is not None else None, frozen=frozen)


def make_model(config: RunConfig, venv, init: Path | None = None, market: Market | None = None,
               algo: type[MaskablePPO] | None = None):
    """A new MaskablePPO for ``config`` on ``venv``, initialised from the run ``init`` if given.

    ``algo``: None for :class:`~hybrid_trader.training.lean_ppo.LeanMaskablePPO` (the same numbers
    as sb3-contrib's ``MaskablePPO``, faster; the tests pass ``MaskablePPO`` to compare).

    A frozen normaliser in ``venv`` gets its statistics here: ``init``'s for the
    inputs both runs share, a warm-up on ``market``'s training days for the others
    (:func:`~hybrid_trader.training.normalizer.freeze_statistics`). Returns ``(model,
    notes)`` where ``notes`` says which layers were adapted.
    """
    ppo = config.ppo
    hyper: dict[str, Any] = dict(
        learning_rate=ppo.learning_rate, n_steps=ppo.n_steps, batch_size=ppo.batch_size, n_epochs=ppo.n_epochs,
        gamma=ppo.gamma, gae_lambda=ppo.gae_lambda, clip_range=ppo.clip_range, ent_coef=ppo.ent_coef,
        vf_coef=ppo.vf_coef, max_grad_norm=ppo.max_grad_norm, target_kl=ppo.target_kl,
    )
    policy: Any = "MlpPolicy"
    policy_kwargs: dict[str, Any] = {"net_arch": list(ppo.net_arch)}
    if config.env.phase == 3:
        policy = HybridMaskablePolicy
        policy_kwargs.update(llm_weight=config.fusion.llm_weight, fusion_mode=config.fusion.mode,
                             w_max=config.fusion.w_max, gate_hidden=config.fusion.gate_hidden,
                             advice_input=config.fusion.advice_input)
    cls = algo or LeanMaskablePPO
    if hasattr(cls, "fast_math"):  # LeanMaskablePPO (the tests pass sb3-contrib's MaskablePPO)
        hyper["fast_math"] = ppo.fast_math
        hyper["update_threads"] = update_threads_of(config)
    model = cls(policy, venv, seed=ppo.seed, device=ppo.device, verbose=0, policy_kwargs=policy_kwargs, **hyper)
    notes: list[str] = []
    src_norm = None
    if init is not None:
        src_run = RunDir(init)
        check_trained_before(src_run, None if market is None else market.first_evaluated_day())
        src_path, src_vec = final_model(src_run, src_run.load_config(RunConfig).ppo.normalize_observations)
        src = load_model(src_run, src_path, device=ppo.device)
        notes = transfer_weights(src.policy, model.policy)
        src_norm = load_normalizer(src_run, src_vec) if src_vec is not None else None
    if isinstance(venv, LeanVecNormalize) and venv.frozen:
        fit = None if market is None else functools.partial(warmup_statistics, market, config)
        refit = freeze_statistics(venv, src_norm, fit)
        if refit:
            names = ", ".join(FEATURE_NAMES[i] for i in refit)
            notes.append(f"normalisation: {names} never varied in the earlier run; scaled by the warm-up's spread")
    elif isinstance(venv, VecNormalize):
        transfer_normalization(src_norm, venv)
    return model, notes


def warn(*parts: Any) -> None:
    """What a user must see even with --quiet (fallbacks, dropped rows, stale results): to stderr."""
    print(*parts, file=sys.stderr, flush=True)


def resume_conflicts(saved: RunConfig, given: RunConfig) -> list[str]:
    """Settings where ``given`` contradicts the run's ``saved`` config (those in RESUMABLE aside). The market
    the run recorded for its file (``data.market``, guessed from the name) is no conflict when ``given``
    names none for the same file."""
    if given.data.path == saved.data.path:
        given = with_recorded_market(given, saved.data.market)
    a, b = _flat(to_dict(saved)), _flat(to_dict(given))
    return [f"{key}: the run has {a.get(key)!r}, given {b.get(key)!r}" for key in sorted(set(a) | set(b))
            if key not in RESUMABLE and a.get(key) != b.get(key)]


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}{key}." if isinstance(value, dict) and value else f"{prefix}{key}"))
    return {k.rstrip("."): v for k, v in out.items()}


def train_run(
    config: RunConfig,
    run_dir: Path,
    *,
    init: Path | None = None,
    resume: bool = False,
    market: Market | None = None,
    quiet: bool = False,
    hooks: TrainHooks = TrainHooks(),
) -> dict:
    """Train (or resume) one run. Returns the final status dict; raises KeyboardInterrupt after saving.

    A new run checks everything it can (config, data and sessions, the environment's
    preset, the LLM advisor's start-up check, the model's hyper-parameters) before it
    creates ``run_dir``, and removes the folder again when it fails before its first
    checkpoint. ``resume`` refuses a ``config`` that contradicts the run's (see
    :data:`RESUMABLE`), records a new target, continues from the newest valid
    checkpoint and drops log rows past it. ``hooks`` (optional): the caller's callbacks, the periodic
    validation, phase 3's calibration rule (:class:`TrainHooks`).
    """
    run = RunDir(run_dir)
    say = _sayer(quiet)
    config.validate()
    check_writable(run.path, what="train --out")  # a file in its place, no permission, a full disk: now
    if resume:
        return _resume(run, config, market=market, hooks=hooks, quiet=quiet)
    if not run.is_empty():
        fix = "choose another --out, or add --resume to continue the run in it"
        if run.config_path.exists() and not run.checkpoints() and not run.model_path.exists():
            fix = f"it holds no checkpoint (training stopped before its first one); {restart_fix(run)}"
        raise UserError(f"run directory {run.path} is not empty", fix=fix)

    # Everything checkable, before the folder exists.
    config = with_absolute_inputs(with_default_student(with_absolute_data(config), init))
    market = market or load_market(config.data, config.split, pool=True)
    config = with_recorded_market(config, market.bars.market)  # run and evaluate read the contract from the run
    split_info = market.split_info()
    advisor, llm_config = make_advisor(config, say, (run_dir, init), hooks.calibrate)
    venv = build_vec_env(market, config, market.sessions("train"), config.ppo.n_envs, config.ppo.seed,
                         normalize=config.ppo.normalize_observations, advisor=advisor,
                         teacher=make_teacher(config, market, say))
    created = False
    lock = None
    try:
        _set_torch(config)
        model, notes = make_model(config, venv, init, market)
        try:
            run.path.mkdir(parents=True)
            created = True
        except FileExistsError:
            if not run.is_empty():
                raise UserError(f"run directory {run.path} is not empty (another process created it meanwhile)",
                                fix="choose another --out") from None
        lock = run.lock("train").acquire()
        if config.env.phase == 3:
            pin_inputs(run.path, llm_inputs(config.llm))
        run.save_config(config, header=f"hybrid-trader run configuration (phase {config.env.phase})")
        keep_calibration(advisor, run.path)
        run.write_json(SPLIT, split_info)
        say(market.describe())
        if llm_config is not None:
            run.write_yaml_text(LLM_CONFIG, _yaml_dump(to_dict(llm_config) if not hasattr(llm_config, "to_dict")
                                                       else llm_config.to_dict()))
        if init is not None:
            run.write_status(init=str(init), init_notes=notes)
            say(f"initialised from {init}: " + ("; ".join(notes) or "same shapes"))
        return _learn(run, config, model, venv, market, start=_Start(None, init), hooks=hooks, quiet=quiet)
    except KeyboardInterrupt:
        raise
    except BaseException:
        if created and not run.checkpoints():
            if lock is not None:
                lock.release()
                lock = None
            run.remove()
            warn(f"removed {run.path}: the run failed before its first checkpoint (this process created it)")
        elif run.exists() and lock is not None:
            run.write_status(state="failed")
        raise
    finally:
        if lock is not None:
            lock.release()
        venv.close()


def _resume(run: RunDir, config: RunConfig, *, market, hooks: TrainHooks, quiet: bool) -> dict:
    run.require()
    say = _sayer(quiet)
    with run.lock("train --resume"):
        if not run.status_path.exists():
            raise UserError(f"--resume: {run.path} has no status.json",
                            fix="resume a run directory made by 'hybrid-trader train'")
        saved = run.load_config(RunConfig)
        run.verified(run.split_path, fix=f"restore {run.split_path}; it records the days this run trained on")
        check_pins(run.path, doing="--resume")
        config = with_absolute_data(config)  # the same file named by another path is the same data
        conflicts = resume_conflicts(with_absolute_data(saved), config)
        if config.data.path == with_absolute_data(saved).data.path:
            config = with_recorded_market(config, saved.data.market)
        if conflicts:
            raise UserError(
                "--resume continues the run as it was configured; these settings contradict it:\n    "
                + "\n    ".join(conflicts),
                fix="drop those options (only --timesteps may change), or start a new run with another --out")
        status = run.read_status()
        done = int(status.get("total_timesteps") or 0)
        target = config.ppo.total_timesteps
        if status.get("state") == "finished" and target <= done:
            warn(f"{run.path} already finished {done:,} steps (target {saved.ppo.total_timesteps:,}); nothing to "
                f"resume and nothing changed. To train on, pass a larger target: --timesteps N (N > {done:,})")
            return status
        ckpt, skipped = newest_valid_checkpoint(run, config.ppo.normalize_observations)
        if skipped:
            warn("skipping damaged checkpoints: " + "; ".join(skipped))
            warn(f"resuming from the newest valid checkpoint, {ckpt.model.name} (step {ckpt.step:,})")
        if target <= ckpt.step:
            warn(f"{run.path}: checkpoint {ckpt.model.name} is at step {ckpt.step:,}, target {target:,}; nothing to "
                f"train. To train on, pass a larger target: --timesteps N (N > {ckpt.step:,})")
            return status
        if target != saved.ppo.total_timesteps:
            run.save_config(config, header=f"hybrid-trader run configuration (phase {config.env.phase}); "
                            f"target changed by --resume from {saved.ppo.total_timesteps:,} to {target:,}")
            warn(f"target recorded: {saved.ppo.total_timesteps:,} -> {target:,} steps (config.yaml, status.json)")
        run.write_status(target_timesteps=target)
        market = market or load_market(config.data, config.split, pool=True)
        say(market.describe())
        advisor, _ = make_advisor(config, say, (run.path, status.get("init")), hooks.calibrate)
        venv = build_vec_env(market, config, market.sessions("train"), config.ppo.n_envs, config.ppo.seed,
                             normalize=config.ppo.normalize_observations, advisor=advisor,
                             teacher=make_teacher(config, market, say))
        try:
            _set_torch(config)
            model = load_model(run, ckpt.model, env=venv, device=config.ppo.device, algo=LeanMaskablePPO)
            model.fast_math = config.ppo.fast_math  # the run's settings, not saved with the model
            model.update_threads = update_threads_of(config)
            # loading seeded every stream with the run's seed: step 0's days and draws again, unless seeded on
            model.set_random_seed(int(np.random.SeedSequence([config.ppo.seed, ckpt.step]).generate_state(1)[0]))
            if config.ppo.normalize_observations and isinstance(venv, LeanVecNormalize) and venv.frozen:
                freeze_statistics(venv, load_normalizer(run, ckpt.vecnormalize), None)  # the checkpoint's, frozen
            elif config.ppo.normalize_observations and isinstance(venv, VecNormalize):
                venv.obs_rms = load_normalizer(run, ckpt.vecnormalize).obs_rms
            dropped = run.truncate_logs(ckpt.step)
            if dropped:
                warn(f"dropped {dropped} log rows past step {ckpt.step:,} (written after the checkpoint)")
            say(f"resuming {run.path} from {ckpt.model.name} at step {model.num_timesteps:,}")
            return _learn(run, config, model, venv, market, start=_Start(ckpt.step, status.get("init")), hooks=hooks,
                          quiet=quiet)
        finally:
            venv.close()


def update_threads_of(config: RunConfig) -> int:
    """``ppo.update_threads`` resolved (training/threads.py); ``auto`` gives 1 beside a local LLM in this process."""
    model_in_process = (config.env.phase == 3 and config.llm.process is False
                        and backend_spec(config.llm.backend).local)
    return update_threads_for(config.ppo.update_threads, model_in_process=model_in_process)


def _set_torch(config: RunConfig) -> None:
    torch.set_num_threads(config.ppo.torch_threads)
    # Checking every action distribution's arguments costs about a third of a policy step
    # (measured: training ~10% faster without); the network's outputs are finite by
    # construction and masked logits are handled by MaskableCategorical.
    torch.distributions.Distribution.set_default_validate_args(config.ppo.validate_distributions)


def _learn(run: RunDir, config: RunConfig, model, venv, market: Market, *, start: _Start, hooks: TrainHooks,
           quiet: bool) -> dict:
    """Train ``model`` to the target, with checkpoints, logs and status; the run's lock is held."""
    say, validation, resumed_from = _sayer(quiet), hooks.validation, start.resumed_from
    ppo = config.ppo
    start_step = resumed_from or 0
    logger = Logger(folder=str(run.path), output_formats=[
        TensorBoardContinued(str(run.tb_dir), purge_step=resumed_from), JsonlWriter(run.progress_path)])
    model.set_logger(logger)

    checkpoints = CheckpointCallback(run, config.train.checkpoint_every, config.train.keep_checkpoints)
    callbacks = [TradingMetricsCallback(), checkpoints]
    if config.env.phase == 3:
        from hybrid_trader.training.hybrid_stats import HybridStatsCallback  # phase 3 only

        wrapper = advice_layer(venv)
        assert wrapper is not None  # a phase 3 stack always holds one (build_vec_env)
        wrapper.follow(model.policy)  # the query policy reads the RL confidence of its decisions
        if wrapper.teacher is not None:
            wrapper.teacher.bind(run.path)  # the folder exists now: the teacher's rows go to its dataset
        callbacks.append(HybridStatsCallback(wrapper, config.llm.in_run()))
    keeper = None
    if validation is not None and config.train.validate_every > 0 and len(market.sessions("val")):
        keeper = BestKeeper(run, select=config.train.select, patience=config.train.early_stop_patience)
        callbacks.append(ValidationCallback(run.validation_path, config.train.validate_every,
                                            validation(market, config), keeper))
    elif config.train.select != "last" or config.train.early_stop_patience:
        warn(f"train.select {config.train.select!r} / early_stop_patience {config.train.early_stop_patience}: no "
             "periodic validation runs (no validation days, or no validation function): the last model is kept")
    if start.init is not None and config.train.freeze_body_steps > 0:
        callbacks.append(FreezeBodyCallback(config.train.freeze_body_steps))
    callbacks += list(hooks.extra_callbacks)

    remaining = max(ppo.total_timesteps - model.num_timesteps, 0)
    to_train = ppo.whole_rollouts(remaining)
    if to_train != remaining:
        say(f"note: {to_train:,} steps will be trained for the {remaining:,} {'left' if resumed_from else 'asked'}: "
            f"whole rollouts of {ppo.n_steps:,} steps x {ppo.n_envs} environments (ppo.n_steps, ppo.n_envs)")
    if config.train.progress_bar and not quiet:
        callbacks.append(RolloutProgressBar(to_train))
    run.write_status(state="running", phase=config.env.phase, target_timesteps=ppo.total_timesteps,
                     total_timesteps=int(model.num_timesteps), final_model=None, pid=os.getpid())
    stop = StopOnSignal().install()  # Ctrl-C / SIGTERM end the run at the next step, cleanly
    started, started_cpu = time.perf_counter(), time.process_time()
    try:
        model.learn(total_timesteps=remaining, callback=CallbackList([stop, *callbacks]), log_interval=1,
                    reset_num_timesteps=resumed_from is None)
        if stop.requested is not None:
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        checkpoints.model = model  # in case training stopped before the callback was initialised
        path = checkpoints.save()
        logger.dump(model.num_timesteps)
        logger.close()
        run.write_status(state="interrupted", total_timesteps=int(model.num_timesteps))
        say(f"\ninterrupted at step {model.num_timesteps:,}: checkpoint {path}; continue with --resume")
        raise
    finally:
        stop.restore()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    logger.dump(model.num_timesteps)
    checkpoints.save()
    had_model = run.model_path.exists()
    vec = venv if isinstance(venv, VecNormalize) else None
    save_model(run, model, run.model_path, vec, run.vecnormalize_path)
    selected = keeper.finish() if keeper is not None else {}
    steps = model.num_timesteps - start_step
    status = run.write_status(
        state="finished", total_timesteps=int(model.num_timesteps), final_model=run.model_path.name,
        wall_seconds=round(elapsed, 2), cpu_seconds=round(cpu, 2),
        steps_per_second=round(steps / elapsed, 1) if elapsed > 0 else None, **selected,
    )
    if selected.get("early_stopped"):
        say(f"stopped early at step {model.num_timesteps:,}: {config.train.early_stop_patience} validations "
            f"without a better one")
    if "selected_step" in selected:
        say(f"kept the model of step {selected['selected_step']:,} (best validation: "
            f"{selected['best_val'][METRIC]:+,.2f} $/day); the last one is in {run.checkpoints_dir.name}/")
    logger.close()
    if had_model:
        for folder in run.mark_stale():
            warn(f"{folder} evaluated the previous model: marked stale (evaluate again)")
    say(f"trained {steps:,} steps in {elapsed:.0f} s ({status['steps_per_second']} steps/s) -> {run.path}")
    return status


def _yaml_dump(data: dict) -> str:
    return "# Resolved LLM advisor configuration of this run.\n" + yaml.safe_dump(data, sort_keys=False)

