"""A run folder has one writer: workers die with their experiment, a second writer is refused."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fedaccel.errors import UserError
from fedaccel.grids.experiment import load_experiment, run_experiment
from fedaccel.launch import resume, run
from fedaccel.runs.config import load_config
from fedaccel.runs.lock import lock_run_dir

ROUNDS = 150  # long enough that a cell is still running when the signal lands


def descendants(root: int) -> list[int]:
    """Every live process below ``root``, from /proc's parent links."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier}
        found.extend(frontier)
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def group_leaders(pids: list[int]) -> list[int]:
    """The processes of ``pids`` that lead a process group of their own (one that ended meanwhile is left out)."""
    leaders = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                leaders.append(pid)
    return leaders


def rounds(run_dir: Path) -> list[int]:
    """The rounds of the complete lines: the test polls while the run appends, and may read half a line."""
    lines = (run_dir / "metrics.jsonl").read_text().split("\n")[:-1]  # the part after the last newline: unfinished
    return [json.loads(line)["round"] for line in lines if line]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["KILL", "TERM", "INT"])
@pytest.mark.slow
def test_killed_experiment_leaves_no_worker_and_a_rerun_finishes_every_cell(sig: int, tmp_path: Path) -> None:
    """`experiment -j 2` on five cells gets ``sig`` while two cells are mid-run (one waiting in the
    pool's call queue, two queued behind it, which a stop cancels): 5 s later none of its processes lives and no cell went on to its end; after kill -9,
    a re-run ends every cell with rounds 0..ROUNDS, each once."""
    path = tmp_path / "exp.yaml"
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "svm",
            "train": {"rounds": ROUNDS, "lr": 0.1, "batch_size": 20},
            "run": {"progress": False, "checkpoint_every": 5}}
    path.write_text(yaml.safe_dump({"name": "killed", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"run.seed": [0, 1, 2, 3, 4]}}))
    cells = [tmp_path / "out" / f"run.seed={seed}" for seed in range(5)]
    parent = subprocess.Popen([sys.executable, "-m", "fedaccel.cli", "experiment", str(path), "-j", "2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            running = [c for c in cells if (c / "metrics.jsonl").is_file() and len(rounds(c)) >= 2
                       and not (c / "summary.json").is_file()]
            if len(running) >= 2 or parent.poll() is not None:
                break
            time.sleep(0.02)
        assert len(running) >= 2, "two cells were not running at once in time"
        workers = descendants(parent.pid)
        assert len(workers) >= 2, workers  # the pool's two workers (and multiprocessing's resource tracker)
        os.kill(parent.pid, sig)
        _, err = parent.communicate(timeout=60)

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(pid) for pid in workers):
            time.sleep(0.1)
        assert not [pid for pid in workers if alive(pid)], "processes of the killed experiment still run"
        assert not all((c / "summary.json").is_file() for c in cells), f"the cells ran to their end: {err}"
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait()
        for pid in workers:  # leave no orphan behind when the test fails
            if alive(pid) and b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)

    if sig != signal.SIGKILL:  # asked to stop: each running cell finished its round and checkpointed it
        assert err.strip().splitlines()[-1] == (
            f"interrupted by {signal.Signals(sig).name}; `fedaccel experiment {path} -j 2` continues every "
            "unfinished cell from its checkpoint")
        assert err.count("finishing the current round") == 1, err  # said by the experiment, not by each worker
        assert "Warning" not in err, err  # e.g. multiprocessing's leaked semaphores of a pool kept alive at exit
        import torch

        stopped = [cell for cell in running if not (cell / "summary.json").is_file()]  # not finished meanwhile
        assert stopped, "every running cell finished before the signal took effect: raise ROUNDS"
        for cell in stopped:
            saved = torch.load(cell / "checkpoint.pt", weights_only=True)["state"]["round"]
            assert saved == rounds(cell)[-1] < ROUNDS, cell.name
        return
    result = run_experiment(load_experiment(path), workers=1)
    for cell in cells:
        assert rounds(cell) == list(range(ROUNDS + 1)), cell.name
    assert "| fedavg (baseline) | 5 |" in result.table


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.slow
def test_stacked_groups_in_workers_stop_after_their_round_and_leave_no_worker(tmp_path: Path) -> None:
    """`experiment --stack-seeds -j 2` on three groups of two seeds gets SIGINT while two groups run: every
    seed of them finishes its round and checkpoints it, no group starts after the signal (the third, unless a
    loaded machine let a group finish first), no worker lives on, and a re-run ends every cell with rounds
    0..ROUNDS, each once."""
    path = tmp_path / "exp.yaml"
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "svm",
            "train": {"rounds": ROUNDS, "lr": 0.1, "batch_size": 20},
            "run": {"progress": False, "checkpoint_every": 50}}
    path.write_text(yaml.safe_dump({"name": "groups", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"train.lr": [0.1, 0.05, 0.02], "run.seed": [0, 1]}}))
    parent = subprocess.Popen([sys.executable, "-m", "fedaccel.cli", "experiment", str(path), "-j", "2",
                               "--stack-seeds"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out, workers = tmp_path / "out", []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and parent.poll() is None:
            running = [c for c in out.glob("*") if (c / "metrics.jsonl").is_file() and len(rounds(c)) >= 2
                       and not (c / "summary.json").is_file()]
            if len(running) >= 4:  # two groups at work, each with ROUNDS - 2 rounds to go
                break
            time.sleep(0.02)
        workers = descendants(parent.pid)
        begun = sorted(c.name for c in out.glob("*") if (c / "metrics.jsonl").is_file())
        os.kill(parent.pid, signal.SIGINT)
        _, err = parent.communicate(timeout=60)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(pid) for pid in workers):
            time.sleep(0.1)
        assert not [pid for pid in workers if alive(pid)], "processes of the stopped experiment still run"
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait()
    assert err.strip().splitlines()[-1].startswith("interrupted by SIGINT; "), err
    assert err.count("finishing the current round") == 1, err
    started = sorted(c.name for c in out.glob("*") if (c / "metrics.jsonl").is_file())
    assert started == begun and len(started) % 2 == 0, (started, begun)  # whole groups, none after the signal
    import torch

    for cell in out.glob("*"):
        if (cell / "metrics.jsonl").is_file() and not (cell / "summary.json").is_file():
            assert torch.load(cell / "checkpoint.pt", weights_only=True)["state"]["round"] == rounds(cell)[-1]
    run_experiment(load_experiment(path), stack_seeds=True, workers=2, progress=False)
    for cell in sorted(c for c in out.glob("*") if c.is_dir()):
        assert rounds(cell) == list(range(ROUNDS + 1)), cell.name


def test_a_second_writer_of_a_run_folder_is_refused_with_one_line_naming_the_holder(tmp_path: Path) -> None:
    """The lock is per open file, so this process holding it through another open is a second writer;
    resume must refuse before it cuts the metrics back to the checkpoint."""
    config = load_config(None, ["data.dataset=digits", "model=svm", "data.clients=2", "train.rounds=2",
                                "run.progress=false"])
    folder = run(config, tmp_path / "r")
    metrics = folder / "metrics.jsonl"
    with open(metrics, "a") as f:
        f.write(json.dumps({"round": 3})[:8])  # a cut-short last line: resume would drop it
    written = metrics.read_text()
    fresh = tmp_path / "fresh"
    with lock_run_dir(folder), lock_run_dir(fresh):
        for write in (lambda: resume(folder), lambda: run(config, fresh)):
            with pytest.raises(UserError, match=rf"is being written by process {os.getpid()}; ") as info:
                write()
            assert "\n" not in str(info.value)
        assert metrics.read_text() == written
        assert not (fresh / "config.yaml").exists()
    resume(folder)  # released on leaving the block
    assert rounds(folder) == [0, 1, 2]


LAUNCHING_PARENT = """
import importlib.util, os, shutil, subprocess, sys, time
spec = importlib.util.spec_from_file_location("lifetime", sys.argv[1])
lifetime = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lifetime)
wrapped = os.path.join(sys.argv[2], "sleep")  # what the shell below starts by name
with open(wrapped, "w") as file:
    file.write(lifetime.wrapper(shutil.which("sleep")))
os.chmod(wrapped, 0o755)
env = {**os.environ, "PATH": sys.argv[2] + os.pathsep + os.environ["PATH"]}
child = subprocess.Popen(lifetime.launched(["sh", "-c", "sleep 120 & wait"]), env=env, start_new_session=True)
print(child.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_launched_command_and_what_it_starts_by_name_die_with_their_parent(tmp_path: Path) -> None:
    """fedaccel.runs.lifetime: a command started through `launched`, in a session of its own, and a
    program it starts by name through a `wrapper` on PATH, both die at once with a parent killed -9."""
    import fedaccel.runs.lifetime as lifetime

    parent = subprocess.Popen([sys.executable, "-I", "-c", LAUNCHING_PARENT, lifetime.__file__, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    started: list[int] = []
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                b"sleep\x00120" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in descendants(child) if alive(pid)):
            time.sleep(0.05)
        started = [child, *descendants(child)]
        assert len(started) == 2, started  # the shell and its sleep
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(pid) for pid in started):
            time.sleep(0.05)
        assert not [pid for pid in started if alive(pid)]
    finally:
        for pid in [parent.pid, *started]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


EXITING_HOLDER = """
import ctypes, os, sys, threading, time
from fedaccel.runs.lock import lock_run_dir
lock = lock_run_dir(sys.argv[1])
threading.Thread(target=lambda: (time.sleep(2.0), os._exit(0))).start()  # still holds the lock for 2 s
print("locked", flush=True)
ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[os.uname().machine], 0)  # only this thread exits
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine not in ("x86_64", "aarch64"),
                    reason="exits one thread with a raw syscall")
