"""TensorBoard event files for runs, written with TensorBoard's own writer (via torch's
``SummaryWriter``), into the run folder itself.

With ``run.tensorboard: true`` (``--tensorboard``) a run writes, while it runs, every metrics row
(tag = the metric's name: ``test_acc``, ``train_loss``, ``bytes_up``, ...; step = the round) and
every round's algorithm diagnostics as ``diag/...`` scalars (BHerd's ``diag/clients/3/distance``,
FedGSNR's ``diag/entropy`` and ``diag/gsnr/3``, GraB's ``diag/clients/3/alpha``; a list such as
``lost``, ``rejected``, ``stragglers`` or ``dropped`` becomes its length). Because the events sit in the run folder,
``tensorboard --logdir GRID_DIR`` lists one run per cell folder (cell values and seed in its
name). ``fedaccel tensorboard DIR`` writes the same files for finished runs from their
``metrics.jsonl`` and ``diagnostics.jsonl``.

The event files fedaccel writes are named in the run folder's ``tensorboard.json``; those, and only
those, are replaced when ``fedaccel tensorboard`` writes them again: another tool's event files in
the folder are kept. Every row is read and checked before anything is written or deleted: a folder
whose rows are not a fedaccel run's is one line, and stays as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from fnmatch import fnmatchcase
from numbers import Number
from pathlib import Path
from typing import Any

from fedaccel.disk import refuse_planted_links, write_atomic
from fedaccel.errors import UserError
from fedaccel.runs.folder import DIAGNOSTICS, OWN_EVENTS
from fedaccel.runs.rows import read_diagnostics_rows, read_rows, rounds_of

EVENTS_GLOB = "events.out.tfevents.*"


def scalars(row: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """(tag, value) for every number in a metrics or diagnostics row, nested keys joined by '/'."""
    for key, value in row.items():
        if key == "round" and not prefix:
            continue
        tag = f"{prefix}{key}"
        if isinstance(value, bool):
            yield tag, float(value)
        elif isinstance(value, Number):
            yield tag, float(value)  # type: ignore[arg-type]
        elif isinstance(value, dict):
            yield from scalars(value, tag + "/")
        elif isinstance(value, list) and key in ("lost", "rejected", "unavailable", "stragglers", "dropped", "zeroed"):
            yield tag, float(len(value))


class EventLog:
    """An open TensorBoard writer on a run folder; ``start_round`` drops events of later rounds
    left by an interrupted earlier attempt (TensorBoard's purge step). The event file it starts is
    recorded in the folder's ``tensorboard.json``."""

    def __init__(self, run_dir: Path, start_round: int = 0) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # pragma: no cover - the package is a dependency
            raise UserError("run.tensorboard needs the tensorboard package: pip install tensorboard") from None
        before = {p.name for p in run_dir.glob(EVENTS_GLOB)}
        own = own_events(run_dir)
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=start_round + 1 if start_round else None)
        started = {p.name for p in run_dir.glob(EVENTS_GLOB)} - before
        write_atomic(run_dir / OWN_EVENTS, json.dumps(sorted(own & before | started)) + "\n")

    def add(self, step: int, pairs: list[tuple[str, float]]) -> None:
        for tag, value in pairs:
            self.writer.add_scalar(tag, value, step)

    def metrics(self, row: dict[str, Any]) -> None:
        self.add(row["round"], list(scalars({k: v for k, v in row.items() if k != "diag"})))
        self.writer.flush()

    def diagnostics(self, row: dict[str, Any]) -> None:
        self.add(row["round"], list(scalars({k: v for k, v in row.items() if k != "round"}, "diag/")))

    def close(self) -> None:
        self.writer.close()


def own_events(run_dir: Path) -> set[str]:
    """The event files of ``run_dir`` that fedaccel wrote (named in its ``tensorboard.json``); a
    ``tensorboard.json`` that is not fedaccel's is one line."""
    file = run_dir / OWN_EVENTS
    refuse_planted_links(run_dir, [OWN_EVENTS])  # read nothing through a link, and write nothing through one later
    try:
        names = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return set()
    except (OSError, ValueError, RecursionError):
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise UserError(f"{file} is not fedaccel's list of its event files; nothing was written or deleted: "
                        "move it away, then run again")
    return {n for n in names if "/" not in n and fnmatchcase(n, EVENTS_GLOB)}  # never a path out of the folder


class NoEvents:
    """What a run without ``run.tensorboard`` writes events to: nothing."""

    def metrics(self, row: dict[str, Any]) -> None:
        pass

    def diagnostics(self, row: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def convert(folder: str | Path) -> list[Path]:
    """Write event files for every run under ``folder`` (a run or a grid); returns the runs.
    Event files fedaccel wrote before are replaced; any other is left alone. Every row of every run
    is read first: a row that is not a fedaccel run's is one line, and nothing is written or deleted."""
    root = Path(folder)
    runs = sorted({p.parent for p in root.rglob("metrics.jsonl") if p.is_file() and (p.parent / "config.yaml").is_file()})
    if not runs:
        raise UserError(f"no fedaccel run under {root} (no folder with metrics.jsonl and config.yaml)")
    read = [(run_dir, own_events(run_dir), *_rows(run_dir)) for run_dir in runs]  # all read (one line) before a write
    for run_dir, own, metrics, diagnostics in read:
        for name in own:
            (run_dir / name).unlink(missing_ok=True)
        log = EventLog(run_dir)
        for row in metrics:
            log.metrics(row)
        for row in diagnostics:
            log.diagnostics(row)
        log.close()
    return runs


def _rows(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The metrics and diagnostics rows of ``run_dir``, rounds bounded by its config's ``train.rounds``."""
    from fedaccel.runs.config import read_yaml

    last = rounds_of(read_yaml(run_dir / "config.yaml")) if (run_dir / "config.yaml").exists() else None
    return read_rows(run_dir / "metrics.jsonl", last_round=last)[0], read_diagnostics_rows(run_dir / DIAGNOSTICS, last_round=last)[0]
