"""A run folder: the names of its files, a new folder's name, and a start that leaves nothing behind.

A run folder holds ``config.yaml`` (resolved), ``metrics.jsonl`` (one line per evaluated round,
flushed as it is written), ``diagnostics.jsonl`` (the algorithm's diagnostics of every round),
``checkpoint.pt`` (every ``run.checkpoint_every`` rounds, :mod:`fedaccel.runs.checkpoint`; the one
before it is kept as ``checkpoint.prev.pt``), ``model.pt`` (the final flat parameter vector) and
``summary.json``. Its one writer holds ``.lock`` (:mod:`fedaccel.runs.lock`).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from fedaccel.runs.config import Config


CHECKPOINT = "checkpoint.pt"


PREVIOUS_CHECKPOINT = "checkpoint.prev.pt"  # the one before; resume falls back to it if the newest is damaged


METRICS = "metrics.jsonl"


DIAGNOSTICS = "diagnostics.jsonl"  # the algorithm's diagnostics of every round, evaluated or not


def new_run_dir(config: Config) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(config.run.out_dir) / f"{config.label}-s{config.run.seed}-{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


@contextmanager
def removed_on_failed_start(path: Path, before: set[Path] | None) -> Iterator[None]:
    """Remove the run folder (``before`` is None: it did not exist) or what this start added to it
    if the start fails before the first metrics line: no folder left holding only ``config.yaml``."""
    try:
        yield
    except BaseException:
        if not (path / METRICS).exists():
            if before is None:
                shutil.rmtree(path, ignore_errors=True)
            else:
                for item in set(path.iterdir()) - before:
                    shutil.rmtree(item) if item.is_dir() else item.unlink()
        raise