@pytest.mark.slow
def test_a_writer_that_is_still_exiting_is_waited_for_not_reported(tmp_path: Path) -> None:
    """A killed writer whose first thread is already a zombie while another finishes (an fsync,
    say) still holds the lock for a moment: the next writer waits for it instead of refusing."""
    holder = subprocess.Popen([sys.executable, "-c", EXITING_HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        deadline = time.monotonic() + 10
        while alive(holder.pid) and time.monotonic() < deadline:  # its first thread: a zombie
            time.sleep(0.01)
        with lock_run_dir(tmp_path):
            assert holder.poll() == 0  # taken once the holder had ended
    finally:
        holder.kill()
        holder.wait()


def test_a_run_killed_before_its_first_checkpoint_resumes_without_repeating_round_0(tmp_path: Path) -> None:
    config = load_config(None, ["data.dataset=digits", "model=svm", "data.clients=2", "train.rounds=2",
                                "run.progress=false"])
    folder = run(config, tmp_path / "r")
    for name in ("checkpoint.pt", "summary.json", "model.pt"):
        (folder / name).unlink()
    metrics = folder / "metrics.jsonl"
    metrics.write_text(metrics.read_text().splitlines()[0] + "\n")  # killed after writing round 0
    resume(folder)
    assert rounds(folder) == [0, 1, 2]


def test_a_worker_asked_to_stop_in_a_cells_last_round_starts_no_further_cell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The experiment's SIGTERM reaches a worker while its cell finishes by itself (the last round: no checkpoint to
    stop at, and the run clears the request as it ends): the worker still starts no further cell, such as the one
    already waiting in the pool's queue (a new user saw that cell run to the end after Ctrl-C)."""
    import fedaccel.launch
    from fedaccel.grids import cell
    from fedaccel.runs import stopping

    started = []

    def a_run_that_ends_as_the_signal_comes(config: object, run_dir: Path, progress: object = None) -> Path:
        started.append(run_dir.name)
        with stopping.stop_signals():
            os.kill(os.getpid(), signal.SIGTERM)  # handled at once: the request is counted, STOP is set
            stopping.clear_stop()  # as run_loop does when the run ends
        return run_dir

    monkeypatch.setattr(fedaccel.launch, "run", a_run_that_ends_as_the_signal_comes)
    monkeypatch.setattr(cell, "_worker_stopped", False)
    config = load_config(None, [])
    assert cell.run_cell(config, tmp_path / "a", False, 1) == tmp_path / "a"
    with pytest.raises(stopping.Interrupted):
        cell.run_cell(config, tmp_path / "b", False, 1)
    assert started == ["a"]
    monkeypatch.setattr(cell, "_worker_stopped", False)
    cell.run_cell(config, tmp_path / "c", False, None)  # in the experiment's own process (no threads): not a worker
    cell.run_cell(config, tmp_path / "d", False, None)
    assert started == ["a", "c", "d"]


def test_a_killed_pool_leaves_neither_worker_nor_manager_thread_behind() -> None:
    """Stopped (the first Ctrl-C) then killed (a failed cell, a second signal) mid-cell: when ``kill`` returns,
    the workers are dead and the pool's manager thread has closed its pipes. Before, the manager thread
    (forgotten by ``shutdown(wait=False)``) could still be closing them when Python's exit woke it, and
    ``OSError: [Errno 9] Bad file descriptor`` came after the experiment's last line."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from fedaccel.grids.pool import PoolHandles

    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))  # the race is not the start method's
    futures = [pool.submit(time.sleep, 60) for _ in range(4)]
    handles = PoolHandles(pool)
    handles.take()
    deadline = time.monotonic() + 60
    while not all(f.running() for f in futures[:2]) and time.monotonic() < deadline:
        time.sleep(0.01)
    handles.stop()  # as the first Ctrl-C: the queue dropped, SIGTERM to the workers (time.sleep ignores it)
    handles.kill()
    assert len(handles.processes) == 2 and not any(p.is_alive() for p in handles.processes)
    assert handles.manager is not None and not handles.manager.is_alive()
    assert all(f.done() for f in futures)


@pytest.mark.slow
def test_a_second_signal_stops_a_stacked_experiment_at_once(tmp_path: Path) -> None:
    """`experiment --stack-seeds`: the first SIGTERM asks every seed to finish its round, a second stops them at
    their next local step (the seeds run in threads, which the interpreter's exit would otherwise wait for). A round
    here takes ~20 s on a quiet core; the experiment must be gone within 8 s of the second signal."""
    path = tmp_path / "exp.yaml"
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "svm",
            "train": {"rounds": 3, "lr": 0.1, "batch_size": 20, "local_steps": 60_000}, "run": {"progress": False}}
    path.write_text(yaml.safe_dump({"name": "stacked", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"run.seed": [0, 1]}}))
    cells = [tmp_path / "out" / f"run.seed={seed}" for seed in (0, 1)]
    parent = subprocess.Popen([sys.executable, "-m", "fedaccel.cli", "experiment", str(path), "--stack-seeds"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and parent.poll() is None:
            if all((c / "metrics.jsonl").is_file() and rounds(c) == [0] for c in cells):
                break  # round 0 (the start's evaluation) written: round 1 trains
            time.sleep(0.05)
        assert parent.poll() is None, parent.communicate()[1]
        time.sleep(1.0)  # well inside round 1's local steps
        os.kill(parent.pid, signal.SIGTERM)
        time.sleep(0.5)
        second = time.monotonic()
        os.kill(parent.pid, signal.SIGTERM)
        _, err = parent.communicate(timeout=60)
        took = time.monotonic() - second
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait()
    assert took < 8, f"the stacked experiment lived {took:.1f} s after the second signal: {err}"
    assert parent.returncode == 130, err
    assert err.strip().splitlines()[-1] == f"interrupted; `fedaccel experiment {path} --stack-seeds` continues", err
    assert "terminate called" not in err, err  # no thread left running into the interpreter's exit
    for cell in cells:
        assert rounds(cell) == [0] and not (cell / "summary.json").exists(), cell.name


@pytest.mark.parametrize("stack", [False, True], ids=["one-by-one", "stacked-seeds"])
def test_a_stop_in_a_cells_last_round_starts_no_next_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          stack: bool) -> None:
    """SIGINT while a cell (or seed group) runs its last round: that run ends by itself, and the grid stops there
    with Interrupted instead of starting the next cell (only a kill would have stopped it, losing a round's work)."""
    import signal

    import yaml

    import fedaccel.runs.loop as loop
    from fedaccel.grids.experiment import load_experiment, run_experiment
    from fedaccel.runs.stopping import Interrupted

    spec = {"name": "last", "out_dir": str(tmp_path / "out"),
            "base": {"data": {"dataset": "digits", "clients": 3}, "model": "softmax",
                     "train": {"rounds": 3, "lr": 0.1, "batch_size": 40}},
            "grid": {"algorithm": ["fedavg", "fedprox"], "run.seed": [0, 1]}}
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(spec))
    import threading

    real = loop.run_round
    once = threading.Lock()  # one Ctrl-C: each stacked seed's thread reaches round 3, and a loaded machine can
    # handle the first signal before the second arrives (a second Ctrl-C stops at once: the worker crashed in CI)

    def stopping_in_round_3(*args: Any, **kwargs: Any) -> Any:
        state, report = real(*args, **kwargs)
        if state.round == 3 and once.acquire(blocking=False):
            signal.raise_signal(signal.SIGINT)  # to the main thread, as Ctrl-C would be
        return state, report

    monkeypatch.setattr(loop, "run_round", stopping_in_round_3)
    with pytest.raises(Interrupted):
        run_experiment(load_experiment(path), progress=False, stack_seeds=stack)
    done = sorted(d.name for d in (tmp_path / "out").iterdir() if (d / "summary.json").is_file())
    started = sorted(d.name for d in (tmp_path / "out").iterdir() if (d / "config.yaml").is_file())
    assert done == started == (["algorithm=fedavg,run.seed=0", "algorithm=fedavg,run.seed=1"] if stack
                               else ["algorithm=fedavg,run.seed=0"])


def state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped), or "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.slow
def test_ctrl_z_stops_the_workers_with_the_experiment_and_the_stop_is_not_its_time(tmp_path: Path) -> None:
    """Ctrl-Z (SIGTSTP, which the terminal sends to the experiment alone: its workers have process groups of their
    own) stops every worker too, so no round is run while it is stopped; SIGCONT (fg) continues them, every cell
    ends, and the time the lines give leaves the stop out."""
    path = tmp_path / "exp.yaml"
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "svm",
            "train": {"rounds": 250, "lr": 0.1, "batch_size": 20}, "run": {"progress": False}}
    path.write_text(yaml.safe_dump({"name": "paused", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"run.seed": [0, 1]}}))
    cells = [tmp_path / "out" / f"run.seed={seed}" for seed in range(2)]
    began = time.monotonic()
    parent = subprocess.Popen([sys.executable, "-m", "fedaccel.cli", "experiment", str(path), "-j", "2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              process_group=0)  # a group whose parent (pytest's) is in the session: not orphaned,
    workers: list[int] = []                    # so SIGTSTP stops it wherever the tests run (setsid, containers)
    try:
        deadline = time.monotonic() + 180
        # both workers up, a cell 3 rounds in: not both cells, one may finish while a loaded machine starts the other
        while time.monotonic() < deadline and parent.poll() is None and not (len(workers) == 2 and any(
                (c / "metrics.jsonl").is_file() and len(rounds(c)) >= 3 for c in cells)):
            workers = group_leaders(descendants(parent.pid))  # init_worker's setpgrp
            time.sleep(0.02)
        assert len(workers) == 2, workers
        os.kill(parent.pid, signal.SIGTSTP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and {state(pid) for pid in [parent.pid, *workers]} != {"T"}:
            time.sleep(0.05)
        assert {state(pid) for pid in [parent.pid, *workers]} == {"T"}, [state(p) for p in [parent.pid, *workers]]
        time.sleep(0.5)  # a worker's last row may still be reaching the file
        before = [len(rounds(c)) if (c / "metrics.jsonl").is_file() else 0 for c in cells]
        time.sleep(10.0)
        assert [len(rounds(c)) if (c / "metrics.jsonl").is_file() else 0 for c in cells] == before, (
            "rounds ran while the experiment was stopped")
        assert not any((c / "summary.json").is_file() for c in cells)
        os.kill(parent.pid, signal.SIGCONT)
        _, err = parent.communicate(timeout=180)
    finally:
        if parent.poll() is None:
            for pid in [parent.pid, *workers]:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
        parent.wait()
    wall = time.monotonic() - began
    assert parent.returncode == 0, err[-2000:]
    assert all(rounds(c) == list(range(251)) for c in cells)
    spent = [float(n) * (60 if unit == "min" else 1) for n, unit in re.findall(r"2/2 cells done, ([\d.]+) (s|min)", err)]
    # the 10.5 s stopped are not counted: the grid's time is the wall's less its start-up and its table (~4 s
    # here; counted, the stop would leave the time spent above wall - 8 s wherever those take under 8 s)
    assert spent and spent[-1] <= wall - 8, (spent, wall, err[-1000:])


def test_a_stop_once_every_cell_of_a_parallel_grid_finished_stops_nothing(tmp_path: Path) -> None:
    """Ctrl-C after every cell of an `experiment -j 2` had finished said "continues every unfinished cell" and
    exited 130, with no cell left to continue: the grid ends as finished now."""
    import io

    from fedaccel.grids.cell import Failures
    from fedaccel.grids.pool import run_cells_in_parallel
    from fedaccel.grids.progress import GridProgress
    from fedaccel.runs.stopping import STOP, clear_stop

    todo = []
    for k, seed in enumerate((1, 2), start=1):
        config = load_config(None, ["data.dataset=digits", "model=softmax", "data.clients=2", "train.rounds=1",
                                    f"run.seed={seed}", "run.progress=false"])
        todo.append((k, f"seed={seed}", config, run(config, tmp_path / f"seed={seed}")))
    report = GridProgress(len(todo), bars=False, stream=io.StringIO())
    STOP.set()  # the stop comes once both have finished
    try:
        run_cells_in_parallel(todo, 2, report, Failures(report, False))
    finally:
        clear_stop()
        report.close()


def test_a_stacked_groups_stop_says_the_command_continues_every_cell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Ctrl-C under --stack-seeds named one cell ("continues (run.seed=0 after round 1431)") though every seed of
    the group stopped there and other cells had not started; the command continues every one of them."""
    from fedaccel.cli import main
    from fedaccel.grids import experiment as experiment_module
    from fedaccel.runs.stopping import Interrupted

    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"name": "g", "out_dir": str(tmp_path / "out"), "grid": {"run.seed": [0, 1]},
                                    "base": {"data": {"dataset": "digits", "clients": 2}, "model": "softmax",
                                             "train": {"rounds": 2}, "run": {"progress": False}}}))

    def stopped(group, report, progress):  # type: ignore[no-untyped-def]
        raise Interrupted(group[0][3], 1, "SIGINT")

    monkeypatch.setattr(experiment_module, "_run_seed_group", stopped)
    assert main(["experiment", str(path), "--stack-seeds", "--no-progress"]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"interrupted by SIGINT; `fedaccel experiment {path} --stack-seeds --no-progress` continues every unfinished "
        "cell from its checkpoint")
