"""How a trial travels to a Ray worker and back: the bars out with it, its folder back as bytes.

A worker never reads the study's data files nor writes the study folder, so that a cluster
needs no shared filesystem and a worker's working directory (or home) does not matter:

- **Bars out.** The driver loads every bar file the study's variants name (``data.path`` and
  ``data.pool``, relative paths read from the driver's working directory, resampled to
  ``data.bar_minutes``) once, and puts them in Ray's object store once (:func:`study_bars`);
  each trial's market is built from them (:func:`hybrid_trader.study.trials.market_for`).
  The trials' configurations carry the paths made absolute at the driver (:func:`absolute_paths`),
  so a trial's ``config.yaml`` names the files as the driver's machine knows them.
- **Folder back.** A trial runs in a scratch folder on its worker
  (:func:`hybrid_trader.study.trials.trial_task`); its
  folder (the phases' runs: config, model, logs, evaluation; ``traceback.txt`` of a failure)
  returns as a tar archive with its row, the task's return value. The driver alone writes
  ``OUT/trials/<slug>/`` (:func:`land_trial`): the folder replaced whole, ``trial.json`` last.
  Earlier phases a failed attempt finished travel out with the retry (:func:`carried`), so
  a retried trial continues from them as it did on one machine.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from hybrid_trader.config import to_dict
from hybrid_trader.data.bars import Bars
from hybrid_trader.evaluation.metrics import jsonable
from hybrid_trader.run.config import DataConfig
from hybrid_trader.run.files import MANIFEST, Manifest, atomic_write_bytes, atomic_write_text, staged_dir
from hybrid_trader.run.market import load_bars_from_config, load_pool_bars, show_findings
from hybrid_trader.run.rundir import MODEL

TRIAL_FILE = "trial.json"
"""A trial's record (status, metrics, error), written last, by the driver."""
TRIALS = "trials"
"""Sub-folder of the study holding one folder per trial."""


@dataclass
class DataBars:
    """The bars of one data configuration: its file's (or the synthetic market's) and its pool files'."""

    bars: Bars
    pool: list[Bars] = field(default_factory=list)
    loaded: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Which load these are: a worker that outlives a study (on a Ray its caller keeps) never trades a later
    study's trials on a market it built from an earlier load of the same file."""


def data_key(data: DataConfig) -> str:
    """The key of a data configuration's bars (every data key: path, clock, bar size, synthetic market), its
    paths absolute as :func:`absolute_paths` makes them (so the driver's and a trial's keys agree)."""
    keys = to_dict(data)
    keys["path"] = _absolute(keys["path"]) if keys.get("path") else keys.get("path")
    keys["pool"] = [_absolute(p) for p in keys.get("pool") or []]
    return json.dumps(keys, sort_keys=True, default=str)


def _absolute(path: str) -> str:
    """``path`` made absolute against the working directory (no filesystem access: the same on every machine
    for a path that is absolute already)."""
    return os.path.abspath(os.path.expanduser(path))


def study_bars(datas: list[DataConfig], into: dict[str, DataBars] | None = None) -> dict[str, DataBars]:
    """Every distinct data configuration's bars, loaded once (the driver's; paths from its working directory),
    added to ``into`` (those it holds are not loaded again)."""
    out = into if into is not None else {}
    for data in datas:
        key = data_key(data)
        if key not in out:
            out[key] = DataBars(load_bars_from_config(data), [load_pool_bars(p, data) for p in data.pool])
            show_findings(out[key].bars)  # once, here: the trials build their markets from these bars silently
    return out


def absolute_paths(spec_data: dict[str, Any]) -> dict[str, Any]:
    """The study (as ``to_dict``) with ``data.path`` and ``data.pool`` absolute, resolved where the driver runs."""

    def fix(keys: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(keys)
        if out.get("data.path"):
            out["data.path"] = _absolute(out["data.path"])
        if out.get("data.pool"):
            out["data.pool"] = [_absolute(p) for p in out["data.pool"]]
        return out

    return {**spec_data, "base": fix(spec_data.get("base") or {}),
            "variants": [{**v, "set": fix(v.get("set") or {})} for v in spec_data.get("variants") or []]}


def pack(folder: Path, *, skip: tuple[str, ...] = ()) -> bytes:
    """``folder``'s files as an uncompressed tar (models are zip files already), names relative to it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if path.is_file() and rel.as_posix() not in skip:
                tar.add(path, arcname=rel.as_posix(), recursive=False)
    return buf.getvalue()


def unpack(data: bytes, folder: Path) -> None:
    """Extract :func:`pack`'s archive into ``folder`` (regular files and folders only, never outside it)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        for member in tar.getmembers():
            name = PurePosixPath(member.name)
            if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
                raise ValueError(f"refusing archive member {member.name!r}")
        tar.extractall(folder, filter="data")


def relocate(folder: Path, home: str, was: str | None = None) -> list[Path]:
    """The trial's JSON records (a run's ``status.json`` ``init``, an evaluation's ``run_dir`` and ``model``) made
    to name ``home``, the trial's folder at the driver, instead of ``was`` (default ``folder``: the worker's scratch
    copy; a copied trial's: the folder it was copied from); a file a checksum manifest lists is recorded anew in
    it. Returns the files changed."""
    old, new = json.dumps(was or str(folder))[1:-1], json.dumps(home)[1:-1]  # as paths appear in JSON strings
    changed = []
    for path in sorted(folder.rglob("*.json")):
        text = path.read_text(encoding="utf-8")
        if path.name == MANIFEST or old not in text:
            continue
        data = text.replace(old, new).encode("utf-8")
        owner = _manifest_listing(path, folder)
        if owner is not None:
            owner.write(path, data)
        else:
            atomic_write_bytes(path, data)
        changed.append(path)
    return changed


def _manifest_listing(path: Path, top: Path) -> Manifest | None:
    """The checksum manifest of ``path``'s folder or one above it (up to ``top``) that lists it, if any."""
    for folder in path.parents:
        manifest = Manifest(folder)
        if manifest.path.exists() and manifest.expected(path) is not None:
            return manifest
        if folder == top:
            return None
    return None


def carried(trial_folder: Path) -> bytes | None:
    """The phases an earlier attempt of the trial finished (those with a model), to continue from; None if none."""
    done = [p for p in sorted(trial_folder.glob("p[0-9]")) if (p / MODEL).exists()]
    if not done:
        return None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for run in done:
            tar.add(run, arcname=run.name)
    return buf.getvalue()


def land_trial(out: Path, slug: str, row: dict[str, Any], files: bytes | None) -> Path:
    """Write a returned trial into the study: its folder replaced whole by ``files``, then ``trial.json``."""
    folder = out / TRIALS / slug
    folder.parent.mkdir(parents=True, exist_ok=True)
    if files is not None:
        with staged_dir(folder) as tmp:
            unpack(files, tmp)
    else:
        folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / TRIAL_FILE, json.dumps(jsonable(row), indent=1))
    return folder
