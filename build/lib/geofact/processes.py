"""Worker processes: the cores this process may use, how many pages share the machine, and workers that
do not outlive their parent."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PAGES_AT_ONCE_ENV = "GEOFACT_PAGES_AT_ONCE"  # set by `geofact run --jobs`: pages sharing this machine's cores


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS has one, else all of them)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def die_with_parent(parent: int) -> None:
    """Make this worker process die when its parent does (on Linux), so that a sweep or a run killed from
    the terminal leaves no process working on (records are written atomically, so none is torn)."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died while this worker started, before the signal was armed
        os._exit(1)
