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
"""

from __future__ import annotations

from collections.abc import Iterator
from numbers import Number
from pathlib import Path
from typing import Any

from fedaccel.errors import UserError
from fedaccel.runs.folder import DIAGNOSTICS
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
        elif isinstance(value, list) and key in ("lost", "rejected", "unavailable", "stragglers", "dropped"):
            yield tag, float(len(value))


class EventLog:
    """An open TensorBoard writer on a run folder; ``start_round`` drops events of later rounds
    left by an interrupted earlier attempt (TensorBoard's purge step)."""

    def __init__(self, run_dir: Path, start_round: int = 0) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # pragma: no cover - the package is a dependency
            raise UserError("run.tensorboard needs the tensorboard package: pip install tensorboard") from None
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=start_round + 1 if start_round else None)

    def metrics(self, row: dict[str, Any]) -> None:
        for tag, value in scalars({k: v for k, v in row.items() if k != "diag"}):
            self.writer.add_scalar(tag, value, row["round"])
        self.writer.flush()

    def diagnostics(self, row: dict[str, Any]) -> None:
        for tag, value in scalars({k: v for k, v in row.items() if k != "round"}, "diag/"):
            self.writer.add_scalar(tag, value, row["round"])

    def close(self) -> None:
        self.writer.close()


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
    Event files written before are replaced."""
    root = Path(folder)
    runs = sorted({p.parent for p in root.rglob("metrics.jsonl")})
    if not runs:
        raise UserError(f"no run under {root} (no metrics.jsonl)")
    rows = {run_dir: _rows(run_dir) for run_dir in runs}  # every file read (damage: one line) before one is written
    for run_dir in runs:
        for old in run_dir.glob(EVENTS_GLOB):
            old.unlink()
        log = EventLog(run_dir)
        metrics, diagnostics = rows[run_dir]
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
