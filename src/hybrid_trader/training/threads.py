"""The threads of a training process: the update's second core (``ppo.update_threads``).

A lone training run leaves one of this machine's two cores idle. The update's loss and gradients by hand
(:func:`~hybrid_trader.training.lean_backward.loss_and_grads`, ``ppo.fast_math``) are three quarters matrix
products on 512-row minibatches, which torch splits over two OpenMP threads about 1.5 times faster (measured in
training, docs/TRAINING.md); the gradients agree to float tolerance (reductions split in two: parameters 1.5e-8
apart after two updates), as ``fast_math``'s do. Everything else (the rollout, Adam, clipping, the small
element-wise operations) stays on ``ppo.torch_threads`` (1: measured faster).

Two threads pay only if OpenMP's idle thread spins between the update's operations instead of sleeping: woken
from sleep for each product (``OMP_WAIT_POLICY=PASSIVE``, which the CLI sets for the LLM's sake, or GNU OpenMP's
default), the update measured slower than on one thread. The spin is
set by ``OMP_WAIT_POLICY=ACTIVE``, which OpenMP reads once, when torch loads it. So:

* :func:`prepare_openmp` (the CLI calls it before a command that trains, unless the user chose a policy) imports
  torch with that setting and puts the variable back (the CLI's default, ``PASSIVE``), so the processes this one
  starts (the LLM advisor, ``SubprocVecEnv``) wait as before;
* :func:`release_idle_threads`, after each update, hands OpenMP's threads back (``omp_pause_resource_all``), so
  nothing spins during the rollout;
* :func:`update_threads_for` resolves ``auto``: 2 where the process may use two CPUs, ``OMP_NUM_THREADS`` (1 in
  each Ray study worker) allows it, OpenMP spins and no local LLM shares the process; else 1;
* :class:`ThreadChooser` probes each update and drops back to one thread while another process takes the core.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from pathlib import Path
from typing import Literal

WAIT_POLICY = "OMP_WAIT_POLICY"
_spins: bool | None = None  # set by prepare_openmp
_OMP_PAUSE_SOFT = 1  # omp_pause_resource_t's omp_pause_soft (OpenMP 5.0)


def prepare_openmp(chosen: str | None) -> bool:
    """Import torch with OpenMP's idle threads spinning (``OMP_WAIT_POLICY=ACTIVE``), then put the variable back as
    it was, so that the processes this one starts wait as before. ``chosen``: the policy the user set before the
    program started (None: none), which is kept. Nothing happens once torch is imported. True when they spin."""
    global _spins
    if "torch" in sys.modules:  # too late: OpenMP read its settings when torch loaded it
        return openmp_spins()
    if chosen is not None:
        _spins = chosen.strip().upper() == "ACTIVE"
        return _spins
    before = os.environ.get(WAIT_POLICY)
    os.environ[WAIT_POLICY] = "ACTIVE"
    try:
        import torch  # noqa: F401  (loads OpenMP, which reads the variable now)
    finally:
        if before is None:
            del os.environ[WAIT_POLICY]
        else:
            os.environ[WAIT_POLICY] = before
    _spins = True
    return True


def openmp_spins() -> bool:
    """True when OpenMP's idle threads spin in this process (set by :func:`prepare_openmp`, or by the user's own
    ``OMP_WAIT_POLICY=ACTIVE`` when torch was imported without it)."""
    if _spins is None:
        return os.environ.get(WAIT_POLICY, "").strip().upper() == "ACTIVE"
    return _spins


def usable_cpus() -> int:
    """CPUs this process may run on, at most ``OMP_NUM_THREADS`` when that is set (Ray sets it for each task)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) >= 1:
        cpus = min(cpus, int(omp))
    return cpus


def update_threads_for(setting: int | Literal["auto"], *, model_in_process: bool = False) -> int:
    """The torch threads of the update's loss and gradients for ``ppo.update_threads``: a number is itself;
    ``auto`` is 2 when :func:`usable_cpus` is 2 or more and :func:`openmp_spins`, else 1. ``model_in_process``: a
    local LLM runs in this process (``llm.process: false``), whose threads the spinning would slow: 1."""
    if setting != "auto":
        return int(setting)
    return 2 if usable_cpus() >= 2 and openmp_spins() and not model_in_process else 1


