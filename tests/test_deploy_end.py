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
from fedaccel.flower.deploy import Interrupts, Processes, Stream, finished_since, summary_stamp, watch
from fedaccel.runs.progress import RoundLines

ROUNDS = 3


@pytest.fixture
def runner() -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def watched(tmp_path: Path, runner: subprocess.Popen, finished: threading.Event) -> float:
    """When :func:`watch` returned on ``runner`` with a stream of ``tmp_path/flwr-run.log`` (``time.monotonic()``)."""
    stream = Stream(tmp_path / "flwr-run.log", RoundLines(ROUNDS, 0, "fedavg"), quiet=True, rounds=ROUNDS)
    watch(runner, Processes(tmp_path, dict(os.environ)), 30.0, stream, Interrupts(tmp_path / "stop"), grace=5.0,
          finished=finished.is_set)
    assert runner.poll() is None  # it returned while `flwr run` still ran
    return time.monotonic()


def round_line(r: int) -> str:
    return f"fedaccel server: round {r}/{ROUNDS}  test_acc 0.5000  (0.1 s)\n"


def later(seconds: float, *steps: object) -> list[float]:
    """Run ``steps`` (callables) in a thread after ``seconds``; the list gets the time they were done."""
    done: list[float] = []

    def go() -> None:
        time.sleep(seconds)
        for step in steps:
            step()  # type: ignore[operator]
        done.append(time.monotonic())

    threading.Thread(target=go, daemon=True).start()
    return done


def test_watch_returns_once_the_run_finished_and_its_last_round_was_streamed(tmp_path: Path, runner) -> None:
    log, finished = tmp_path / "flwr-run.log", threading.Event()
    log.write_text(round_line(1) + round_line(2))
    done = later(0.6, lambda: log.open("a").write(round_line(3)), finished.set)
    returned = watched(tmp_path, runner, finished)
    assert done and done[0] <= returned < done[0] + 1.0  # not before the summary; within a few 0.2 s looks after


def test_a_finished_run_waits_for_its_last_round_line(tmp_path: Path, runner) -> None:
    """The summary is there, the stream has not shown the last round yet: it waits for that line (the bar ends
    at its last round), here 0.6 s."""
    log, finished = tmp_path / "flwr-run.log", threading.Event()
    log.write_text(round_line(1) + round_line(2))
    finished.set()
    done = later(0.6, lambda: log.open("a").write(round_line(3)))
    returned = watched(tmp_path, runner, finished)
    assert done and done[0] <= returned < done[0] + 1.0


def test_a_finished_run_whose_last_round_line_is_late_ends_after_the_grace(tmp_path: Path, runner,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deploy, "LAST_LINE_S", 0.5)
    (tmp_path / "flwr-run.log").write_text(round_line(1))
    finished = threading.Event()
    finished.set()
    began = time.monotonic()
    returned = watched(tmp_path, runner, finished)
    assert began + 0.5 <= returned < began + 0.5 + 1.0


def test_an_unfinished_run_is_waited_for(tmp_path: Path, runner) -> None:
    """Without a summary (a run stopped, diverged or failing), `flwr run`'s end is what ends it."""
    (tmp_path / "flwr-run.log").write_text(round_line(1) + round_line(2) + round_line(3))
    done = later(1.0, runner.kill, runner.wait)
    stream = Stream(tmp_path / "flwr-run.log", RoundLines(ROUNDS, 0, "fedavg"), quiet=True, rounds=ROUNDS)
    watch(runner, Processes(tmp_path, dict(os.environ)), 30.0, stream, Interrupts(tmp_path / "stop"), grace=5.0,
          finished=lambda: False)
    assert runner.poll() is not None and done  # it returned when `flwr run` ended, not before


def test_only_a_summary_of_a_finished_run_written_since_counts(tmp_path: Path) -> None:
    """By the summary's identity (its inode and mtime: written atomically, a new file), not by comparing the
    file system's clock with ours (a coarse one stamps a file a few ms in the past)."""
    from fedaccel.disk import write_atomic

    summary = tmp_path / "summary.json"
    before = summary_stamp(tmp_path)
    assert before is None and not finished_since(tmp_path, before)  # none yet
    write_atomic(summary, json.dumps({"finished": False, "diverged": 4}))
    assert not finished_since(tmp_path, before)  # a diverged run: its error line is still to come
    write_atomic(summary, json.dumps({"finished": True}))
    assert finished_since(tmp_path, before)
    os.utime(summary, ns=(0, 0))  # any clock
    assert finished_since(tmp_path, before)
    assert not finished_since(tmp_path, summary_stamp(tmp_path))  # a summary from before this deployment
    write_atomic(summary, json.dumps({"finished": True}))
    assert finished_since(tmp_path, (0, 0))


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
    assert finished_since(tmp_path, None) is expected
