"""The Flower runtimes' pacing: the simulation engine woken on push, a SuperNode's quiet time,
the ServerApp's first pull (no processes started: each piece on its own)."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("flwr")

from fedaccel.flower import dispatch  # noqa: E402
from fedaccel.flower.node import _NodeClock  # noqa: E402
from fedaccel.flower.server import exchange  # noqa: E402


def test_the_simulation_dispatch_loop_wakes_on_push_and_still_stops_on_its_event() -> None:
    from flwr.server.superlink.fleet.vce import vce_api

    assert dispatch.wake_simulation_on_push()
    wrapped = vce_api.add_messages_to_queue
    assert dispatch.wake_simulation_on_push() and vce_api.add_messages_to_queue is wrapped  # once

    stop = threading.Event()
    woken = dispatch._WokenStop(stop)
    dispatch.PUSHED.clear()
    threading.Timer(0.05, dispatch.PUSHED.set).start()
    started = time.monotonic()
    assert woken.wait(5.0) is False  # woken by the push, long before its timeout; not stopped
    assert time.monotonic() - started < 2.0
    assert not dispatch.PUSHED.is_set()  # taken
    stop.set()
    assert woken.is_set() and woken.wait(0.01) is True


def test_a_supernode_stays_quiet_for_70_percent_of_its_quickest_recent_round() -> None:
    clock = _NodeClock(0.05, threading.Event())
    assert clock.quiet_until() == 0.0  # nothing learnt: poll at once
    times = iter([10.0, 11.0, 11.5, 11.9, 12.4])  # hello, then messages 0.5, 0.4, 0.5 s apart
    real = time.monotonic
    try:
        time.monotonic = lambda: next(times)  # type: ignore[assignment]
        for _ in range(5):
            clock.message_stored()
    finally:
        time.monotonic = real  # type: ignore[assignment]
    assert clock.periods == pytest.approx([0.5, 0.4, 0.5])  # the interval after the hello is not a round's
    assert clock.quiet_until() == pytest.approx(12.4 + 0.7 * 0.4)


class _Grid:
    """Replies to every message ``after`` s after the push; counts the pulls."""

    def __init__(self, after: float) -> None:
        self.after, self.pulls, self.pushed_at = after, 0, 0.0

    def push_messages(self, messages):  # noqa: ANN001, ANN201
        self.pushed_at = time.monotonic()
        return [f"m{k}" for k in range(len(messages))]

    def pull_messages(self, ids):  # noqa: ANN001, ANN201
        self.pulls += 1
        if time.monotonic() - self.pushed_at < self.after:
            return []
        return [type("Reply", (), {"metadata": type("M", (), {"reply_to_message_id": i})()})() for i in ids]


def test_the_first_pull_waits_as_told_and_then_pulls_every_poll() -> None:
    messages = [object(), object()]
    eager, paced = _Grid(0.3), _Grid(0.3)
    exchange(eager, messages, timeout=5.0, poll=0.02)  # type: ignore[arg-type]
    replies = exchange(paced, messages, timeout=5.0, poll=0.02, first_pull=0.25)  # type: ignore[arg-type]
    assert all(reply is not None and seconds >= 0.3 for reply, seconds in replies)
    assert paced.pulls <= 4 < eager.pulls  # 0.25 s of waiting saved about 12 pulls of 20 ms


class _HalfUploadedGrid(_Grid):
    """Node 1's reply came, its arrays never will (its node died uploading them): Flower's grid
    pulls them with its own retries, then answers with an error reply for that message."""

    def pull_messages(self, ids):  # noqa: ANN001, ANN201
        from flwr.supercore.inflatable import inflatable_utils

        def never(object_id: str) -> bytes:
            raise inflatable_utils.ObjectUnavailableError(object_id)

        self.pulls += 1
        try:
            inflatable_utils.pull_objects(["arrays"], never)
        except inflatable_utils.ObjectPullError:
            return [type("Error", (), {"metadata": type("M", (), {"reply_to_message_id": i})()})() for i in ids]
        raise AssertionError("an object that never comes was pulled")


def test_a_reply_whose_objects_never_come_is_given_up_at_the_rounds_timeout() -> None:
    """Without the bound, Flower retries its pull for minutes (500 tries, backoff up to 0.5 s)."""
    from flwr.supercore.inflatable import inflatable_utils

    from fedaccel.flower.node import shorten_object_pull_backoff

    shorten_object_pull_backoff()
    before = dict(inflatable_utils.pull_objects.__kwdefaults__)
    started = time.monotonic()
    replies = exchange(_HalfUploadedGrid(0.0), [object(), object()], timeout=1.0, poll=0.02)  # type: ignore[arg-type]
    assert time.monotonic() - started < 5.0
    assert all(reply is not None for reply, _ in replies)  # Flower's error replies, which the round reads as lost
    assert inflatable_utils.pull_objects.__kwdefaults__ == before  # the bound holds only while collecting


def test_the_simulation_s_reply_store_wakes_the_server_s_wait_for_replies() -> None:
    """A reply stored by the engine's storing loop sets REPLIED after the store; a collect on the in-memory
    grid, told to pull only every 5 s, answers within a fraction of that."""
    from flwr.server.superlink.fleet.vce import vce_api

    assert dispatch.wake_simulation_on_push() and vce_api.put_message_into_state.__name__ == "put_message_into_state"
    stored: list[object] = []

    class State:
        def store_message_res(self, message: object) -> None:
            assert not dispatch.REPLIED.is_set()  # set after the store, not before
            stored.append(message)

    dispatch.REPLIED.clear()
    telling = dispatch._TellingState(State())
    telling.store_message_res("reply")
    assert stored == ["reply"] and dispatch.REPLIED.is_set()


def test_a_collect_on_the_in_memory_grid_is_woken_by_a_stored_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedaccel.flower import server

    class Grid(_Grid):
        pass

    monkeypatch.setattr(server, "InMemoryGrid", Grid)  # this grid counts as the simulation engine's
    grid = Grid(0.2)
    threading.Timer(0.25, dispatch.REPLIED.set).start()  # the engine stores the replies at 0.2-0.25 s
    started = time.monotonic()
    replies = exchange(grid, [object(), object()], timeout=10.0, poll=5.0)  # type: ignore[arg-type]
    assert all(reply is not None for reply, _ in replies)
    assert time.monotonic() - started < 2.0 and grid.pulls <= 3  # woken, not 5 s of polling


class _Actor:
    """A stand-in for a Ray actor handle: records its terminations."""

    def __init__(self, name: str, stopped: list[str]) -> None:
        self.name = name
        self.terminate = type("Method", (), {"remote": lambda _: stopped.append(name)})()


def test_each_simulation_actor_is_listed_twice_and_terminated_once() -> None:
    """Flower's own pool methods on a pool listing each actor twice: the first two messages go to
    distinct actors, each actor then holds two, a reply frees its entry, and the end stops each once."""
    from flwr.simulation.ray_transport.ray_actor import BasicActorPool

    from fedaccel.flower.in_flight import IN_FLIGHT, keep_two_in_flight, list_each_actor

    stopped: list[str] = []
    pool = object.__new__(BasicActorPool)  # its state without Ray: Flower's methods on stand-in actors
    a, b = _Actor("a", stopped), _Actor("b", stopped)
    pool.pool, pool.num_actors, pool._future_to_actor = [a, b], 2, {}
    list_each_actor(pool, IN_FLIGHT)
    assert IN_FLIGHT == 2 and pool.num_actors == 4  # the engine starts one thread per entry

    def submit(job: int) -> str:
        return pool.submit(lambda actor, *_: f"{actor.name}{job}", (None, None, "", None))

    futures = [submit(job) for job in range(4)]
    assert [f[0] for f in futures[:2]] in (["a", "b"], ["b", "a"]) and sorted(f[0] for f in futures) == list("aabb")
    assert not pool.is_actor_available()
    pool.add_actor_back_to_pool(futures[0])  # its reply came: that actor takes the next message
    assert submit(4)[0] == futures[0][0]
    for future in [*futures[1:], f"{futures[0][0]}4"]:
        pool.add_actor_back_to_pool(future)
    pool.terminate_all_actors()
    assert sorted(stopped) == ["a", "b"]
    assert keep_two_in_flight() and keep_two_in_flight()  # patched once, then left as it is


def test_flowers_notices_about_fedaccels_own_use_are_filtered_and_nothing_else() -> None:
    """A new user saw Flower's deprecation of run_simulation (which fedaccel calls on purpose), each Ray actor's
    "Manually terminating ClientAppActor" and Ray's accelerator tip around every simulation; other warnings stay."""
    import logging
    import warnings

    from flwr.supercore import log
    from flwr.supercore.logger import warn_deprecated_feature

    from fedaccel.flower.notices import FlowerNotices, quiet_notices

    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            quiet_notices()
            quiet_notices()
            warn_deprecated_feature("The `run_simulation` function is deprecated and will be removed")
            log(logging.WARNING, "Manually terminating %s", "ClientAppActor")
            warn_deprecated_feature("The `start_client` function is deprecated")
            log(logging.WARNING, "node %s was lost", 3)
            warnings.warn("Tip: In future versions of Ray, Ray will no longer override accelerator visible devices "
                          "env var if num_gpus=0", FutureWarning, stacklevel=1)
            warnings.warn("some other future", FutureWarning, stacklevel=1)
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage().split("\n")[0] for r in seen] == [
        "DEPRECATED FEATURE: The `start_client` function is deprecated", "node 3 was lost"]
    assert [str(w.message) for w in caught] == ["some other future"]
    assert sum(isinstance(f, FlowerNotices) for f in logger.filters) == 1


