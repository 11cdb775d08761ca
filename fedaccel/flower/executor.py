"""A ClientApp process that lives for the whole run: ``python -m fedaccel.flower.executor``.

Flower 1.41's SuperNode hands each message to a fresh ``flwr-clientapp`` process (with
``--isolation subprocess``, and with ``--isolation process`` behind ``flower-superexec``): for
fedaccel that means importing torch and loading the run's data for every round. With the
SuperNode started as ``--isolation process``, this executor takes the place of
``flower-superexec``: it acquires the SuperNode's tasks over its Runtime API, like
``flower-superexec``, but runs each one *in this process*, like ``flwr-clientapp`` does once, so
the setup built by :mod:`fedaccel.flower.client` stays warm across rounds.

It uses Flower's Runtime API client (``flwr.supercore``, ``flwr.supernode.runtime``), which is
not part of Flower's public API: pinned to flwr 1.41.0 (the ``flower`` extra). The ClientApp is
fedaccel's own (no FAB is installed or imported per message).

``fedaccel deploy`` runs it as a thread of each SuperNode process (:mod:`fedaccel.flower.node`),
woken when a message arrives instead of polling; ``python -m fedaccel.flower.executor`` runs it
as a process of its own beside a ``flower-supernode --isolation process``, polling.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback
from typing import Any

from flwr.app import Message
from flwr.app.error import Error
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supercore.tls import validate_and_resolve_root_certificates
from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output

from fedaccel.flower.client import app as fedaccel_client_app

IDLE_WAIT = 1.0  # seconds a woken executor waits before asking for a task anyway


def _client(address: str, insecure: bool, certificates: bytes | None, component: str, *extra: Any) -> RuntimeHttpClient:
    return RuntimeHttpClient.from_server_address(
        server_address=address, insecure=insecure, root_certificates=certificates,
        interceptors=[RuntimeVersionHttpInterceptor(component_name=component), *extra],
        retry_invoker=make_simple_http_retry_invoker(),
    )


def run_task(address: str, token: str, insecure: bool, certificates: bytes | None, client_app: Any,
             done: threading.Event | None = None) -> None:
    """One message: pull it with its context, run the ClientApp here, push the reply and context;
    ``done`` is set once the reply is pushed."""
    client = _client(address, insecure, certificates, "flwr-clientapp", RuntimeTokenHttpInterceptor(token))
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
        if done is not None:
            done.set()
    finally:
        push_task_output(client=client, context=context, sub_status=status, details=details)
        heartbeat.stop()
        client.close()


def serve_tasks(address: str, *, insecure: bool = True, root_certificates: str | None = None,
                poll: float = 0.02, client_app: Any = fedaccel_client_app,
                wake: threading.Event | None = None, done: threading.Event | None = None) -> None:
    """Acquire and run the SuperNode's ClientApp tasks, one after another, until killed.

    Without a task it sleeps ``poll`` s, or, given ``wake`` (set when the SuperNode stores a
    message), waits for it (at most ``IDLE_WAIT`` s)."""
    certificates = validate_and_resolve_root_certificates(root_certificates, insecure)
    client = _client(address, insecure, certificates, "SuperExec")
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    while True:
        try:
            task = client.AcquireTask(request)
            if task.HasField("task") and task.token:
                run_task(address, task.token, insecure, certificates, client_app, done)
                continue
        except Exception:  # the node not up yet, a task lost on the way: the server sees it lost
            print(f"fedaccel executor: {traceback.format_exc()}", file=sys.stderr, flush=True)
            time.sleep(IDLE_WAIT)
            continue
        if wake is not None:
            wake.wait(IDLE_WAIT)
            wake.clear()
        else:
            time.sleep(poll)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime-api-address", required=True, help="the SuperNode's --host:--port")
    parser.add_argument("--root-certificates", help="CA certificate, for a TLS Runtime API")
    parser.add_argument("--poll", type=float, default=0.02, help="seconds between empty polls")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: several SuperNodes usually share the cores)")
    args = parser.parse_args()
    import torch

    from fedaccel.flower.node import shorten_object_pull_backoff

    torch.set_num_threads(args.threads)
    shorten_object_pull_backoff()
    serve_tasks(args.runtime_api_address, insecure=args.root_certificates is None,
                root_certificates=args.root_certificates, poll=args.poll)


if __name__ == "__main__":
    main()
