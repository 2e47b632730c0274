"""Issue 24, case 7: kill -9 of ``advise collect`` leaves no worker process behind.

Before: its pool workers (each holding a model, ~2 GB with Gemma) lived on for over a minute.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import psutil

from hybrid_trader.child_process import end_with_parent


def test_collect_workers_die_with_the_parent_when_it_is_killed(tmp_path, student_p2):
    run = tmp_path / "p2"
    shutil.copytree(student_p2, run)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with open(tmp_path / "collect.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "hybrid_trader.cli.main", "advise", "collect", str(run),
                                 "--split", "test", "--llm", "mock", "--workers", "2", "--batch", "1",
                                 "--no-progress"], stdout=log, stderr=subprocess.STDOUT, env=env)
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    workers: list[psutil.Process] = []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = [c for c in parent.children(recursive=True) if "resource_tracker" not in " ".join(c.cmdline())]
        if len(workers) >= 2:
            break
        time.sleep(0.1)
    assert len(workers) >= 2, (tmp_path / "collect.log").read_text()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"workers still alive after their parent was killed: {[p.pid for p in alive]}"


def test_end_with_parent_when_called_in_a_child_arms_the_death_signal():
    code = ("from hybrid_trader.child_process import end_with_parent; import sys; "
            "sys.exit(0 if end_with_parent() else 3)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=60).returncode == (
        0 if sys.platform.startswith("linux") else 3)
    assert callable(end_with_parent)
