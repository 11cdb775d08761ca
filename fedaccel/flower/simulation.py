"""``run.runtime: flower-simulation``: the run on Flower's simulation engine (Ray underneath).

One virtual SuperNode per client; Ray runs their ClientApps in a pool of worker processes that
stay alive for the whole run (one per core by default), so each builds the run's setup once; each
worker holds two messages at a time (:mod:`fedaccel.flower.in_flight`).
Ray itself stays up for the process's next simulation (:mod:`fedaccel.flower.warm_ray`), and so do the
workers for a while (:mod:`fedaccel.flower.warm_actors`).
The ServerApp runs in a thread of this process and writes the usual run folder. Ctrl-C and SIGTERM
do what they do in process (:mod:`fedaccel.runs.stopping`): the first finishes the round, checkpoints it
and stops; a second one, or one before the first round, stops at once (:func:`simulation_signals`). The
clients keep their part states (SCAFFOLD's c_i, FedDyn's and FedDC's drifts, FedUMF's stored update) at each
checkpoint in the run folder's ``client-states`` (removed when the run finishes), so a resumed run continues them.
On a Ray cluster: start it with ``ray start --head`` / ``ray start --address HEAD:6379`` (fedaccel and
the data on every node) and run with ``RAY_ADDRESS=auto`` on the head. SIGTERM to the whole process
group (not only to this process) also ends Ray's own processes, and the round with them.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedaccel.errors import UserError
from fedaccel.flower import ENV
from fedaccel.runs.config import Config
from fedaccel.runs.folder import CLIENT_STATES

for _key, _value in {**ENV, "RAY_DEDUP_LOGS": "0"}.items():
    os.environ.setdefault(_key, _value)


def simulate(
    config: Config, path: Path, *, progress: bool | None = None, workers: int | None = None,
    client_app: Any = None,
) -> Path:
    """Run ``config`` with its clients as virtual SuperNodes; returns the run folder.

    ``workers``: Ray worker processes for the ClientApps (default: one per core, at most one per
    client); ``client_app``: another ClientApp (tests use a deliberately broken one).
    """
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    from fedaccel.flower.client import app as fedaccel_client_app
    from fedaccel.flower.dispatch import wake_simulation_on_push
    from fedaccel.flower.in_flight import keep_two_in_flight
    from fedaccel.flower.notices import client_errors_kept_quiet, quiet_notices
    from fedaccel.flower.server import serve
    from fedaccel.flower.warm_actors import actors_kept_warm
    from fedaccel.flower.warm_ray import backend_config, keep_ray_up, remember_started

    quiet_notices()  # Flower's deprecation of run_simulation, which fedaccel calls on purpose, and Ray's tip
    wake_simulation_on_push()  # the engine's dispatch wakes when the server pushes, not every 0.1 s
    keep_two_in_flight()  # an actor's next message travels while it trains

    failures: list[BaseException] = []
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: object) -> None:
        try:
            serve(grid, config, path, progress=progress)
        except BaseException as exc:  # run_simulation only logs what a ServerApp raises
            failures.append(exc)

    # The local Ray (started with this machine's cores if none runs) stays up for the process's next
    # simulation. With RAY_ADDRESS set (e.g. "auto" on a node of a cluster started with `ray start`),
    # Ray joins that cluster and its CPUs decide how many ClientApps run at once.
    keep_ray_up()
    backend = backend_config(config.data.clients, workers)
    # Ctrl-C and SIGTERM reach this (the main) thread, not the ServerApp's, where run_loop can set no handler; the
    # ClientApp actors are the last simulation's, if any
    with simulation_signals(), actors_kept_warm(backend), client_errors_kept_quiet():
        run_simulation(
            server_app=server_app,
            client_app=client_app or fedaccel_client_app,
            num_supernodes=config.data.clients,
            backend_config=backend,
        )
    remember_started(backend)
    states = path / CLIENT_STATES
    if (path / "summary.json").is_file() and states.is_dir() and not states.is_symlink():
        shutil.rmtree(states, ignore_errors=True)  # what a resume would need: a finished (or diverged) run has none
    if failures:
        raise failures[0]
    if not (path / "summary.json").is_file():
        raise UserError(f"the Flower simulation ended before the run finished; see the log above ({path})")
    return path


_handlers: dict[int, Any] = {}  # within simulation_signals: its handlers, set again after Ray's start


@contextmanager
def simulation_signals() -> Iterator[None]:
    """SIGINT and SIGTERM during a simulation, as :func:`fedaccel.runs.stopping.stop_signals` does them in
    process (main thread only). Flower runs the ServerApp, and so the rounds, in a thread of its own, where
    no handler can be set, while this thread waits for the simulation engine; Ray's start sets its own
    SIGTERM handlers (Python's ``sys.exit`` and its core worker's, which dumps a stack and aborts), so these
    are set again after it (:func:`_after_ray_starts`). While the rounds run, the first signal sets
    :data:`~fedaccel.runs.stopping.STOP` (the ServerApp finishes its round, checkpoints it and raises
    :class:`~fedaccel.runs.stopping.Interrupted`); a second one sets :data:`fedaccel.flower.server.NOW` (it
    stops at once, with the last checkpoint). Before the rounds (Ray and its workers starting) and after
    them, a signal does what this process's own handler does (Ctrl-C: stop at once)."""
    from fedaccel.flower.server import IN_ROUNDS, NOW
    from fedaccel.runs.stopping import clear_stop, request_stop

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _after_ray_starts()
    asked = threading.Event()  # a first signal came while the rounds ran
    pending: list[BaseException] = []  # what the process's own handler raised: raised once the simulation ended

    def outside(signum: int, frame: Any) -> None:  # what the process would do without the simulation
        handler = previous[signum]
        if handler is signal.SIG_IGN:
            return
        if callable(handler):
            try:
                handler(signum, frame)
            except KeyboardInterrupt:  # default_int_handler: raised here it would leave the ServerApp running
                NOW.set()
            except BaseException as exc:  # noqa: BLE001 - sys.exit (Ray's, a container's): stop the rounds first
                NOW.set()
                pending.append(exc)
            return
        NOW.set()  # SIG_DFL: stop at once (SIGTERM would end the process, Ray's workers' fate left to Ray)

    def on_signal(signum: int, frame: Any) -> None:
        if NOW.is_set() and asked.is_set():  # a third signal: the process's own handlers again, and at once
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            raise KeyboardInterrupt
        if asked.is_set():
            NOW.set()  # the second signal: stop now
        elif IN_ROUNDS.is_set():
            asked.set()
            request_stop(signal.Signals(signum).name)
        else:
            outside(signum, frame)

    NOW.clear()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _handlers.update({sig: on_signal for sig in previous})
    for sig in previous:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        _handlers.clear()
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        NOW.clear()
        if asked.is_set():
            clear_stop()  # the ServerApp's run_loop cleared it, unless the signal came after its last round
    if pending:
        raise pending[0]


def _after_ray_starts() -> None:
    """Make Flower's Ray backend set :func:`simulation_signals`'s handlers again once it started Ray (once per
    process): ``ray.init`` replaces the SIGTERM handler, in Python and, in its core worker, under Python."""
    try:
        from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend
    except ImportError:
        return
    if getattr(RayBackend.init_ray, "keeps_handlers", False):
        return
    init = RayBackend.init_ray

    def init_ray(self: Any, backend_config: Any) -> None:
        init(self, backend_config)
        if _handlers and threading.current_thread() is threading.main_thread():
            for sig, handler in _handlers.items():
                signal.signal(sig, handler)

    init_ray.keeps_handlers = True  # type: ignore[attr-defined]
    RayBackend.init_ray = init_ray
