"""One cell of a grid, run in whichever process takes it: this one, an ``experiment -j`` worker
(:mod:`fedaccel.grids.pool`) or a Ray task (:mod:`fedaccel.grids.ray_tasks`).

``run_cell`` runs a cell, or resumes it when an earlier, interrupted run left its folder. A pool
worker is set up by :func:`init_worker`: it ends with the experiment however that ends, and
its SIGTERM lets the running round finish and checkpoint before the worker starts no further cell.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedaccel.errors import UserError, disk_full, too_large
from fedaccel.runs.config import Config
from fedaccel.runs.folder import ERROR_FILE
from fedaccel.runs.lifetime import die_with_parent

if TYPE_CHECKING:
    from fedaccel.grids.progress import GridProgress


class CellFailed(UserError):
    """A cell whose run raised: one line (the cell, the error, where its traceback is); the grid goes on with its
    other cells (``fail_fast``: it stops) and running the grid again resumes this one."""

    def __init__(self, line: str, cell: str = "") -> None:
        super().__init__(line)
        self.cell = cell

    def __reduce__(self) -> tuple[Any, ...]:  # to and from a pool worker or a Ray task, with its cell
        return CellFailed, (str(self), self.cell)


def failed_cell(run_dir: Path, exc: Exception, since: float) -> CellFailed:
    """The one line of a cell's error: a user error's own words, else its kind and first line, and the run folder's
    ``error.txt`` where its rounds wrote it (since ``since``, a time.time()); an error before the rounds (no
    error.txt) has its traceback printed here."""
    words = str(exc).strip().splitlines()
    said = (words[0] if words else type(exc).__name__) if isinstance(exc, UserError) else \
        f"{type(exc).__name__}: {words[0] if words else ''}".rstrip(": ")
    kept = run_dir / ERROR_FILE
    try:
        fresh = kept.stat().st_mtime >= since - 1
    except OSError:
        fresh = False
    if fresh:
        said += f" (its traceback: {kept})"
    elif not isinstance(exc, UserError):
        import traceback

        print("".join(traceback.format_exception(exc)), end="", file=sys.stderr, flush=True)
    return CellFailed(f"cell {run_dir.name} failed: {said}", run_dir.name)


class Failures:
    """The cells of a grid whose runs raised (:class:`CellFailed`), as they come: each said by the grid's
    ``report``; ``fail_fast``: the first one stops the grid."""

    def __init__(self, report: GridProgress, fail_fast: bool) -> None:
        self.report, self.fail_fast = report, fail_fast
        self.cells: list[str] = []

    def group(self, cells: list[tuple[int, str]], failures: list[CellFailed]) -> None:
        """``cells`` (index, name) run together ended, ``failures`` among them: those are said, the others counted
        as done."""
        by_cell = {failure.cell: failure for failure in failures}
        ended = [(k, name) for k, name in cells if name not in by_cell]
        if ended:
            self.report.end_together(ended)
        if failures and self.fail_fast:
            raise failures[0]  # its line is the grid's last
        for k, name in cells:
            if name in by_cell:
                self.cells.append(name)
                self.report.fail(k, name, str(by_cell[name]))


def verb(run_dir: Path) -> str:
    return "resuming" if (run_dir / "config.yaml").is_file() else "running"


def run_cell(config: Config, run_dir: Path, progress: bool | None, threads: int | None = None) -> Path:
    """Run one cell, or resume it when an earlier, interrupted run left its folder. ``threads``
    is given in a parallel worker: it uses that many torch threads, and once asked to stop it
    starts no further cell (one may already wait in the pool's queue). A cell that diverges
    (``run.on_divergence: stop``) is said in one line and the grid goes on: its summary.json marks
    it, and the table and curves show it as diverged."""
    from fedaccel.launch import resume, run
    from fedaccel.runs.loop import Diverged
    from fedaccel.runs.stopping import Interrupted, stop_requests

    global _worker_stopped
    if threads is not None:  # run_loop's thread rule reads this (fedaccel.runs.loop.choose_threads)
        os.environ["FEDACCEL_TORCH_THREADS"] = str(threads)
        if _worker_stopped:
            raise Interrupted(run_dir, None)
    requests, since = stop_requests(), time.time()
    try:
        if (run_dir / "config.yaml").is_file():
            return resume(run_dir, progress=progress)
        return run(config, run_dir, progress=progress)
    except Interrupted:
        _worker_stopped = threads is not None
        raise
    except Diverged as diverged:
        from tqdm import tqdm  # above the grid's bars

        tqdm.write(f"{run_dir.name}: {diverged}", file=sys.stderr)
        return run_dir
    except Exception as exc:
        if stops_every_cell(exc):
            raise
        raise failed_cell(run_dir, exc, since) from exc
    finally:  # asked to stop while the run ended by itself (its last round): still no further cell
        if threads is not None and stop_requests() > requests:
            _worker_stopped = True


def cell_failure(config: Config, run_dir: Path, progress: bool | None, threads: int | None = None
                 ) -> CellFailed | None:
    """:func:`run_cell`, its own failure returned rather than raised (None: it ran, or diverged)."""
    try:
        run_cell(config, run_dir, progress, threads)
    except CellFailed as failure:
        return failure
    return None


def stops_every_cell(exc: BaseException) -> bool:
    """An error no other cell would escape: a full disk, a quota, a file-size limit (the grid stops with the
    command's own line for it)."""
    return disk_full(exc) or too_large(exc)


_worker_stopped = False  # a parallel worker was asked to stop (SIGTERM from the experiment)


def _stop_worker(signum: int, frame: Any) -> None:
    """A worker's SIGTERM outside a run: start no further cell (within a run, run_loop's handler
    finishes the round and checkpoints it first)."""
    global _worker_stopped
    _worker_stopped = True
    from fedaccel.runs.stopping import STOP

    STOP.set()


def init_worker(parent: int) -> None:
    """Pool worker initializer: end this worker as soon as the experiment's process ``parent``
    ends (:func:`fedaccel.runs.lifetime.die_with_parent`: the kernel kills it when the thread that
    started it exits, which waits for the workers to the end, even after ``kill -9``), in a
    process group of its own (Ctrl-C at a terminal reaches only the experiment, which asks its
    workers to stop once), and quiet about a stop request: the experiment says it, once.
    """
    from fedaccel.runs.stopping import announce_stops

    os.setpgrp()
    signal.signal(signal.SIGTERM, _stop_worker)
    announce_stops(False)
    die_with_parent(parent)


def every_cell_finished(todo: list[tuple[int, str, Config, Path]]) -> bool:
    """Whether every cell of ``todo`` finished its rounds: a stop that came after the last one ended stops nothing."""
    from fedaccel.runs.finished import finished

    return all(finished(run_dir, config.train.rounds) for _, _, config, run_dir in todo)
