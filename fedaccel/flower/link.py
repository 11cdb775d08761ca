"""``python -m fedaccel.flower.link --secrets DIR [flower-superlink arguments]``: Flower's SuperLink, guarded.

Flower 1.42's SuperLink serves its Fleet API (SuperNodes), its Control API (``flwr run``, ``flwr
supernode register``) and its Runtime API (the SuperExec and the ServerApps) on one HTTP port,
and its Control API asks nothing of a caller in this distribution (account authentication is
OIDC, which it lacks): whoever reaches the port starts runs, and a run's ServerApp is the
caller's code, run as the SuperLink's user. ``--tls`` authenticates SuperNodes only. This
launcher runs the unchanged ``flower-superlink`` command with:

* :class:`Guard` in front of every API: from an address other than loopback only the Fleet API
  (``/v1/fleet/...``) and ``/health`` are served (403); from loopback the Runtime API too, and
  everything else (the Control API, Flower's API pages) only with ``Authorization: Bearer``
  the deployment's token (``DIR/control-token``, compared in constant time; 401);
* Flower's SuperExec authentication, which it leaves off for the SuperExec it starts itself
  (``--isolation subprocess``): that SuperExec is given ``DIR/superexec-secret``, and the Runtime
  API lets only a caller holding it take a run's ServerApp task (someone else on this host who
  took it would run the deployment's ServerApp as themselves, with its run config).

The secrets are :func:`fedaccel.flower.security.write_secrets`'s; docs/threat-model.md says what
this covers and what it does not.

With ``FEDACCEL_REQUEST_LOG=FILE`` in its environment the SuperLink also appends one line per
request to FILE (:class:`RequestLog`: time, path, response bytes), for counting what a round costs
it (``benchmarks/runtime_overhead.py``).
"""

from __future__ import annotations

import atexit
import importlib
import ipaddress
import json
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from fedaccel.flower.security import same_secret

FLEET, HEALTH, RUNTIME = "/v1/fleet/", "/health", "/v1/runtime/"
REQUEST_LOG = "FEDACCEL_REQUEST_LOG"  # environment: a file to append every request's line to
Scope = MutableMapping[str, Any]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (the peer's address as the server saw it) is this host's loopback."""
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def refusal(path: str, peer: str | None, authorizations: Sequence[str], token: str) -> tuple[int, str] | None:
    """Why a request for ``path`` from ``peer`` with these ``Authorization`` headers is refused
    (HTTP status, reason), or None when it may go on to Flower."""
    if path.startswith(FLEET) or path == HEALTH:
        return None  # SuperNodes, wherever they are (with --tls: Flower's TLS and SuperNode authentication)
    if not is_loopback(peer):
        return 403, "only the Fleet API is served to other hosts"
    if path.startswith(RUNTIME):
        return None  # the SuperExec (Flower's HMAC authentication) and ServerApps (their task tokens)
    scheme, _, given = authorizations[0].partition(" ") if len(authorizations) == 1 else ("", "", "")
    if scheme.lower() != "bearer" or not same_secret(given.strip(), token):
        return 401, "the Control API needs the deployment's token"
    return None


class Guard:
    """ASGI middleware: each request that :func:`refusal` refuses is answered with its status."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Any, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)  # lifespan
        peer = scope.get("client")[0] if scope.get("client") else None
        headers = [value.decode("latin-1") for name, value in scope.get("headers", [])
                   if name.lower() == b"authorization"]
        refused = refusal(scope.get("path", ""), peer, headers, self.token)
        if refused is None:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        status, reason = refused
        body = ('{"detail": "%s"}' % reason).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class RequestLog:
    """ASGI middleware: every HTTP request as a JSON line ``[unix time, path, response body bytes]``
    appended to ``file`` (buffered; written every 0.1 s and when the process exits). A diagnostic:
    it costs a list append a request."""

    def __init__(self, app: Callable[..., Awaitable[None]], file: str) -> None:
        from fedaccel.disk import open_no_link

        self.app, self.lines, self.lock = app, [], threading.Lock()
        self.out = open_no_link(Path(file), "a", encoding="utf-8")  # a link planted there is refused
        threading.Thread(target=self._flush_every, args=(0.1,), daemon=True, name="request-log").start()
        atexit.register(self.flush)

    async def __call__(self, scope: Scope, receive: Any, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        sent = 0

        async def counting(event: MutableMapping[str, Any]) -> None:
            nonlocal sent
            if event["type"] == "http.response.body":
                sent += len(event.get("body", b""))
            await send(event)

        try:
            await self.app(scope, receive, counting)
        finally:
            with self.lock:
                self.lines.append(json.dumps([round(time.time(), 4), scope.get("path", ""), sent]))

    def flush(self) -> None:
        with self.lock:
            lines, self.lines = self.lines, []
        if lines:
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()

    def _flush_every(self, seconds: float) -> None:
        while True:
            time.sleep(seconds)
            self.flush()


def with_outer_middleware(*first: Any) -> None:
    """Put ``first`` (Starlette ``Middleware``) in front of every middleware of the SuperLink's app,
    and :class:`RequestLog` first of all where ``FEDACCEL_REQUEST_LOG`` names a file."""
    from starlette.middleware import Middleware

    app = importlib.import_module("flwr.superlink.main")
    middleware = app._get_middleware
    log = [Middleware(RequestLog, file=os.environ[REQUEST_LOG])] if os.environ.get(REQUEST_LOG) else []
    app._get_middleware = lambda: [*log, *first, *middleware()]  # outermost: first to see a request


def take_option(argv: list[str], name: str) -> str | None:
    """Remove ``name VALUE`` (or ``name=VALUE``) from ``argv``; its value, None if absent."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
            del argv[i:i + 2]
            return value
        if arg.startswith(name + "="):
            del argv[i]
            return arg[len(name) + 1:]
    return None


def main() -> int:
    from fedaccel.errors import UserError
    from fedaccel.flower.security import CONTROL_TOKEN, SUPEREXEC_SECRET, read_secret

    folder = take_option(sys.argv, "--secrets")
    try:
        if folder is None:
            raise UserError("--secrets DIR is required: the folder `fedaccel deploy --prepare` makes "
                            "(RUN_DIR/flower/secrets)")
        token = read_secret(Path(folder) / CONTROL_TOKEN)
        secret_file = Path(folder) / SUPEREXEC_SECRET
        read_secret(secret_file)  # this user's private file
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from starlette.middleware import Middleware

    cli = importlib.import_module("flwr.superlink.cli.flower_superlink")
    with_outer_middleware(Middleware(Guard, token=token))
    superexec_command = cli._get_superexec_command
    cli._get_superexec_command = lambda *args, **kwargs: [
        *superexec_command(*args, **kwargs), "--superexec-auth-secret-file", str(secret_file)]
    parse = cli._parse_superlink_lifespan_config

    def parse_with_secret() -> Any:
        config = parse()
        config.superexec_auth_secret = secret_file.read_bytes()  # the bytes the SuperExec reads
        return config

    cli._parse_superlink_lifespan_config = parse_with_secret
    sys.argv[0] = "flower-superlink"
    return int(cli.flower_superlink() or 0)


if __name__ == "__main__":
    sys.exit(main())
