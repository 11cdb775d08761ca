"""``python -m fedaccel.flower.node [flower-supernode arguments]``: Flower's SuperNode, kept warm.

Flower 1.42's SuperNode sleeps 3 s after every poll of the SuperLink that brings no message,
0.5 s between checks for its ClientApp's reply, and starts the ClientApp in a fresh process per
message (``flower-superexec``). For FL rounds of a second or less those waits and start-ups
are most of a round. This launcher runs the unchanged ``flower-supernode`` command with:

* its polls of the SuperLink capped at ``FEDACCEL_NODE_POLL`` seconds (default 0.05);
* with ``--isolation process``, fedaccel's ClientApp executor (:mod:`fedaccel.flower.executor`)
  as a thread of this process, in place of ``flower-superexec``: it serves every message of the
  run with the setup kept warm, calls the SuperNode's Runtime API handlers in process (the ones
  its HTTP server runs), and is woken the moment a message is stored (no polling); the
  SuperNode's wait for the reply is woken the moment the executor has pushed it;
* the backoff of its object pulls started at 20 ms instead of 1 s.

The executor thread trains with ``FEDACCEL_TORCH_THREADS`` torch threads (default 1: the
SuperNodes of one host share its cores).

Everything else — protocol, TLS, authentication, heartbeats — is Flower's.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from typing import Any

LINK_POLL = float(os.environ.get("FEDACCEL_NODE_POLL", "0.05"))  # seconds between empty polls of the SuperLink
LOCAL_WAIT = 0.5  # the SuperNode's sleep while its ClientApp works (Flower's value; woken early by `replied`)


class _NodeClock:
    """The ``time`` module of Flower's SuperNode loop, with its sleeps shortened.

    Its 0.5 s sleeps (waiting for the ClientApp's reply or its objects) end as soon as
    ``replied`` is set. Its 3 s sleeps (no message from the SuperLink) become polls every
    ``poll`` s, except right after a message: FL rounds come at a steady pace, so the node
    first sleeps through ``AHEAD`` of the shortest of its last ``PERIODS`` intervals between
    messages (each poll costs the SuperLink a request, and all nodes share its time). The
    interval after a run's first message (the server's hello, then its set-up) is not a round's.
    """

    AHEAD, PERIODS = 0.7, 5

    def __init__(self, poll: float, replied: threading.Event) -> None:
        self.poll, self.replied = poll, replied
        self.last_message: float | None = None
        self.messages = 0
        self.periods: list[float] = []

    def sleep(self, seconds: float) -> None:
        if seconds <= LOCAL_WAIT:
            self.replied.wait(min(seconds, self.poll))
            self.replied.clear()
            return
        time.sleep(max(min(seconds, self.poll), self.quiet_until() - time.monotonic()))

    def quiet_until(self) -> float:
        """When the next message may come: before then the node does not poll the SuperLink."""
        if not self.periods:
            return 0.0
        return self.last_message + self.AHEAD * min(self.periods)  # type: ignore[operator]

    def before_pull(self) -> None:
        """Flower's loop polls again right after it pushed a reply, with no sleep: a poll that
        finds nothing (the server's next round waits for every client's reply), so sleep
        through the quiet time first."""
        time.sleep(max(0.0, self.quiet_until() - time.monotonic()))

    def message_stored(self) -> None:
        now = time.monotonic()
        self.messages += 1
        if self.messages > 2:
            self.periods = [*self.periods[1 - self.PERIODS:], now - self.last_message]  # type: ignore[operator]
        self.last_message = now

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
    cli = importlib.import_module("flwr.supernode.cli.flower_supernode")
    loop = importlib.import_module("flwr.supernode.start_client_internal")  # the module, not its function

    stored, replied = threading.Event(), threading.Event()
    clock = _NodeClock(LINK_POLL, replied)
    loop.time = clock  # type: ignore[assignment]
    shorten_object_pull_backoff()

    pull_and_store = loop._pull_and_store_message

    def pull_and_store_then_wake(*args: Any, **kwargs: Any) -> Any:
        clock.before_pull()
        run_id = pull_and_store(*args, **kwargs)
        if run_id is not None:  # a message and all its objects are in the SuperNode's store
            clock.message_stored()
            stored.set()
        return run_id

    loop._pull_and_store_message = pull_and_store_then_wake
    start = cli.start_client_internal

    def start_with_executor(**kwargs: Any) -> None:
        if kwargs.get("isolation") == "process":
            import torch

            from fedaccel.flower.executor import LocalRuntime, serve_tasks

            torch.set_num_threads(int(os.environ.get("FEDACCEL_TORCH_THREADS", "1")))
            state = kwargs["state_factory"].state()  # the SuperNode's own (one per process)
            executor = threading.Thread(
                target=serve_tasks, name="fedaccel-executor", daemon=True,
                args=(lambda token: LocalRuntime(state, token), stored, replied))
            executor.start()
        start(**kwargs)

    cli.start_client_internal = start_with_executor
    sys.argv[0] = "flower-supernode"
    return int(cli.flower_supernode() or 0)


def _exit_now(code: Any) -> None:
    """Exit without the interpreter's slow teardown (torch, the run's data: about a second of
    CPU per node, paid by every node at once when a deployment stops): Flower's exit handlers
    have run, and the logs are flushed."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1 if code else 0)


if __name__ == "__main__":
    try:
        status: Any = main()
    except SystemExit as exc:
        status = exc.code
    _exit_now(status)
