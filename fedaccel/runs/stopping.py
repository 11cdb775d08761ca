"""Stopping a run cleanly: SIGINT/SIGTERM finish the current round, checkpoint it, then stop.

While :func:`stop_signals` is active (``run_loop`` holds it), the first SIGINT or SIGTERM sets
:data:`STOP`; the loop checks it after every round, writes a checkpoint of that round and raises
:class:`Interrupted`. A second signal stops at once (``KeyboardInterrupt``), losing only the
rounds since the last checkpoint. Signal handlers can only be set in the main thread; elsewhere
(a Flower ServerApp thread, a notebook's worker) the handlers are left alone and ``STOP`` can be
set by whoever owns the process.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedaccel.errors import UserError

STOP = threading.Event()


class Interrupted(UserError):
    """A run stopped on request; its checkpoint in ``run_dir`` continues after round ``round``
    (``round`` None: a grid of runs stopped, each cell at its own checkpoint)."""

    def __init__(self, run_dir: Path, round_: int | None, reason: str = "a stop request") -> None:
        self.run_dir, self.round, self.reason = Path(run_dir), round_, reason
        where = f"continues after round {round_}" if round_ is not None else "holds the checkpoint of every cell"
        super().__init__(f"interrupted by {reason}; {run_dir} {where}")

    def __reduce__(self) -> tuple[type, tuple[Path, int | None, str]]:  # crosses process pools intact
        return type(self), (self.run_dir, self.round, self.reason)

    def how_to_continue(self, command: str) -> str:
        """One line for the user: what stopped, and the command that continues."""
        if self.round is None:
            return f"interrupted by {self.reason}; `{command}` continues every unfinished cell from its checkpoint"
        if "--resume" in command:
            return f"interrupted by {self.reason}; `{command}` continues after round {self.round}"
        return f"interrupted by {self.reason}; `{command}` continues ({self.run_dir.name} after round {self.round})"


_received: list[str] = []
_requests = [0]  # stop requests this process has had, handled or not (never cleared): see stop_requests
_announce = [True]  # say "finishing the current round" on a signal (a worker leaves it to its parent)


def announce_stops(say: bool) -> None:
    """Whether this process says, on SIGINT/SIGTERM, that it finishes the round (default: yes). An
    ``experiment -j`` worker does not: its experiment says it once for every worker."""
    _announce[0] = say


def _on_signal(signum: int, frame: Any) -> None:
    if STOP.is_set() and _received:  # the second signal: stop now
        raise KeyboardInterrupt
    # the first (STOP set otherwise, by a Ray cell's watch of its grid, is no signal: Ray's cancel that follows it
    # must not stop the run at once, between a round's row and its checkpoint)
    request_stop(signal.Signals(signum).name)


def request_stop(name: str) -> None:
    """Take a first stop request (``name``: the signal's, e.g. ``SIGINT``) as :func:`stop_signals`'s handler
    does: set :data:`STOP` and say that the round finishes. For a handler of a process whose rounds run in
    another thread (:mod:`fedaccel.flower.simulation`)."""
    _received.append(name)
    _requests[0] += 1
    STOP.set()
    if _announce[0]:
        print(f"\n{name}: finishing the current round and checkpointing it (again to stop at once)",
              file=sys.stderr, flush=True)


def clear_stop() -> None:
    """Forget a handled stop request (the next run in this process starts afresh)."""
    STOP.clear()
    _received.clear()


def stop_requests() -> int:
    """How many stop requests this process has had, :func:`clear_stop` or not: a request that came while a run
    ended by itself (in its last round) is cleared with the run, yet an ``experiment -j`` worker must still
    start no further cell."""
    return _requests[0]


def signal_name() -> str:
    """The signal that set :data:`STOP` (or a generic phrase when it was set otherwise)."""
    return _received[-1] if _received else "a stop request"


@contextmanager
def stop_signals() -> Iterator[None]:
    """Turn SIGINT/SIGTERM into :data:`STOP` for the duration (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
