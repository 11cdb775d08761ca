"""Ctrl-C on ``run.runtime: flower-simulation`` does what it does in process.

Flower runs the ServerApp (the rounds) in a thread of its own, where ``run_loop`` can set no signal
handler, and Ray's start replaces the SIGTERM handler: the run went on through every round, or
aborted with a stack dump. :func:`fedaccel.flower.simulation.simulation_signals` takes the signals in
the main thread. The end-to-end case is tiny (digits, softmax regression, 3 clients) and pays one
start of Ray and its workers in a process of its own, and one in the test's process for the resume.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from fedaccel.flower import server  # noqa: E402
from fedaccel.flower.deploy import descendants  # noqa: E402
from fedaccel.flower.simulation import simulation_signals  # noqa: E402
from fedaccel.runs import stopping  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# tests/test_flower.py's TINY with more rounds: the signal comes after round 2, the run must still be going when
# its handler runs (a round takes tens of ms; on a loaded machine a run of 12 rounds once finished after the stop's
# message was printed, likely its handler running only in the last round)
ROUNDS = 40
TINY = ["data.dataset=digits", "model=softmax", "data.clients=3", "data.split=dirichlet", "data.split.alpha=0.5",
        f"train.rounds={ROUNDS}", "train.lr=0.1", "train.batch_size=20", "run.progress=false", "algorithm=fedavg",
        "run.checkpoint_every=100"]


def rows(run_dir: Path) -> list[dict]:
    """The complete rows of a metrics.jsonl that may be being appended to (a last line still being written left
    out)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    return [json.loads(line) for line in lines if line.endswith("\n")]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, already dead, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def in_session(sid: int) -> list[int]:
    """The live processes of session ``sid`` (the test's CLI and all it started, unless one left it)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
def test_ctrl_c_finishes_the_round_checkpoints_it_and_resume_gives_the_uninterrupted_numbers(tmp_path: Path) -> None:
    """SIGINT to the process group of `fedaccel run` on flower-simulation after round 2 (a terminal's Ctrl-C
    reaches Ray's processes too): the round finishes, is checkpointed, the resume line is the last one on
    stderr, the exit status is 130, no Ray stack dump, no process left; `--resume` ends with the
    in-process numbers."""
    from fedaccel.cli import main
    from fedaccel.launch import run
    from fedaccel.runs.config import load_config

    local = rows(run(load_config(None, TINY), tmp_path / "in-process"))
    out = tmp_path / "simulated"
    argv = [sys.executable, "-m", "fedaccel.cli", "run", "--out", str(out)]
    for item in [*TINY, "run.runtime=flower-simulation"]:
        argv += ["--set", item]
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
           "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "stderr.txt", "w") as sink:  # a file: Ray's lines cannot fill a pipe
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=sink,
                                   start_new_session=True)  # its own process group, as a terminal's job
    said = lambda: (tmp_path / "stderr.txt").read_text()[-3000:]  # noqa: E731
    started: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while not ((out / "metrics.jsonl").is_file() and len(rows(out)) > 2):  # rows of rounds 0, 1, 2
            assert process.poll() is None, said()
            assert time.monotonic() < deadline, said()
            time.sleep(0.05)
        started = descendants({process.pid})  # Ray's GCS, raylet, ClientApp workers
        assert any("raylet" in command_line(pid) for pid in started), [command_line(pid) for pid in started]
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
        deadline = time.monotonic() + 30  # Ray's processes end with their driver (a loaded machine: seconds)
        while time.monotonic() < deadline and (in_session(process.pid) or any(alive(pid) for pid in started)):
            time.sleep(0.1)
        left = sorted(set(in_session(process.pid)) | {pid for pid in started if alive(pid)})
        assert not left, [command_line(pid) for pid in left]
    finally:
        for pid in [process.pid, *started]:  # leave nothing behind when the test fails
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    import torch

    stderr = (tmp_path / "stderr.txt").read_text()
    stopped_at = torch.load(out / "checkpoint.pt", weights_only=True)["state"]["round"]
    assert process.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (f"interrupted by SIGINT; `fedaccel run --resume {out}` continues "
                                               f"after round {stopped_at}"), stderr[-3000:]
    assert "SIGINT: finishing the current round" in stderr
    # the run's own stack dump (Ray's SIGTERM handler, before): a Ray worker's crash in its own shutdown, which it
    # prints prefixed "(pid=N)" (once a SIGSEGV in its metrics thread, on a loaded machine), is Ray's, not the run's
    own = [line for line in stderr.splitlines() if not line.lstrip().startswith("(pid=")]
    assert not [line for line in own if "Traceback" in line or "*** SIG" in line], stderr[-3000:]
    assert 3 <= stopped_at < ROUNDS and rows(out)[-1]["round"] == stopped_at and not (out / "summary.json").exists()

    assert main(["run", "--resume", str(out)]) == 0
    resumed = rows(out)
    assert [r["round"] for r in resumed] == list(range(ROUNDS + 1))
    for a, b in zip(local, resumed, strict=True):
        for key in ("test_acc", "test_loss", "train_loss"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["round"], key)
        for key in ("bytes_up", "bytes_down", "local_steps", "clients", "uploaded"):
            assert b.get(key) == a.get(key), (a["round"], key)


def test_the_first_signal_in_the_rounds_finishes_the_round_a_second_or_one_before_them_stops_at_once(
        capsys: pytest.CaptureFixture) -> None:
    """The handlers alone (no Ray): in the rounds a first SIGINT sets STOP and says so, the second sets NOW, which
    makes the ServerApp's wait for replies raise KeyboardInterrupt; before the rounds the process's own handler
    decides (Python's: KeyboardInterrupt, taken as NOW rather than raised in the thread that waits for Flower)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    def deliver(sig: int) -> None:
        os.kill(os.getpid(), sig)
        time.sleep(0.05)  # the handler runs at the next bytecode of this thread

    try:
        with simulation_signals():
            assert signal.getsignal(signal.SIGTERM) not in before
            server.IN_ROUNDS.set()
            deliver(signal.SIGTERM)
            assert stopping.STOP.is_set() and not server.NOW.is_set() and stopping.signal_name() == "SIGTERM"
            deliver(signal.SIGINT)
            assert server.NOW.is_set()
            with pytest.raises(KeyboardInterrupt):
                pushed = server.Pushed(grid=None, ids=["m"], started=time.monotonic())  # type: ignore[arg-type]
                server.collect(pushed, 10.0)
            server.IN_ROUNDS.clear()
        assert not stopping.STOP.is_set() and not server.NOW.is_set()
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
        assert "SIGTERM: finishing the current round" in capsys.readouterr().err

        signal.signal(signal.SIGINT, signal.default_int_handler)
        with simulation_signals():  # Ray and its workers still starting: no round to finish
            deliver(signal.SIGINT)  # no KeyboardInterrupt here: the ServerApp's thread raises it
            assert server.NOW.is_set() and not stopping.STOP.is_set()
    finally:
        server.IN_ROUNDS.clear()
        stopping.clear_stop()
        for sig, handler in zip((signal.SIGINT, signal.SIGTERM), before):
            signal.signal(sig, handler)
