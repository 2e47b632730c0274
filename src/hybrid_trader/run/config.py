"""The configuration of a training run: one dataclass per section, one field per knob.

A YAML file holds any subset of these sections; everything else takes the defaults
below. ``hybrid_trader.config`` validates it (unknown keys get a "did you mean"),
and the resolved configuration is saved as ``RUN_DIR/config.yaml``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from hybrid_trader.agent.fusion import FusionConfig
from hybrid_trader.config import check
from hybrid_trader.data.loader import named_market
from hybrid_trader.data.resample import check_bar_minutes
from hybrid_trader.env.config import EnvConfig
from hybrid_trader.env.risk_veto import RiskConfig
from hybrid_trader.errors import UserError
from hybrid_trader.llm.config import LLMConfig, packaged_llm_config
from hybrid_trader.markets import get_contract


@dataclass
class DataConfig:
    """Where the bars come from."""

    path: str | None = None
    """Bars file (CSV or Parquet); null: the built-in synthetic market."""
    tz: str = "America/New_York"
    """Time zone of naive timestamps in the file."""
    time_shift: float = 0.0
    """Hours added to every timestamp (the ES sample file needs -5)."""
    market: str | None = None
    """Contract root symbol; null: guessed from the file name (synthetic: NQ). A new run records the market
    it guessed here, so that ``run`` and ``evaluate`` price its trades with the contract it trained on."""
    repair: bool = False
    """Repair fixable data errors (each reported) instead of stopping."""
    pool: list[str] = field(default_factory=list)
    """More bar files (other markets, periods) trained on too, each its own contract; days before validation only."""
    bar_minutes: int | None = None
    """Trade bars of this many minutes, resampled from the file's finer bars within each session (OHLCV rules,
    clock-aligned to the 18:00 ET open, e.g. 1, 3, 5, 15; ``data.resample``); null: the file's own bars."""
    synthetic_days: int = 60
    """Trading days of the built-in synthetic market."""
    synthetic_edge: float = 0.3
    """Strength of the synthetic market's planted edge (0: none, 0.1 subtle, 0.3 strong)."""
    synthetic_seed: int = 0
    """Seed of the built-in synthetic market."""


    def __post_init__(self) -> None:
        if self.bar_minutes is not None:
            check_bar_minutes(self.bar_minutes)


@dataclass
class SplitConfig:
    """How trading days are split by time into train, validation and test (or walk-forward folds)."""

    train: float = 0.70
    """Share of trading days for training (the earliest)."""
    val: float = 0.15
    """Share of trading days for validation (after train)."""
    test: float = 0.15
    """Share of trading days for the final test (the latest)."""
    folds: int = 0
    """Walk-forward: 0 = one split by the shares above; N = N successive folds whose test windows tile the last days."""
    fold: int = 0
    """Walk-forward: which fold this run trains and is evaluated on (0 = the oldest)."""
    anchored: bool = False
    """Walk-forward: every training window starts at the first day (and grows) instead of rolling."""
    unit: Literal["share", "month"] = "share"
    """share: the shares above; month: calendar-month folds (train_months, val_months, test_months), rolling by
    test_months; split.folds caps their number (0: as many as the data holds), split.fold picks one."""
    train_months: int = 6
    """unit month: calendar months of training days in each fold."""
    val_months: int = 1
    """unit month: calendar months of validation days after them (0: none)."""
    test_months: int = 1
    """unit month: calendar months of test days after those; the next fold starts this much later."""

    def __post_init__(self) -> None:
        if self.unit == "month" and (self.train_months < 1 or self.test_months < 1 or self.val_months < 0):
            raise UserError(f"split months: train {self.train_months}, val {self.val_months}, test "
                            f"{self.test_months}",
                            fix="use at least 1 train and 1 test month, and 0 or more val months")
        if self.folds < 0 or (self.folds and not 0 <= self.fold < self.folds):
            raise UserError(f"split.fold {self.fold} is not one of split.folds {self.folds}",
                            fix=f"use a fold from 0 to {max(self.folds - 1, 0)}")
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6 or min(self.train, self.val, self.test) <= 0:
            raise UserError(
                f"split: train {self.train} + val {self.val} + test {self.test} = {total:g}",
                fix="use three positive shares that add up to 1, e.g. 0.7, 0.15, 0.15",
            )