def test_a_simulation_drops_the_engines_records_of_a_clients_code_error_and_shows_the_rest() -> None:
    """A simulated client whose code raised was ~30 lines of Flower's and Ray's records, three times over, before
    fedaccel's one line; they are dropped while a simulation runs (error.txt keeps the client's traceback). A worker
    that died, another error and a warning are shown; after the simulation, everything is."""
    import logging

    from flwr.supercore import log

    from fedaccel.flower.notices import client_errors_kept_quiet

    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    wrapped = RuntimeError("ray::ClientAppActor.run()\n...\nflwr.clientapp.client_app.ClientAppException: boom")
    try:
        with client_errors_kept_quiet():
            log(logging.ERROR, "An exception was raised when processing a message by %s", "RayBackend")
            log(logging.ERROR, wrapped)
            log(logging.ERROR, "Traceback (most recent call last):\n...\nRayTaskError(LoadClientAppError): no app")
            log(logging.ERROR, "The actor died unexpectedly before finishing this task.")
            log(logging.WARNING, "ClientAppException in a warning")
        log(logging.ERROR, wrapped)
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage().split("\n")[0] for r in seen] == [
        "The actor died unexpectedly before finishing this task.", "ClientAppException in a warning",
        "ray::ClientAppActor.run()"]


@pytest.mark.parametrize("user_set", [None, "1"])
def test_ray_prints_its_workers_prefixes_without_colour_codes_into_a_log(user_set: str | None, monkeypatch,
                                                                        tmp_path) -> None:
    """A new user's `fedaccel run ... > log` with run.runtime flower-simulation held `\\x1b[36m(ClientAppActor
    pid=...)\\x1b[0m` lines. Into files (as in a log) Ray now prints its prefixes plain; a value the user set wins."""
    pytest.importorskip("ray")
    from ray._private.worker import print_worker_logs

    from fedaccel.flower.notices import quiet_notices

    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    if user_set is not None:
        monkeypatch.setenv("RAY_COLOR_PREFIX", user_set)
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        monkeypatch.setattr("sys.stdout", out)
        monkeypatch.setattr("sys.stderr", err)
        quiet_notices()
        print_worker_logs({"pid": 4242, "actor_name": "ClientAppActor", "lines": ["fedaccel client: hello"],
                           "ip": "127.0.0.1", "localhost": "127.0.0.1"}, out)
    line = (tmp_path / "out").read_text()
    if user_set is None:
        assert line == "(ClientAppActor pid=4242) fedaccel client: hello\n"
    else:
        assert "\x1b[" in line  # colours asked for
