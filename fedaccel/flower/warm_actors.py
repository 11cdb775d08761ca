"""ClientApp actors kept for the next Flower simulation of the process.

Flower 1.42's Ray backend creates a pool of ClientApp actors for each simulation and stops them at its
end. Even with Ray kept up (:mod:`fedaccel.flower.warm_ray`), each simulation pays new Ray worker
processes that import torch, Flower and fedaccel before their first message (about 9 s on 2 cores:
``python benchmarks/warm_actors.py``). Within :func:`actors_kept_warm`, a simulation that ends with no
message in flight keeps its actors, and the next one that asks for actors of the same resources takes
them instead of starting new ones. Only on the local Ray a simulation of this process started
(:func:`fedaccel.flower.warm_ray._ours`); on a cluster or a Ray someone else started, nothing is kept.

An actor carries nothing from one simulation to the next but its process: the modules it imported (a plugin
upgraded in between still runs its old code there, as in this process) and the last run's setup
(:func:`fedaccel.flower.client.setup_for`, keyed by the whole config); each message brings its node's context
and the ClientApp to run. Kept actors are stopped when the next simulation asks for other
resources, when one of them does not answer, or after :data:`IDLE_S` seconds unused: until then they
hold their share of Ray's CPUs, which other Ray work of the process would wait for. Pinned to flwr 1.42
(``BasicActorPool`` is not public API): if it is gone, nothing is patched and each simulation starts
its own actors, as in Flower.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

IDLE_S = 60.0  # seconds kept actors wait for the next simulation before they are stopped

_lock = threading.Lock()
_active: dict[str, Any] | None = None  # within actors_kept_warm: the simulation's backend config
_kept: list[Any] = []  # idle actors of the last simulation
_kept_for: tuple[Any, ...] = ()  # (their Ray session, their resources)
_timer: threading.Timer | None = None


@contextmanager
def actors_kept_warm(backend: dict[str, Any]) -> Iterator[bool]:
    """Within: the actor pool of a simulation with Flower's ``backend`` config
    (:func:`fedaccel.flower.warm_ray.backend_config`) starts with the kept actors and keeps its own
    when the simulation ends cleanly. Yields whether Flower's pool could be patched."""
    global _active
    patched = _patch()
    _active = backend if patched else None
    try:
        yield patched
    finally:
        _active = None


def kept_actors() -> list[Any]:
    """The actors kept for the next simulation on the running Ray (their Ray handles)."""
    with _lock:
        return list(_kept) if _kept and _kept_for[0] == _session() else []


def release() -> None:
    """Stop the kept actors now (they free their share of Ray's CPUs)."""
    with _lock:
        actors, _, ours = _drop()
    if ours:
        _stop(actors)


def _patch() -> bool:
    try:
        from flwr.simulation.ray_transport.ray_actor import BasicActorPool
    except ImportError:
        return False
    if getattr(BasicActorPool.add_actors_to_pool, "warm", False):
        return True
    add, terminate = BasicActorPool.add_actors_to_pool, BasicActorPool.terminate_all_actors

    def add_kept_first(self: Any, num_actors: int) -> None:
        taken = _take(_key(self.client_resources), num_actors) if _active is not None else []
        self.pool.extend(taken)
        self.num_actors += len(taken)
        add(self, num_actors - len(taken))

    def keep_or_terminate(self: Any) -> None:
        if not (_active is not None and _keep(self)):
            terminate(self)

    add_kept_first.warm = True  # type: ignore[attr-defined]
    BasicActorPool.add_actors_to_pool = add_kept_first
    BasicActorPool.terminate_all_actors = keep_or_terminate
    return True


def _key(resources: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a kept actor must match: the local Ray a simulation here started, and the resources."""
    from fedaccel.flower.warm_ray import _ours, remember_started

    remember_started(_active or {"init_args": {}})  # a Ray this simulation started is ours from its start
    if not _ours():
        return None
    return _session(), tuple(sorted(resources.items()))


def _session() -> str | None:
    """The running Ray's session (a Ray restarted on the same address is another session), or None."""
    import ray

    return ray.get_runtime_context().get_session_name() if ray.is_initialized() else None


def _take(key: tuple[Any, ...] | None, wanted: int) -> list[Any]:
    """Up to ``wanted`` kept actors for a pool of ``key``, each answering; the rest of them are stopped."""
    import ray

    with _lock:
        actors, kept_for, ours = _drop()
    taken = actors[:wanted] if ours and key == kept_for else []
    rest = actors[len(taken):]
    if ours:
        _stop(rest)
    if taken:
        try:
            ray.get([actor.__ray_ready__.remote() for actor in taken], timeout=30)
        except Exception:  # noqa: BLE001  one died while kept (killed, out of memory): start afresh
            _stop(taken)
            return []
    return taken


def _drop() -> tuple[list[Any], tuple[Any, ...], bool]:
    """Empty the kept actors (call under the lock): (them, what they were kept for, whether the Ray they
    run on is still up)."""
    global _kept, _kept_for, _timer
    actors, key = _kept, _kept_for
    _kept, _kept_for = [], ()
    if _timer is not None:
        _timer.cancel()
        _timer = None
    return actors, key, bool(actors) and key[0] == _session()


def _keep(pool: Any) -> bool:
    """Keep ``pool``'s actors for the next simulation, if it has no message in flight (else: False)."""
    global _kept, _kept_for, _timer
    key = _key(pool.client_resources)
    if key is None or pool._future_to_actor:
        return False
    unique = list({actor._actor_id.hex(): actor for actor in pool.pool}.values())
    with _lock:
        old, _, ours = _drop()
        _kept, _kept_for = unique, key
        _timer = threading.Timer(IDLE_S, release)
        _timer.daemon = True
        _timer.start()
    if ours:
        _stop(old)
    return True


def _stop(actors: list[Any]) -> None:
    for actor in actors:
        try:
            actor.terminate.remote()
        except Exception:  # noqa: BLE001  Ray shut down meanwhile (the idle timer's thread), the actor gone
            pass


def _forget() -> None:
    """In a forked child: the parent's actors, lock and timer are not the child's."""
    global _lock, _kept, _kept_for, _timer
    _lock, _kept, _kept_for, _timer = threading.Lock(), [], (), None


os.register_at_fork(after_in_child=_forget)