@dataclass
class PPOConfig:
    """MaskablePPO hyper-parameters (sb3-contrib)."""

    total_timesteps: int = 200_000
    """Environment steps to train for (all environments together), rounded up to whole rollouts (n_steps x n_envs)."""
    n_envs: int = 4
    """Parallel environments; each rollout step queries the policy once for all of them."""
    vec_env: Literal["dummy", "subproc"] = "dummy"
    """Where environments run: dummy (all in the main process; fastest for this ~20 us numpy env, measured)
    or subproc (one process each, SubprocVecEnv)."""
    torch_threads: int = 1
    """Torch CPU threads (1 is fastest for these small networks, measured on an idle and a busy machine)."""
    update_threads: int | Literal["auto"] = "auto"
    """Torch threads for the update's loss and gradients by hand (fast_math; its matrix products split over cores,
    equal to float tolerance; an update drops back to one while another process takes the core): auto = 2 in a
    command that trains (the CLI lets OpenMP's idle thread spin) where the process may use 2 CPUs, OMP_NUM_THREADS
    allows it (1 in each Ray study worker) and no local LLM shares the process, else 1; the rest keeps torch_threads.
    Two threads sum in another order and the drop-back follows the machine's load, so a seed's run is not the same
    to the bit twice: 1 for runs that must be (docs/TRAINING.md, "Fifth round")."""
    fast_math: bool = True
    """Faster training arithmetic, equal to sb3-contrib's MaskablePPO to float tolerance: the rollout's decisions
    in numpy and one compiled call (phase 3 with the constant prior too), the update's loss and gradients by hand,
    numpy's tanh and fused Adam (docs/TRAINING.md, "fast_math"); false: the same bits as MaskablePPO."""
    validate_distributions: bool = False
    """torch.distributions argument checks, process-wide (a third of each policy step; true for debugging)."""
    learning_rate: float = 3e-4
    """Adam learning rate."""
    n_steps: int = 2048
    """Steps per environment per rollout."""
    batch_size: int = 512
    """Minibatch size."""
    n_epochs: int = 10
    """Passes over each rollout."""
    gamma: float = 0.99
    """Discount factor per bar."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_range: float = 0.2
    """PPO clipping of the probability ratio."""
    ent_coef: float = 0.01
    """Entropy bonus."""
    vf_coef: float = 0.5
    """Value loss weight."""
    max_grad_norm: float = 0.5
    """Gradient clipping."""
    target_kl: float | None = None
    """Stop an update early past this KL divergence; null: never."""
    net_arch: list[int] = field(default_factory=lambda: [128, 128])
    """Hidden layer sizes of the policy and value networks."""
    normalize_observations: bool = True
    """Mean/std normalisation of observations (phase 3: of the features), from the training days only."""
    normalizer: Literal["frozen", "running"] = "frozen"
    """frozen: statistics fitted before training (warm-up, or the --init run's), then fixed; running: SB3's updates."""
    normalizer_warmup_steps: int = 8192
    """frozen: steps (all environments together) of random legal actions on the training days that fit it."""
    seed: int = 0
    """Seed of the policy, the environments and the episode sampling."""
    device: str = "cpu"
    """Torch device (cpu, cuda, auto)."""

    def __post_init__(self) -> None:
        for name in ("total_timesteps", "n_envs", "n_steps", "batch_size", "n_epochs", "torch_threads",
                     "normalizer_warmup_steps"):
            check(getattr(self, name) >= 1, name, f"{getattr(self, name)!r} must be >= 1", fix="use 1 or more")
        check(self.update_threads == "auto" or self.update_threads >= 1, "update_threads",
              f"{self.update_threads!r} must be >= 1", fix="use auto, or 1 or more")
        check(0 < self.learning_rate < math.inf, "learning_rate", f"{self.learning_rate!r} must be a positive number",
              fix="use e.g. 3e-4")
        for name in ("gamma", "gae_lambda"):
            check(0 <= getattr(self, name) <= 1, name, f"{getattr(self, name)!r} is not in [0, 1]", fix="use e.g. 0.99")
        check(0 < self.clip_range < math.inf, "clip_range", f"{self.clip_range!r} must be > 0", fix="use e.g. 0.2")
        for name in ("ent_coef", "vf_coef"):
            check(
                0 <= getattr(self, name) < math.inf, name, f"{getattr(self, name)!r} must be >= 0", fix="use e.g. 0.01"
            )
        check(0 < self.max_grad_norm < math.inf, "max_grad_norm", f"{self.max_grad_norm!r} must be > 0",
              fix="use e.g. 0.5")
        check(self.target_kl is None or 0 < self.target_kl < math.inf, "target_kl", f"{self.target_kl!r} must be > 0",
              fix="use e.g. 0.02, or null for no early stop")
        check(all(n >= 1 for n in self.net_arch), "net_arch", f"{self.net_arch!r} has a layer of fewer than 1 unit",
              fix="use positive layer sizes, e.g. [128, 128]")
        if self.batch_size > self.n_steps * self.n_envs:
            raise UserError(
                f"ppo.batch_size: {self.batch_size} is larger than a rollout ({self.n_steps} x {self.n_envs} envs)",
                fix="lower ppo.batch_size or raise ppo.n_steps",
            )

    def whole_rollouts(self, steps: int) -> int:
        """What training ``steps`` more really trains: ``steps`` rounded up to whole rollouts (``n_steps`` x
        ``n_envs`` steps; PPO collects and learns from whole rollouts)."""
        rollout = self.n_steps * self.n_envs
        return -(-max(int(steps), 0) // rollout) * rollout


@dataclass
class TrainConfig:
    """Run management: checkpoints, validation, transfer between phases."""

    checkpoint_every: int = 50_000
    """Save a checkpoint every this many steps (and at the end, and on Ctrl-C); at least 1."""
    keep_checkpoints: int = 3
    """Checkpoints kept on disk (the newest); at least 1, so that --resume always has one."""
    validate_every: int = 50_000
    """Evaluate on the last training days and the validation split every this many steps; 0: never."""
    validation_sessions: int = 10
    """Trading days of each split used by periodic validation (the most recent ones)."""
    validation_account: Literal["carried", "fresh"] = "carried"
    """carried: the validation days traded on one account carried from day to day (as ``evaluate`` reports); fresh:
    each day from a fresh account, the mean day (the policy free of the path: on one account a pass or a breach
    on the first days decides the rest; ``evaluation.runner.run_fresh_days``)."""
    select: Literal["last", "best_val"] = "last"
    """The model the run keeps (model.zip): the last, or the one with the best validation net P&L per day."""
    early_stop_patience: int = 0
    """Stop training after this many validations in a row without a better one; 0: never stop early."""
    freeze_body_steps: int = 0
    """When initialised from an earlier phase: steps during which the hidden layers stay frozen."""
    progress_bar: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        for name in ("checkpoint_every", "keep_checkpoints", "validation_sessions"):
            check(getattr(self, name) >= 1, name, f"{getattr(self, name)!r} must be >= 1", fix="use 1 or more")
        for name in ("validate_every", "freeze_body_steps", "early_stop_patience"):
            check(getattr(self, name) >= 0, name, f"{getattr(self, name)!r} must be >= 0", fix="use 0 (never) or more")
        for name, value in (("select", self.select), ("early_stop_patience", self.early_stop_patience)):
            if value not in ("last", 0):
                check(self.validate_every > 0, name, f"{value!r} needs periodic validation, but validate_every is 0",
                      fix="set train.validate_every (e.g. 50000), or select: last and early_stop_patience: 0")


@dataclass
class RunConfig:
    """Everything a training run needs."""

    data: DataConfig = field(default_factory=DataConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    risk: RiskConfig = field(default_factory=RiskConfig)
    llm: LLMConfig = field(default_factory=packaged_llm_config)
    """Phase 3: the LLM advisor; a file's llm options are merged over the packaged defaults
    (hybrid_trader/configs/llm.yaml)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Cross-section checks (the seed's frozen-policy run must be impossible)."""
        fb, total = self.train.freeze_body_steps, self.ppo.total_timesteps
        if fb < 0:
            raise UserError(f"train.freeze_body_steps: {fb} must be >= 0")
        if fb >= total:
            raise UserError(
                f"train.freeze_body_steps: {fb:,} is not shorter than the run (ppo.total_timesteps {total:,}): "
                "the policy would never be trained",
                fix=f"use a freeze shorter than the run, e.g. {total // 10:,} (10%), or 0",
            )
        pool = self.data.pool
        if pool and self.env.phase == 3:
            raise UserError(f"data.pool ({len(pool)} files) trains phases 1 and 2; phase 3's advisor reads one market",
                            fix="pool the phase 2 run, then train phase 3 on data.path with --init from it")
        if pool and self.env.market:
            raise UserError(f"data.pool trades each file's own contract, but env.market forces {self.env.market} "
                            "on all of them", fix="drop env.market (each file's market is taken from its name)")
        if pool and not self.data.path:
            raise UserError("data.pool adds files to data.path, which is not set (the synthetic market)",
                            fix="set data.path, or drop data.pool")


def with_absolute_data(config: RunConfig) -> RunConfig:
    """``config`` with ``data.path`` made absolute (relative to the current directory, as it is loaded).

    A run records its bars' path once; evaluate, resume, advise and report read it later,
    often from another directory.
    """
    path, pool = config.data.path, config.data.pool
    data = dataclasses.replace(config.data, path=str(Path(path).resolve()) if path else path,
                               pool=[str(Path(p).resolve()) for p in pool])
    return config if data == config.data else dataclasses.replace(config, data=data)


def with_recorded_market(config: RunConfig, symbol: str | None) -> RunConfig:
    """``config`` with ``data.market`` set to ``symbol`` (the market its bars were loaded with) when neither
    ``data.market`` nor ``env.market`` names one: a run records the market guessed from its file's name."""
    if not symbol or not config.data.path or config.data.market or config.env.market:
        return config
    return dataclasses.replace(config, data=dataclasses.replace(config.data, market=symbol))


def run_market(config: RunConfig) -> tuple[str | None, str]:
    """The contract root a run trained on, and where it comes from (for messages).

    ``env.market``, else ``data.market`` (where training records a guessed market), else, for a
    run recorded before that, what the loader chose for ``data.path`` (its file name, else NQ);
    the synthetic market is NQ. ``(None, why)`` when ``data.path`` is a folder or glob that
    lists no file now and its files' names cannot be read again.
    """
    for key, value in (("env.market", config.env.market), ("data.market", config.data.market)):
        if value:
            return get_contract(value).symbol, key
    if not config.data.path:
        return "NQ", "the synthetic market"
    symbol, how = named_market(config.data.path)
    if symbol is None:
        return None, f"data.path {config.data.path}: {how}"
    return symbol, (f"the name of data.path {config.data.path}" if how == "name"
                    else f"data.path {config.data.path} (its name names no market: NQ assumed, as training did)")
