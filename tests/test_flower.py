"""The Flower runtimes give the in-process numbers, and the server gates what clients send.

A worker's first simulation starts Ray and its ClientApp workers (10-20 s on 2 cores); the next
ones run on them (fedaccel.flower.warm_actors). The cases are tiny: digits, softmax regression,
3 clients, 3 rounds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, Context, Message  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from fedaccel.algorithms.base import ClientContext  # noqa: E402
from fedaccel.engine.round import init_state, round_info, run_round, train_client  # noqa: E402
from fedaccel.flower import client as fedaccel_client  # noqa: E402
from fedaccel.flower.deploy import descendants  # noqa: E402
from fedaccel.flower.simulation import simulate  # noqa: E402
from fedaccel.flower.wire import BadMessage, pack, unpack  # noqa: E402
from fedaccel.launch import run
from fedaccel.runs.config import load_config  # noqa: E402
from fedaccel.runs.setup import build_setup  # noqa: E402

TINY = ["data.dataset=digits", "model=softmax", "data.clients=3", "data.split=dirichlet", "data.split.alpha=0.5",
        "train.rounds=3", "train.lr=0.1", "train.batch_size=20", "run.progress=false"]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


CASES = {
    # ... with systems heterogeneity (stragglers dropped) and augmentation: the same seeded crops and flips
    # on the Flower clients as in process (one simulation for the three: each costs Ray workers' start)
    "bherd-stragglers-augment": ["algorithm=bherd", "algorithm.alpha=0.5", "train.local_epochs=3", "data.clients=4",
                                 "train.local_work={name: stragglers, fraction: 0.5}",
                                 "train.augment={crop_padding: 2, flip: true}"],
    # SCAFFOLD's controls on Flower: fedgsnr-scaffold here, and deployed SCAFFOLD in the Ctrl-C and kill -9 test
    # FedUMF with FedDC's states, partial uploads, and the client-mean and all-client-mean models scored
    "fedumf-feddc": ["algorithm=fedumf-feddc", "train.client_fraction=0.5", "data.clients=4",
                     "eval.models=[broadcast, client_mean, all_mean]"],
    # ... with a server optimiser on top (its moments stay on the server: Algorithm.client_view)
    "fedgsnr-scaffold-adam": ["algorithm=fedgsnr-scaffold", "algorithm.samples=8", "algorithm.e_const=4",
                              "algorithm.server_opt={name: adam, lr: 0.05}"],
    # GraB-reorder (its client state sets the order of the next round): tests/test_ray_grid.py's simulation
    # systems heterogeneity: drawn local epochs, Bernoulli participation, stragglers dropped
    "fednova-uniform-work": ["algorithm=fednova", "train.local_work={name: uniform, min_epochs: 1, max_epochs: 3}",
                             "train.sampling=bernoulli", "train.client_fraction=0.7"],
    # the references' DataLoader batches (short last batch, a new order every epoch), FedNova's tau_i over
    # them and its step schedule
    "fednova-code": ["algorithm=fednova", "algorithm.preset=fednova-code", "train.local_epochs=2"],
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.slow
def test_flower_simulation_gives_the_in_process_numbers(case: str, tmp_path: Path) -> None:
    overrides = [*TINY, *CASES[case]]
    local = rows(run(load_config(None, overrides), tmp_path / "in-process"))
    flower = rows(run(load_config(None, [*overrides, "run.runtime=flower-simulation"]), tmp_path / "flower"))
    assert len(flower) == len(local) == 4
    for a, b in zip(local, flower):
        for key in ("test_acc", "test_loss", "train_loss", *(k for k in a if "/" in k)):  # extra models too
            assert b[key] == pytest.approx(a[key], abs=1e-5), (case, a["round"], key)
        for key in ("bytes_up", "bytes_down", "local_steps", "clients", "uploaded"):
            assert b.get(key) == a.get(key), (case, a["round"], key)
    assert local[-1]["test_acc"] > local[0]["test_acc"]  # it learned something
    import ray

    from fedaccel.flower import warm_ray

    assert ray.is_initialized() and warm_ray._ours(), "the local Ray should stay up for the next simulation"


def rewriting_app(change: Callable[[int, Message], None]) -> ClientApp:
    """The fedaccel ClientApp, with ``change(client, reply)`` applied to every training reply."""
    app = ClientApp()

    @app.query("hello")
    def hello(message: Message, context: Context) -> Message:
        return fedaccel_client.hello(message, context)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        reply = fedaccel_client.train(message, context)
        change(int(context.node_config["partition-id"]), reply)
        return reply

    return app


def broken_app() -> ClientApp:
    """Client 1 uploads NaNs, client 2 an update of the wrong shape, client 3 JSON nested 100,000 deep,
    client 4 a tensor in its diagnostics; client 0 is honest."""

    def change(client: int, reply: Message) -> None:
        upload = unpack(reply.content, prefix=fedaccel_client.UPDATE)
        if client == 1:
            upload["delta"] = torch.full_like(upload["delta"], float("nan"))
        if client == 2:
            upload["delta"] = torch.zeros(3)
        if client == 4:
            upload["diag"] = {"gap": torch.ones(2)}
        pack(upload, into=reply.content, prefix=fedaccel_client.UPDATE)
        if client == 3:
            reply.content[fedaccel_client.UPDATE + "packed"]["json"] = "[" * 100_000 + "]" * 100_000

    return rewriting_app(change)


RAY_WRAPPED = """<class 'ray.exceptions.RayTaskError(ClientAppException)'>: ray::ClientAppActor.run() (pid=1, ip=0)
  File "mine.py", line 3, in load
    import no_such_module
ModuleNotFoundError: No module named 'no_such_module'

The above exception was the direct cause of the following exception:

  File "mine.py", line 9, in local_term
    raise ConfigError("loading mine failed") from exc
fedaccel.errors.ConfigError: loading mine failed

The above exception was the direct cause of the following exception:

flwr.clientapp.client_app.ClientAppException:
Exception ClientAppException occurred. Message: loading mine failed
'>"""


@settings(max_examples=200, deadline=None)
@given(reason=st.one_of(st.text(max_size=300), st.builds(lambda a, b: a + "\nThe above exception was the direct cause"
                                                            + b, st.text(max_size=100), st.text(max_size=100))))
def test_a_clients_error_is_said_as_its_own_exceptions_line(reason: str) -> None:
    """Flower wraps a simulated client's exception in Ray's traceback (300 characters of actor ids were all a
    row kept); the line said is the outermost of the client's own chain, a line of the reason or the reason
    itself, read from its end only: a hostile node's reason of 2 GB of newlines costs no list of its lines."""
    from fedaccel.flower.server import own_error

    said = own_error(reason)
    assert said == reason or (said in reason and "\n" not in said)


def test_the_outermost_line_of_a_clients_chain_is_said_and_a_huge_reason_costs_no_split() -> None:
    from fedaccel.flower.server import own_error

    assert own_error(RAY_WRAPPED) == "fedaccel.errors.ConfigError: loading mine failed"
    huge = "\n" * 100_000_000 + "The above exception was the direct cause"
    assert own_error(huge) is huge


