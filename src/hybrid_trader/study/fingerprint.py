"""The machine and libraries a trial ran on, and torch set as deterministic as it allows on a CPU.

A trial is bit-identical when rerun on one machine; across machines its floating point can differ (the CPU's
vector instructions pick torch's and MKL's kernels, library versions change numerics). Every trial records
:func:`fingerprint` in its ``trial.json``; the study's summary says when its trials ran on different ones
(:func:`fingerprint_summary`), so a reader knows a difference between two trials may hold the machine too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import warnings
from collections import Counter
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

LIBRARIES = ("torch", "numpy", "stable-baselines3", "sb3-contrib", "gymnasium", "pandas", "numba")
"""Libraries whose versions decide a trial's numbers (their versions are recorded)."""
NUMERIC_ENV = ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "PYTHONHASHSEED")
"""Environment variables that change which kernels torch and MKL pick, or the threads (recorded when set)."""
KEY_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
"""CPU flags named in the fingerprint (the full set is hashed)."""


def make_deterministic(threads: int = 1) -> None:
    """Fixed torch threads and deterministic algorithms where torch has them (an op with none warns, once)."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    warnings.filterwarnings("once", message=".*does not have a deterministic implementation.*")


def _cpu() -> tuple[str, list[str]]:
    """The CPU's model name and flags (Linux's /proc/cpuinfo; elsewhere the processor string, no flags)."""
    model, flags = "", list[str]()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not model:
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = sorted(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or platform.machine(), flags


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def fingerprint() -> dict[str, Any]:
    """This process's machine and libraries: CPU model and flags, torch's kernel level and threads, the
    deterministic-algorithms setting, python and the libraries' versions; ``id`` hashes them all."""
    model, flags = _cpu()
    fp: dict[str, Any] = {
        "cpu": model,
        "cpu_flags": [f for f in KEY_FLAGS if f in flags],
        "cpu_flags_sha256": hashlib.sha256(" ".join(flags).encode()).hexdigest()[:12] if flags else None,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "mkl": torch.backends.mkl.is_available(),
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.machine()}",
        "libraries": {name: _version(name) for name in LIBRARIES},
        "env": {k: os.environ[k] for k in NUMERIC_ENV if k in os.environ},
    }
    fp["id"] = fingerprint_id(fp)
    return fp


def fingerprint_id(fp: dict[str, Any]) -> str:
    """A short hash of a fingerprint (its ``id`` left out)."""
    data = {k: v for k, v in fp.items() if k != "id"}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """The code computing this process's trials: the package's version and, in a git checkout, its commit and a hash
    of its uncommitted changes under the package (tracked diffs and untracked files; None when clean). Two trials
    with equal records ran the same code; with a commit None (an installed package), the version alone says so."""
    here = Path(__file__).resolve().parents[1]  # the hybrid_trader package

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True, timeout=30,
                                  check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    changes = None
    if commit:
        diff = (git("diff", "HEAD", "--", ".") or "") + (git("status", "--porcelain", "--untracked-files=all", "--",
                                                                 ".") or "")
        changes = hashlib.sha256(diff.encode()).hexdigest()[:12] if diff.strip() else None
    return {"version": _version("hybrid-trader"), "commit": commit.strip() if commit else None, "changes": changes}


def code_label(code: dict[str, Any] | None) -> str | None:
    """A code record in a few characters: ``0.1.0 728a42f8`` (``+ changes 8ccaeffbe42e`` when uncommitted)."""
    if not code:
        return None
    commit = (code.get("commit") or "no commit")[:8]
    return f"{code.get('version')} {commit}" + (f" + changes {code['changes']}" if code.get("changes") else "")


UNKNOWN = "unknown"
"""The fingerprint of a trial recorded before fingerprints were (or of a worker lost before it wrote one)."""


def fingerprint_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The fingerprints the finished trials ran on: each with its trials' count and details, and a warning when
    there are several (the trials are then comparable only up to what the machines change)."""
    ok = [r for r in rows if r.get("status") == "finished"]
    ids = Counter((r.get("fingerprint") or {}).get("id", UNKNOWN) for r in ok)
    details: dict[str, dict[str, Any]] = {}
    for r in ok:
        fp = r.get("fingerprint") or {}
        details.setdefault(fp.get("id", UNKNOWN), {k: v for k, v in fp.items() if k != "id"})
    out: dict[str, Any] = {"distinct": len(ids),
                           "by id": {i: {"trials": n, **details[i]} for i, n in ids.most_common()}}
    if len(ids) > 1:
        out["warning"] = differ_warning(list(details.values()), ids)
    return out


def differ_warning(fps: list[dict[str, Any]], counts: Counter) -> str:
    """What differs between fingerprints, in one sentence."""
    keys = sorted({k for fp in fps for k in fp} - {"id"})
    differ = [k for k in keys if len({json.dumps(fp.get(k), sort_keys=True, default=str) for fp in fps}) > 1]
    if UNKNOWN in counts:
        differ.append(f"{counts[UNKNOWN]} trial(s) recorded none")
    return (f"the trials ran on {len(counts)} different machine/library fingerprints ({', '.join(differ)} "
            "differ): a trial is bit-identical when rerun on one fingerprint, not across them")
