"""``python -m fedaccel.flower.node [flower-supernode arguments]``: Flower's SuperNode, polling faster.

Flower 1.41's SuperNode sleeps 3 s after every poll of the SuperLink that brings no message, and
0.5 s between checks for its ClientApp's reply (``flwr.supernode.start_client_internal``). For
FL rounds of a second or less these waits are most of a round. This launcher runs the unchanged
``flower-supernode`` command with those waits capped at ``FEDACCEL_NODE_POLL`` seconds
(default 0.05): the module's ``time`` is replaced by one whose ``sleep`` is capped; and the
backoff of its object pulls starts at 20 ms instead of 1 s. Everything else — protocol, TLS,
authentication, heartbeats — is Flower's.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


class _CappedTime:
    """The ``time`` module, with ``sleep`` capped at ``cap`` seconds."""

    def __init__(self, cap: float) -> None:
        self.cap = cap

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, self.cap))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def shorten_object_pull_backoff(initial: float = 0.02, cap: float = 0.5) -> None:
    """Flower pulls a message's objects (arrays) with a backoff that starts at 1 s when one is not
    yet uploaded — most of a deployed round. Start it at ``initial`` s, cap it at ``cap`` s, in
    this process (the SuperNode's, the ClientApp executor's and the ServerApp's call this)."""
    from flwr.supercore.inflatable import inflatable_utils

    for function in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        function.__kwdefaults__ = {**(function.__kwdefaults__ or {}), "initial_backoff": initial, "backoff_cap": cap}


def main() -> int:
    import flwr.supernode.start_client_internal as loop
    from flwr.supernode.cli import flower_supernode

    loop.time = _CappedTime(float(os.environ.get("FEDACCEL_NODE_POLL", "0.05")))  # type: ignore[assignment]
    shorten_object_pull_backoff()
    sys.argv[0] = "flower-supernode"
    return int(flower_supernode() or 0)


if __name__ == "__main__":
    sys.exit(main())
