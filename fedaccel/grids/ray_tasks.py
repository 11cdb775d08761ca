"""A grid's cells as Ray tasks: ``fedaccel experiment GRID --ray auto|ADDRESS``.

Each unfinished cell is one task asking for ``cpus_per_cell`` CPUs (its torch threads) and
``gpus_per_cell`` GPUs. The task runs or resumes the cell in its run folder under the
experiment's ``out_dir``, which every node must see at the same path (a shared filesystem),
like the code, the environment and the data where the config says.

A worker or node that dies mid-cell costs that cell a retry (``max_retries``): the retry resumes
from the cell's last checkpoint, cutting ``metrics.jsonl`` back to it, so no round is lost or
written twice. A retry that finds the folder still locked by a live writer (a node taken for
dead that is not) waits for it to end instead of writing beside it, then resumes, or skips a
cell the other writer finished. Ctrl-C/SIGTERM cancel the tasks: a running cell keeps its last
checkpoint and the same command continues it.

Example:
    >>> run_cells_on_ray(todo, RayOptions("auto"))   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedaccel.errors import UserError
from fedaccel.grids.cell import Failures, every_cell_finished
from fedaccel.runs.config import Config, check_plugins, plugin_note

if TYPE_CHECKING:
    from fedaccel.grids.progress import GridProgress


@dataclass(frozen=True)
class RayOptions:
    """Where the cells run and what each asks for."""

    address: str = "auto"  # "auto": the running cluster, else a local instance; or "HOST:PORT", "ray://..."
    cpus_per_cell: float = 1.0
    gpus_per_cell: float = 0.0
    max_retries: int = 3  # per cell, for dead workers and nodes (a cell's own error is not retried)
    lock_wait_s: float = 3600.0  # how long a retry waits for a live writer of its folder


_joined_here = False  # connect() started Ray in this process (not a caller that had it running)


def connect(address: str = "auto") -> str:
    """Join the Ray cluster at ``address`` (once per process) and say which, in one line.

    ``auto`` joins the cluster named by ``RAY_ADDRESS`` or the one this host joined with ``ray
    start`` and, when there is none, starts a local instance with this machine's cores (never a
    Ray instance another program started for itself with ``ray.init``, as Ray's own "auto" would).
    """
    import ray

    from fedaccel.flower.notices import quiet_notices
    from fedaccel.flower.warm_actors import release
    from fedaccel.flower.warm_ray import release_local_ray

    global _joined_here
    release()  # the ClientApp workers a simulation kept, and their idle timer, before the shutdown below
    release_local_ray()  # a local Ray a Flower simulation of this process kept up is not a cluster
    quiet_notices()  # Ray's tip on accelerator variables, as it starts
    if not ray.is_initialized():
        _joined_here = True
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # quiet; a 0-GPU cell sees no GPU anyway
        options = {"include_dashboard": False, "log_to_driver": True}
        try:
            ray.init(address=None if address == "auto" else address, **options)
        except ConnectionError as exc:
            if address != "auto":
                raise UserError(f"no Ray cluster at {address}: {str(exc).splitlines()[0]}") from None
            ray.init(address="local", **options)  # the `ray start` cluster on record has stopped
    resources = ray.cluster_resources()
    return (f"ray: {len(ray.nodes())} node(s), {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs "
            f"at {ray.get_runtime_context().gcs_address}")


def run_cells_on_ray(
    todo: list[tuple[int, str, Config, Path]],
    options: RayOptions,
    report: GridProgress | None = None,
    failed: Failures | None = None,
) -> list[dict[str, Any]]:
    """Run the cells ``todo`` ((index, name, config, run folder)) as Ray tasks, shown by ``report``, their failures
    told to ``failed`` (by default the first stops the others); returns what each task says of itself (run
    folder, node, process, whether it resumed, ``failed``: its failure), in the order they ended.
    """
    import ray

    from fedaccel.grids.progress import GridProgress
    from fedaccel.runs.stopping import (
        STOP,
        Interrupted,
        clear_stop,
        signal_name,
        stop_signals,
    )

    if options.cpus_per_cell <= 0 or options.gpus_per_cell < 0:
        raise UserError(f"--cpus-per-cell must be > 0 and --gpus-per-cell >= 0, got "
                        f"{options.cpus_per_cell:g} and {options.gpus_per_cell:g}")
    if not todo:
        return []
    report = report or GridProgress(len(todo))
    failed = failed or Failures(report, fail_fast=True)
    print(connect(options.address), file=sys.stderr, flush=True)
    task = ray.remote(_cell_task).options(
        num_cpus=options.cpus_per_cell, num_gpus=options.gpus_per_cell, max_retries=options.max_retries,
        retry_exceptions=False, name="fedaccel-cell",
    )
    threads = max(1, int(options.cpus_per_cell))
    cwd = os.getcwd()  # relative paths in the configs mean the same on every node of a shared filesystem
    flag_name = f"fedaccel-grid-stop-{uuid.uuid4().hex}"
    flag = ray.remote(num_cpus=0)(GridStop).options(name=flag_name).remote()
    pending: dict[Any, tuple[int, str]] = {}
    for k, name, config, run_dir in todo:
        ref = task.remote(config, str(run_dir.resolve()), threads, cwd, options.lock_wait_s, plugin_note(config),
                          flag_name)
        pending[ref] = (k, name)
        report.queue(k, name, run_dir, config.train.rounds, verb="resuming" if (run_dir / "config.yaml").is_file()
                     else "running")
    ended: list[dict[str, Any]] = []
    with stop_signals():  # Ctrl-C / SIGTERM: cancel the tasks; each cell keeps its last checkpoint
        stopping = False
        try:
            while pending:
                report.poll()
                if STOP.is_set() and not stopping:
                    stopping = True
                    _end(flag)
                    for ref in pending:
                        ray.cancel(ref)  # Ray's SIGINT in the task: run_loop finishes its round and checkpoints it
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.2)
                for ref in ready:
                    k, name = pending.pop(ref)
                    try:
                        info = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        if stopping:
                            report.forget([(k, name)])  # stopped; the next run resumes it
                            continue
                        raise _cell_error(exc, name) from None
                    ended.append(info)
                    failed.group([(k, name)], [info["failed"]] if "failed" in info else [])
        except BaseException as exc:  # a failed cell, a second Ctrl-C: the other cells stop too
            _end(flag)  # a task the cancel misses (one starting as it comes) stops when it next looks
            for ref in pending:
                ray.cancel(ref, force=isinstance(exc, KeyboardInterrupt))
            raise
        _end(flag)
        if stopping:  # a cancelled task's result comes at once: wait for its cell's checkpoint (lock freed)
            for _, _, _, run_dir in todo:
                with contextlib.suppress(UserError):
                    _wait_for_writer(run_dir, timeout=120, every=0.2, say=False)
            if _joined_here:
                ray.shutdown()  # the workers' late echoes of the signal would print after our last line
            reason = signal_name()
            clear_stop()
            if not every_cell_finished(todo):
                raise Interrupted(todo[0][3].parent, None, reason)
    return ended


def _cell_error(exc: BaseException, cell: str) -> BaseException:
    """The error to stop with: the cell's own (a user error stays one line), or one line when the
    workers cannot import fedaccel, else Ray's."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, UserError):
        return cause
    if "No module named 'fedaccel" in str(exc):
        return UserError(f"the Ray workers cannot import fedaccel (cell {cell}); every node needs the same "
                         "environment, e.g. the same venv on a shared filesystem")
    return exc


