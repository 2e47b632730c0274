"""Issue 24, cases 5 and 6: write failures and bad numbers are exit 2 with the fix, never a traceback;
what ``data check`` warns about is said by train and evaluate too; counts above the cores are capped.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.run.config import DataConfig, SplitConfig
from hybrid_trader.run.market import load_market
from tests.conftest import ES_1MIN, shared_file

from .helpers import TINY, train_args


@pytest.fixture(scope="module")
def p1(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad") / "p1"
    assert main(train_args(out, 256)) == 0
    return out


def err_of(capsys) -> str:
    return capsys.readouterr().err


def test_train_out_is_a_file_is_exit_2_before_any_work(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(train_args(tmp_path / "f", 256)) == 2
    assert "is a file, not a folder" in err_of(capsys)


@pytest.mark.parametrize("command", [["evaluate", "{run}"], ["llm", "eval", "{run}"], ["llm", "finetune", "{run}"]])
def test_unwritable_run_folder_is_exit_2_before_computing(p1, capsys, monkeypatch, command):
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    assert main([c.format(run=p1) for c in command]) == 2
    assert "cannot write in" in err_of(capsys)


def test_a_full_disk_is_exit_2_naming_the_space_left(p1, capsys, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 2**20, 2**20))
    assert main(["evaluate", str(p1)]) == 2
    assert "is full (1.0 MiB free)" in err_of(capsys)


def test_disk_full_while_writing_is_exit_2_with_the_fix_not_a_traceback(p1, capsys, monkeypatch):
    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(p1 / "eval" / "test" / "results.json"))

    monkeypatch.setattr("hybrid_trader.evaluation.evaluate.save_results", no_space)
    assert main(["evaluate", str(p1)]) == 2
    err = err_of(capsys)
    assert "No space left on device" in err and "free disk space" in err and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["llm", "eval", "{run}", "--max-states", "-3"], "--max-states -3"),
    (["llm", "eval", "{run}", "--max-states", "0"], "--max-states 0"),
    (["llm", "eval", "{run}", "--cot", "-1"], "--cot -1"),
    (["llm", "finetune", "{run}", "--lr", "inf"], "lr inf must be a finite number"),
    (["train", "--out", "{new}", "--phase", "3", "--llm", "student", "--set", "llm.student.threads=-1"],
     "llm.student.threads"),
    (["train", "--out", "{new}", "--phase", "2", "--init", "{run}", "--teacher", "mock", *TINY],
     "this run is phase 2"),
])
def test_bad_numbers_and_options_are_exit_2_naming_them(p1, tmp_path, capsys, args, message):
    assert main([a.format(run=p1, new=tmp_path / "new") for a in args]) == 2
    assert message in err_of(capsys)
    assert not (tmp_path / "new").exists() and not (p1 / "llm_eval").exists()


def test_a_closed_pipe_ends_quietly_without_a_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-m", "hybrid_trader.cli.main", "llm", "ask", "--backend", "mock"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # the reader is gone before the first line (like `| head` that has exited)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_train_and_evaluate_repeat_the_clock_warning_of_data_check(capsys):
    path = shared_file(ES_1MIN)
    load_market(DataConfig(path=str(path)), SplitConfig())
    err = err_of(capsys)
    assert "[clock]" in err and "--time-shift -5" in err and "[market]" in err


def test_workers_above_the_cores_are_capped_with_a_note():
    from hybrid_trader.advise.collect import worker_count
    from hybrid_trader.llm.config import load_llm_config

    said: list[str] = []
    assert worker_count(64, load_llm_config(overrides={"backend": "mock"}), said.append) == (os.cpu_count() or 1)
    assert said and "--workers 64 capped at" in said[0]
    assert worker_count(1, load_llm_config(overrides={"backend": "mock"}), said.append) == 1 and len(said) == 1
