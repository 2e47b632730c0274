"""Tiny training runs and file fingerprints for the fault-injection suite."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TINY = ["--set", "data.synthetic_days=12", "--set", "ppo.n_steps=128", "--set", "ppo.batch_size=128",
        "--set", "ppo.n_envs=2", "--set", "ppo.n_epochs=1", "--set", "train.validate_every=0",
        "--set", "train.checkpoint_every=256", "--set", "train.progress_bar=false"]
"""A run of a few seconds: 12 synthetic days, 2 environments, a checkpoint every 256 steps."""


def train_args(out: Path, steps: int, *extra: str) -> list[str]:
    return ["train", "--out", str(out), "--timesteps", str(steps), "--phase", "1", *TINY, *extra]


def fingerprint(folder: Path, skip: tuple[str, ...] = (".lock",)) -> dict[str, str]:
    """sha256 of every file under ``folder`` (relative path -> digest)."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in skip}


def start_training(out: Path, steps: int, *extra: str) -> subprocess.Popen:
    """``hybrid-trader train`` in a child process (output to out.log)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with open(str(out) + ".log", "w") as log:  # the child holds its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "hybrid_trader.cli.main", *train_args(out, steps, *extra)],
                                stdout=log, stderr=subprocess.STDOUT, env=env)


def wait_for(proc: subprocess.Popen, predicate, timeout: float = 90.0) -> None:
    """Poll until ``predicate()`` holds (fails if the child exits first or time runs out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, ValueError):
            pass
        if proc.poll() is not None:
            raise AssertionError(f"training exited with {proc.returncode} before the condition held")
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def kill9(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def steps_done(out: Path) -> int:
    path = out / "status.json"
    return int(json.loads(path.read_text()).get("total_timesteps") or 0) if path.exists() else -1


def log_steps(path: Path) -> list[int]:
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r["time/total_timesteps"] for r in rows if "time/total_timesteps" in r]
