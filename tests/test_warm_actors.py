"""The ClientApp actors of one Flower simulation serve the next (fedaccel.flower.warm_actors): the
same Ray worker processes, the in-process numbers, and no actor kept that is dead, of other
resources or idle too long."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")
ray = pytest.importorskip("ray")

from fedaccel.flower import warm_actors  # noqa: E402
from fedaccel.flower.simulation import simulate  # noqa: E402
from fedaccel.launch import run  # noqa: E402
from fedaccel.runs.config import load_config  # noqa: E402

TINY = ["data.dataset=digits", "model=softmax", "data.clients=3", "data.split=dirichlet", "data.split.alpha=0.5",
        "train.rounds=2", "train.lr=0.1", "train.batch_size=20", "run.progress=false"]


def numbers(run_dir: Path) -> list[dict]:
    """The metrics rows without their wall times."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in rows]


def same(a: list[dict], b: list[dict]) -> bool:
    """The same rows, floats to 1e-5 (the order in which replies arrive changes the sums' last bits)."""
    return len(a) == len(b) and all(x.keys() == y.keys() and all(
        x[k] == pytest.approx(y[k], abs=1e-5) if isinstance(x[k], float) else x[k] == y[k] for k in x)
        for x, y in zip(a, b))


def ids(actors: list) -> set[str]:
    return {actor._actor_id.hex() for actor in actors}


def alive(actor) -> bool:
    try:
        ray.get(actor.__ray_ready__.remote(), timeout=30)
    except ray.exceptions.RayError:
        return False
    return True


def raising_app(broken: frozenset[int] = frozenset({0})):  # type: ignore[no-untyped-def]
    """fedaccel's ClientApp, except that the ``broken`` clients' training raises in every round."""
    from flwr.clientapp import ClientApp

    from fedaccel.flower import client as fedaccel_client

    app = ClientApp()

    @app.query("hello")
    def hello(message, context):  # type: ignore[no-untyped-def]
        return fedaccel_client.hello(message, context)

    @app.train()
    def train(message, context):  # type: ignore[no-untyped-def]
        if (client := int(context.node_config["partition-id"])) in broken:
            raise RuntimeError(f"client {client} is broken")
        return fedaccel_client.train(message, context)

    return app


