"""Ctrl-Z on a grid: the whole grid stops, ``fg`` continues it, and the stop is not the grid's pace.

The terminal sends SIGTSTP only to the experiment's process: its ``-j`` workers run in process groups of their
own (so that Ctrl-C reaches them once, through the experiment), and would go on training while it is stopped.
Within :func:`suspending`, SIGTSTP stops the workers' process groups (SIGSTOP), then this process; when it is
continued, it continues them. The seconds it spent stopped add up in :func:`suspended_s`, which
:class:`~fedaccel.grids.progress.GridProgress` takes out of the time spent (its pace, its time left).

Where cells run elsewhere (Ray tasks) nothing is installed: they go on while the experiment is stopped, and the
stop counts as time spent. ``kill -STOP`` cannot be caught: it stops this process alone, and counts the same way.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_suspended_s = 0.0  # seconds this process spent stopped by SIGTSTP within `suspending`


def suspended_s() -> float:
    """Seconds this process has spent stopped by Ctrl-Z (SIGTSTP) while a grid ran (:func:`suspending`)."""
    return _suspended_s


@contextmanager
def suspending(groups: Callable[[], list[int]] = list) -> Iterator[None]:
    """For the duration (main thread only), SIGTSTP stops the process groups ``groups()`` names (the workers',
    each its leader's pid) with this process and continues them with it, and counts the stop."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTSTP) == signal.SIG_IGN:
        yield  # (a launcher that ignores Ctrl-Z keeps it ignored)
        return

    def stop(signum: int, frame: Any) -> None:
        global _suspended_s
        stopped = _signal_groups(groups(), signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)  # the default: stop, as the terminal asked
        began = time.perf_counter()
        try:
            os.kill(os.getpid(), signal.SIGTSTP)  # delivered (the process stops) before kill returns
        finally:
            _suspended_s += time.perf_counter() - began
            signal.signal(signal.SIGTSTP, stop)
            _signal_groups(stopped, signal.SIGCONT)

    previous = signal.signal(signal.SIGTSTP, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTSTP, previous if previous is not None else signal.SIG_DFL)


def _signal_groups(groups: list[int], sig: int) -> list[int]:
    """Send ``sig`` to each process group in ``groups``; returns those that were there."""
    reached = []
    for group in groups:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            continue
        reached.append(group)
    return reached
