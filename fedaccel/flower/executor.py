"""fedaccel's ClientApp executor: one warm process serves every message of a run.

Flower 1.42's SuperNode hands each message to a fresh ``flwr-clientapp`` process (with
``--isolation subprocess``, and with ``--isolation process`` behind ``flower-superexec``): for
fedaccel that means importing torch and loading the run's data for every round. With the
SuperNode started as ``--isolation process``, this executor takes the place of
``flower-superexec``: it acquires the SuperNode's tasks through Flower's Runtime API, like
``flower-superexec``, but runs each one *in this process*, like ``flwr-clientapp`` does once, so
the setup built by :mod:`fedaccel.flower.client` stays warm across rounds.

``fedaccel deploy`` runs it as a thread of each SuperNode (:mod:`fedaccel.flower.node`); it
calls the node's Runtime API handlers (the ones the node's HTTP server runs) directly on the
node's state through :class:`LocalRuntime`, and is woken when a message is stored: no HTTP and
no polling between the node and its ClientApp.

It uses Flower's Runtime API (``flwr.supercore``, ``flwr.supernode``), which is not part of
Flower's public API: pinned to flwr 1.42.0 (the ``flower`` extra). The ClientApp is fedaccel's
own (no FAB is installed or imported per message).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from flwr.app import Message
from flwr.app.error import Error
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.servicer.runtime.runtime_handlers import send_task_heartbeat
from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output
from flwr.supernode.servicer.runtime import runtime_handlers as handlers

from fedaccel.flower.client import app as fedaccel_client_app

IDLE_WAIT = 1.0  # seconds a woken executor waits before asking for a task anyway

Runtime = Callable[[str | None], Any]  # task token (None: the executor's own) -> a Runtime API client


def _for_task(handler: Callable[[Any, Any, Any], Any]) -> Callable[[LocalRuntime, Any], Any]:
    return lambda runtime, request: handler(request, runtime.state, runtime.task)


class LocalRuntime:
    """A SuperNode's Runtime API called in its own process: each method (Flower's names) is the
    handler its HTTP route runs, on the node's state, for the task of ``token``."""

    def __init__(self, state: Any, token: str | None = None) -> None:
        self.state = state
        self.task = state.get_task_by_token(token) if token else None

    def AcquireTask(self, request: Any) -> Any:  # noqa: N802
        return handlers.acquire_task(request, self.state)

    SendTaskHeartbeat = _for_task(send_task_heartbeat)
    PullTaskInput = _for_task(handlers.pull_task_input)
    PullMessages = _for_task(handlers.pull_messages)
    PullObject = _for_task(handlers.pull_object)
    ConfirmMessageReceived = _for_task(handlers.confirm_message_received)
    PushMessages = _for_task(handlers.push_messages)
    PushObject = _for_task(handlers.push_object)
    PushTaskOutput = _for_task(handlers.push_task_output)

    def close(self) -> None:
        pass


def run_task(client: Any, client_app: Any, done: threading.Event) -> None:
    """One message: pull it with its context, run the ClientApp here, push the reply and context;
    ``done`` is set once the reply is pushed."""
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    heartbeat.start()
    context = None
    status, details = SubStatus.FAILED, "fedaccel executor: task failed"
    try:
        message, context, _, _ = pull_task_input(client)
        try:
            reply = client_app(message=message, context=context)
            status, details = SubStatus.COMPLETED, ""
        except Exception as exc:  # the server gets the reason, the executor goes on
            reason = f"{type(exc)}:<'{exc}'>"
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=message)
            details = reason
        push_message(client, reply, context)
        done.set()
    finally:
        push_task_output(client=client, context=context, sub_status=status, details=details)
        heartbeat.stop()
        client.close()


def serve_tasks(runtime: Runtime, wake: threading.Event, done: threading.Event,
                client_app: Any = fedaccel_client_app) -> None:
    """Acquire and run the SuperNode's ClientApp tasks, one after another, until killed. Without
    a task it waits for ``wake`` (set when the SuperNode stores a message), at most ``IDLE_WAIT``
    s; ``done`` is set whenever a reply is pushed."""
    client = runtime(None)
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    while True:
        try:
            task = client.AcquireTask(request)
            if task.HasField("task") and task.token:
                run_task(runtime(task.token), client_app, done)
                continue
        except Exception:  # a task lost on the way: the server sees the client lost
            print(f"fedaccel executor: {traceback.format_exc()}", file=sys.stderr, flush=True)
        wake.wait(IDLE_WAIT)
        wake.clear()