@pytest.mark.slow
def test_a_simulation_runs_on_the_actors_the_last_one_left_and_gives_the_in_process_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One simulation after another in this process (two start actors: the first, and the one asking for
    another share); a dead actor or an unanswered ready check: the stand-in tests below."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(__import__(__name__))  # Ray workers cannot import tests/

    def simulated(name: str, overrides: list[str], **options) -> list[dict]:
        config = load_config(None, [*TINY, *overrides, "run.runtime=flower-simulation"])
        return numbers(simulate(config, tmp_path / name, **options))

    workers = min(os.cpu_count() or 1, 3)  # the default: one ClientApp worker per core, at most one per client
    # client 0's ClientApp raises: a simulation's clients are this machine's code, so the error stops the run at
    # round 1, not kept, in one line with the client's own exception (it went on without the client, and
    # "finished"; the reason was 300 characters of Ray's actor ids), as in process ...
    from fedaccel.runs.loop import ClientError

    seen: list[logging.LogRecord] = []  # what Flower's logger would print
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logging.getLogger("flwr").addHandler(handler)
    try:
        with pytest.raises(ClientError, match=r"^round 1: client 0's code raised RuntimeError: client 0 is broken; "
                                              r"a simulation's clients run this machine's code") as stopped:
            simulated("raising", ["algorithm=fedavg"], client_app=raising_app())
    finally:
        logging.getLogger("flwr").removeHandler(handler)
    assert "\n" not in str(stopped.value) and not (tmp_path / "raising" / "summary.json").exists()  # resumable
    assert not (tmp_path / "raising" / "metrics.jsonl").read_text().count('"round": 1')  # round 1 not kept
    kept = (tmp_path / "raising" / "error.txt").read_text()  # round 1 was not kept: none was run
    assert kept.startswith("an error stopped the run after 0 round(s)") and "client 0 is broken" in kept, kept
    assert re.search(r"client 0's traceback, in its ClientApp's process:\n(.*\n)*  File .*test_warm_actors\.py\", "
                     r"line \d+, in train\n(.*\n)*RuntimeError: client 0 is broken\n", kept), kept
    said = "\n".join(str(r.msg) for r in seen)  # ... and not as the engine's records: ~30 lines of Ray's each
    assert "ClientAppException" not in said and f"its traceback: {tmp_path / 'raising' / 'error.txt'}" in str(stopped.value)
    first = warm_actors.kept_actors()
    assert len(first) == workers and all(alive(a) for a in first)

    # ... naming the others that raised too
    with pytest.raises(ClientError, match=r"^round 1: client \d's code raised RuntimeError: client \d is broken "
                                          r"\(2 more client\(s\) raised too\)"):
        simulated("all raising", ["algorithm=fedavg", "train.rounds=4"], client_app=raising_app(frozenset({0, 1, 2})))
    assert ids(warm_actors.kept_actors()) == ids(first)  # the actors serve on

    # ... and the actors that ran it serve another method, with the in-process numbers
    overrides = ["algorithm=fedprox", "algorithm.mu=0.1", "data.split.alpha=0.3"]  # 3 clients: the same share
    local = numbers(run(load_config(None, [*TINY, *overrides]), tmp_path / "in-process"))
    assert same(simulated("second", overrides), local)
    assert ids(warm_actors.kept_actors()) == ids(first)

    # a simulation asking for another share of the CPUs (one worker, or two on one core) stops the kept ones
    other = 1 if workers > 1 else 2
    assert same(simulated("third", overrides, workers=other), local)
    third = warm_actors.kept_actors()
    assert len(third) == other and not ids(third) & ids(first)
    assert not any(alive(a) for a in first)

    # unused for IDLE_S seconds, they are stopped (they hold their share of Ray's CPUs)
    monkeypatch.setattr(warm_actors, "IDLE_S", 2.0)  # from the simulation's end, before it returns: a margin
    assert same(simulated("fourth", overrides, workers=other), local)
    fourth = warm_actors.kept_actors()
    assert ids(fourth) == ids(third)
    time.sleep(6)
    assert warm_actors.kept_actors() == [] and not alive(fourth[0])


class _Handle:
    """A stand-in actor handle whose every call raises, as one of a Ray that is gone or of a dead actor does."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        def remote(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls.append(name)
            raise Exception(f"Failed to submit task to actor: {name}")  # what Ray raises: not a RayError

        return type("Method", (), {"remote": staticmethod(remote)})()


RESOURCES = (("num_cpus", 1.0), ("num_gpus", 0.0))


def test_actors_kept_in_another_ray_session_are_neither_handed_on_nor_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray restarted (on the same address, with RAY_GCS_SERVER_PORT): the old handles are dropped untouched."""
    calls: list[str] = []
    monkeypatch.setattr(warm_actors, "_session", lambda: "session_now")
    monkeypatch.setattr(warm_actors, "_kept", [_Handle(calls)])
    monkeypatch.setattr(warm_actors, "_kept_for", ("session_before", RESOURCES))
    assert warm_actors.kept_actors() == []
    assert warm_actors._take(("session_now", RESOURCES), 2) == [] and calls == []
    assert warm_actors._kept == []


def test_a_kept_actor_that_does_not_answer_is_stopped_and_none_handed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(warm_actors, "_session", lambda: "session_now")
    monkeypatch.setattr(warm_actors, "_kept", [_Handle(calls), _Handle(calls)])
    monkeypatch.setattr(warm_actors, "_kept_for", ("session_now", RESOURCES))
    assert len(warm_actors.kept_actors()) == 2
    assert warm_actors._take(("session_now", RESOURCES), 2) == []
    assert calls == ["__ray_ready__", "terminate", "terminate"] and warm_actors._kept == []
    # of other resources: not asked, stopped
    monkeypatch.setattr(warm_actors, "_kept", [_Handle(calls)])
    monkeypatch.setattr(warm_actors, "_kept_for", ("session_now", RESOURCES))
    calls.clear()
    assert warm_actors._take(("session_now", (("num_cpus", 2.0), ("num_gpus", 0.0))), 1) == [] and calls == ["terminate"]
