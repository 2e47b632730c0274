"""Atomic, checked files: write to a temporary name, fsync, rename; a sha256 manifest per folder.

:func:`atomic_write_bytes` never leaves a half-written file under the final name: the
bytes go to ``.<name>.tmp-<pid>`` in the same folder, are flushed to disk and then
``os.replace``-d over the target (atomic on POSIX). :class:`Manifest` keeps
``{relative path: {"sha256", "size"}}`` in ``<folder>/manifest.json`` so that a reader
can tell a damaged or swapped file from a good one (:meth:`Manifest.verify`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hybrid_trader.errors import UserError

MANIFEST = "manifest.json"
"""File name of a folder's checksum manifest."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    """sha256 of a file's content (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder (flushed, fsync'd, renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)
    return path


MIN_FREE_BYTES = 50 * 1024 * 1024
"""Free disk space a writing command needs before it starts (models, chunks and reports are small)."""


def check_writable(folder: str | Path, *, what: str) -> Path:
    """Refuse, before any long computation, a folder that cannot be written: a file in its place (or in
    a parent's), no permission, a read-only file system, a full disk. Creates nothing; returns the folder."""
    p = Path(folder)
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{what}: {probe} is a file, not a folder", file=str(probe),
                        fix="give a folder path (a new or an existing folder)")
    try:
        fd, name = tempfile.mkstemp(prefix=".write-check-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        raise UserError(f"{what}: cannot write in {probe} ({err.strerror})", file=str(probe),
                        fix="make it writable, or give a folder you can write to") from None
    free = shutil.disk_usage(probe).free
    if free < MIN_FREE_BYTES:
        raise UserError(f"{what}: the disk holding {probe} is full ({free / 2**20:.1f} MiB free)", file=str(probe),
                        fix=f"free at least {MIN_FREE_BYTES // 2**20} MiB, then run the command again")
    return p


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def staged_dir(folder: str | Path, *, keep: Sequence[str] = ()) -> Iterator[Path]:
    """A folder written whole: fill the yielded temporary folder; on success it replaces ``folder``.

    A failure while filling leaves ``folder`` as it was (the temporary folder is removed).
    A new folder appears by one rename; an existing one has each entry replaced by a rename,
    and its entries named in ``keep`` that the new one lacks stay (e.g. ``checkpoints``):
    they are never moved, so no interruption can lose them.
    """
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if not folder.exists():
            tmp.replace(folder)
        else:
            for old in folder.iterdir():
                if old.name not in keep and not (tmp / old.name).exists():
                    shutil.rmtree(old) if old.is_dir() else old.unlink()
            for item in tmp.iterdir():
                target = folder / item.name
                if target.is_dir():
                    shutil.rmtree(target)
                item.replace(target)
        _fsync_dir(folder.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Manifest:
    """``<folder>/manifest.json``: sha256 and size of the files written through it."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / MANIFEST

    def entries(self) -> dict[str, dict[str, Any]]:
        """``{relative path: {"sha256", "size"}}``; empty when there is no manifest (a run from before manifests)."""
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise UserError(f"checksum manifest is damaged ({err})", file=str(self.path),
                            fix=f"restore it, or delete {self.path} to load the files without checksum checks") \
                from None
        if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
            raise UserError("checksum manifest has no 'files' table", file=str(self.path),
                            fix=f"delete {self.path} to load the files without checksum checks")
        return data["files"]

    def _key(self, path: str | Path) -> str:
        return Path(path).resolve().relative_to(self.folder.resolve()).as_posix()

    def _save(self, files: dict[str, dict[str, Any]]) -> None:
        text = json.dumps({"format": "hybrid_trader.manifest/1", "files": dict(sorted(files.items()))}, indent=1)
        atomic_write_text(self.path, text + "\n")

    def write(self, path: str | Path, data: bytes) -> Path:
        """Write ``data`` atomically to ``path`` (inside the folder) and record its checksum."""
        path = atomic_write_bytes(path, data)
        self.record({path: data})
        return path

    def write_text(self, path: str | Path, text: str) -> Path:
        return self.write(path, text.encode("utf-8"))

    def record(self, written: dict[Path, bytes]) -> None:
        files = self.entries()
        for path, data in written.items():
            files[self._key(path)] = {"sha256": sha256_bytes(data), "size": len(data)}
        self._save(files)

    def forget(self, *paths: str | Path) -> None:
        """Remove entries (for files deleted on purpose, e.g. rotated checkpoints)."""
        files = self.entries()
        keys = {self._key(p) for p in paths}
        if keys & set(files):
            self._save({k: v for k, v in files.items() if k not in keys})

    def expected(self, path: str | Path) -> dict[str, Any] | None:
        return self.entries().get(self._key(path))

    def problem(self, path: str | Path) -> str | None:
        """Why ``path`` is not the file that was written (missing, size, checksum), or None when it is."""
        path = Path(path)
        entry = self.expected(path)
        if not path.exists():
            return "missing"
        if entry is None:
            return None
        size = path.stat().st_size
        if size != entry.get("size"):
            return f"damaged: {size:,} bytes, {entry.get('size'):,} were written (truncated or changed)"
        if sha256_file(path) != entry.get("sha256"):
            return "damaged: its sha256 differs from the one recorded when it was written"
        return None

    def verify(self, path: str | Path, *, fix: str) -> Path:
        """``path`` when it is the file that was written; else a UserError naming it, with ``fix``."""
        problem = self.problem(path)
        if problem is not None:
            raise UserError(f"{problem} (checked against {self.path.name})", file=str(path), fix=fix)
        return Path(path)
