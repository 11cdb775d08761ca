"""One local Ray for every Flower simulation a process runs.

Flower 1.42's Ray backend starts Ray when none is running and shuts Ray down when a simulation
ends (``RayBackend.terminate``): each simulation of a grid pays Ray's start and stop (3-5 s on
2 cores), and a Ray that someone else started in the process (a notebook, a Ray grid) is shut
down under them. :func:`keep_ray_up` makes ``terminate`` stop only that simulation's ClientApp
actors; Ray then lives until the process ends (Ray's own exit handler stops it).

The local Ray fedaccel starts gets all of the machine's cores, and a simulation's ClientApp
workers are sized by their share of it (:func:`backend_config`), so a first simulation of one
client does not leave a one-CPU Ray to the next. It passes objects of up to :data:`INLINE_BYTES`
inline with a task, as Ray passes small ones (Ray's default, 100 KiB, sends a 2NN's 358 KB model
through its shared-memory store: 9.3 ms a round trip against 3.8 ms inline, measured here; a
ClientApp message goes out and comes back every round). It prestarts no worker for its first driver:
Ray starts one per CPU, plain, but Flower's backend starts Ray with a runtime environment (its
``PYTHONPATH``), so the ClientApp actors get workers of their own and the prestarted ones only
started, sat idle and were stopped (two interpreters importing Ray, ~2 s of CPU a start on 2 cores).
Pinned to flwr 1.42 (``RayBackend`` is not public API): if it is gone, nothing is patched and Ray
restarts per simulation, as in Flower.
"""

from __future__ import annotations

import math
import os
from typing import Any

INLINE_BYTES = 8 << 20  # Ray's max_direct_call_object_size for the local Ray started here
_started: str | None = None  # the GCS address of the local Ray a simulation here started


def keep_ray_up() -> bool:
    """Make Flower's Ray backend leave Ray running when a simulation ends (once per process)."""
    try:
        from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend
    except ImportError:
        return False
    if getattr(RayBackend.terminate, "keeps_ray", False):
        return True

    def terminate(self: Any) -> None:
        if self.pool:
            self.pool.terminate_all_actors()

    terminate.keeps_ray = True  # type: ignore[attr-defined]
    RayBackend.terminate = terminate
    return True


def _ours() -> bool:
    """Whether the running Ray is the local one a simulation of this process started."""
    import ray

    return ray.is_initialized() and _started is not None and ray.get_runtime_context().gcs_address == _started


def backend_config(clients: int, workers: int | None = None) -> dict[str, Any]:
    """Flower's ``backend_config``: ``workers`` ClientApp workers (default one per core, at most
    one per client) on the local Ray (started with every core if none runs); on a cluster
    (``RAY_ADDRESS``) or a Ray someone else started here, one ClientApp per CPU, as before."""
    import ray

    ours = _ours()
    if os.environ.get("RAY_ADDRESS") or (ray.is_initialized() and not ours):
        return {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {}}
    cores = os.cpu_count() or 1
    if ours:
        cores = int(ray.cluster_resources().get("CPU", cores))
    share = math.floor(cores / (workers or min(cores, clients)) * 1e4) / 1e4  # Ray counts 1e-4 CPUs
    init = {} if ray.is_initialized() else {"num_cpus": cores, "include_dashboard": False,
                                            "_system_config": {"max_direct_call_object_size": INLINE_BYTES,
                                                               "prestart_worker_first_driver": False}}
    return {"client_resources": {"num_cpus": share, "num_gpus": 0.0}, "init_args": init}


def remember_started(config: dict[str, Any]) -> None:
    """After a simulation run with ``config``: if it started Ray, that Ray is this module's."""
    import ray

    global _started
    if config["init_args"] and ray.is_initialized():
        _started = ray.get_runtime_context().gcs_address


def release_local_ray() -> None:
    """Shut down the local Ray a simulation here left up (nothing else): for a caller that wants
    Ray on its own terms, e.g. a grid joining a cluster (:func:`fedaccel.grids.ray_tasks.connect`)."""
    import ray

    global _started
    if _ours():
        ray.shutdown()
    _started = None
