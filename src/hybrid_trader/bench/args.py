"""Typed arguments of the benchmarks: one dataclass per ``hybrid-trader bench`` command.

The CLI (``cli/bench.py``) builds them from its flags, whose defaults and help come from
these fields; code and tests call ``run(EnvBenchArgs(steps=1000))`` directly. Only the
standard library is imported here, so ``hybrid-trader --help`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from hybrid_trader.config import check
from hybrid_trader.llm.backends import BACKEND_NAMES


@dataclass
class DataArgs:
    """Where a benchmark's bars come from."""

    data: str | None = None
    """Bars file (CSV/Parquet); None: the built-in synthetic market."""
    market: str | None = None
    """Contract root symbol; None: NQ, or guessed from the file name."""
    tz: str | None = None
    """Time zone of naive timestamps; None: America/New_York."""
    time_shift: float | None = None
    """Hours added to every timestamp (the ES sample file needs -5)."""
    seed: int = 0
    """Seed of the synthetic market, the actions and the policy."""


@dataclass
class EnvBenchArgs(DataArgs):
    """``bench env``: environment steps per second with random legal actions."""

    steps: int = 200_000
    """Environment steps to time."""
    phase: Literal[1, 2, 3] = 2
    """Environment phase."""
    reward: Literal["pnl", "prop", "sharpe"] = "pnl"
    """The environment's reward (``env.reward``)."""

    def __post_init__(self) -> None:
        check(self.steps >= 1, "steps", f"{self.steps} must be >= 1", fix="use 1 or more")


@dataclass
class LLMBenchArgs:
    """``bench llm``: advisor decisions per second through submit/poll, and how long callers block."""

    config: str | None = None
    """LLM config YAML merged over the packaged default."""
    llm_overrides: dict[str, Any] = field(default_factory=dict)
    """Dotted LLMConfig keys set on the command line (``backend``, ``openai.base_url``, ...)."""
    batch: int = 16
    """Batch size = parallel environments."""
    queries: int | None = None
    """Model answers to time; None: 128 (2000 for the mock back end)."""
    step_ms: float = 5.0
    """Simulated environment time per vectorised step [ms] (5: 16 envs at 3200 steps/s)."""
    max_wait_ms: float | None = None
    """llm.batching.max_wait_ms; None: the config's."""
    seed: int = 0
    """Seed of the generated contexts."""
    calibration_run: str | None = None
    """A run directory whose batch calibration (llm_calibration.json) divides the advice; None: no calibration."""
    retrieval_run: str | None = None
    """A run directory whose training days give the retrieval pool (needed when llm.prompt.retrieval.k > 0)."""

    def __post_init__(self) -> None:
        check(self.batch >= 1, "batch", f"{self.batch} must be >= 1", fix="use 1 or more")
        check(self.queries is None or self.queries >= 1, "queries", f"{self.queries} must be >= 1", fix="use 1 or more")
        check(self.step_ms >= 0, "step_ms", f"{self.step_ms} must be >= 0", fix="use 0 or more ms")


