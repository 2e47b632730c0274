"""``hybrid-trader bench train --against REF``: this code against another, timed in pairs that run at once.

On a shared or virtual machine the speed of one run moves by 10-35% from minute to minute,
so two codes timed one after the other differ by more than most changes are worth. Here each
pair runs both codes **at the same time**, each pinned to its own core with one torch thread
(``--torch-threads 1 --update-threads 1``), and the cores and the order they start in are
swapped from one pair to the next: whatever slows the machine slows both alike. Each pair
gives the ratio of their ``model.learn`` wall times (this code over the other: below 1, this
code is faster); the verdict is the median ratio over ``--pairs`` pairs, with the sign test's
two-sided p-value of "faster in k of n pairs". A first, untimed pair of one step each lets
each copy compile and cache its numba kernels, so that no timed run pays a compilation the
other does not. Against itself (docs/TRAINING.md) six pairs gave a median of 0.98 on a quiet
machine and 1.08 on a loaded one: compare with the null of the same sitting.

``REF`` is a git revision of the checkout this package runs from (its ``src`` is exported
with ``git archive`` into a temporary folder), or a folder holding another copy of the
project (``FOLDER/src/hybrid_trader``). Both codes run with this environment's Python and
packages, as the CLI's ``bench train`` with the same flags.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from io import BytesIO
from pathlib import Path
from typing import Any

from hybrid_trader.bench.args import TrainBenchArgs
from hybrid_trader.errors import UserError

PAIRED_FLAGS = ("against", "pairs")
"""The flags of the pairing itself: not passed to the runs it times."""
FIGURE = "learn_seconds"
"""What each run reports that the pairs compare: ``model.learn``'s wall time."""


@dataclass(frozen=True)
class PairResult:
    """One pair: each code's ``learn`` seconds and the core it ran on."""

    this_seconds: float
    against_seconds: float
    this_core: int

    @property
    def ratio(self) -> float:
        """This code's time over the other's: below 1, this code was faster."""
        return self.this_seconds / self.against_seconds


def package_src() -> Path:
    """The ``src`` folder this package is imported from."""
    return Path(__file__).resolve().parents[2]


def code_of(ref: str, scratch: Path) -> Path:
    """The ``src`` folder of ``ref``: a folder's own, or the git revision's exported into ``scratch``."""
    folder = Path(ref).expanduser()
    if (folder / "src" / "hybrid_trader").is_dir():
        return (folder / "src").resolve()
    checkout = package_src().parent
    done = subprocess.run(["git", "-C", str(checkout), "archive", "--format=tar", ref, "src"], capture_output=True,
                          check=False, timeout=120)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise UserError(f"--against {ref}: neither a folder with src/hybrid_trader nor a git revision of {checkout} "
                        f"({why[-1] if why else 'git failed'})",
                        fix="give a commit, branch or tag of this checkout (e.g. HEAD~1), or a folder with another "
                            "copy of the project")
    with tarfile.open(fileobj=BytesIO(done.stdout)) as tar:
        tar.extractall(scratch, filter="data")
    return scratch / "src"


def two_cores() -> tuple[int, int]:
    """Two cores this process may run on, or a refusal that says why pairs need them."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < 2:
        usable = len(cores) or "an unknown number of"
        raise UserError(f"--against runs both codes at once on a core each; this process may use {usable} core(s)",
                        fix="run it where two cores are free (Linux), or time each code alone with bench train")
    return cores[0], cores[1]


def run_flags(args: TrainBenchArgs) -> list[str]:
    """``bench train``'s flags for one timed run: those given, less the pairing's, on one thread."""
    flags: list[str] = []
    pinned = replace(args, torch_threads=1, update_threads="1")
    for f in fields(pinned):
        value = getattr(pinned, f.name)
        if f.name in PAIRED_FLAGS or value is None or value == f.default:
            continue
        flag = "--" + f.name.replace("_", "-")
        flags += [flag] if value is True else [] if value is False else [flag, str(value)]
    return flags


def time_once(command: list[str], src: Path, core: int, flags: list[str]) -> subprocess.Popen:
    """Start ``command`` (``bench train``'s, after the interpreter) with ``flags`` on the code in ``src``, pinned to
    ``core``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.Popen([sys.executable, *command, *flags], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, {core}))


