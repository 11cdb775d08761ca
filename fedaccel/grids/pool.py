"""The cells of a grid in ``experiment -j N`` worker processes (spawned, one torch thread each).

The workers end with the experiment however it ends (:func:`fedaccel.grids.cell.init_worker`);
when it stops early (a failed cell, Ctrl-C) it kills them and drops the queued cells. A cell
killed mid-round loses nothing: the next run resumes it from its checkpoint.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedaccel.grids.cell import init_worker, run_cell, verb
from fedaccel.runs.config import Config

if TYPE_CHECKING:
    from fedaccel.grids.progress import GridProgress


def run_cells_in_parallel(todo: list[tuple[int, str, Config, Path]], workers: int, report: GridProgress) -> None:
    """Cells in ``workers`` processes, shown by ``report`` (a line per running cell).

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

    context = multiprocessing.get_context("spawn")  # no forked torch thread pools
    pool = ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context,
                               initializer=init_worker, initargs=(os.getpid(),))
    try:
        with stop_signals():  # Ctrl-C / SIGTERM: every running cell finishes its round and checkpoints it
            pending = {}
            for k, name, config, run_dir in todo:
                report.queue(k, name, run_dir, config.train.rounds, verb=verb(run_dir))
                pending[pool.submit(run_cell, config, run_dir, False, 1)] = (k, name)
            stopping = False
            while pending:
                report.poll()
                if STOP.is_set() and not stopping:
                    stopping = True
                    _stop_pool(pool)
                for future in [f for f in pending if stopping and f.cancelled()]:
                    del pending[future]  # dropped from the queue: wait() never counts a cancelled future as done
                finished, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for future in finished:
                    k, name = pending.pop(future)
                    if future.cancelled() or (stopping and future.exception() is not None):
                        continue  # stopped (Interrupted), or killed before its first round: resumed next time
                    if future.exception() is not None:  # a failed cell stops the experiment with its own error
                        raise future.exception()  # type: ignore[misc]
                    report.end(k, name)
            if stopping:
                reason = signal_name()
                clear_stop()
                raise Interrupted(todo[0][3].parent, None, reason)
    except BaseException:
        _kill_pool(pool)
        del pool  # not kept alive by the traceback: its queues' semaphores are released now, not warned of at exit
        raise
    pool.shutdown()


def _drop_queue(pool: ProcessPoolExecutor) -> list[Any]:
    """Cancel the queued cells; the worker processes still running them (taken before shutdown
    forgets them; public in 3.14 as kill_workers/terminate_workers)."""
    processes = list((pool._processes or {}).values())  # type: ignore[attr-defined]
    pool.shutdown(wait=False, cancel_futures=True)
    return processes


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Drop the queued cells and ask the running ones (SIGTERM) to finish their round and checkpoint it."""
    for process in _drop_queue(pool):
        if process.is_alive():
            os.kill(process.pid, signal.SIGTERM)


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """Drop the queued cells and kill the running ones now, rather than wait for them."""
    processes = _drop_queue(pool)
    for process in processes:
        process.kill()
    for process in processes:
        process.join()
    pool.shutdown(wait=True)  # its manager thread closes the queues: no semaphores left for Python to warn of at exit
