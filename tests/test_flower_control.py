"""Only the deploying user drives a deployment: fedaccel's SuperLink guard and the run token.

Fast checks without a deployment; the live one (a rogue `flwr run` against a running TLS
deployment, refused, and the deployment's numbers those of the in-process run) is
tests/test_flower.py's TLS test.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("flwr")

from fedaccel.disk import LinkRefused  # noqa: E402
from fedaccel.errors import UserError  # noqa: E402
from fedaccel.flower.link import Guard, RequestLog, is_loopback, refusal, take_option  # noqa: E402
from fedaccel.flower.security import (  # noqa: E402
    CONTROL_TOKEN,
    RUN_CONFIG,
    RUN_TOKEN,
    SECRETS,
    SUPEREXEC_SECRET,
    check_run_token,
    read_secret,
    write_flwr_home,
    write_secrets,
)

TOKEN = "s3cret-token-of-the-deployment"
LOOPBACK = ["127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"]
paths = st.text(alphabet="/abcdefgilmnortuv-.%_1", max_size=40).map(lambda p: "/" + p)
remote = st.one_of(st.ip_addresses(v=4).filter(lambda a: not a.is_loopback).map(str),
                   st.ip_addresses(v=6).filter(lambda a: not a.is_loopback and not (
                       a.ipv4_mapped and a.ipv4_mapped.is_loopback)).map(str),
                   st.just("not-an-address"), st.none())


@given(path=paths, peer=remote, headers=st.lists(st.text(max_size=60), max_size=2))
@settings(max_examples=300, deadline=None)
def test_another_host_reaches_the_fleet_api_and_nothing_else(path: str, peer: str | None, headers: list[str]) -> None:
    """Whatever the path and headers (the right token included), a peer that is not loopback is
    served only the Fleet API and /health."""
    for authorizations in (headers, [f"Bearer {TOKEN}"]):
        refused = refusal(path, peer, authorizations, TOKEN)
        if path.startswith("/v1/fleet/") or path == "/health":
            assert refused is None
        else:
            assert refused is not None and refused[0] == 403, (path, peer)


@given(path=paths.filter(lambda p: not p.startswith(("/v1/fleet/", "/v1/runtime/")) and p != "/health"),
       peer=st.sampled_from(LOOPBACK), headers=st.lists(st.text(max_size=60), max_size=3))
@settings(max_examples=300, deadline=None)
def test_the_control_api_on_loopback_takes_the_deployment_token_only(path: str, peer: str, headers: list[str]) -> None:
    """From this host, the Control API (and any other path but the Fleet and Runtime APIs) needs
    exactly one `Authorization: Bearer TOKEN`; anything else is 401."""
    refused = refusal(path, peer, headers, TOKEN)
    exact = len(headers) == 1 and headers[0].partition(" ")[0].lower() == "bearer" and \
        headers[0].partition(" ")[2].strip() == TOKEN
    assert (refused is None) == exact, (headers, refused)
    if refused:
        assert refused[0] == 401
    assert refusal(path, peer, [f"Bearer {TOKEN}"], TOKEN) is None
    assert refusal(path, peer, [f"bearer {TOKEN}"], TOKEN) is None
    for wrong in ([], [f"Bearer {TOKEN}x"], [f"Bearer {TOKEN[:-1]}"], [f"Basic {TOKEN}"], [f"Bearer {TOKEN}"] * 2,
                  ["Bearer "], [TOKEN]):
        assert refusal(path, peer, wrong, TOKEN) == (401, "the Control API needs the deployment's token"), wrong


def test_loopback_is_told_from_other_addresses() -> None:
    assert all(is_loopback(a) for a in LOOPBACK)
    assert not any(is_loopback(a) for a in ["10.0.0.1", "192.168.1.2", "::", "0.0.0.0", "::ffff:10.0.0.1", "",
                                             None, "localhost", "fe80::1"])


def test_the_guard_answers_refused_requests_itself_and_passes_the_rest_to_flower() -> None:
    """The ASGI middleware: a refused request never reaches the app; lifespan events pass."""
    reached: list[str] = []

    async def app(scope, receive, send) -> None:  # noqa: ANN001
        reached.append(scope.get("path", scope["type"]))

    def call(scope: dict) -> list[dict]:
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        asyncio.run(Guard(app, token=TOKEN)(scope, None, send))
        return sent

    def http(path: str, client: tuple[str, int] | None, *headers: tuple[bytes, bytes]) -> dict:
        return {"type": "http", "path": path, "client": client, "headers": list(headers)}

    sent = call(http("/v1/control/start-run", ("10.1.2.3", 5000), (b"authorization", f"Bearer {TOKEN}".encode())))
    assert sent[0]["status"] == 403 and b"Fleet API" in sent[1]["body"]
    sent = call(http("/v1/control/start-run", ("127.0.0.1", 5000), (b"Authorization", b"Bearer nope")))
    assert sent[0]["status"] == 401
    assert call(http("/v1/runtime/acquire-task", None))[0]["status"] == 403  # no peer address: not loopback
    assert reached == []
    own = (b"Authorization", f"Bearer {TOKEN}".encode())
    assert call(http("/v1/control/start-run", ("127.0.0.1", 5000), own)) == []
    assert call(http("/v1/fleet/pull-messages", ("10.1.2.3", 5000))) == []
    assert call({"type": "lifespan"}) == []
    assert call({"type": "websocket", "path": "/v1/control/x", "client": ("10.0.0.1", 1), "headers": []}) == [
        {"type": "websocket.close", "code": 1008}]
    assert reached == ["/v1/control/start-run", "/v1/fleet/pull-messages", "lifespan"]


def test_the_request_log_writes_each_request_s_path_and_response_bytes_and_passes_it_on(tmp_path: Path) -> None:
    """Every HTTP request, answered or failed, becomes one line ``[time, path, bytes sent]``; the
    app's answer reaches the client unchanged; lifespan events are not requests."""
    answers = {"/v1/fleet/pull-messages": b"", "/v1/runtime/pull-object": b"x" * 300}

    async def app(scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] != "http":
            return
        if scope["path"] == "/boom":
            raise RuntimeError("the app failed")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": answers[scope["path"]]})

    log = tmp_path / "requests.jsonl"
    middleware = RequestLog(app, file=str(log))
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    before = time.time()
    for path in ["/v1/fleet/pull-messages", "/v1/runtime/pull-object", "/boom"]:
        try:
            asyncio.run(middleware({"type": "http", "path": path}, None, send))
        except RuntimeError:
            assert path == "/boom"
    asyncio.run(middleware({"type": "lifespan"}, None, send))
    middleware.flush()
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(path, size) for _, path, size in rows] == [
        ("/v1/fleet/pull-messages", 0), ("/v1/runtime/pull-object", 300), ("/boom", 0)]
    assert all(before <= t <= time.time() + 1 for t, _, _ in rows)
    assert [m.get("body") for m in sent if m["type"] == "http.response.body"] == [b"", b"x" * 300]
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "planted").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LinkRefused):
        RequestLog(app, file=str(tmp_path / "planted"))