def test_a_clients_traceback_is_its_own_frames_up_to_its_exception() -> None:
    """error.txt keeps a simulated client's traceback: its frames and exception, not Ray's wrapper after them."""
    from fedaccel.flower.server import client_traceback

    kept = client_traceback(RAY_WRAPPED.replace("ray::ClientAppActor", "\x1b[36mray::ClientAppActor\x1b[39m"))
    assert kept.startswith('  File "mine.py", line 3, in load\n')
    assert kept.endswith("fedaccel.errors.ConfigError: loading mine failed")
    assert "ClientAppException" not in kept and "\x1b" not in kept


@settings(max_examples=200, deadline=None)
@given(reason=st.one_of(st.text(max_size=300), st.builds(lambda a, b: a + "\nThe above exception was the direct cause"
                                                            + b, st.text(max_size=100), st.text(max_size=100))))
def test_a_clients_traceback_is_printable_lines_of_its_reasons_end(reason: str) -> None:
    """A node's reason is its own words: what error.txt keeps of it is printable, line by line, and bounded."""
    from fedaccel.flower.server import OWN_ERROR_WINDOW, client_traceback

    kept = client_traceback(reason)
    assert all(line.isprintable() for line in kept.split("\n")) and len(kept) <= min(len(reason), OWN_ERROR_WINDOW)


def nan_app() -> ClientApp:
    """Every client uploads NaNs (a method's bug)."""

    def change(_client: int, reply: Message) -> None:
        upload = unpack(reply.content, prefix=fedaccel_client.UPDATE)
        upload["delta"] = torch.full_like(upload["delta"], float("nan"))
        pack(upload, into=reply.content, prefix=fedaccel_client.UPDATE)

    return rewriting_app(change)


@pytest.mark.slow
def test_a_simulation_whose_every_answer_is_refused_stops_at_that_round(tmp_path: Path) -> None:
    """Every client's update is NaN: in process the model diverges and the run stops; a simulation's server refuses
    every answer and stops at that round too (it waited out 3 such rounds, as a deployment does, so a 2-round run
    ended "finished" with round 0's model), resumable."""
    import cloudpickle

    from fedaccel.runs.loop import Diverged

    cloudpickle.register_pickle_by_value(__import__(__name__))  # Ray workers cannot import tests/
    config = load_config(None, [*TINY, "train.rounds=2", "algorithm=fedavg", "run.runtime=flower-simulation"])
    with pytest.raises(Diverged, match=r"^the run stopped at round 1: the server refused the answer of every client "
                                       r"\(3; client \d: non-finite values"):
        simulate(config, tmp_path / "nan", client_app=nan_app())
    assert not (tmp_path / "nan" / "summary.json").exists()


@pytest.mark.slow
def test_broken_updates_are_rejected_with_a_reason_and_never_aggregated(tmp_path: Path) -> None:
    import cloudpickle

    cloudpickle.register_pickle_by_value(__import__(__name__))  # Ray workers cannot import tests/
    config = load_config(None, [*TINY, "train.rounds=1", "algorithm=fedavg", "data.clients=5",
                                "run.runtime=flower-simulation"])
    path = simulate(config, tmp_path / "broken", client_app=broken_app())
    last = rows(path)[-1]
    rejected = last["diag"]["rejected"]
    assert set(rejected) == {"1", "2", "3", "4"} and last["uploaded"] == 1
    assert "non-finite" in rejected["1"] and "shape (3,)" in rejected["2"]
    assert "nested 100000 deep" in rejected["3"] and "diagnostic 'gap'" in rejected["4"]
    assert np.isfinite(last["test_loss"])
    # only client 0's update was aggregated: the new global model is client 0's local model
    setup = build_setup(config)
    w0 = setup.federation.model.theta.clone()
    state = init_state(setup.algorithm, w0, 5)
    info = round_info(setup.federation, 0)
    ctx = ClientContext(info, 0, int(setup.federation.steps[0]), True)
    _, update = train_client(setup.algorithm, ctx, w0, state.server, state.clients[0], setup.federation)
    w1 = torch.load(path / "model.pt")["w"]
    torch.testing.assert_close(w1, w0 - update.delta, atol=1e-6, rtol=0)


def huge_app() -> ClientApp:
    """Client 1 uploads a finite delta of 3e38 per coordinate, of the right shape and dtype; the others are honest."""

    def change(client: int, reply: Message) -> None:
        if client == 1:
            upload = unpack(reply.content, prefix=fedaccel_client.UPDATE)
            upload["delta"] = torch.full_like(upload["delta"], 3e38)
            pack(upload, into=reply.content, prefix=fedaccel_client.UPDATE)

    return rewriting_app(change)


