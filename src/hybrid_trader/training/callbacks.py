"""Training callbacks: trading metrics, checkpoints with run status, validation, freezing.

Each follows Stable-Baselines3's ``BaseCallback`` template: ``_on_step`` returns
``True`` to continue training.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, ProgressBarCallback
from stable_baselines3.common.logger import KVWriter, TensorBoardOutputFormat
from torch import nn
from torch.utils.tensorboard import SummaryWriter
from tqdm import TqdmExperimentalWarning
from tqdm.rich import tqdm

from hybrid_trader.run import RunDir
from hybrid_trader.run.models import save_model
from hybrid_trader.training.advice_env import advice_layer


class JsonlWriter(KVWriter):
    """SB3 logger output writing one JSON object per dump to ``progress.jsonl``."""

    def __init__(self, path: Path) -> None:
        # the file stays open for the writer's life; SB3 calls close() at the end
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, key_values: dict[str, Any], key_excluded: dict, step: int = 0) -> None:
        row: dict[str, int | float | str | None] = {}
        for key, value in key_values.items():
            if hasattr(value, "item"):
                value = value.item()
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[key] = value if (isinstance(value, int) or math.isfinite(value)) else None
            elif isinstance(value, str):
                row[key] = value
        row.setdefault("time/total_timesteps", step)
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()


class TensorBoardContinued(TensorBoardOutputFormat):
    """TensorBoard output into ``folder`` itself (one run); a resume purges the events past its checkpoint.

    ``purge_step`` (the checkpoint's step) makes TensorBoard discard the earlier
    events at or after it, so a resumed run's curves continue instead of doubling back.
    """

    def __init__(self, folder: str, purge_step: int | None = None) -> None:
        # Not super().__init__: it would open a second, empty event file.
        self.writer = SummaryWriter(log_dir=folder, purge_step=None if purge_step is None else int(purge_step))
        self._is_closed = False


class TradingMetricsCallback(BaseCallback):
    """Logs ``trading/*`` metrics from the episodes finished in each rollout."""

    def __init__(self, window: int = 100) -> None:
        super().__init__()
        self.episodes: deque[dict] = deque(maxlen=window)
        self.steps_in_env = 0.0
        self.total_episodes = 0

    def _on_step(self) -> bool:
        dones = self.locals["dones"]
        if not dones.any():  # most steps: no episode ended
            return True
        for info, done in zip(self.locals["infos"], dones):
            if done and "trades" in info:
                trades = info["trades"]
                wins = sum(1 for t in trades if t.net_pnl > 0)
                self.episodes.append(
                    {
                        "trades": len(trades),
                        "wins": wins,
                        "net_pnl": sum(t.net_pnl for t in trades),
                        "breach": info.get("end_reason") == "BREACH",
                        "bars": info.get("episode_bars", 0),
                    }
                )
                self.total_episodes += 1
        return True

    def _on_rollout_end(self) -> None:
        if not self.episodes:
            return
        eps = list(self.episodes)
        trades = sum(e["trades"] for e in eps)
        self.logger.record("trading/trades_per_episode", trades / len(eps))
        self.logger.record("trading/win_rate_pct", 100.0 * sum(e["wins"] for e in eps) / trades if trades else 0.0)
        self.logger.record("trading/net_pnl_per_episode", float(np.mean([e["net_pnl"] for e in eps])))
        self.logger.record("trading/breach_rate_pct", 100.0 * float(np.mean([e["breach"] for e in eps])))
        self.logger.record("trading/episodes", self.total_episodes)


class CheckpointCallback(BaseCallback):
    """Saves model + normalisation every ``every`` steps, keeps the newest ``keep``, updates status.json."""

    def __init__(self, run: RunDir, every: int, keep: int = 3) -> None:
        super().__init__()
        self.run = run
        self.every = max(int(every), 1)
        self.keep = max(int(keep), 1)
        self._next = 0  # set by _on_training_start

    def _on_training_start(self) -> None:
        self._next = (self.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self.save()
            self._next += self.every
        return True

    def save(self) -> Path:
        """Write the checkpoint of the current step (atomically, into the manifest) and rotate old ones."""
        ckpt = self.run.checkpoint(self.num_timesteps)
        vec = self.model.get_vec_normalize_env()
        save_model(self.run, self.model, ckpt.model, vec, ckpt.vecnormalize)
        self.run.write_status(total_timesteps=int(self.num_timesteps),
                              last_checkpoint=ckpt.model.relative_to(self.run.path).as_posix())
        old = self.run.checkpoints()[: -self.keep]
        for c in old:
            c.model.unlink(missing_ok=True)
            c.vecnormalize.unlink(missing_ok=True)
        if old:
            self.run.manifest.forget(*[p for c in old for p in (c.model, c.vecnormalize)])
        return ckpt.model


class ValidationCallback(BaseCallback):
    """Every ``every`` steps: deterministic policy on recent train days and on validation days."""

    def __init__(self, path: Path, every: int, evaluate: Callable[[Any], dict], keeper: Any = None) -> None:
        """``keeper``: a ``training.selection.BestKeeper`` that keeps the best model and stops early, or None."""
        super().__init__()
        self.path = Path(path)
        self.every = int(every)
        self.evaluate = evaluate
        self.keeper = keeper
        self._next: int | None = None

    def _on_training_start(self) -> None:
        self._next = (self.num_timesteps // self.every + 1) * self.every if self.every > 0 else None

    def _on_step(self) -> bool:
        if self._next is not None and self.num_timesteps >= self._next:
            row = self.run()
            self._next += self.every
            if self.keeper is not None:
                return self.keeper.offer(self.num_timesteps, row, self.model)
        return True

    def run(self) -> dict:
        row = {"time/total_timesteps": int(self.num_timesteps), **self.evaluate(self.model)}
        for key, value in row.items():
            if key != "time/total_timesteps":
                self.logger.record(key, value)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        return row


class FreezeBodyCallback(BaseCallback):
    """Keeps the hidden layers frozen for the first ``steps`` steps after a phase transfer."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = int(steps)
        self.frozen = False

    def _set(self, frozen: bool) -> None:
        body = self.model.policy.mlp_extractor
        assert isinstance(body, nn.Module)  # nn.Module.__getattr__ is typed Tensor | Module
        for p in body.parameters():
            p.requires_grad_(not frozen)
        self.frozen = frozen
        self.logger.record("train/body_frozen", int(frozen))

    def _on_training_start(self) -> None:
        if self.num_timesteps < self.steps:
            self._set(True)

    def _on_step(self) -> bool:
        if self.frozen and self.num_timesteps >= self.steps:
            self._set(False)
        return True


class TimingCallback(BaseCallback):
    """Adds up the wall time spent in chosen methods (of the model, its policy or the VecEnv) per segment.

    Subclasses call :meth:`_wrap` in ``_on_training_start``: the method becomes an instance
    attribute that times each call, for the length of one ``learn``; at its end every timing
    wrapper of those methods is removed again (this timer's and any other's: they all end with
    ``learn``), so that the model and the VecEnv pickle.
    """

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = {}
        """Seconds per segment, inclusive of what the wrapped methods call."""
        self._restore: list[Callable[[], None]] = []
        self._depth: dict[str, int] = {}

    def _timed(self, original: Callable[..., Any], segment: str) -> Callable[..., Any]:
        """``original`` adding its wall time to ``segment``; a call inside another of the same segment is not
        counted twice."""
        seconds = self.seconds
        seconds.setdefault(segment, 0.0)
        depth = self._depth
        depth.setdefault(segment, 0)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if depth[segment]:
                return original(*args, **kwargs)
            depth[segment] = 1
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[segment] += time.perf_counter() - t0
                depth[segment] = 0

        return timed

    def _wrap(self, owner: Any, attr: str, segment: str) -> None:
        original = getattr(owner, attr)
        current = owner.__dict__.get(attr)
        # whether the method was an instance attribute before any timer wrapped it (the advisor's advise_into)
        base_own = getattr(current, "timing_base_own", current is not None)
        timed: Any = self._timed(original, segment)
        timed.timing_original = original
        timed.timing_base_own = base_own
        object.__setattr__(owner, attr, timed)  # past nn.Module.__setattr__ for the policy
        self._restore.append(lambda: _unwrap(owner, attr))

    def _patch(self, owner: Any, attr: str, segment: str) -> None:
        """Time a class's method or a module's function (``torch.Tensor.backward``) for the length of one ``learn``."""
        own = attr in vars(owner)
        original = vars(owner)[attr] if own else getattr(owner, attr)
        setattr(owner, attr, self._timed(getattr(owner, attr), segment))
        self._restore.append(lambda: setattr(owner, attr, original) if own else delattr(owner, attr))

    def _on_training_end(self) -> None:
        for restore in reversed(self._restore):
            restore()
        self._restore = []

    def _on_step(self) -> bool:
        return True


def _unwrap(owner: Any, attr: str) -> None:
    """Remove every timing wrapper of ``owner.attr`` (timers end together, with ``learn``)."""
    current = owner.__dict__.get(attr)
    if not hasattr(current, "timing_original"):
        return  # another timer has unwrapped it already
    base_own = current.timing_base_own
    while hasattr(current, "timing_original"):
        current = current.timing_original
    if base_own:
        object.__setattr__(owner, attr, current)
    else:
        del owner.__dict__[attr]


class EnvTimeCallback(TimingCallback):
    """Measures the wall time spent in the environments and the normaliser (for ``bench train``): the outermost
    VecEnv's ``step`` and ``env_method``, less what an advice layer inside it (phase 3's ``AdvisorVecEnv``: the
    advisor's bookkeeping and the student's forward) adds to the environments it wraps."""

    def _on_training_start(self) -> None:
        # action_masks() is fetched through env_method every step (unless LeanDummyVecEnv recorded them)
        for attr in ("step_async", "step_wait", "env_method"):
            self._wrap(self.training_env, attr, "env")
        layer = advice_layer(self.training_env)
        if layer is not None:  # its step_wait steps the environments, then advises
            self._wrap(layer, "step_wait", "advice")
            self._wrap(layer.venv, "step_wait", "advised environments")

    @property
    def advice_seconds(self) -> float:
        """Seconds the advice layer added to the environments' steps (0 without one)."""
        return self.seconds.get("advice", 0.0) - self.seconds.get("advised environments", 0.0)

    @property
    def env_seconds(self) -> float:
        """Seconds spent in the environments and the normaliser: the VecEnv's step and env_method calls, less the
        advice layer's own."""
        return self.seconds.get("env", 0.0) - self.advice_seconds


class RolloutProgressBar(ProgressBarCallback):
    """SB3's progress bar (tqdm and rich) whose total is what training really runs, ``steps`` (the budget rounded up
    to whole rollouts: SB3's own bar would end at 24,576/20,000)."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = int(steps)

    def _on_training_start(self) -> None:
        with warnings.catch_warnings():  # as SB3's own bar: tqdm calls its rich bar experimental
            warnings.simplefilter("ignore", TqdmExperimentalWarning)
            self.pbar = tqdm(total=self.steps)


class StopOnSignal(BaseCallback):
    """Ends training cleanly at the next environment step after Ctrl-C (SIGINT) or SIGTERM.

    The first signal only sets a flag; ``_on_step`` then returns False, SB3 finishes the
    step and ``learn`` returns, and the caller saves a checkpoint. Nothing is raised in
    the middle of a step, so no lock (advisor queue, statistics) is left held and no
    thread or subprocess is abandoned mid-call. A second signal raises KeyboardInterrupt
    at once, for a run that does not reach its next step. Install with :meth:`install`
    (main thread only) and undo with :meth:`restore`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.requested: str | None = None
        """The name of the signal that asked to stop, or None."""
        self._previous: dict[int, Any] = {}

    def install(self) -> StopOnSignal:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:  # pragma: no cover - exercised through a subprocess test
        import signal

        if self.requested is not None:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    def _on_step(self) -> bool:
        return self.requested is None