def test_take_option_removes_the_option_and_leaves_flowers_arguments() -> None:
    argv = ["link", "--insecure", "--secrets", "/a b", "--port", "1"]
    assert take_option(argv, "--secrets") == "/a b" and argv == ["link", "--insecure", "--port", "1"]
    argv = ["link", "--secrets=/c"]
    assert take_option(argv, "--secrets") == "/c" and argv == ["link"]
    assert take_option(["link", "--secrets"], "--secrets") is None


@given(name=st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/\0"), min_size=1, max_size=30))
@settings(max_examples=50, deadline=None)
def test_secrets_are_private_fresh_and_the_run_config_names_the_folder_exactly(tmp_path_factory, name: str) -> None:
    """Any run folder name (quotes, backslashes, control characters) comes back from the run
    config that `flwr run` reads; every secret is a 0600 file in a 0700 folder, new each time."""
    if name in (".", ".."):
        return
    run_dir = tmp_path_factory.mktemp("run") / name
    flower = run_dir / "flower"
    folder = write_secrets(flower, run_dir)
    assert folder == flower / SECRETS and folder.stat().st_mode & 0o777 == 0o700
    files = {p.name: p for p in folder.iterdir()}
    assert set(files) == {CONTROL_TOKEN, SUPEREXEC_SECRET, RUN_TOKEN, RUN_CONFIG}
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in files.values())
    run_config = tomllib.loads(files[RUN_CONFIG].read_text())
    assert run_config == {"run-dir": str(run_dir), "run-token": read_secret(files[RUN_TOKEN])}
    tokens = {read_secret(files[n]) for n in (CONTROL_TOKEN, SUPEREXEC_SECRET, RUN_TOKEN)}
    assert len(tokens) == 3 and all(len(t) >= 40 for t in tokens)
    write_secrets(flower, run_dir)
    assert not tokens & {read_secret(folder / n) for n in (CONTROL_TOKEN, SUPEREXEC_SECRET, RUN_TOKEN)}


