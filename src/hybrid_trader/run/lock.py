"""One writer per folder: an exclusive ``fcntl.flock`` on ``<folder>/.lock`` (or per file: a live journal's
``<folder>/<journal>.lock``).

The lock belongs to the open file, so the operating system releases it when the
process ends in any way (kill -9 included); a stale ``.lock`` file never blocks. The
holder writes its PID and what it does into the file so that a second writer's error
can name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from hybrid_trader.errors import UserError

LOCK = ".lock"
"""File name of a folder's writer lock."""


class FolderLock:
    """Exclusive writer lock on ``folder`` (use as a context manager, or acquire/release); ``name`` and ``subject``:
    the lock file of one file in it (``subject``, named by a second writer's error) instead of the folder's."""

    def __init__(self, folder: str | Path, what: str, *, name: str = LOCK, subject: str | Path | None = None) -> None:
        self.folder = Path(folder)
        self.path = self.folder / name
        self.subject = Path(subject) if subject is not None else self.folder
        self.what = what
        self._fd: int | None = None

    def holder(self) -> str:
        """What the lock file says about its holder ("PID 123: train"), or "unknown"."""
        try:
            text = self.path.read_text(encoding="utf-8").strip()
        except OSError:
            return "unknown"
        pid, _, what = text.partition(" ")
        return f"PID {pid}: {what}" if pid.isdigit() else "unknown"

    def acquire(self) -> FolderLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = self.holder()
            pid = holder.split(":")[0].removeprefix("PID ")
            who = "this process, through another handle" if pid == str(os.getpid()) else "another process"
            raise UserError(
                f"{self.subject} is being written by {who} ({holder})",
                fix=f"wait until it ends (or stop it: kill {pid}); one process writes it at a time. "
                "Read-only commands (report of existing results, diagnose) work meanwhile",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {self.what}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):  # the folder was removed meanwhile
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