@pytest.mark.slow
def test_one_client_sending_3e38_cannot_stop_a_simulation(tmp_path: Path) -> None:
    """Issue 47, item 7: the aggregate overflowed and the run ended at round 1 ("the run diverged"). Now the
    upload is rejected by the norm bound every round, counted in the row, and the run finishes all rounds with
    the model the others' updates make (the in-process rounds without client 1)."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(__import__(__name__))  # Ray workers cannot import tests/
    config = load_config(None, [*TINY, "algorithm=fedavg", "run.runtime=flower-simulation"])
    assert_finished_without_client_1(simulate(config, tmp_path / "huge", client_app=huge_app()), config)


def assert_finished_without_client_1(path: Path, config: Any, rounds: int = 3, said: str = "") -> None:
    """Every round rejected client 1's upload by the norm bound and counted it; the run finished with the model
    of the in-process rounds without client 1. ``said``: what the run printed, shown when a check fails."""
    from test_gate import WithoutClient

    trained = rows(path)[1:]
    assert [row["round"] for row in trained] == list(range(1, rounds + 1)), said[-3000:]
    assert json.loads((path / "summary.json").read_text())["finished"]
    for row in trained:
        shown = json.dumps({k: v for k, v in row.items() if k in ("round", "uploaded", "rejected", "diag")})[:3000]
        assert row["uploaded"] == 2 and row["rejected"] == 1 and np.isfinite(row["test_loss"]), shown + said[-3000:]
        assert set(row["diag"]["rejected"]) == {"1"} and "run.norm_ceiling" in row["diag"]["rejected"]["1"], shown
    setup = build_setup(config)
    state = init_state(setup.algorithm, setup.federation.model.theta.clone(), setup.federation.n_clients)
    for _ in range(rounds):
        state, _ = run_round(setup.algorithm, state, setup.federation, fraction=setup.fraction, schedule=setup.schedule,
                             runtime=WithoutClient(setup.algorithm, setup.federation, state.clients))
    torch.testing.assert_close(torch.load(path / "model.pt")["w"], state.w, atol=1e-5, rtol=0)


def test_wire_round_trip_and_refusals() -> None:  # the gate: tests/test_gate.py
    from fedaccel.algorithms.fedumf import FedUMFClient

    value = (None, {"c": torch.arange(3.0)}, FedUMFClient(torch.ones(2), 0.1, 4), [1, 2.5, "x"], (True,))
    back = unpack(pack(value))
    assert back[0] is None and torch.equal(back[1]["c"], torch.arange(3.0))
    assert isinstance(back[2], FedUMFClient) and torch.equal(back[2].update, torch.ones(2))
    assert back[2].update_lr == 0.1 and back[2].authorised_round == 4 and back[3] == [1, 2.5, "x"] and back[4] == (True,)
    records = pack({"x": 1})
    records["packed"]["json"] = json.dumps({"$dc": "os:system"})  # a hostile peer naming any callable
    with pytest.raises(BadMessage, match="refusing"):
        unpack(records)
    records["packed"]["json"] = json.dumps({"$t": "0", "dtype": "object", "shape": [1]})  # no object arrays
    with pytest.raises(BadMessage, match="dtype"):
        unpack(records)
    records["packed"]["json"] = json.dumps({"$t": "0", "dtype": "float32", "shape": [2]})
    records["packed"]["0"] = b"\x00" * 4  # fewer bytes than the shape says
    with pytest.raises(BadMessage, match="size"):
        unpack(records)
    big = unpack(pack({"w": torch.arange(300_000.0)}))["w"]  # 1.2 MB: a Flower Array, chunked by Flower
    assert torch.equal(big, torch.arange(300_000.0))


class SilentAndGoneGrid:
    """Node 10 never answers; node 11 is declared gone by the SuperLink ``after`` s into the wait
    (the error reply as flwr's SuperLink makes it: from no node, only naming the message it answers); a message
    to node 12 the SuperLink does not take (an empty id: it knows the node gone)."""

    def __init__(self, after: float) -> None:
        from flwr.server.superlink.linkstate.utils import create_message_error_unavailable_res_message

        self.after, self.pushed, self.started = after, {}, 0.0
        self.unavailable = create_message_error_unavailable_res_message  # imported before the clock runs

    def push_messages(self, messages: list[Message]) -> list[str]:
        import time

        ids = []
        for k, message in enumerate(messages):
            message.metadata.__dict__["_message_id"] = f"m{k}"
            self.pushed[f"m{k}"] = message
            ids.append("" if message.metadata.dst_node_id == 12 else f"m{k}")
        self.started = time.monotonic()
        return ids

    def pull_messages(self, ids: set[str]) -> list[Message]:
        import time

        if time.monotonic() - self.started < self.after:
            return []
        return [self.unavailable(m.metadata, "node_unavail")
                for i, m in self.pushed.items() if i in ids and m.metadata.dst_node_id == 11]


@pytest.mark.slow
def test_a_deployed_round_says_how_long_it_waited_for_a_silent_client_and_when_a_node_was_found_gone(
    capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SuperLink's "node unavailable" reply comes from no node: it is matched by the message it
    answers, and each loss is said with the time it really took (not run.timeout for both)."""
    import re

    from flwr.supercore.task_identity import TaskIdentity

    from fedaccel.flower.server import FlowerClients

    for name in ("_run_id", "_task_id", "_node_id"):  # what a ServerApp process has
        monkeypatch.setattr(TaskIdentity, name, 1)

    setup = build_setup(load_config(None, TINY))
    state = init_state(setup.algorithm, setup.federation.model.theta.clone(), 3)
    info = round_info(setup.federation, 0)
    contexts = [ClientContext(info, client, 3, True) for client in (0, 1, 2)]
    runtime = FlowerClients(SilentAndGoneGrid(after=0.3), setup, {0: 10, 1: 11, 2: 12},  # type: ignore[arg-type]
                            timeout=1.5)
    updates, diag = runtime.train(contexts, state.w, state.server)
    assert updates == [] and diag == {"lost": [0, 1, 2]}
    err = capsys.readouterr().err
    silent = re.search(r"round 1: no answer from client\(s\) \[0\] in (\d+\.\d) s \(run.timeout\)", err)
    gone = re.search(r"round 1: client\(s\) \[1, 2\] lost: the SuperLink found their node gone \(no heartbeat\) "
                     r"(\d+\.\d) s into the round", err)
    assert silent and gone, err  # client 2's undelivered message was "no answer in 0.2 s (run.timeout)"
    assert 1.5 <= float(silent.group(1)) < 3.0 and 0.3 <= float(gone.group(1)) < 1.0, err
    # the next round loses them again: in its row, not in another line each (a lost client was said every round)
    updates, diag = runtime.train(contexts, state.w, state.server)
    assert diag == {"lost": [0, 1, 2]} and "round" not in capsys.readouterr().err


def test_the_deployed_server_app_holds_the_run_folder_lock_while_it_writes(tmp_path: Path, capsys) -> None:
    """The ServerApp is the process that writes a deployed run: it takes the folder's lock, so a
    second writer (here this process, through another open) makes it stop with one line."""
    from types import SimpleNamespace

    from fedaccel.flower.apps import main as server_main
    from fedaccel.flower.security import RUN_TOKEN, SECRETS, read_secret, write_secrets
    from fedaccel.runs.lock import lock_run_dir

    run_dir = tmp_path / "run"
    write_secrets(run_dir / "flower", run_dir)  # the deployment's own run: its run token
    own = {"run-dir": str(run_dir), "run-token": read_secret(run_dir / "flower" / SECRETS / RUN_TOKEN)}
    with lock_run_dir(run_dir):
        server_main(None, SimpleNamespace(run_config=own))  # type: ignore[arg-type]
    assert capsys.readouterr().err.strip() == (f"fedaccel server: error: {run_dir} is being written by process "
                                               f"{os.getpid()}; wait for it to end (or stop it), then run again")
    assert not (run_dir / "metrics.jsonl").exists()


def test_the_deployed_server_app_on_a_finished_run_says_so_and_changes_nothing(tmp_path: Path, capsys) -> None:
    """The same `flwr run` again after a manual deployment finished said "resuming after round 5" and "rounds
    6-5"; it says the run is finished, as `fedaccel run --resume` does, and touches nothing."""
    from types import SimpleNamespace

    from fedaccel.flower.apps import main as server_main
    from fedaccel.flower.security import RUN_TOKEN, SECRETS, read_secret, write_secrets

    run_dir = run(load_config(None, ["data.dataset=digits", "model=softmax", "data.clients=2", "train.rounds=2",
                                     "run.progress=false"]), tmp_path / "run")
    write_secrets(run_dir / "flower", run_dir)
    before = {f: f.read_bytes() for f in run_dir.rglob("*") if f.is_file()}
    capsys.readouterr()
    own = {"run-dir": str(run_dir), "run-token": read_secret(run_dir / "flower" / SECRETS / RUN_TOKEN)}
    server_main(None, SimpleNamespace(run_config=own))  # type: ignore[arg-type]  # no grid: nothing to serve
    assert f"{run_dir} is already finished (round 2 of 2): nothing to resume" in capsys.readouterr().err
    assert {f: f.read_bytes() for f in run_dir.rglob("*") if f.is_file()} == before


# SCAFFOLD deployed (its client controls on the nodes) gives the in-process numbers in the kill -9
# and Ctrl-C test below, every round, through a --resume too; BHerd in the TLS test (a deployment less)
DEPLOYED = {  # with a server optimiser: its state on the server, its numbers the in-process ones
    "fedumf-yogi": ["algorithm=fedumf", "train.client_fraction=0.5", "algorithm.server_opt={name: yogi, lr: 0.05}"],
}


@pytest.mark.parametrize("case", sorted(DEPLOYED))
@pytest.mark.slow
def test_deploy_on_loopback_gives_the_in_process_numbers_and_stops_its_processes(case: str, tmp_path: Path) -> None:
    """`fedaccel deploy`: a real SuperLink and two SuperNode processes on 127.0.0.1, bounded in time."""
    from fedaccel.cli import main

    overrides = [*TINY, "data.clients=2", "train.rounds=2", *DEPLOYED[case], "run.timeout=120"]
    local = rows(run(load_config(None, overrides), tmp_path / "in-process"))
    argv = ["deploy", "--clients", "2", "--out", str(tmp_path / "deployed"), "--timeout", "400"]
    for item in overrides:
        argv += ["--set", item]
    assert main(argv) == 0
    deployed = rows(tmp_path / "deployed")
    for a, b in zip(local, deployed, strict=True):
        for key in ("test_acc", "test_loss", "bytes_up", "local_steps"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["round"], key)
    flower = tmp_path / "deployed" / "flower"
    assert sorted(p.name for p in flower.glob("*.log")) == ["flwr-run.log", "superlink.log", "supernode0.log",
                                                            "supernode1.log"]
    for node in ("supernode0.log", "supernode1.log"):  # one warm ClientApp per SuperNode served all 3 messages
        assert (flower / node).read_text().count("built the run's setup") == 1
    assert not live_flower_processes(within=tmp_path), "processes left running"


def live_flower_processes(within: Path | None = None) -> list[str]:
    """Command lines of Flower processes that are alive (zombies, already dead, do not count);
    ``within``: only those whose command line or working directory is under that folder (other
    people's runs on a shared machine do not count)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(stat.parent / "cwd") if within else ""
        except (OSError, IndexError):
            continue
        names = ("flower-superlink", "flower-supernode", "flower-superexec", "flwr-serverapp", "flwr-clientapp",
                 "fedaccel.flower.node", "fedaccel.flower.link")
        if state != "Z" and any(name in cmdline for name in names) and (
                within is None or str(within) in cmdline or cwd.startswith(str(within))):
            found.append(cmdline)
    return found


@pytest.mark.slow
def test_a_client_killed_mid_run_is_lost_and_the_run_goes_on(tmp_path: Path) -> None:
    """Kill SuperNode 2 (its ClientApp runs inside) after round 1: later rounds wait run.timeout, record
    the client as lost (or its node as unavailable), aggregate the others and finish."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "deployed"
    overrides = [*TINY, "data.clients=3", "train.rounds=3", "algorithm=fedavg", "run.timeout=5"]
    argv = [sys.executable, "-m", "fedaccel.cli", "deploy", "--clients", "3", "--out", str(out), "--timeout", "400"]
    for item in overrides:
        argv += ["--set", item]
    deploy = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (
            (out / "metrics.jsonl").is_file() and len(rows(out)) >= 2
        ):
            assert deploy.poll() is None, deploy.stdout.read() if deploy.stdout else ""
            time.sleep(0.2)
        victims = [cmd for cmd in live_flower_processes(within=tmp_path) if "partition-id=2" in cmd]
        assert victims, "SuperNode 2 not found"
        for stat in Path("/proc").glob("[0-9]*/cmdline"):
            cmdline = stat.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            try:
                ours = str(tmp_path) in cmdline or os.readlink(stat.parent / "cwd").startswith(str(tmp_path))
            except OSError:
                continue
            if ours and "fedaccel.flower.node" in cmdline and "partition-id=2" in cmdline:
                node = int(stat.parent.name)  # the client host "dies": its SuperNode and children
                for pid in [*descendants({node}), node]:
                    os.kill(pid, signal.SIGKILL)
        output, _ = deploy.communicate(timeout=300)
    finally:
        if deploy.poll() is None:
            deploy.kill()
    assert deploy.returncode == 0, output
    metrics = rows(out)
    assert [r["round"] for r in metrics] == [0, 1, 2, 3]
    later = [r.get("diag", {}) for r in metrics[2:]]
    missing = [set(d.get("lost", [])) | {int(c) for c in d.get("rejected", {})} for d in later]
    # round 2 was under way when the node died (it may have answered already); round 3 misses it
    assert missing[0] in ({2}, set()) and missing[1:] == [{2}], missing
    # uploaded: the updates aggregated (all three in round 1, then without the lost client)
    assert [r["uploaded"] for r in metrics[1:]] == [3, *(3 - len(m) for m in missing)], metrics
    waits = [float(t) for t in re.findall(r"no answer from client\(s\) \[2\] in (\d+\.\d) s \(run.timeout\)", output)]
    assert all(5.0 <= t < 10.0 for t in waits), output  # the time it waited: run.timeout, said as measured
    assert metrics[-1]["test_acc"] > metrics[0]["test_acc"]
    assert not live_flower_processes(within=tmp_path)


def numpy_client_app() -> ClientApp:
    """A client written with Flower's public API and NumPy only (no fedaccel, no torch): softmax
    regression on its own third of scikit-learn's digits, Flower's convention of answering
    ``train`` with its new model in ``arrays``. It knows the model's layout (W: 10 x 64, then b)."""
    app = ClientApp()

    @app.train()
    def train(message: Message, context: Context) -> Message:
        from flwr.app import RecordDict
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        part = int(context.node_config["partition-id"])
        x, y = x[part::3] / 16.0, y[part::3]
        w = message.content["arrays"]["w"].numpy().astype(np.float64)
        weight, bias = w[:640].reshape(10, 64), w[640:]
        for step in range(int(message.content["config"]["steps"])):
            batch = slice((step * 20) % len(y), (step * 20) % len(y) + 20)
            logits = x[batch] @ weight.T + bias
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(len(p)), y[batch]] -= 1.0
            weight -= 0.1 * p.T @ x[batch] / len(p)
            bias -= 0.1 * p.mean(axis=0)
        new = np.concatenate([weight.ravel(), bias]).astype(np.float32)
        reply = RecordDict({"arrays": ArrayRecord({"w": Array(new)})})
        return Message(reply, reply_to=message)

    return app


