"""User-facing errors: loud, specific, and with the fix.

Anything a user can cause (a bad file, a bad option, a bad config value) raises
:class:`UserError`. The command line prints it without a traceback and exits with
code 2. Internal bugs stay ordinary exceptions.
"""

from __future__ import annotations

import difflib
import errno
from collections.abc import Iterable
from typing import Any


class UserError(Exception):
    """An error the user can fix. Printed as one clear message, exit code 2.

    Parameters mirror what a user needs to find and fix the problem: which file,
    which row (1-based data row, header excluded), which column, which value, and how
    to fix it.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        row: int | None = None,
        column: str | None = None,
        value: Any = None,
        fix: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.row = row
        self.column = column
        self.value = value
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        where = []
        if self.file is not None:
            where.append(str(self.file))
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.column is not None:
            where.append(f"column '{self.column}'")
        if self.value is not None:
            where.append(f"value {self.value!r}")
        text = (": ".join([", ".join(where), self.message]) if where else self.message)
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


def did_you_mean(name: str, options: Iterable[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest option, or an empty string."""
    matches = difflib.get_close_matches(str(name), [str(o) for o in options], n=1, cutoff=0.5)
    return f" Did you mean '{matches[0]}'?" if matches else ""


WRITE_ERRORS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EISDIR,
                errno.EEXIST}
"""Errors of writing a file that are the user's to fix (permissions, a full disk, a file where a folder goes)."""

_WRITE_FIXES = {
    errno.EACCES: "make the folder writable (chmod u+w), or write somewhere else",
    errno.EPERM: "make the folder writable (chmod u+w), or write somewhere else",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.ENOSPC: "free disk space (df -h shows it), then run the command again: it resumes where it can",
    errno.EDQUOT: "free space within your quota, then run the command again",
    errno.ENOTDIR: "a file stands where a folder is expected: move it away, or choose another path",
    errno.EISDIR: "a folder stands where a file is expected: choose another path",
    errno.EEXIST: "something already exists at that path: move it away, or choose another path",
}


def os_error(err: OSError) -> UserError:
    """A file-system error as a UserError naming the file, what went wrong and the fix."""
    what = err.strerror or str(err)
    return UserError(f"cannot write: {what}", file=str(err.filename) if err.filename else None,
                     fix=_WRITE_FIXES.get(err.errno or 0, "check the path and the disk"))
