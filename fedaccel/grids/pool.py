"""The cells of a grid in ``experiment -j N`` worker processes (spawned, one torch thread each).

The workers end with the experiment however it ends (:func:`fedaccel.grids.cell.init_worker`);
when it stops early (a failed cell, Ctrl-C) it kills them and drops the queued cells. A cell
killed mid-round loses nothing: the next run resumes it from its checkpoint.
"""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fedaccel.grids.cell import CellFailed, Failures, cell_failure, every_cell_finished, init_worker, verb
from fedaccel.grids.suspend import suspending
from fedaccel.runs.config import Config

if TYPE_CHECKING:
    from fedaccel.grids.progress import GridProgress


Cell = tuple[int, str, Config, Path]


def run_one_cell(cells: list[Cell]) -> list[CellFailed]:
    """A pool task of one cell (:func:`run_cells_in_parallel`'s default ``job``), one torch thread; returns its
    failure, if it failed."""
    ((_, _, config, run_dir),) = cells
    failure = cell_failure(config, run_dir, False, 1)
    return [failure] if failure else []


def run_cells_in_parallel(todo: list[Cell], workers: int, report: GridProgress, failed: Failures, *,
                          tasks: list[list[Cell]] | None = None,
                          job: Callable[[list[Cell]], list[CellFailed]] = run_one_cell) -> None:
    """Cells in ``workers`` processes, shown by ``report`` (a line per running cell), their failures told to
    ``failed``; ``tasks``: the cells in the groups one worker runs together by ``job`` (a top-level function: it
    goes to the worker by name; it returns the cells that failed), by default each cell alone.

    The workers end with this process however it ends (see :func:`init_worker`); when it
    stops early (a failed cell, Ctrl-C) it kills them and drops the queued cells. A cell killed
    mid-round loses nothing: the next run resumes it from its checkpoint.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from fedaccel.runs.stopping import (
        STOP,
        Interrupted,
        clear_stop,
        signal_name,
        stop_signals,
    )

    tasks = [[cell] for cell in todo] if tasks is None else tasks
    context = multiprocessing.get_context("spawn")  # no forked torch thread pools
    pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context,
                               initializer=init_worker, initargs=(os.getpid(),))
    handles = PoolHandles(pool)
    try:  # Ctrl-C / SIGTERM: every running cell finishes its round and checkpoints it; Ctrl-Z stops the workers too
        with stop_signals(), suspending(handles.worker_groups):
            pending = {}
            for task in tasks:
                stacked = f" (stacked: {len(task)})" if len(task) > 1 else ""
                for k, name, config, run_dir in task:
                    report.queue(k, name, run_dir, config.train.rounds, verb=verb(run_dir) + stacked)
                pending[pool.submit(job, task)] = task
            handles.take()
            stopping = False
            while pending:
                report.poll()
                if STOP.is_set() and not stopping:
                    stopping = True
                    handles.stop()
                for future in [f for f in pending if stopping and f.cancelled()]:
                    report.forget(named(pending.pop(future)))  # dropped from the queue: wait() never counts it done
                finished, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for future in finished:
                    cells = pending.pop(future)
                    if future.cancelled() or (stopping and future.exception() is not None):
                        report.forget(named(cells))  # stopped (Interrupted), or killed before its first round: resumed
                        continue
                    if future.exception() is not None:  # not a cell's own failure (those are returned): it stops all
                        raise future.exception()  # type: ignore[misc]
                    failed.group(named(cells), future.result())
    except BaseException:
        handles.kill()
        del pool, handles  # not kept alive by the traceback: its queues' semaphores are released now, not warned of at exit
        raise
    handles.close()
    if stopping:
        reason = signal_name()
        clear_stop()
        if not every_cell_finished(todo):
            raise Interrupted(todo[0][3].parent, None, reason)


def named(cells: list[Cell]) -> list[tuple[int, str]]:
    return [(k, name) for k, name, _, _ in cells]


class PoolHandles:
    """A pool's worker processes and manager thread, taken once every cell is submitted: ``shutdown(wait=False)``
    forgets both (public in 3.14 as kill_workers/terminate_workers), and a manager thread still closing its pipes
    when Python exits races the exit's wake-up of it (EBADF printed after the experiment's last line)."""

    def __init__(self, pool: ProcessPoolExecutor) -> None:
        self.pool = pool
        self.processes: list[Any] = []
        self.manager: threading.Thread | None = None

    def worker_groups(self) -> list[int]:
        """The live workers' pids, each its own process group's (:func:`fedaccel.grids.cell.init_worker`)."""
        try:
            live = self.pool._processes  # type: ignore[attr-defined]  # None once shut down (a stop asked)
            processes = list(live.values()) if live is not None else self.processes
        except RuntimeError:  # changed size while read: the manager thread started or reaped one
            processes = self.processes
        return [process.pid for process in processes if process.is_alive()]

    def take(self) -> None:
        if self.pool._executor_manager_thread is not None:  # type: ignore[attr-defined]
            self.processes = list((self.pool._processes or {}).values())  # type: ignore[attr-defined]
            self.manager = self.pool._executor_manager_thread  # type: ignore[attr-defined]

    def stop(self) -> None:
        """Drop the queued cells and ask the running ones (SIGTERM) to finish their round and checkpoint it."""
        self.take()
        self.pool.shutdown(wait=False, cancel_futures=True)
        for process in self.processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)

    def close(self, grace: float = 30.0) -> None:
        """Every cell has ended (or stopped after its round): the workers leave on the pool's sentinel (killed
        after ``grace`` s), so they release what they hold themselves, and the manager thread is waited for."""
        self.take()
        self.pool.shutdown(wait=False)
        for process in self.processes:
            process.join(timeout=grace)
        self.kill()

    def kill(self) -> None:
        """Drop the queued cells, kill the running ones now rather than wait for them, and wait for the manager
        thread to close the queues (no semaphores left for Python to warn of at exit, no pipe closed under it)."""
        self.take()
        self.pool.shutdown(wait=False, cancel_futures=True)
        for process in self.processes:
            if process.is_alive():
                process.kill()
        for process in self.processes:
            process.join()
        if self.manager is not None:
            self.manager.join(timeout=30)
        self.pool.shutdown(wait=True)