@pytest.mark.slow
def test_a_numpy_only_flower_client_joins_a_fedavg_federation(tmp_path: Path) -> None:
    import cloudpickle

    cloudpickle.register_pickle_by_value(__import__(__name__))
    config = load_config(None, [*TINY, "algorithm=fedavg", "run.runtime=flower-simulation"])
    metrics = rows(simulate(config, tmp_path / "numpy", client_app=numpy_client_app()))
    assert [r["uploaded"] for r in metrics[1:]] == [3, 3, 3]
    assert not any("rejected" in r.get("diag", {}) or "lost" in r.get("diag", {}) for r in metrics)
    assert metrics[-1]["test_acc"] > 0.6 > metrics[0]["test_acc"]


def listening(address: str) -> bool:
    """Whether something accepts TCP connections at ``HOST:PORT``."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
        return True
    except OSError:
        return False


ROGUE_APP = {  # a Flower App of someone else's: its ServerApp, if started, leaves a mark and reads the node IDs
    "pyproject.toml": """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "rogue"
version = "1.0.0"

[tool.flwr.app]
publisher = "rogue"

[tool.flwr.app.components]
serverapp = "rogue_app:server"
clientapp = "rogue_app:client"

[tool.flwr.app.config]
mark = ""
""",
    "rogue_app.py": """from pathlib import Path

