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
from pathlib import Path
from typing import Any

from fedaccel.runs.config import Config
from fedaccel.runs.lifetime import die_with_parent


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
    requests = stop_requests()
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
    finally:  # asked to stop while the run ended by itself (its last round): still no further cell
        if threads is not None and stop_requests() > requests:
            _worker_stopped = True


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