def test_flwr_home_holds_the_control_token_for_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `flwr` CLI, with this FLWR_HOME, sends the deployment's token as its bearer token."""
    from flwr.cli.utils import load_cli_auth_plugin_from_connection
    from flwr.common.constant import ACCESS_TOKEN_KEY
    from flwr.supercore.credential_store.file_credential_store import FileCredentialStore

    home = tmp_path / "home"
    write_flwr_home(home, "127.0.0.1:9093", TOKEN, tmp_path / "ca.crt")
    assert all((home / n).stat().st_mode & 0o777 == 0o600 for n in ("config.toml", "credentials.yaml"))
    config = tomllib.loads((home / "config.toml").read_text())
    assert config["superlink"]["local"] == {"address": "127.0.0.1:9093", "root-certificates": str(tmp_path / "ca.crt")}
    store = FileCredentialStore(home / "credentials.yaml")
    monkeypatch.setattr("flwr.cli.utils.get_credential_store", lambda: store)
    monkeypatch.setattr("flwr.cli.auth_plugin.oidc_cli_plugin.get_credential_store", lambda: store)
    plugin = load_cli_auth_plugin_from_connection("127.0.0.1:9093")
    plugin.load_tokens()
    assert (ACCESS_TOKEN_KEY, TOKEN) in plugin.write_tokens_to_metadata([])


def test_the_server_app_serves_only_the_deployments_own_run(tmp_path: Path, capsys) -> None:
    """A run of fedaccel's app (anyone can build it: the same FAB) with a run-dir of this user's
    but without its run token is refused in one line before the folder is touched (no lock
    file, nothing written); a token file that another user could have planted or read is refused."""
    from fedaccel.flower.apps import main as server_main

    run_dir = tmp_path / "run"
    write_secrets(run_dir / "flower", run_dir)
    token = read_secret(run_dir / "flower" / SECRETS / RUN_TOKEN)
    before = sorted(p.name for p in run_dir.rglob("*"))
    for given in (None, "", token[:-1], token + "x", token.upper(), 12345):
        context = SimpleNamespace(run_config={"run-dir": str(run_dir), "run-token": given})
        server_main(None, context)  # type: ignore[arg-type]
        err = capsys.readouterr().err.strip()
        assert err.startswith("fedaccel server: error: refused: this run is not the deployment's own") and \
            "\n" not in err, err
    assert sorted(p.name for p in run_dir.rglob("*")) == before  # untouched: no .lock, no run

    check_run_token(run_dir, token)  # the deployment's own
    secret = run_dir / "flower" / SECRETS / RUN_TOKEN
    secret.chmod(0o644)
    with pytest.raises(UserError, match="not a private file"):
        check_run_token(run_dir, token)
    secret.unlink()
    planted = tmp_path / "planted"
    planted.write_text(token)
    planted.chmod(0o600)
    os.symlink(planted, secret)
    with pytest.raises(UserError, match="not a private file"):
        check_run_token(run_dir, token)
    with pytest.raises(UserError, match="is missing"):
        check_run_token(tmp_path / "elsewhere", token)
