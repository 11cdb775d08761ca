"""Two messages in flight per ClientApp worker of Flower's simulation engine.

Flower 1.42's Ray backend hands each ClientApp actor one message at a time: one engine thread per
actor submits a message, waits for the reply, stores it and takes the next message. Between two
messages the actor idles while its reply travels back and the next message travels out: on this
2-core VM 7-8 ms a message for the 2NN (Ray's actor call, ~4 ms even with nothing in it, plus the
359 KB model out and the update back), about as long as the 2NN's local training itself.

:func:`keep_two_in_flight` makes the backend's actor pool list every actor :data:`IN_FLIGHT` times,
so the engine starts that many threads per actor: when an actor finishes a message, the next one is
already with it (Ray runs an actor's tasks one at a time, in the order submitted), and the transfers
overlap the training. Each message still runs alone, in its own node's context: what the ClientApps
compute and what the server gets are unchanged. Flower starts those threads in a ``ThreadPoolExecutor``
of its default size (cores + 4, at most 32): beyond 4 actors on as many cores only that many messages
are in flight, so some actors hold one, as before. Pinned to flwr 1.42 (``RayBackend`` is not public
API): if it is gone, nothing is patched and messages go one at a time, as in Flower.
"""

from __future__ import annotations

from typing import Any

IN_FLIGHT = 2  # messages an actor holds at once: the one it runs and the next


def keep_two_in_flight() -> bool:
    """Make Flower's Ray backend keep :data:`IN_FLIGHT` messages with each actor (once per process)."""
    try:
        from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend
    except ImportError:
        return False
    if getattr(RayBackend.build, "in_flight", False):
        return True
    build = RayBackend.build

    def build_in_flight(self: Any, app_fn: Any) -> None:
        build(self, app_fn)
        list_each_actor(self.pool, IN_FLIGHT)

    build_in_flight.in_flight = True  # type: ignore[attr-defined]
    RayBackend.build = build_in_flight
    return True


def list_each_actor(pool: Any, times: int) -> None:
    """List each actor of Flower's ``BasicActorPool`` ``times`` times (the engine starts one thread
    per entry, and a thread submits to the entry it takes); its termination stops each actor once."""
    actors = list(pool.pool)
    pool.pool = actors * times  # taken from the end: the first messages of a round go to distinct actors
    pool.num_actors = len(pool.pool)
    terminate_all = pool.terminate_all_actors

    def terminate_each_once() -> None:
        pool.pool = actors  # a second terminate of a stopped actor would only log an error
        terminate_all()

    pool.terminate_all_actors = terminate_each_once