@functools.cache
def _openmp() -> ctypes.CDLL | None:
    """The OpenMP runtime torch loaded (its Linux wheels ship GNU OpenMP as ``torch/lib/libgomp*``) where it has
    ``omp_pause_resource_all``, or None."""
    import torch

    for path in sorted((Path(torch.__file__).parent / "lib").glob("libgomp*.so*")):
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            continue
        if hasattr(lib, "omp_pause_resource_all"):
            lib.omp_pause_resource_all.argtypes = [ctypes.c_int]
            lib.omp_pause_resource_all.restype = ctypes.c_int
            return lib
    return None


def release_idle_threads() -> bool:
    """Hand back OpenMP's idle threads (they would otherwise spin through the rollout); the next parallel
    operation starts them again. False where torch's OpenMP cannot be found or does not support it."""
    lib = _openmp()
    return lib is not None and lib.omp_pause_resource_all(_OMP_PAUSE_SOFT) == 0


class ThreadChooser:
    """Picks, update by update, the thread count of the loss and gradients: ``more`` (``update_threads``) or the
    process's own, whichever a probe finds faster now.

    Two threads are faster only while the second core is free. Where another process wants it (two trainings at
    once, a study beside a run), the spinning threads of both wait for each other at every product: measured,
    two runs at once trained 5 to 14 times slower on two threads each than on one. So each update runs its first
    minibatch on ``more`` threads (starting them: not timed), times its second on the process's own count and its
    third on ``more``, keeps the faster, and drops back to the process's own count for the rest of the update
    when two minibatches in a row on ``more`` take over ``SLOWER`` times the one-thread probe. An update that ended
    on the process's own count is followed by ``REST`` updates without a probe. The cost on a free machine: one
    minibatch of an update (160 by default) on one thread; on a busy one, two slow minibatches every ``REST + 1``
    updates.
    """

    SLOWER = 1.5
    """Minibatches on ``more`` threads this many times slower than the one-thread probe: drop back."""
    REST = 7
    """Updates run on the process's own count, without a probe, after one that ended there."""

    def __init__(self, more: int) -> None:
        self.more = more
        self.base = 1
        self.probe: dict[int, float] = {}
        self.choice = more
        self.slow = 0
        self.chosen: list[int] = []
        """The thread count each minibatch of the last update ran on (the tests read it)."""
        self.resting = 0

    def begin(self, base: int) -> None:
        """A new update, the process running on ``base`` threads: probe again (unless resting)."""
        if self.resting:
            self.resting -= 1
        elif self.chosen and self.choice != self.more:
            self.resting = self.REST
        self.base, self.probe, self.choice, self.slow, self.chosen = base, {}, self.more, 0, []

    def next_count(self) -> int:
        """The thread count of the next minibatch."""
        if self.resting:
            return self.base
        if not self.chosen:
            return self.more  # the warm-up
        if self.base not in self.probe:
            return self.base
        if self.more not in self.probe:
            return self.more
        return self.choice

    def record(self, count: int, seconds: float) -> None:
        """The minibatch just run on ``count`` threads took ``seconds``."""
        self.chosen.append(count)
        if len(self.chosen) == 1 and not self.resting:
            return  # the warm-up: the threads started
        if count not in self.probe:
            self.probe[count] = seconds
            if len(self.probe) == 2 and self.probe[self.more] >= self.probe[self.base]:
                self._drop_back()
        elif count == self.more:
            self.slow = self.slow + 1 if seconds > self.SLOWER * self.probe[self.base] else 0
            if self.slow >= 2:
                self._drop_back()

    def _drop_back(self) -> None:
        """The rest of the update on the process's own count, the idle threads handed back at once (spinning, they
        would take the core the other process needs)."""
        self.choice = self.base
        release_idle_threads()