from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

server = ServerApp()
client = ClientApp()


@server.main()
def main(grid, context):
    Path(context.run_config["mark"]).write_text(str(list(grid.get_node_ids())))
""",
}


def rogue_attempts(address: str, certs: Path, out: Path, env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """What someone else on this host, with the deployment's public ca.crt, gets from its SuperLink
    at ``address``: a `flwr run` of their own app, and of fedaccel's app on the deployment's run
    folder (the Control API); a claim of the run's ServerApp task (the Runtime API); and what a
    connection to the port on this host's other address gets."""
    import socket
    import ssl
    import subprocess

    import httpx

    from fedaccel.flower.deploy import _tool

    rogue, home = tmp_path / "rogue", tmp_path / "rogue-home"
    for folder in (rogue, home):
        folder.mkdir()
    for name, text in ROGUE_APP.items():
        (rogue / name).write_text(text)
    (home / "config.toml").write_text(f'[superlink]\ndefault = "x"\n\n[superlink.x]\naddress = "{address}"\n'
                                      f'root-certificates = "{certs / "ca.crt"}"\n')
    said = {}
    for name, app, config in (("own app", rogue, f"mark='{tmp_path / 'rogue-ran'}'"),
                              ("fedaccel's app", out / "flower" / "app", f"run-dir='{out}'")):
        done = subprocess.run([_tool("flwr"), "run", str(app), "x", "--run-config", config],
                              env={**env, "FLWR_HOME": str(home)}, capture_output=True, text=True, timeout=120)
        said[name] = f"exit {done.returncode}: {done.stdout}{done.stderr}"
    tls = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    answer = httpx.post(f"https://{address}/v1/runtime/acquire-task", content=b"", verify=tls,
                        headers={"content-type": "application/protobuf"})
    said["acquire-task"] = f"{answer.status_code} {answer.text}"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # this host's address on its network, if any
        try:
            probe.connect(("10.255.255.255", 1))
            own = probe.getsockname()[0]
        except OSError:
            own = "127.0.0.1"
    if own != "127.0.0.1":
        said["other address"] = "accepted" if listening(f"{own}:{address.rpartition(':')[2]}") else "refused"
    return said


@pytest.mark.slow
def test_tls_deployment_refuses_a_supernode_whose_key_was_not_registered(tmp_path: Path) -> None:
    """`fedaccel certs` + `fedaccel deploy --tls`: the run goes over TLS with registered SuperNode
    keys; a SuperNode with a key of its own (or none) is refused by the SuperLink. Someone else
    with the public ca.crt drives nothing (issue 29): their `flwr run` (their app, or fedaccel's
    on the deployment's run folder) is refused by the Control API, their claim of the run's
    ServerApp task by the Runtime API, the port is not open on another address, and the run ends
    with the in-process numbers (of BHerd, once a loopback test of its own)."""
    import os
    import re
    import subprocess
    import sys
    import time

    from fedaccel.cli import main
    from fedaccel.flower.deploy import ENV, _tool, free_port
    from fedaccel.flower.security import node_key

    certs = tmp_path / "tls"
    assert main(["certs", str(certs), "--clients", "2"]) == 0
    intruder = node_key(tmp_path / "intruder_key")
    out = tmp_path / "deployed"
    # the refused SuperNodes knock while the deployment starts (its own SuperNodes and ServerApp take
    # seconds); rounds enough that it still runs when they have been refused (about 2 s each, side by side)
    overrides = [*TINY, "data.clients=2", "train.rounds=20", "algorithm=bherd", "algorithm.alpha=0.5"]
    local = rows(run(load_config(None, overrides), tmp_path / "in-process"))
    argv = [sys.executable, "-m", "fedaccel.cli", "deploy", "--tls", str(certs), "--clients", "2",
            "--out", str(out), "--timeout", "400"]
    for item in overrides:
        argv += ["--set", item]
    mark = f"FEDACCEL_TEST_MARK={tmp_path}"  # inherited by every process this test starts, orphans too
    deploy = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "FEDACCEL_TEST_MARK": str(tmp_path)})
    refused: dict[str, tuple[int, str]] = {}
    nodes: dict[str, subprocess.Popen] = {}
    try:
        deadline = time.monotonic() + 300
        address = ""
        while time.monotonic() < deadline and not (address and listening(address)):
            assert deploy.poll() is None, deploy.stdout.read() if deploy.stdout else ""
            time.sleep(0.1)
            toml = out / "flower" / "home" / "config.toml"
            found = re.search(r'address = "([^"]+)"', toml.read_text()) if toml.is_file() else None
            address = found.group(1) if found else ""
        env = {**os.environ, **ENV, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
               "FEDACCEL_TEST_MARK": str(tmp_path)}
        for name, key in (("intruder", ["--auth-supernode-private-key", str(intruder)]), ("keyless", [])):
            (tmp_path / name).mkdir()
            with open(tmp_path / name / "supernode.log", "w") as sink:  # `process`: no children of its own
                nodes[name] = subprocess.Popen(
                    [_tool("flower-supernode"), "--root-certificates", str(certs / "ca.crt"), "--superlink", address,
                     "--host", "127.0.0.1", "--port", str(free_port()), "--max-retries", "2", "--isolation", "process",
                     "--node-config", "partition-id=1 num-partitions=2", *key],
                    env={**env, "FLWR_HOME": str(tmp_path / name)}, stdout=sink, stderr=subprocess.STDOUT)
        rogue = rogue_attempts(address, certs, out, env, tmp_path)
        for name, node in nodes.items():
            refused[name] = (node.wait(timeout=120), (tmp_path / name / "supernode.log").read_text())
        assert deploy.poll() is None, "the deployment ended before the refused SuperNodes and the rogue were refused"
        output, _ = deploy.communicate(timeout=300)
    finally:
        for process in [deploy, *nodes.values()]:
            if process.poll() is None:
                process.kill()
    assert deploy.returncode == 0, output
    for name in ("own app", "fedaccel's app"):
        assert rogue[name].startswith("exit 1") and "Authentication failed" in rogue[name], rogue
    assert rogue["acquire-task"].startswith("401") and "Authentication failed" in rogue["acquire-task"], rogue
    assert rogue.get("other address", "refused") == "refused", rogue
    assert not (tmp_path / "rogue-ran").exists()  # no code of theirs ran
    assert "Successfully started run" in (out / "flower" / "flwr-run.log").read_text()  # the deployment's own did
    deployed = rows(out)
    assert len(deployed) == 21
    for a, b in zip(local, deployed, strict=True):
        for key in ("test_acc", "test_loss", "bytes_up", "local_steps"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["round"], key)
    for name, (code, log) in refused.items():
        assert code != 0, (name, log[-500:])
        assert "Exit Code: 305" in log, (name, log[-500:])  # "Failed to activate" / "must be registered"

    def ours(proc: Path) -> str | None:  # alive, started by this test (its mark in the environment): the command
        try:
            alive = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            marked = mark.encode() in (proc / "environ").read_bytes().split(b"\0")
            return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode() if alive and marked else None
        except (OSError, IndexError):
            return None

    left = [cmd for proc in Path("/proc").glob("[0-9]*") if (cmd := ours(proc))]  # other people's Flower: unmarked
    assert not left + live_flower_processes(within=tmp_path), "processes this test started are left running"


