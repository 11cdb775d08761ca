"""``run.runtime: flower-simulation``: the run on Flower's simulation engine (Ray underneath).

One virtual SuperNode per client; Ray runs their ClientApps in a pool of worker processes that
stay alive for the whole run (one per core by default), so each builds the run's setup once; each
worker holds two messages at a time (:mod:`fedaccel.flower.in_flight`).
Ray itself stays up for the process's next simulation (:mod:`fedaccel.flower.warm_ray`), and so do the
workers for a while (:mod:`fedaccel.flower.warm_actors`).
The ServerApp runs in this process and writes the usual run folder. On a Ray cluster: start it
with ``ray start --head`` / ``ray start --address HEAD:6379`` (fedaccel and the data on every
node) and run with ``RAY_ADDRESS=auto`` on the head.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fedaccel.errors import UserError
from fedaccel.flower import ENV
from fedaccel.runs.config import Config

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
    from fedaccel.flower.notices import quiet_notices
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
    with actors_kept_warm(backend):  # its ClientApp actors: the last simulation's, if it left them
        run_simulation(
            server_app=server_app,
            client_app=client_app or fedaccel_client_app,
            num_supernodes=config.data.clients,
            backend_config=backend,
        )
    remember_started(backend)
    if failures:
        raise failures[0]
    if not (path / "summary.json").is_file():
        raise UserError(f"the Flower simulation ended before the run finished; see the log above ({path})")
    return path
