"""Processes that die with their parent, however the parent ends (``kill -9`` included).

One mechanism for every process fedaccel starts: the ``experiment -j`` workers
(:func:`die_with_parent`, their initializer) and every process of a deployment, Flower's own
children included (:func:`launched`: a command started through this file).

On Linux the kernel sends SIGKILL to a process when the thread that started it exits
(``prctl(PR_SET_PDEATHSIG)``); the request survives ``exec``. A parent that died before the
request was made is caught by comparing ``os.getppid()`` with the expected parent. Elsewhere a
watchdog polls ``os.getppid()``.

``python -I lifetime.py PARENT PROGRAM ARGS...`` (what :func:`launched` and :func:`wrapper`
write) asks for this, then becomes ``PROGRAM`` (``os.execvp``, same PID); outside Linux it stays
as PROGRAM's parent and kills it once PARENT is gone. It imports only the standard library, so
it starts in milliseconds (run by path, without fedaccel's package and torch).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time

PR_SET_PDEATHSIG = 1


def _kill_me_with_parent() -> bool:
    """Ask the kernel for SIGKILL when the parent (thread) exits; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0


def die_with_parent(parent: int, every: float = 0.5) -> None:
    """End this process (at once, exit status 1 or SIGKILL) as soon as its parent ``parent`` ends."""
    _kill_me_with_parent()
    threading.Thread(target=_watch_parent, args=(parent, every), name="watch-parent", daemon=True).start()


def _watch_parent(parent: int, every: float) -> None:
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)


def _launcher() -> list[str]:
    return [sys.executable, "-I", os.path.abspath(__file__)]


def launched(command: list[str], parent: int | None = None) -> list[str]:
    """``command`` started so that it dies with ``parent`` (default: this process, i.e. the
    thread that starts it with ``subprocess.Popen``)."""
    return [*_launcher(), str(parent or os.getpid()), *command]


def wrapper(program: str) -> str:
    """A shell script that runs ``program`` (an absolute path) with its arguments so that it dies
    with whichever process starts the script: put it on ``PATH`` under ``program``'s name for
    programs that others (Flower) start by name."""
    launcher = " ".join(shlex.quote(part) for part in _launcher())
    return f'#!/bin/sh\nexec {launcher} "$PPID" {shlex.quote(program)} "$@"\n'


def main(argv: list[str]) -> None:
    parent, command = int(argv[0]), argv[1:]
    if _kill_me_with_parent():
        if os.getppid() != parent:  # the parent was gone before the request
            os._exit(1)
        os.execvp(command[0], command)
    child = subprocess.Popen(command)  # no kernel help: stay, and kill the command once the parent is gone
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    while child.poll() is None:
        if os.getppid() != parent:
            child.kill()
            break
        time.sleep(0.2)
    sys.exit(child.wait())


if __name__ == "__main__":
    main(sys.argv[1:])
