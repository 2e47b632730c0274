"""Pinned inputs: the files a run's results depend on, by absolute path and content hash.

A phase 3 run reads files that live outside it and can change under it: the distilled
student (``llm.student.path``), a LoRA adapter folder (``llm.transformers.adapter``).
:func:`pin_inputs` records each in ``RUN_DIR/pins.json`` when the run starts;
:func:`check_pins` (resume, evaluate) refuses a file whose content changed since, naming
both hashes, instead of silently producing results from another model. A folder's hash
covers its files' names and contents (its ``checkpoints/`` excluded).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hybrid_trader.errors import UserError
from hybrid_trader.run.files import atomic_write_text, sha256_file

PINS = "pins.json"
"""File name of a run's pinned inputs."""
SKIP_DIRS = ("checkpoints",)
"""Sub-folders left out of a folder's hash (training state, not the model)."""


def content_hash(path: str | Path) -> str:
    """sha256 of a file, or of a folder's relative names and file hashes (sorted; ``checkpoints/`` left out)."""
    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    if not p.is_dir():
        raise UserError("a pinned input is missing", file=str(p),
                        fix="restore it at this path (the run recorded it), or train a new run")
    h = hashlib.sha256()
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        rel = f.relative_to(p)
        if rel.parts[0] in SKIP_DIRS:
            continue
        h.update(f"{rel.as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


def pin_inputs(run_dir: str | Path, inputs: Mapping[str, str | Path | None]) -> dict[str, Any]:
    """Record ``{name: path}`` (None: not used) in ``RUN_DIR/pins.json``; returns what was recorded."""
    pins = {name: {"path": str(Path(path).resolve()), "sha256": content_hash(path)}
            for name, path in inputs.items() if path}
    if pins:
        atomic_write_text(Path(run_dir) / PINS, json.dumps(pins, indent=1) + "\n")
    return pins


def read_pins(run_dir: str | Path) -> dict[str, Any]:
    """The run's pinned inputs ({} for a run that pinned none, or from before pins)."""
    path = Path(run_dir) / PINS
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"the run's pinned inputs are unreadable ({err})", file=str(path),
                        fix="restore the file from a backup; the run cannot vouch for its inputs without it") from None
    return data if isinstance(data, dict) else {}


def check_pins(run_dir: str | Path, *, doing: str) -> dict[str, Any]:
    """Refuse (UserError) when a pinned input's content changed or it is gone; returns the pins."""
    pins = read_pins(run_dir)
    for name, pin in pins.items():
        path = Path(pin["path"])
        now = content_hash(path)
        if now != pin["sha256"]:
            raise UserError(
                f"{doing}: the {name} this run used has changed since: {path} is now sha256 {now[:12]}, "
                f"the run pinned {pin['sha256'][:12]}",
                file=str(path),
                fix=f"restore the {name} the run was trained with, or train a new run with the new {name} "
                    f"(results from another {name} would not be this run's)")
    return pins
