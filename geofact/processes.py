"""Worker processes that do not outlive the process that started them."""

from __future__ import annotations

import ctypes
import os
import signal
import sys


def die_with_parent(parent: int) -> None:
    """Make this worker process die when its parent does (on Linux), so that a sweep or a run killed from
    the terminal leaves no process working on (records are written atomically, so none is torn)."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died while this worker started, before the signal was armed
        os._exit(1)
