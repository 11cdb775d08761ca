"""Flower's and Ray's notices that tell a fedaccel user nothing, filtered where they are raised.

- Flower's "DEPRECATED FEATURE: The `run_simulation` function is deprecated": fedaccel drives the
  simulation engine through it on purpose (``flwr run`` would re-install the app's dependencies);
- "Manually terminating ClientAppActor", which each Ray actor logs as the simulation ends it;
- Ray's FutureWarning "Tip: In future versions of Ray, Ray will no longer override accelerator visible
  devices env var ...", printed as a local Ray starts.

And Ray's colour codes around its ClientApp workers' prefixes, ``(ClientAppActor pid=...)``, unless stdout and
stderr are both a terminal: in a log or a pipe they were escape codes (``RAY_COLOR_PREFIX=0``; a value the user
set is kept). Everything else Flower and Ray say is shown as before.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

RAY_TIP = r"Tip: In future versions of Ray, Ray will no longer override accelerator visible devices"


class FlowerNotices(logging.Filter):
    """Drops the two Flower records above from the ``flwr`` logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "Manually terminating %s":
            return False
        return not (str(record.msg).startswith("DEPRECATED FEATURE") and "`run_simulation`" in record.getMessage())


def quiet_notices() -> None:
    """Filter the notices above in this process (once; later calls add nothing)."""
    logger = logging.getLogger("flwr")
    if not any(isinstance(f, FlowerNotices) for f in logger.filters):
        logger.addFilter(FlowerNotices())
    warnings.filterwarnings("ignore", message=RAY_TIP, category=FutureWarning)
    if not all(stream is not None and stream.isatty() for stream in (sys.stdout, sys.stderr)):
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")  # read by Ray as it prints each worker's line
