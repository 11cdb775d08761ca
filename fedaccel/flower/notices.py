"""Flower's and Ray's notices that tell a fedaccel user nothing, filtered where they are raised.

- Flower's "DEPRECATED FEATURE: The `run_simulation` function is deprecated": fedaccel drives the
  simulation engine through it on purpose (``flwr run`` would re-install the app's dependencies);
- "Manually terminating ClientAppActor", which each Ray actor logs as the simulation ends it;
- Ray's FutureWarning "Tip: In future versions of Ray, Ray will no longer override accelerator visible
  devices env var ...", printed as a local Ray starts.

And Ray's colour codes around its ClientApp workers' prefixes, ``(ClientAppActor pid=...)``, unless stdout and
stderr are both a terminal: in a log or a pipe they were escape codes (``RAY_COLOR_PREFIX=0``; a value the user
set is kept). While a simulation runs, the engine's records of a ClientApp whose code raised
(:class:`ClientCodeErrors`): fedaccel says the error in one line, with the client's traceback in ``error.txt``.
Everything else Flower and Ray say is shown as before.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

RAY_TIP = r"Tip: In future versions of Ray, Ray will no longer override accelerator visible devices"


class FlowerNotices(logging.Filter):
    """Drops the two Flower records above from the ``flwr`` logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "Manually terminating %s":
            return False
        return not (str(record.msg).startswith("DEPRECATED FEATURE") and "`run_simulation`" in record.getMessage())


class ClientCodeErrors(logging.Filter):
    """Drops what Flower's simulation engine logs of a ClientApp whose code raised: its three records (a line, the
    client's traceback as Ray wraps it, and the engine's own) for each client, ~30 lines each. fedaccel stops the
    run in one line and keeps each client's own traceback in ``error.txt`` (:class:`fedaccel.runs.loop.ClientError`).
    A worker that died, or any other error of the engine, is shown as before."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.ERROR:
            return True
        if record.msg == "An exception was raised when processing a message by %s":
            return False  # the engine's preface to the records below, whatever the error
        text = f"{type(record.msg).__name__}: {record.msg}" if isinstance(record.msg, BaseException) else str(record.msg)
        return not any(name in text[-CLIENT_ERROR_WINDOW:] for name in CLIENT_CODE_ERRORS)


CLIENT_CODE_ERRORS = ("ClientAppException", "LoadClientAppError")  # Flower's wrappers of a ClientApp's own error
CLIENT_ERROR_WINDOW = 1 << 16  # a record's last characters searched for them


@contextmanager
def client_errors_kept_quiet() -> Iterator[None]:
    """:class:`ClientCodeErrors` on the ``flwr`` logger while a simulation runs in this process."""
    logger, quiet = logging.getLogger("flwr"), ClientCodeErrors()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def quiet_notices() -> None:
    """Filter the notices above in this process (once; later calls add nothing)."""
    logger = logging.getLogger("flwr")
    if not any(isinstance(f, FlowerNotices) for f in logger.filters):
        logger.addFilter(FlowerNotices())
    warnings.filterwarnings("ignore", message=RAY_TIP, category=FutureWarning)
    if not all(stream is not None and stream.isatty() for stream in (sys.stdout, sys.stderr)):
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")  # read by Ray as it prints each worker's line
