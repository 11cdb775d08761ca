"""A run folder: the names of its files, a new folder's name, and a start that leaves nothing behind.

A run folder holds ``config.yaml`` (resolved), ``metrics.jsonl`` (one line per evaluated round,
flushed as it is written), ``diagnostics.jsonl`` (the algorithm's diagnostics of every round),
``checkpoint.pt`` (every ``run.checkpoint_every`` rounds, :mod:`fedaccel.runs.checkpoint`; the one
before it is kept as ``checkpoint.prev.pt``), ``model.pt`` (the final flat parameter vector) and
``summary.json``. Its one writer holds ``.lock`` (:mod:`fedaccel.runs.lock`).

Every file of it is written through :func:`fedaccel.runs.files.write_atomic` and every ``.pt``
file read through :func:`fedaccel.runs.files.load_plain`.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from fedaccel.errors import UserError
from fedaccel.runs.config import Config
from fedaccel.runs.lock import LOCK_FILE


CHECKPOINT = "checkpoint.pt"


PREVIOUS_CHECKPOINT = "checkpoint.prev.pt"  # the one before; resume falls back to it if the newest is damaged


METRICS = "metrics.jsonl"


DIAGNOSTICS = "diagnostics.jsonl"  # the algorithm's diagnostics of every round, evaluated or not
OWN_EVENTS = "tensorboard.json"  # the names of the TensorBoard event files fedaccel wrote into this run folder


ERROR_FILE = "error.txt"  # the traceback of the error that stopped the run's rounds (gone once it runs again)
CLIENT_STATES = "client-states"  # a Flower simulation's clients' part states at its checkpoints, one folder each


RUN_FILES = ("config.yaml", METRICS, DIAGNOSTICS, CHECKPOINT, PREVIOUS_CHECKPOINT, "model.pt", "summary.json",
             LOCK_FILE, OWN_EVENTS, ERROR_FILE)  # what fedaccel writes in a run folder: no link may stand at these names


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


def check_out_folder(path: Path) -> None:
    """A new run goes into a new or empty folder (``.lock`` aside: a start that failed) or, to be
    refused with the way to continue it, a run folder: never into a folder of the user's files."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{path} is a file, not a folder; give --out a new or empty folder")
    if path.is_dir() and not (path / METRICS).exists() and {p.name for p in path.iterdir()} - {LOCK_FILE}:
        killed = (f" (a run killed before its first round: `fedaccel run --resume {path}`)"
                  if (path / "config.yaml").is_file() else "")
        raise UserError(f"{path} is not empty and holds no fedaccel run; nothing in it was touched: give --out "
                        f"a new or empty folder{killed}")
