"""Flower's simulation engine, handed a round's messages the moment the server pushes them.

Flower 1.42's simulation engine moves the server's messages from its LinkState to the
ClientApp workers in a loop that sleeps 0.1 s between scans (``add_messages_to_queue`` in
``flwr.server.superlink.fleet.vce.vce_api``, waiting on its stop event): on average 50 ms of
every round, most of the runtime's cost on a small model. :func:`wake_simulation_on_push` gives
that loop a stop event whose waits also end when :data:`PUSHED` is set, which
:func:`fedaccel.flower.server.exchange` does after every push; the loop, its 0.1 s timeout and
its stopping are Flower's, unchanged. Pinned to flwr 1.42 (``vce_api`` is not public API): if
the function is gone, nothing is patched and rounds are only slower.

The other way likewise: the engine stores each ClientApp's reply in its LinkState from a thread
(``put_message_into_state``); wrapped, it sets :data:`REPLIED` after each store, and the
ServerApp (:func:`fedaccel.flower.server.collect`) waits on that event instead of pulling every
few milliseconds (a pull every 2 ms took CPU from the ClientApp workers on a small machine).
"""

from __future__ import annotations

import threading
from typing import Any

PUSHED = threading.Event()  # set by the server after it pushed messages (this process)
REPLIED = threading.Event()  # set by the engine after it stored a ClientApp's reply (this process)


class _WokenStop:
    """The engine's stop event, seen by its dispatch loop: ``wait`` also ends on :data:`PUSHED`."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def is_set(self) -> bool:
        return self.stop.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        PUSHED.wait(timeout)  # messages are stored before PUSHED is set: the next scan finds them
        PUSHED.clear()
        return self.stop.is_set()


class _TellingState:
    """The engine's LinkState, seen by its reply-storing loop: ``store_message_res`` also sets
    :data:`REPLIED` (after the store, so that a pull woken by it finds the reply)."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def store_message_res(self, message: Any) -> Any:
        try:
            return self.state.store_message_res(message)
        finally:
            REPLIED.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.state, name)


def wake_simulation_on_push() -> bool:
    """Wrap the simulation engine's dispatch loop and its reply-storing loop (once per process);
    False if flwr has neither."""
    try:
        from flwr.server.superlink.fleet.vce import vce_api
    except ImportError:
        return False
    dispatch = getattr(vce_api, "add_messages_to_queue", None)
    store = getattr(vce_api, "put_message_into_state", None)
    if dispatch is None or store is None:
        return False
    if getattr(dispatch, "woken_on_push", False):
        return True

    def add_messages_to_queue(state: Any, queue: Any, nodes_mapping: Any, f_stop: threading.Event) -> None:
        dispatch(state, queue, nodes_mapping, _WokenStop(f_stop))

    def put_message_into_state(state: Any, queue: Any, f_stop: threading.Event) -> None:
        store(_TellingState(state), queue, f_stop)

    add_messages_to_queue.woken_on_push = True  # type: ignore[attr-defined]
    vce_api.add_messages_to_queue = add_messages_to_queue
    vce_api.put_message_into_state = put_message_into_state
    return True