@pytest.mark.slow
def test_a_deployment_stopped_by_ctrl_c_then_killed_with_sigkill_resumes_with_the_clients_state(tmp_path: Path) -> None:
    """One SCAFFOLD deployment (client controls c_i on the nodes) stopped twice, then finished; once
    two tests, each paying for a deployment of its own (minutes on 2 cores).

    1. SIGINT to `fedaccel deploy` during the rounds (no checkpoint due by rhythm): the run finishes
       its round, checkpoints it, the nodes keep their clients' states of it, every process stops,
       and it names the folder and `fedaccel deploy --resume`. Meanwhile its first lines were the run
       line and what it starts, stderr showed `fedaccel run`'s progress bar, and the stream one line
       per round.
    2. kill -9 of the `deploy --resume` that follows, once it checkpointed by rhythm (the server host
       crashes): within seconds no process it started lives (Flower's own SuperExec and ServerApp
       included); meanwhile the ServerApp held the run folder's lock (it writes the run).
    3. `deploy --resume` ends the run from its last checkpoint with every round once, in order, and
       the uninterrupted run's numbers: SCAFFOLD's client controls c_i came back from each
       SuperNode's state-dir, through both stops."""
    import re
    import signal
    import subprocess
    import sys
    import time
    from collections.abc import Callable

    from fedaccel.cli import main

    # SIGINT after round 3 (3 rounds before the rhythm's checkpoint at 7), kill -9 after round 8, 4 rounds left
    rounds, every = 12, 7
    overrides = [*TINY, "data.clients=2", f"train.rounds={rounds}", "algorithm=scaffold",
                 f"run.checkpoint_every={every}"]
    local = rows(run(load_config(None, overrides), tmp_path / "in-process"))
    out = tmp_path / "deployed"

    def wait_for_rows(process: subprocess.Popen, count: int, said: Callable[[], str]) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not ((out / "metrics.jsonl").is_file() and len(rows(out)) >= count):
            assert process.poll() is None, said()
            time.sleep(0.1)

    # 1. Ctrl-C
    argv = [sys.executable, "-m", "fedaccel.cli", "deploy", "--clients", "2", "--out", str(out), "--timeout", "400"]
    for item in [*overrides, "run.progress=true"]:
        argv += ["--set", item]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_rows(first, 4, lambda: str(first.communicate()))
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    stopped_at = torch.load(out / "checkpoint.pt", weights_only=True)["state"]["round"]
    assert first.returncode == 130, stderr[-2000:]
    assert stderr.splitlines()[-1] == (f"interrupted by SIGINT; `fedaccel deploy --resume {out}` continues "
                                       f"after round {stopped_at}")
    assert 2 <= stopped_at < every and rows(out)[-1]["round"] == stopped_at and not (out / "summary.json").exists()
    assert not live_flower_processes(within=tmp_path)
    lines = [line for line in stderr.splitlines()
             if not line.startswith("reading ")]  # said when loading the config takes seconds (a loaded machine)
    assert lines[0].startswith(f"scaffold: model softmax (each SuperNode builds it), 2 clients, rounds 1-{rounds} -> "
                               f"{out.resolve()} [runtime flower-deployment"), lines[:3]
    assert lines[1] == "starting SuperLink and 2 SuperNodes", lines[:3]
    assert "\r" not in stderr  # into a pipe: lines, never a redrawn bar (the bar is for a terminal, as in process)
    assert "fedaccel server: round" not in stderr  # the ServerApp's round lines go to its log, not here
    stream = (out / "flower" / "flwr-run.log").read_text()
    assert re.search(rf"^fedaccel server: round 2/{rounds}  test_acc 0\.\d{{4}}  \(\d+\.\d s\)$", stream, re.M), stream[-2000:]

    # 2. kill -9 of the resumed deployment
    with open(tmp_path / "stderr.txt", "w") as sink:
        second = subprocess.Popen([sys.executable, "-m", "fedaccel.cli", "deploy", "--resume", str(out), "--timeout",
                                   "400"], stdout=subprocess.DEVNULL, stderr=sink, start_new_session=True)
    started: list[int] = []
    try:
        wait_for_rows(second, every + 2, lambda: (tmp_path / "stderr.txt").read_text()[-2000:])
        started = descendants({second.pid})
        commands = {pid: command_line(pid) for pid in started}
        for name in ("fedaccel.flower.link", "flower-superexec", "flwr-serverapp", "flwr run"):
            assert any(name in c for c in commands.values()), (name, commands)
        assert sum("fedaccel.flower.node" in c for c in commands.values()) == 2, commands
        holder = int((out / ".lock").read_text())
        assert "flwr-serverapp" in command_line(holder), command_line(holder)  # the writer holds the lock
        os.kill(second.pid, signal.SIGKILL)
        second.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and [pid for pid in started if alive(pid)]:
            time.sleep(0.1)
        assert not [commands[pid] for pid in started if alive(pid)], "processes of the killed deployment live on"
    finally:
        for pid in [second.pid, *started]:  # leave nothing behind when the test fails
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert not (out / "summary.json").exists(), "killed after the run ended"
    assert torch.load(out / "checkpoint.pt", weights_only=True)["state"]["round"] >= every  # the rhythm's, not SIGINT's

    # 3. the end
    assert main(["deploy", "--resume", str(out), "--timeout", "400", "--no-progress"]) == 0
    resumed = rows(out)
    assert [r["round"] for r in resumed] == list(range(rounds + 1))
    for a, b in zip(local, resumed, strict=True):
        for key in ("test_acc", "test_loss", "bytes_up", "local_steps"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["round"], key)
    assert not live_flower_processes(within=tmp_path)


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Whether any thread of ``pid`` still runs: a killed process whose first thread is already a
    zombie may still have a thread finishing (an fsync, say), and its files (a lock) stay open."""
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
                return True
        except (OSError, IndexError):
            continue
    return False


@pytest.mark.slow
def test_deploy_resume_is_refused_with_one_line_while_another_process_writes_the_run(tmp_path: Path, capsys) -> None:
    """An orphaned writer (here a process holding the run folder's lock, as a ServerApp does)
    makes `deploy --resume` stop at once with one line naming it; nothing is started."""
    import subprocess
    import sys

    from fedaccel.cli import main
    from fedaccel.flower.deploy import prepare

    out = tmp_path / "run"
    argv = ["deploy", "--prepare", "--out", str(out)]
    for item in [*TINY, "data.clients=2"]:
        argv += ["--set", item]
    assert main(argv) == 2  # a run folder for other hosts: only with TLS and registered keys
    ours = [line for line in capsys.readouterr().err.splitlines() if "ClientAppActor" not in line]  # not Ray's late lines
    assert ours and ours[0].startswith("error: --prepare needs --tls DIR: SuperNodes on other hosts join ")
    prepare(load_config(None, [*TINY, "data.clients=2", "run.runtime=flower-deployment"]), out.resolve())  # as deploy
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from fedaccel.runs.lock import lock_run_dir; "
         "lock = lock_run_dir(sys.argv[1]); print('locked', flush=True); time.sleep(120)", str(out)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        code = main(["deploy", "--resume", str(out), "--timeout", "60"])
    finally:
        holder.kill()
        holder.wait()
    assert code == 2
    ours = [line for line in capsys.readouterr().err.splitlines() if "ClientAppActor" not in line]  # not a warm
    assert ours == [(f"error: {out.resolve()} is being written by process {holder.pid}; "  # Ray's late log lines
                     "wait for it to end (or stop it), then run again")]
    assert not (out / "flower" / "superlink.log").exists() and not live_flower_processes(within=tmp_path)


def test_deploy_refuses_clients_that_disagree_with_data_clients(tmp_path: Path, capsys) -> None:
    """`--clients` is checked against data.clients, as its help says: a mismatch is one line, no folder."""
    import yaml

    from fedaccel.cli import main

    config = tmp_path / "five.yaml"
    config.write_text(yaml.safe_dump({"data": {"dataset": "digits", "clients": 5}, "model": "softmax"}))
    for extra in (["--prepare"], ["--timeout", "30"]):
        assert main(["deploy", str(config), "--clients", "3", "--out", str(tmp_path / "run"), *extra]) == 2
        assert capsys.readouterr().err.strip() == (
            "error: --clients 3 but data.clients = 5 (one SuperNode per client): --set data.clients=3, "
            "or leave --clients out")
        assert not (tmp_path / "run").exists()


class ScriptedGrid:
    """A Grid whose connected nodes change over time: ``script[k]`` answers the k-th poll (the
    last one answers every later poll)."""

    def __init__(self, script: list[list[int]]) -> None:
        self.script, self.polls = script, 0

    def get_node_ids(self) -> list[int]:
        self.polls += 1
        return self.script[min(self.polls - 1, len(self.script) - 1)]


@pytest.mark.slow
def test_waiting_for_supernodes_says_how_many_once_per_change_and_fails_in_one_line(capsys) -> None:
    from fedaccel.errors import UserError
    from fedaccel.flower.server import wait_for_nodes

    grid = ScriptedGrid([[7], [7], [7, 8, 9]])  # one of two, then one too many
    with pytest.raises(UserError) as failed:
        wait_for_nodes(grid, 2, timeout=1.0, quiet=0.0)  # type: ignore[arg-type]
    # only fedaccel's lines: Ray's log monitor of an earlier simulation in this worker may print in between
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fedaccel server:")]
    assert lines == [
        "fedaccel server: 1 of 2 SuperNodes connected (data.clients = 2); waiting up to 1 s",
        "fedaccel server: 3 SuperNodes connected, more than data.clients = 2 (one per client, partition-id 0..1); "
        "waiting up to 1 s",
    ]
    assert str(failed.value) == ("3 SuperNodes connected, more than data.clients = 2 (one per client, partition-id "
                                 "0..1) after 1 s: start one SuperNode per client, or set data.clients to the number "
                                 "of SuperNodes")
    assert grid.polls > 3  # it kept polling, and said nothing more while the count stayed


def run_prepared(tmp_path: Path, capsys, overrides: list[str], nodes: int, *, clients: int | None = None,
                 own_code: dict[int, str] | None = None, connect_timeout: int | None = None) -> tuple[Path, str]:
    """`fedaccel deploy --prepare --tls` for ``clients`` SuperNodes (default: ``nodes``), then its printed
    commands run as printed (the SuperLink on loopback): ``nodes`` SuperNodes registered and started, node i
    running the script ``own_code[i]`` in place of ``fedaccel.flower.node`` (a participant's own code), then
    `flwr run`. Returns the run folder and what `flwr run` streamed."""
    import shlex
    import subprocess
    import sys
    import time

    from fedaccel.cli import main
    from fedaccel.flower.deploy import ENV, Processes, free_port, wait_for_port

    clients, own_code = clients or nodes, own_code or {}
    run_dir, certs, port = tmp_path / "run", tmp_path / "tls", free_port()
    assert main(["certs", str(certs), "--clients", str(clients)]) == 0
    argv = ["deploy", "--prepare", "--tls", str(certs), "--port", str(port), "--out", str(run_dir)]
    for item in [*overrides, f"data.clients={clients}"]:
        argv += ["--set", item]
    assert main(argv) == 0
    printed = dict(line.split(":  ", 1) for line in capsys.readouterr().out.splitlines() if ":  " in line)
    assert f"partition-id=<i> num-partitions={clients}" in printed["client host <i> (with ca.crt and node<i>_key)"]
    assert (run_dir / "config.yaml").is_file()

    def command(where: str, **replace: str) -> tuple[dict[str, str], list[str]]:  # (environment, argv) as printed
        words = shlex.split(printed[where])
        env = dict(w.split("=", 1) for w in words if w.startswith("FLWR_HOME="))
        words = [w for w in words if not w.startswith("FLWR_HOME=")]
        for old, value in replace.items():
            words = [w.replace(old, value) for w in words]
        return env, [sys.executable if w == "python" else w for w in words]

    env = {**os.environ, **ENV, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    procs = Processes(tmp_path, env)
    try:
        _, link_argv = command("server host")
        link_argv[link_argv.index("0.0.0.0")] = "127.0.0.1"  # this test's SuperLink: loopback
        link = procs.start("superlink", link_argv, cwd=tmp_path)
        wait_for_port(port, link, "the SuperLink")
        for i in range(nodes):
            home, register = command(f"server host, <i> = 0..{clients - 1}", **{"<i>": str(i)})
            done = subprocess.run(register, env={**env, **home}, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
            _, node = command("client host <i> (with ca.crt and node<i>_key)", **{
                "node<i>_key": str(certs / f"node{i}_key"), "ca.crt": str(certs / "ca.crt"), "SERVER": "127.0.0.1",
                "9094": str(free_port()), "partition-id=<i>": f"partition-id={i}",
                "/var/tmp/fedaccel": str(tmp_path / f"state{i}")})
            if i in own_code:
                at = node.index("-m")
                node[at:at + 2] = [own_code[i]]
            procs.env = {**env, "FLWR_HOME": str(tmp_path / f"node{i}")}
            procs.start(f"supernode{i}", node, cwd=tmp_path)
        deadline = time.monotonic() + 120
        while (tmp_path / "superlink.log").read_text().count("Activated node_id") < nodes and time.monotonic() < deadline:
            time.sleep(0.2)
        home, run_argv = command("then, on the server host")
        if connect_timeout is not None:
            with open(run_argv[-1], "a") as run_config:  # the printed run config, with a short wait
                run_config.write(f"connect-timeout = {connect_timeout}\n")
        procs.env = {**env, **home}
        runner = procs.start("flwr-run", run_argv)
        runner.wait(timeout=240)
    finally:
        procs.stop()
    return run_dir, (tmp_path / "flwr-run.log").read_text()


@pytest.mark.slow
def test_a_prepared_run_with_too_few_supernodes_says_so_within_seconds_and_fails_in_one_line(
    tmp_path: Path, capsys
) -> None:
    """`fedaccel deploy --prepare --tls` makes the run folder for SuperNodes on other hosts and
    prints the commands; run as printed (the SuperLink on loopback here), with one registered
    SuperNode and data.clients = 2, the `flwr run` streams the node count after a few seconds of
    waiting, and at the deadline one error line."""
    _, stream = run_prepared(tmp_path, capsys, [*TINY, "algorithm=fedavg"], nodes=1, clients=2, connect_timeout=6)
    waiting = "fedaccel server: 1 of 2 SuperNodes connected (data.clients = 2); waiting up to 6 s"
    error = ("fedaccel server: error: 1 of 2 SuperNodes connected (data.clients = 2) after 6 s: start one SuperNode "
             "per client, or set data.clients to the number of SuperNodes")
    assert waiting in stream and error in stream, stream[-2000:]
    assert stream.index(waiting) < stream.index(error)  # said after QUIET (3 s), before the 6 s deadline
    assert stream.count("SuperNodes connected") == 2 and "Traceback" not in stream, stream[-2000:]
    assert not live_flower_processes(within=tmp_path)


@pytest.mark.slow
def test_one_client_sending_3e38_cannot_stop_a_deployment(tmp_path: Path, capsys) -> None:
    """Issue 47, item 7, on a deployment: three SuperNodes on other "hosts" (processes joined with TLS and
    node keys, as `deploy --prepare` prints), SuperNode 1 running its own code that uploads 3e38 per
    coordinate every round (tests/hostile_node.py). The gate's norm bound rejects it every round, the row
    counts it, and the run finishes every round with the model the two honest clients' updates make."""
    overrides = [*TINY, "algorithm=fedavg"]
    run_dir, stream = run_prepared(tmp_path, capsys, overrides, nodes=3,
                                   own_code={1: str(Path(__file__).with_name("hostile_node.py"))})
    assert (run_dir / "metrics.jsonl").is_file(), stream[-2000:]
    assert_finished_without_client_1(run_dir, load_config(None, [*overrides, "data.clients=3"]), said=stream)
    assert "Traceback" not in stream and not live_flower_processes(within=tmp_path)


def test_free_port_never_hands_out_a_port_already_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may offer a port again before the process it went to binds it (two SuperNodes once
    got the same one): with ``taken``, free_port skips those and records what it returns."""
    from fedaccel.flower import deploy

    offered = iter([5001, 5002, 5001, 5003])

    class FakeSocket:
        def __enter__(self) -> FakeSocket:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(offered)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(deploy.socket, "socket", FakeSocket)
    taken = {5002}
    assert [deploy.free_port(taken), deploy.free_port(taken)] == [5001, 5003]
    assert taken == {5001, 5002, 5003}


@pytest.mark.parametrize("hosts, named", [([], "SERVER"), (["127.0.0.1", "myserver.example"], "myserver.example"),
                                          (["10.1.2.3"], "10.1.2.3"), (["a b;touch x", "*.example.com"], "SERVER"),
                                          (None, "SERVER")])
def test_prepare_names_the_server_as_its_certificate_does(tmp_path: Path, capsys, hosts: list[str] | None,
                                                          named: str) -> None:
    """`deploy --prepare` printed `--superlink SERVER:9093` though the certificates were made with `--host
    myserver.example` (a new user's run): the clients' command now names what the certificate is valid for,
    quoted for the shell; a name that is no host name or address (a certificate folder from someone else may
    hold anything) is not printed."""
    import shlex

    from fedaccel.cli import main, print_multi_host_commands

    argv = ["certs", str(tmp_path / "tls"), "--clients", "1"]
    for host in hosts or []:
        argv += ["--host", host]
    assert main(argv) == 0
    if hosts is None:  # a server.pem that is no certificate, then a FIFO: the placeholder, no traceback, no wait
        (tmp_path / "tls" / "server.pem").write_bytes(b"-----BEGIN CERTIFICATE-----\nnot one\n")
        from fedaccel.flower.security import served_name

        assert served_name(tmp_path / "tls") == "SERVER"
        (tmp_path / "tls" / "server.pem").unlink()
        os.mkfifo(tmp_path / "tls" / "server.pem")
    capsys.readouterr()
    print_multi_host_commands(tmp_path / "run" / "flower" / "app", 1, tmp_path / "tls", 9093)
    client = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("client host <i>"))
    assert f"--superlink {shlex.quote(named + ':9093')} " in client and "partition-id=<i> " in client, client


@pytest.fixture(scope="module")
def signing_key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _certificate_naming(key: Any, names: list[str]) -> bytes:
    """A self-signed PEM certificate valid for the DNS ``names`` (whatever they hold)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


@given(names=st.lists(st.text(st.characters(max_codepoint=127), min_size=1, max_size=40)  # ASCII: a DNS name's type
                      | st.sampled_from(["myserver.example", "10.0.0.7", "localhost", "*.example.com"]),
                      min_size=1, max_size=3), garbage=st.binary(max_size=300))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_certificate_from_someone_else_gives_a_host_name_an_address_or_the_placeholder(
    tmp_path: Path, signing_key: Any, names: list[str], garbage: bytes
) -> None:
    """Whatever server.pem holds (any names in its SAN, or no certificate at all), `deploy --prepare` prints a
    host name or an IP address from it, or SERVER; it never raises."""
    import ipaddress
    import re

    from fedaccel.flower.security import served_name

    def fits(name: str) -> bool:
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            return re.fullmatch(r"[A-Za-z0-9.-]{1,254}", name) is not None and not name.startswith(("-", "."))

    for content in (_certificate_naming(signing_key, names), garbage):
        (tmp_path / "server.pem").write_bytes(content)
        named = served_name(tmp_path)
        assert named == "SERVER" or fits(named) and named in names, (names, named)