@dataclass
class TrainBenchArgs(DataArgs):
    """``bench train``: training steps per second; with phase 3, the time phase 3 takes against phase 2."""

    phase: Literal[1, 2, 3] = 1
    """Phase; 3 also times phase 2 from the same start and reports phase3_over_phase2."""
    llm: str = "mock"
    """Phase 3: LLM advisor back end (a name of the registry hybrid_trader.llm.backends.BACKENDS)."""
    repeats: int = 1
    """Phase 3: timed phase 2 / phase 3 pairs, alternating; medians are compared."""
    n_envs: int = 1
    """Parallel environments."""
    vec_env: Literal["dummy", "subproc"] = "dummy"
    """Environments in the main process (dummy) or one subprocess each (subproc)."""
    steps: int = 20_480
    """Training steps to time."""
    student: str | None = None
    """Phase 3 with --llm student: the student.pt to use; None: the bench distils a tiny one from mock advice."""
    fusion: Literal["constant", "learned"] = "constant"
    """Phase 3: fusion.mode (constant prior or the learned gate)."""
    advice_input: Literal["true", "false"] | None = None
    """Phase 3: fusion.advice_input (false: the network reads no advice, the prior alone carries it); None: the
    config's default."""
    fast_math: Literal["true", "false"] | None = None
    """ppo.fast_math (false: the same bits as sb3-contrib's MaskablePPO; true: float tolerance, faster); None: the
    config's default."""
    torch_threads: int | None = None
    """ppo.torch_threads: torch's threads in the training process (docs/TRAINING.md, Parallel environments); None:
    the config's default."""
    update_threads: str | None = None
    """ppo.update_threads: torch's threads for the update's loss and gradients by hand, auto or a number
    (docs/TRAINING.md, Fifth round); None: the config's default."""
    breakdown: bool = False
    """Time each segment of training (policy, prior, advice, each VecEnv layer, update) per vector step;
    phase 3: in both phases, with phase 3's extra for each."""
    against: str | None = None
    """Time this code against another (a git revision of this checkout, or a folder with another copy), in pairs
    that run at once on a core each with one thread, the cores swapped each pair (``bench.paired``); None: this
    code alone."""
    pairs: int = 6
    """With --against: the pairs timed; the verdict is the median of their ratios."""

    def __post_init__(self) -> None:
        check(self.torch_threads is None or self.torch_threads >= 1, "torch_threads",
              f"{self.torch_threads} must be >= 1", fix="use 1 or more, or leave it out for the config's default")
        check(self.update_threads is None or self.update_threads == "auto"
              or (self.update_threads.isdigit() and int(self.update_threads) >= 1), "update_threads",
              f"{self.update_threads!r} is neither auto nor a number >= 1", fix="use auto, 1 or 2")
        check(self.llm in BACKEND_NAMES, "llm", f"{self.llm!r} is not an LLM back end",
              fix=f"use one of: {', '.join(BACKEND_NAMES)}")
        check(self.against is None or not self.breakdown, "against", "--against times whole runs; --breakdown "
              "times each segment of one", fix="drop one of them")
        for name in ("repeats", "n_envs", "steps", "pairs"):
            check(getattr(self, name) >= 1, name, f"{getattr(self, name)} must be >= 1", fix="use 1 or more")


@dataclass
class LiveLatencyArgs:
    """``bench live-latency``: bar appended to a followed file -> NinjaTrader order file visible (ms percentiles)."""

    run_dir: str | None = None
    """The trained run the executor trades (a phase 2 or 3 run directory); required."""
    bars: str | None = None
    """Bars file (CSV/Parquet) whose bars are appended to the followed file, history first; required."""
    market: str | None = None
    """Contract root symbol; None: the run's."""
    warmup: int | None = None
    """Bars appended at once before the timed ones: history, which warms the features and is never traded; None:
    those before the first 09:30 ET bar that has a day of bars before it (the timed bars then are the session's)."""
    n_bars: int = 300
    """Live bars appended one at a time and timed."""
    interval_s: float = 0.3
    """Seconds between two appended live bars."""
    follow_poll_s: float | None = None
    """The follow feed's polling interval [s]; None: the default of 'run --feed follow:'."""
    nt_poll_s: float = 0.05
    """How often the simulated NinjaTrader reads incoming/ [s] (it does not delay the file's appearance)."""
    account: str = "Sim101"
    """The NinjaTrader account."""
    instrument: str = "NQ 12-26"
    """The NinjaTrader instrument."""
    out: str | None = None
    """Folder for the followed file, the journal and the NinjaTrader folder; None: a new temporary folder."""

    def __post_init__(self) -> None:
        check(bool(self.run_dir), "run_dir", "a run directory is needed", fix="pass --run-dir RUN")
        check(bool(self.bars), "bars", "a bars file is needed", fix="pass --bars FILE (e.g. the run's data)")
        check((self.warmup is None or self.warmup >= 1) and self.n_bars >= 1, "n_bars",
              f"warmup {self.warmup} and n_bars {self.n_bars} must be >= 1", fix="e.g. --warmup 1500 --n-bars 300")
        check(self.interval_s > 0 and self.nt_poll_s > 0 and (self.follow_poll_s is None or self.follow_poll_s > 0),
              "interval_s", "intervals must be positive", fix="e.g. --interval-s 0.3")
