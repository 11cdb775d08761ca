"""A Flower simulation stopped and resumed continues its clients' part states (SCAFFOLD's c_i): its clients keep
them in the run folder's ``client-states`` at each checkpoint, as a deployment's nodes keep theirs in their
``state-dir``. A resumed SCAFFOLD simulation used to start every client's control from zero, and its numbers
left the uninterrupted run's."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytest.importorskip("flwr")

import fedaccel.runs.loop as loop  # noqa: E402
from fedaccel.errors import UserError  # noqa: E402
from fedaccel.launch import resume, run  # noqa: E402
from fedaccel.runs.config import load_config  # noqa: E402
from fedaccel.runs.stopping import STOP, Interrupted  # noqa: E402

SCAFFOLD = ["data.dataset=digits", "model=softmax", "data.clients=3", "data.split=dirichlet", "data.split.alpha=0.5",
            "train.rounds=4", "train.lr=0.1", "train.batch_size=20", "run.progress=false", "algorithm=scaffold",
            "run.checkpoint_every=1"]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_resumed_scaffold_simulation_gives_the_uninterrupted_numbers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture) -> None:
    local = rows(run(load_config(None, SCAFFOLD), tmp_path / "in-process"))
    metrics = loop._metrics

    def stop_after_round_2(setup, state, report, wall):  # type: ignore[no-untyped-def]
        row = metrics(setup, state, report, wall)
        if state.round == 2:
            STOP.set()  # as Ctrl-C does: the round is checkpointed, then the run stops
        return row

    monkeypatch.setattr(loop, "_metrics", stop_after_round_2)
    simulated = tmp_path / "simulated"
    with pytest.raises(Interrupted):
        run(load_config(None, [*SCAFFOLD, "run.runtime=flower-simulation"]), simulated)
    monkeypatch.setattr(loop, "_metrics", metrics)
    assert [r["round"] for r in rows(simulated)] == [0, 1, 2]
    kept = simulated / "client-states"
    assert sorted(p.name for p in kept.iterdir()) == ["client-0", "client-1", "client-2"]
    assert all((kept / f"client-{i}" / "round-2.pt").is_file() for i in range(3))

    crashed, lost = tmp_path / "crashed", tmp_path / "lost"  # client 1's states of the checkpoint's round lost;
    shutil.copytree(simulated, crashed)  # then all of them
    (crashed / "client-states" / "client-1" / "round-2.pt").unlink()
    shutil.copytree(simulated, lost)
    shutil.rmtree(lost / "client-states" / "client-1")
    resume(simulated)
    capfd.readouterr()
    resume(crashed)  # its older states, said
    assert ("client 1 kept no state of round 2, the last it was sent to train in: it resumes from its states of "
            "round 1, the newest it kept") in capfd.readouterr().err
    resume(lost)  # SCAFFOLD's fresh c_i is None: the loss went unsaid, the client taken for restored
    assert "client 1 (round 2) kept no state of the round it last trained in: it starts from a fresh state" in \
        capfd.readouterr().err
    flower = rows(simulated)
    assert [r["round"] for r in flower] == [0, 1, 2, 3, 4]
    for a, b in zip(local, flower):
        for key in ("test_acc", "test_loss", "train_loss"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["round"], key)
    assert not kept.exists()  # a finished run resumes nothing: its clients' states are not kept


# --- the folder, from someone else maybe ------------------------------------------------------------------------------

kinds = st.sampled_from(["dir", "file", "link"])
names = st.sampled_from(["client-0", "client-12", "client-x", "round-1.pt", "notes"])


def build(root: Path, tree: dict) -> None:
    """``tree``: name -> (kind, {name: kind}) under ``root``; a link points at a folder outside."""
    outside = root.parent / "outside"
    outside.mkdir(exist_ok=True)
    root.mkdir()
    for name, (kind, inner) in tree.items():
        entry = root / name
        if kind == "link":
            entry.symlink_to(outside)
            continue
        if kind == "file":
            entry.write_bytes(b"x")
            continue
        entry.mkdir()
        for inner_name, inner_kind in inner.items():
            target = entry / inner_name
            if inner_kind == "link":  # to a file that is there: only the link itself gives it away
                (outside / inner_name).write_bytes(b"x")
                target.symlink_to(outside / inner_name)
            elif inner_kind == "file":
                target.write_bytes(b"x")
            else:
                target.mkdir()


@settings(max_examples=80, deadline=None)
@given(tree=st.dictionaries(names, st.tuples(kinds, st.dictionaries(st.sampled_from(["round-1.pt", "round-2.pt", "x"]),
                                                                    kinds, max_size=2)), max_size=3))
def test_a_client_states_folder_with_a_link_or_a_stranger_is_refused_before_any_client_hears_of_it(tree: dict) -> None:
    from fedaccel.flower.server import check_client_states

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "client-states"
        build(root, tree)
        plain = all(re.fullmatch(r"client-\d+", name) and kind == "dir" and all(k == "file" for k in inner.values())
                    for name, (kind, inner) in tree.items())
        if plain:
            check_client_states(root)
        else:
            with pytest.raises(UserError, match="nothing was written"):
                check_client_states(root)


def test_only_a_simulations_node_takes_a_state_folder_and_only_a_running_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedaccel.flower import client

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("{}")
    given = str(run_dir / "client-states")
    assert client.simulation_folder(given) is None  # a deployment's node (no Ray here): the server's word is ignored
    monkeypatch.setattr(client, "in_simulation", lambda: True)
    assert client.simulation_folder(given) is None  # no writer holds the run
    (run_dir / ".lock").write_text("")
    assert client.simulation_folder(given) == given
    assert client.simulation_folder(str(tmp_path / "elsewhere")) is None  # not a run's client-states
    assert client.simulation_folder(str(tmp_path / "client-states")) is None


@pytest.mark.slow
def test_a_crashed_partial_participation_simulation_resumes_every_clients_state_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture) -> None:
    """A crash a round after a checkpoint, under partial participation: the clients that sat out the checkpoint's
    round, and those that trained after it, resume from the states they had at it (their newest kept at or before
    it), so the resumed run gives the uninterrupted numbers. They used to start fresh, named, and the numbers moved."""
    partial = [*SCAFFOLD, "data.clients=4", "train.client_fraction=0.5", "train.rounds=6", "run.checkpoint_every=3"]
    local = rows(run(load_config(None, partial), tmp_path / "in-process"))
    metrics = loop._metrics

    def crash_at_round_5(setup, state, report, wall):  # type: ignore[no-untyped-def]
        if state.round == 5:
            raise RuntimeError("the machine went down")
        return metrics(setup, state, report, wall)

    monkeypatch.setattr(loop, "_metrics", crash_at_round_5)
    simulated = tmp_path / "simulated"
    with pytest.raises(RuntimeError, match="went down"):
        run(load_config(None, [*partial, "run.runtime=flower-simulation"]), simulated)
    monkeypatch.setattr(loop, "_metrics", metrics)
    assert [r["round"] for r in rows(simulated)] == [0, 1, 2, 3, 4]
    capfd.readouterr()
    resume(simulated)
    assert "kept no state" not in capfd.readouterr().err
    flower = rows(simulated)
    assert [r["round"] for r in flower] == list(range(7))
    for a, b in zip(local, flower):
        for key in ("test_acc", "test_loss", "train_loss"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["round"], key)


stretch = st.tuples(st.integers(1, 5), st.integers(1, 12), st.sets(st.integers(1, 12)), st.booleans())


@settings(max_examples=80, deadline=None)
@given(stretches=st.lists(stretch, min_size=1, max_size=4))
def test_a_client_keeps_the_states_every_checkpoint_a_run_can_resume_from_needs(stretches: list) -> None:
    """Kept after each round a client trains: for the server's newest checkpoint and the one before it, the
    client's states of the round it last trained in by then, across stretches of a run (each with its own
    ``run.checkpoint_every``, ended by a stop, which checkpoints its last round, or by a crash, after which the
    rounds since the last checkpoint are trained again); and, once a stretch has checkpointed a round of its own,
    at most three files, however long the run (before, those it began with and its newest)."""
    from types import SimpleNamespace

    from fedaccel.algorithms.registry import build_algorithm
    from fedaccel.flower import client

    scaffold = build_algorithm("scaffold")
    with tempfile.TemporaryDirectory() as scratch:
        context = SimpleNamespace(node_config={"state-dir": scratch},
                                  state={"fedaccel": {"config": "name: kept\n", "start": 0}})
        folder = Path(scratch) / client.config_key("name: kept\n")[:16]
        checkpoints, trained, begin = [0], set(), 0
        for every, length, offsets, stopped in stretches:
            context.state["fedaccel"]["start"] = begin
            client.forget_states_after(context, begin)  # the hello of a stretch
            began_with = len(list(folder.iterdir())) if folder.is_dir() else 0
            for round_ in range(begin + 1, begin + length + 1):
                if round_ - 1 > begin and (round_ - 1) % every == 0:
                    checkpoints.append(round_ - 1)  # the server's, before it sends this round
                if round_ - begin not in offsets:
                    continue
                client.keep_states(context, round_, (None,), scaffold, every)
                trained.add(round_)
                for resumed_at in checkpoints[-2:]:  # the newest, and checkpoint.prev.pt
                    last = max((r for r in trained if r <= resumed_at), default=0)
                    assert last == 0 or (folder / f"round-{last}.pt").is_file(), (resumed_at, last, checkpoints)
                own = any(c > begin for c in checkpoints)  # a checkpoint of this stretch's own rhythm
                assert len(list(folder.iterdir())) <= (3 if own else began_with + 1)
            if stopped:  # a stop checkpoints the stretch's last round; the next begins there
                begin = begin + length
                checkpoints.append(begin)
            else:  # a crash: the next begins at the last checkpoint and trains the rounds since again
                begin = checkpoints[-1]
                trained = {r for r in trained if r <= begin}


def test_two_deployed_runs_of_one_config_keep_their_clients_states_apart(tmp_path: Path) -> None:
    """A node's ``state-dir`` held one folder per config: a second run of the same config (into another run folder)
    wrote over the first's states, and its fresh start now deletes kept states. The server names its run folder
    (hashed) in the hello, and each run has its own folder."""
    from types import SimpleNamespace

    from fedaccel.flower import client
    from fedaccel.flower.server import run_name

    def folder(run: str) -> Path | None:
        context = SimpleNamespace(node_config={"state-dir": str(tmp_path)},
                                  state={"fedaccel": {"config": "name: same\n", "client": 0, "run": run}})
        return client._state_folder(context, "name: same\n")  # type: ignore[arg-type]

    first, second = run_name(tmp_path / "first"), run_name(tmp_path / "second")
    assert len({folder(first), folder(second), folder("")}) == 3
    assert folder(first) == folder(run_name(tmp_path / "x" / ".." / "first"))  # a resume names the same folder
    assert str(tmp_path) not in first


def test_a_finished_run_resumed_removes_client_states_a_kill_as_it_ended_left(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """SIGKILL between a simulation's summary and its removal of ``client-states`` left them for good: `--resume`
    said "already finished ... nothing was changed" and kept them. It removes them now, and says so."""
    from fedaccel.cli import main

    done = run(load_config(None, [*SCAFFOLD, "train.rounds=1"]), tmp_path / "run")
    (done / "client-states" / "client-0").mkdir(parents=True)
    (done / "client-states" / "client-0" / "round-1.pt").write_bytes(b"x")
    capsys.readouterr()
    assert main(["run", "--resume", str(done)]) == 0
    assert "nothing to resume, its clients' states, left by a stop as it ended, were removed" in capsys.readouterr().err
    assert not (done / "client-states").exists()
    main(["run", "--resume", str(done)])
    assert "nothing to resume, nothing was changed" in capsys.readouterr().err
    (done / "client-states" / "client-0").mkdir(parents=True)
    from fedaccel.runs.lock import lock_run_dir

    with lock_run_dir(done):  # a writer holds the folder: the removal waits its turn, as every write does
        assert main(["run", "--resume", str(done)]) == 2
    assert "is being written by process" in capsys.readouterr().err and (done / "client-states").is_dir()


hello_values = st.none() | st.integers(-5, 10**12) | st.text(max_size=20) | st.booleans() | st.floats(allow_nan=True)


@settings(max_examples=60, deadline=None)
@given(restored=st.booleans() | st.integers(0, 2), lacked=hello_values, older=hello_values, why=st.text(max_size=400))
@example(restored=False, lacked=3, older=None, why="damaged\nfedaccel server: round 9 rejected nobody")
def test_a_hostile_hello_reply_is_mapped_and_said_in_one_line_whatever_it_says_of_its_states(
        restored: Any, lacked: Any, older: Any, why: str) -> None:
    """A node's hello reply says whether it restored its states, of which round, from which older one and why not:
    a node's words, so any values; the client is mapped, and what is said is one line each, no traceback."""
    import contextlib
    import io
    from types import SimpleNamespace

    from flwr.app import ConfigRecord, RecordDict

    from fedaccel.flower import server

    said = {"client": 0, "restored": restored, **({"round": lacked} if lacked is not None else {}),
            **({"from": older} if older is not None else {}), **({"why": why} if why else {})}
    try:
        content = RecordDict({"hello": ConfigRecord(said)})
    except (TypeError, ValueError):  # Flower's record takes no such value: it never crosses the wire
        return
    reply = SimpleNamespace(has_error=lambda: False, content=content)
    err = io.StringIO()
    original = server.collect
    server.collect = lambda sent, timeout: [(reply, 0.1)]
    try:
        with contextlib.redirect_stderr(err):
            mapping, plain = server.connect(None, [7], 1, 1.0, start_round=5)  # type: ignore[arg-type]
    finally:
        server.collect = original
    assert mapping == {0: 7} and not plain
    assert all(line.startswith("fedaccel server: client") for line in err.getvalue().splitlines())
    assert len(err.getvalue().splitlines()) == (0 if restored else 1)
