"""``fedaccel deploy`` ends once its run wrote its summary and the stream showed its last round, not when
Flower's ``flwr run`` ends (about 3 s later: the ServerApp's log flush, the stream's polls). Real
processes stand for ``flwr run`` (a ``sleep`` that would outlive the test)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedaccel.flower import deploy
from fedaccel.flower.deploy import Interrupts, Processes, Stream, finished_since, watch
from fedaccel.runs.progress import RoundLines

ROUNDS = 3


@pytest.fixture
def runner() -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def watched(tmp_path: Path, runner: subprocess.Popen, finished: threading.Event) -> float:
    """Seconds :func:`watch` took on ``runner`` with a stream of ``tmp_path/flwr-run.log``."""
    stream = Stream(tmp_path / "flwr-run.log", RoundLines(ROUNDS, 0, "fedavg"), quiet=True, rounds=ROUNDS)
    began = time.monotonic()
    watch(runner, Processes(tmp_path, dict(os.environ)), 30.0, stream, Interrupts(tmp_path / "stop"), grace=5.0,
          finished=finished.is_set)
    assert runner.poll() is None  # it returned while `flwr run` still ran
    return time.monotonic() - began


def round_line(r: int) -> str:
    return f"fedaccel server: round {r}/{ROUNDS}  test_acc 0.5000  (0.1 s)\n"


def test_watch_returns_once_the_run_finished_and_its_last_round_was_streamed(tmp_path: Path, runner) -> None:
    log, finished = tmp_path / "flwr-run.log", threading.Event()
    log.write_text(round_line(1) + round_line(2))

    def finish_later() -> None:
        time.sleep(0.6)
        with open(log, "a") as file:
            file.write(round_line(3))
        finished.set()

    threading.Thread(target=finish_later, daemon=True).start()
    took = watched(tmp_path, runner, finished)
    assert 0.6 <= took < 0.6 + 1.0  # not before the summary; within a few of its 0.2 s looks after


def test_a_finished_run_whose_last_round_line_is_late_ends_after_the_grace(tmp_path: Path, runner,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deploy, "LAST_LINE_S", 0.5)
    (tmp_path / "flwr-run.log").write_text(round_line(1))
    finished = threading.Event()
    finished.set()
    took = watched(tmp_path, runner, finished)
    assert 0.5 <= took < 0.5 + 1.0


def test_an_unfinished_run_is_waited_for(tmp_path: Path, runner) -> None:
    """Without a summary (a run stopped, diverged or failing), `flwr run`'s end is what ends it."""
    (tmp_path / "flwr-run.log").write_text(round_line(1) + round_line(2) + round_line(3))
    threading.Timer(1.0, runner.kill).start()
    stream = Stream(tmp_path / "flwr-run.log", RoundLines(ROUNDS, 0, "fedavg"), quiet=True, rounds=ROUNDS)
    began = time.monotonic()
    watch(runner, Processes(tmp_path, dict(os.environ)), 30.0, stream, Interrupts(tmp_path / "stop"), grace=5.0,
          finished=lambda: False)
    assert time.monotonic() - began >= 1.0 and runner.poll() is not None


def test_only_a_summary_of_a_finished_run_written_since_counts(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    before = time.time_ns()
    assert not finished_since(tmp_path, before)  # none yet
    summary.write_text(json.dumps({"finished": False, "diverged": 4}))
    assert not finished_since(tmp_path, before)  # a diverged run: its error line is still to come
    summary.write_text(json.dumps({"finished": True}))
    assert finished_since(tmp_path, before)
    assert not finished_since(tmp_path, time.time_ns())  # a summary from before this deployment (a resumed run)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(st.binary(max_size=200), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["finished", "x"]), inner, max_size=2),
    max_leaves=8).map(lambda value: json.dumps(value).encode())))
def test_any_summary_someone_wrote_is_read_as_finished_only_when_it_says_so(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "summary.json").write_bytes(content)
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    expected = isinstance(value, dict) and value.get("finished") is True
    assert finished_since(tmp_path, 0) is expected
