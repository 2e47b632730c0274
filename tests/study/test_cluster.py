"""A study on a real, separate Ray head (``ray start --head`` in another directory, another HOME, its own temp
dir), joined with ``study --address`` by a driver in its own directory with a relative data path: every trial
finishes, and the study folder is written by the driver alone. The same with token authentication on."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import yaml

import hybrid_trader
from hybrid_trader.data.synthetic import generate_bars
from tests.study.test_study import TINY

RAY = Path(sys.executable).with_name("ray")
SRC = Path(hybrid_trader.__file__).resolve().parents[1]
"""The source the head's workers import (this checkout's, like the driver's)."""
TOKEN = "0123456789abcdef0123456789abcdef"

pytestmark = pytest.mark.skipif(not RAY.exists(), reason=f"Ray's command line is not installed beside {sys.executable}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pids_using(marker: str) -> list[int]:
    """Processes whose command line names ``marker`` (the head's own temp dir: its GCS, raylet, workers)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@contextmanager
def ray_head(root: Path, *, token: str | None) -> Iterator[tuple[str, Path]]:
    """A Ray head in ``root/head`` (cwd, HOME, TMPDIR of its own; temp dir a short folder of /tmp for Ray's socket
    paths), two CPUs; yields its address and its folder. Stopped by its PID (``ray start --block``), then any
    process left that names its temp dir, by PID."""
    head = root / "head"
    for sub in ("cwd", "home", "tmp"):
        (head / sub).mkdir(parents=True)
    temp = Path(tempfile.mkdtemp(prefix="htray", dir="/tmp"))
    port = _free_port()
    env = {**os.environ, "HOME": str(head / "home"), "TMPDIR": str(head / "tmp"), "PYTHONPATH": str(SRC),
           "RAY_AUTH_MODE": "token" if token else "disabled"}
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RAY_ADDRESS", None)
    if token:
        env["RAY_AUTH_TOKEN"] = token
    fixed = [f"--{name}={_free_port()}" for name in (  # ports with fixed defaults: free ones, beside other heads
        "ray-client-server-port", "dashboard-port", "dashboard-agent-listen-port", "runtime-env-agent-port")]
    proc = subprocess.Popen([str(RAY), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=2", f"--temp-dir={temp}", "--include-dashboard=false", *fixed,
                             "--disable-usage-stats", "--block"], cwd=head / "cwd", env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"ray start --head did not come up on port {port} (exit {proc.poll()})")
                time.sleep(0.5)
        yield f"127.0.0.1:{port}", head
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _pids_using(str(temp)):
                with suppress(ProcessLookupError):
                    os.kill(pid, sig)
            time.sleep(2 if sig == signal.SIGTERM else 0)
        shutil.rmtree(temp, ignore_errors=True)


def _driver(root: Path) -> Path:
    """The driver's folder: a bars file at the relative path data/NQ_bars.csv and a study naming it so, with a
    second variant trading the same minute bars at 5 minutes (data.bar_minutes)."""
    cwd = root / "driver"
    (cwd / "data").mkdir(parents=True)
    (cwd / "home").mkdir()
    bars = generate_bars(days=14, seed=3, edge=0.3)
    bars.frame.rename_axis("timestamp").to_csv(cwd / "data" / "NQ_bars.csv")
    study = {"base": {**{k: v for k, v in TINY.items() if k != "data.synthetic_days"}, "data.path": "data/NQ_bars.csv"},
             "seeds": [0], "evaluate": {"split": "test", "seeds": 1},
             "variants": [{"name": "m1", "set": {}}, {"name": "m5", "set": {"data.bar_minutes": 5}}]}
    (cwd / "study.yaml").write_text(yaml.safe_dump(study))
    return cwd


def _study(cwd: Path, address: str, **env_over: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(cwd / "home"), "PYTHONPATH": str(SRC), **env_over}
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        if name not in env_over:
            env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "hybrid_trader.cli.main", "study", "study.yaml", "--out", "out",
                           "--address", address, "--no-progress", "--json"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=400)


def _check_written_by_the_driver_alone(done: subprocess.CompletedProcess, cwd: Path, head: Path) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["trials"] == summary["finished"] == 2, summary["errors"]
    for slug in ("m1-s0-f0", "m5-s0-f0"):
        trial = cwd / "out" / "trials" / slug
        assert json.loads((trial / "trial.json").read_text())["status"] == "finished"
        assert (trial / "p1" / "model.zip").exists() and (trial / "p1" / "config.yaml").exists()
        config = yaml.safe_load((trial / "p1" / "config.yaml").read_text())
        assert config["data"]["path"] == str(cwd / "data" / "NQ_bars.csv")  # resolved at the driver
        assert not [p for p in trial.rglob("*.json") if "hybrid-trader-trial-" in p.read_text()]  # no scratch path
    m5 = yaml.safe_load((cwd / "out" / "trials" / "m5-s0-f0" / "p1" / "config.yaml").read_text())
    assert m5["data"]["bar_minutes"] == 5
    # the workers ran with the head's cwd, HOME and TMPDIR: nothing of the study there, their scratch removed
    left = [p for p in head.rglob("*") if p.name in ("out", "trials", "trial.json", "model.zip")
            or p.name.startswith("hybrid-trader-trial-")]
    assert not left, left
    assert not (head / "cwd" / "data").exists()


def test_a_study_joins_a_separate_ray_head_and_the_driver_alone_writes_its_folder(tmp_path):
    started = time.perf_counter()
    cwd = _driver(tmp_path)
    with ray_head(tmp_path, token=None) as (address, head):
        done = _study(cwd, address)
        _check_written_by_the_driver_alone(done, cwd, head)
    print(f"cluster study without authentication: {time.perf_counter() - started:.1f} s")


@pytest.mark.slow  # 50 to 110 s on the shared 2-core machine (the test above: 40 to 85 s)
def test_a_token_authenticated_head_refuses_a_driver_without_its_token_and_accepts_one_with_it(tmp_path):
    started = time.perf_counter()
    cwd = _driver(tmp_path)
    with ray_head(tmp_path, token=TOKEN) as (address, head):
        refused = _study(cwd, address)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert "refused this driver's authentication" in refused.stderr and "auth_token" in refused.stderr
        assert "check --address" not in refused.stderr
        wrong = _study(cwd, address, RAY_AUTH_TOKEN="f" * 32)
        assert wrong.returncode == 2 and "the cluster's differs" in wrong.stderr, wrong.stderr[-3000:]
        assert not (cwd / "out" / "trials").exists()
        token_file = cwd / "home" / ".ray" / "auth_token"  # Ray's default token file, RAY_AUTH_MODE unset
        token_file.parent.mkdir()
        token_file.write_text(TOKEN)
        done = _study(cwd, address)
        _check_written_by_the_driver_alone(done, cwd, head)
    print(f"cluster study with token authentication: {time.perf_counter() - started:.1f} s")
