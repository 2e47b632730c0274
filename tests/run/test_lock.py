"""One writer per folder (hybrid_trader.run.lock)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.run.lock import FolderLock


def test_second_writer_is_refused_naming_the_pid_when_the_folder_is_locked(tmp_path):
    with FolderLock(tmp_path, "train"), pytest.raises(UserError) as err:
        FolderLock(tmp_path, "train --resume").acquire()
    text = err.value.render()
    assert f"PID {os.getpid()}: train" in text and f"kill {os.getpid()}" in text


def test_lock_is_free_again_when_released(tmp_path):
    FolderLock(tmp_path, "a").acquire().release()
    with FolderLock(tmp_path, "b") as lock:
        assert lock.held


def test_lock_is_released_by_the_os_when_its_process_is_killed(tmp_path):
    code = ("import os, sys, time; from hybrid_trader.run.lock import FolderLock; "
            f"FolderLock({str(tmp_path)!r}, 'holder').acquire(); print('locked', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(UserError, match=f"PID {proc.pid}: holder"):
            FolderLock(tmp_path, "second").acquire()
    finally:
        proc.kill()
        proc.wait()
    with FolderLock(tmp_path, "after kill -9"):
        pass