def reported(proc: subprocess.Popen, which: str) -> dict[str, Any]:
    """The JSON last line of a finished run, or a refusal with the end of what it printed."""
    out, err = proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((err or out).strip().splitlines()[-8:])
        raise UserError(f"bench train of {which} failed (exit {proc.returncode}):\n{tail}",
                        fix="check that this code's flags exist in the other code, or fix the error above")
    return json.loads(lines[-1])


def start_pair(command: list[str], jobs: list[tuple[Path, int]], flags: list[str],
               first: int) -> list[subprocess.Popen]:
    """Start each ``(src, core)`` of ``jobs`` (job ``first`` first); their processes, in ``jobs``' order."""
    procs: dict[int, subprocess.Popen] = {}
    for k in (first, 1 - first):
        procs[k] = time_once(command, *jobs[k], flags)
    return [procs[0], procs[1]]


def sign_test_p(faster: int, n: int) -> float:
    """Two-sided exact sign test: the chance of a split at least this uneven if neither code were faster."""
    k = min(faster, n - faster)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def run_pairs(args: TrainBenchArgs, command: list[str], say: Callable[[str], None] = print) -> dict[str, Any]:
    """Time ``args.pairs`` pairs of this code and ``args.against``, each run ``python COMMAND FLAGS`` (the CLI's
    ``bench train``); the pairs, the median ratio and the sign test."""
    assert args.against is not None
    cores = two_cores()
    flags = run_flags(args)
    this = package_src()
    pairs: list[PairResult] = []
    with tempfile.TemporaryDirectory(prefix="hybrid-trader-against-") as scratch:
        other = code_of(args.against, Path(scratch))
        say(f"timing {args.pairs} pairs at once, cores {cores[0]} and {cores[1]} swapped each pair: this code "
            f"({this}) against {args.against} ({other}); bench train {' '.join(flags)}")
        # untimed: each copy compiles and caches its numba kernels (and byte code), and a flag the other code lacks
        # fails here, before any pair is timed
        procs = start_pair(command, [(this, cores[0]), (other, cores[1])], run_flags(replace(args, steps=1)), 0)
        reported(procs[0], "this code"), reported(procs[1], args.against)
        for i in range(args.pairs):
            mine, theirs = (cores[0], cores[1]) if i % 2 == 0 else (cores[1], cores[0])
            # the start order swapped with the cores: neither code always starts first
            procs = start_pair(command, [(this, mine), (other, theirs)], flags, i % 2)
            a, b = reported(procs[0], "this code"), reported(procs[1], args.against)
            pair = PairResult(float(a[FIGURE]), float(b[FIGURE]), mine)
            pairs.append(pair)
            say(f"pair {i + 1}: this {pair.this_seconds:.2f} s (core {mine}), {args.against} "
                f"{pair.against_seconds:.2f} s (core {theirs}): ratio {pair.ratio:.3f}")
    ratios = [p.ratio for p in pairs]
    faster = sum(r < 1 for r in ratios)
    return {"against": args.against, "pairs": len(pairs), "figure": FIGURE,
            "this_seconds": [p.this_seconds for p in pairs], "against_seconds": [p.against_seconds for p in pairs],
            "this_cores": [p.this_core for p in pairs], "ratios": [round(r, 4) for r in ratios],
            "median_ratio": round(statistics.median(ratios), 4), "this_faster_in": faster,
            "sign_test_p": round(sign_test_p(faster, len(pairs)), 4), "flags": flags}


def run(args: TrainBenchArgs, command: list[str]) -> int:
    """``bench train --against REF``: print each pair and the verdict; the JSON record on the last line."""
    result = run_pairs(args, command)
    m = result["median_ratio"]
    print(f"this code took {m:.3f}x the time of {args.against} (median of {result['pairs']} pairs; "
          f"{'faster' if m < 1 else 'slower' if m > 1 else 'equal'} by {abs(1 - m) * 100:.1f}%), faster in "
          f"{result['this_faster_in']} of {result['pairs']} pairs (sign test p = {result['sign_test_p']})")
    print(json.dumps(result))
    return 0
