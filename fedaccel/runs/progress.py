"""A run's progress where no terminal shows a bar (a log, a pipe, CI): a plain line now and then.

tqdm's bar redraws itself with a carriage return at every round; written into a log file that is
hundreds of updates. :class:`RoundLines` has the part of tqdm's interface a run uses (``update``,
``set_postfix``, ``reset``, ``write``, ``close``, ``n``) and prints one line at most every
:data:`EVERY_S` seconds instead, so a short run prints none and a long one a line every half minute.

Example:
    >>> lines = RoundLines(total=60, initial=0, desc="fedavg")   # doctest: +SKIP
    >>> lines.set_postfix(acc="0.9312"); lines.update(1)         # fedavg: round 20/60, acc 0.9312 (31 s)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any

#: Seconds between two lines of one run (none before the first have passed).
EVERY_S = 30.0


def on_terminal(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (default: stderr) is a terminal, where a bar can redraw itself."""
    try:
        return (stream or sys.stderr).isatty()
    except (AttributeError, ValueError):
        return False


class RoundLines:
    """Rounds (or another ``unit``) as plain lines: ``DESC: round 20/60, acc 0.9312 (31 s)`` at most
    every ``every_s`` seconds."""

    def __init__(self, total: int, initial: int = 0, desc: str = "", *, every_s: float | None = None,
                 stream: IO[str] | None = None, clock: Callable[[], float] = time.monotonic, unit: str = "round",
                 say: Callable[[str], None] | None = None, began: float | None = None) -> None:
        self.total, self.n, self.desc, self.unit = total, initial, desc, unit
        self.say = say or self.write  # where its lines go (default: ``stream``, else stderr)
        self.every_s, self.stream, self.clock = EVERY_S if every_s is None else every_s, stream, clock
        self.said = clock()
        self.began = self.said if began is None else began  # ``clock``'s time its seconds count from
        self.postfix: dict[str, Any] = {}

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.said >= self.every_s and self.n < self.total:
            self.said = now
            extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
            self.say(f"{self.desc}: {self.unit} {self.n}/{self.total}{extra} ({now - self.began:.0f} s)")

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        self.postfix = values

    def reset(self) -> None:
        """The clock starts again (a deployment's rounds, after its processes started)."""
        self.began = self.said = self.clock()

    def write(self, text: str, file: IO[str] | None = None) -> None:
        print(text, file=file or self.stream or sys.stderr, flush=True)

    def close(self) -> None:
        pass


class Heartbeat:
    """While its block runs, a thread says ``line(seconds since the block began)`` whenever ``every_s``
    seconds pass with no other line (each one told through :meth:`say`): no silence longer than that,
    whatever one step of the block costs.

    Example:
        >>> with Heartbeat(print, lambda s: f"report: still drawing ({s:.0f} s)") as beat:  # doctest: +SKIP
        ...     beat.say("report: 12 figures")
    """

    def __init__(self, say: Callable[[str], None], line: Callable[[float], str], every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        import threading

        self._say, self.line, self.every_s, self.clock = say, line, every_s, clock
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._beat, name="fedaccel-heartbeat", daemon=True)
        self.began = self.said = clock()

    def say(self, text: str) -> None:
        with self._lock:
            self.said = self.clock()
            self._say(text)

    def _beat(self) -> None:
        while not self._stop.wait(min(0.25, self.every_s / 4)):
            with self._lock:
                now = self.clock()
                if now - self.said >= self.every_s:
                    self.said = now
                    self._say(self.line(now - self.began))

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