def _cell_task(config: Config, run_dir: str, threads: int, cwd: str, lock_wait_s: float,
               plugins_line: str = "", flag_name: str | None = None) -> dict[str, Any]:
    """One cell in a Ray worker: wait while another live process writes its folder, then skip it
    (finished), resume it (interrupted) or run it; returns where it ran and what it did. ``plugins_line``:
    the plugins the driver's config uses (``config.yaml``'s line), which this node must have, the same.
    ``flag_name``: the grid's :class:`GridStop`, watched while the cell runs."""
    import socket

    from fedaccel.grids import cell

    check_plugins(plugins_line, f"cell {Path(run_dir).name} on Ray node {socket.gethostname()}")
    if os.path.isdir(cwd):
        os.chdir(cwd)
    path = Path(run_dir)
    _wait_for_writer(path, lock_wait_s)
    info = {"run_dir": run_dir, "node": socket.gethostname(), "pid": os.getpid(),
            "resumed": (path / "config.yaml").is_file(), "skipped": (path / "summary.json").is_file()}
    if not info["skipped"]:
        with watching(flag_name) as ended:
            if ended:  # the grid ended before this task began: it starts nothing
                info["skipped"] = True
                return info
            cell._worker_stopped = False  # a Ray worker process runs task after task
            if failure := cell.cell_failure(config, path, False, threads):
                info["failed"] = failure
    return info


class GridStop:
    """A grid's stop flag on Ray: an actor (no CPU) the driver kills when the grid stops or fails. A Ray cancel that
    reaches a task as it starts is lost, and its cell ran to its end after the grid had said it stopped; each
    task also watches this actor, and stops its cell at a checkpoint once the actor is gone."""

    def alive(self) -> bool:
        return True


STOP_POLL_S = 1.0  # how often a running cell looks at its grid's flag


def _end(flag: Any) -> None:
    """Kill the grid's :class:`GridStop` (again: a no-op)."""
    import ray

    with contextlib.suppress(Exception):
        ray.kill(flag)


@contextlib.contextmanager
def watching(flag_name: str | None) -> Iterator[bool]:
    """While the body runs, look at the grid's :class:`GridStop` every :data:`STOP_POLL_S` seconds and ask the run
    to stop (as SIGINT does: it finishes its round and checkpoints it) once the actor is gone; yields whether it
    was gone already. A slow answer is not a stop: only the actor's death is."""
    import threading

    import ray

    from fedaccel.runs.stopping import STOP, clear_stop

    if flag_name is None:
        yield False
        return
    try:
        flag = ray.get_actor(flag_name)
    except ValueError:  # killed before this task began
        yield True
        return
    clear_stop()  # a watcher of an earlier grid's task in this worker may have set it as that task ended
    done = threading.Event()

    def watch() -> None:
        while not done.wait(STOP_POLL_S):
            try:
                ray.get(flag.alive.remote(), timeout=30)
            except ray.exceptions.GetTimeoutError:
                continue
            except ray.exceptions.RayActorError:
                STOP.set()
                return

    watcher = threading.Thread(target=watch, name="fedaccel-grid-stop", daemon=True)
    watcher.start()
    try:
        yield False
    finally:
        done.set()
        watcher.join(timeout=5)


def _wait_for_writer(path: Path, timeout: float, every: float = 2.0, *, say: bool = True) -> None:
    """Return once no live process holds ``path``'s lock (at once if none does); after ``timeout``
    seconds, the lock's own one-line error."""
    from fedaccel.runs.lock import lock_run_dir

    if not path.is_dir():
        return
    deadline = time.monotonic() + timeout
    said = not say
    while True:
        try:
            lock_run_dir(path).release()
            return
        except UserError as exc:
            if time.monotonic() > deadline:
                raise
            if not said:
                print(f"{exc}; waiting", file=sys.stderr, flush=True)
                said = True
            time.sleep(every)
