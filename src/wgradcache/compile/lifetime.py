"""Processes that end with the process that started them: no orphans after a SIGKILL.

A build's loky workers block on their task queue and its codegen children on LLVM; killed
by SIGKILL (an OOM killer, a CI timeout), the coordinator runs no clean-up, and before this
its two workers and loky's resource trackers ran on for minutes (a worker only ends after
300 s idle, and a tracker only when every process holding its pipe has). ``end_with_parent``
is called first thing in each such process:

* On Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills this process the moment
  its parent dies, even while it runs LLVM's C code holding the GIL, and costs nothing while
  the parent lives. The signal follows the *thread* that started the process: the build
  starts its workers and stage-2 children from its main thread, so that is the process.
* Elsewhere (or if prctl is refused), a daemon thread polls ``os.getppid()`` twice a second.

Either way a parent that died before the call is caught: ``getppid()`` no longer names it.
Once the workers are gone, loky's resource trackers see their pipe close and exit (removing
the build's temporary folders) by themselves.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

__all__ = ["end_with_parent", "PARENT_ENV"]

# the variable that tells a child started by ``subprocess`` which process is its parent
PARENT_ENV = "WGRADCACHE_PARENT_PID"
_PR_SET_PDEATHSIG = 1
_POLL_S = 0.5


def _pdeathsig() -> bool:
    """Ask the kernel for SIGKILL when the parent dies; False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_POLL_S)
    os._exit(1)


def end_with_parent(parent: int | None = None) -> None:
    """End this process when ``parent`` (default: ``$WGRADCACHE_PARENT_PID``) dies; a
    no-op without one. Exits at once if it is already gone (we were re-parented)."""
    if parent is None:
        text = os.environ.get(PARENT_ENV, "")
        if not (text.isascii() and text.isdigit()):
            return
        parent = int(text)
    if not _pdeathsig():
        threading.Thread(target=_watch, args=(parent,), daemon=True,
                         name="end-with-parent").start()
    if os.getppid() != parent:
        os._exit(1)
