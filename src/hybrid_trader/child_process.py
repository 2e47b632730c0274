"""Child processes that end with their parent, however it ends (kill -9 included).

A worker holding a model (about 2 GB for Gemma 3 270M) must not outlive the process that
started it: :func:`end_with_parent`, called first thing in the child, asks Linux to send
it SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), and leaves Ctrl-C to the
parent. Elsewhere it only ignores Ctrl-C (the parent's pipe closing still ends the child).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
"""prctl option: the signal the calling process gets when its parent thread dies."""


def end_with_parent() -> bool:
    """In a child process: die with the parent (Linux), ignore Ctrl-C (the parent's to handle).

    Returns True when the death signal was set. A parent already gone before the call
    (the child was orphaned while starting) ends the child at once.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if parent == 1 or os.getppid() != parent:  # orphaned before the death signal was armed
        os._exit(1)
    return ok
