"""Grids on Ray: the same numbers as one cell at a time, and a worker killed mid-cell costs a retry
from the cell's checkpoint (no round lost, none written twice)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from fedaccel.errors import UserError
from fedaccel.grids.experiment import CellsFailed, load_experiment, run_experiment
from fedaccel.grids.ray_tasks import RayOptions, _wait_for_writer, run_cells_on_ray
from fedaccel.launch import run
from fedaccel.runs.config import load_config
from fedaccel.runs.lock import lock_run_dir

ray = pytest.importorskip("ray")

BASE = {"data": {"dataset": "digits", "clients": 3}, "model": "svm",
        "train": {"rounds": 4, "lr": 0.1, "batch_size": 20}, "run": {"progress": False, "checkpoint_every": 2}}


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():  # a Flower simulation's local Ray, kept up in this process (fedaccel.flower.warm_ray)
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # ours, not a neighbour's
    yield
    ray.shutdown()


def numbers(run_dir: Path) -> list[dict]:
    """The metrics rows without their wall times (the only thing that differs between runs)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]


def grid(tmp_path: Path, out: str, grid: dict, **train) -> Path:
    path = tmp_path / f"{out}.yaml"
    base = yaml.safe_load(yaml.safe_dump(BASE))
    base["train"].update(train)
    path.write_text(yaml.safe_dump({"name": out, "out_dir": str(tmp_path / out), "base": base, "grid": grid}))
    return path


@pytest.mark.slow
def test_a_grid_on_ray_gives_the_numbers_of_one_cell_at_a_time(local_ray, tmp_path: Path) -> None:
    cells = {"algorithm": ["fedavg", {"name": "bherd", "alpha": 0.5}], "run.seed": [0, 1]}
    serial = run_experiment(load_experiment(grid(tmp_path, "serial", cells)), workers=1)
    on_ray = run_experiment(load_experiment(grid(tmp_path, "ray", cells)), ray=RayOptions("auto"))
    assert len(on_ray.run_dirs) == 4
    for a, b in zip(serial.run_dirs, on_ray.run_dirs):
        assert a.name == b.name and (b / "summary.json").is_file()
        assert numbers(a) == numbers(b), a.name
    assert on_ray.table == serial.table


@pytest.mark.slow
def test_a_flower_simulation_in_a_ray_someone_else_started_leaves_it_running(local_ray, tmp_path: Path) -> None:
    """Flower's Ray backend shuts Ray down after a simulation; fedaccel's leaves a Ray it did not
    start (here this module's) running, and the simulation gives the in-process numbers: of
    GraB-reorder, whose client state sets the order of the next round (one of the cases of
    tests/test_flower.py's simulations, checked here to save a simulation)."""
    pytest.importorskip("flwr")
    from fedaccel.flower import warm_actors

    before = ray.get_runtime_context().gcs_address
    overrides = ["data.dataset=digits", "model=softmax", "data.clients=3", "data.split=dirichlet",
                 "data.split.alpha=0.5", "train.rounds=3", "train.lr=0.1", "train.batch_size=20", "run.progress=false",
                 "algorithm=grab-reorder"]
    local = numbers(run(load_config(None, overrides), tmp_path / "in-process"))
    flower = numbers(run(load_config(None, [*overrides, "run.runtime=flower-simulation"]), tmp_path / "flower"))
    assert ray.is_initialized() and ray.get_runtime_context().gcs_address == before
    assert warm_actors.kept_actors() == []  # its ClientApp workers are not kept on a Ray fedaccel did not start
    assert len(flower) == len(local) == 4
    for a, b in zip(local, flower, strict=True):
        for key in ("test_acc", "test_loss", "train_loss"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["round"], key)
        for key in ("bytes_up", "bytes_down", "local_steps", "clients", "uploaded"):
            assert b.get(key) == a.get(key), (a["round"], key)
    assert local[-1]["test_acc"] > local[0]["test_acc"]  # it learned something


@pytest.mark.slow
def test_a_grid_does_not_take_the_local_ray_a_simulation_kept_up_for_its_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that ran a Flower simulation keeps its local Ray (fedaccel.flower.warm_ray); a grid
    asked to run on Ray afterwards joins what it was asked for, not that instance."""
    from fedaccel.flower import warm_ray
    from fedaccel.grids import ray_tasks

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    warm_ray.remember_started({"init_args": {"num_cpus": 1}})  # as a simulation that started it says
    kept = ray.get_runtime_context().gcs_address
    monkeypatch.setenv("RAY_ADDRESS", "")  # no cluster: "auto" starts a local instance of its own
    monkeypatch.setattr(ray_tasks, "_joined_here", False)
    try:
        assert "1 node(s)" in ray_tasks.connect("auto")
        assert ray.get_runtime_context().gcs_address != kept and not warm_ray._ours()
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_a_worker_killed_mid_cell_costs_a_retry_from_its_checkpoint(local_ray, tmp_path: Path) -> None:
    """The test kills the Ray worker writing the cell (the PID in its folder's lock) once the cell
    has a checkpoint; Ray retries the task, which resumes from that checkpoint: rounds 0..R once
    each, and the numbers of an uninterrupted run."""
    rounds = 80
    experiment = load_experiment(grid(tmp_path, "killed", {"run.seed": [3]}, rounds=rounds))
    name, config = experiment.cells[0]
    cell = experiment.out_dir / name
    killed: list[int] = []

    def kill_when_checkpointed() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            metrics = cell / "metrics.jsonl"
            if (cell / "checkpoint.pt").is_file() and metrics.is_file() and len(metrics.read_text().splitlines()) > 6:
                pid = (cell / ".lock").read_text().strip()
                if pid.isdigit() and not (cell / "summary.json").exists():
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
                    return
            time.sleep(0.005)

    killer = threading.Thread(target=kill_when_checkpointed, daemon=True)
    killer.start()
    experiment.out_dir.mkdir(parents=True)
    (info,) = run_cells_on_ray([(1, name, config, cell)], RayOptions("auto", max_retries=2))
    killer.join(timeout=5)
    assert killed, "the cell ended before it could be killed"
    assert info["resumed"] and info["pid"] != killed[0], info  # the retry, in another worker, resumed the folder

    uninterrupted = run(config, tmp_path / "uninterrupted")
    assert [row["round"] for row in numbers(cell)] == list(range(rounds + 1))
    assert numbers(cell) == numbers(uninterrupted)


def test_a_retry_waits_while_a_live_writer_holds_the_folder(tmp_path: Path) -> None:
    """A node taken for dead that still writes: the retry waits for its lock, then goes on; after
    the wait's limit, the lock's own one-line error."""
    folder = tmp_path / "cell"
    lock = lock_run_dir(folder)
    with pytest.raises(UserError, match=rf"is being written by process {os.getpid()}"):
        _wait_for_writer(folder, timeout=0.2, every=0.05)
    waited = threading.Event()
    waiter = threading.Thread(target=lambda: (_wait_for_writer(folder, timeout=60, every=0.05), waited.set()))
    waiter.start()
    time.sleep(0.5)
    assert not waited.is_set()
    lock.release()
    waiter.join(timeout=30)
    assert waited.is_set()


@pytest.mark.slow
def test_a_cells_own_error_on_ray_stops_the_grid_with_its_one_line(local_ray, tmp_path: Path) -> None:
    """The MNIST cell finds no data; with fail_fast the grid stops with that line, and the digits cell beside it
    is stopped too (at a checkpoint, not run to its end). Without, it is said and the other cell finishes."""
    path = grid(tmp_path, "bad", {"data.dataset": ["mnist", "digits"]}, rounds=2000)
    experiment = load_experiment(path, [f"data.root={tmp_path / 'nowhere'}"])
    with pytest.raises(UserError, match="dataset folder does not exist") as info:
        run_experiment(experiment, ray=RayOptions("auto"), fail_fast=True)
    assert not isinstance(info.value, ray.exceptions.RayError) and "\n" not in str(info.value)
    beside = experiment.out_dir / experiment.cells[1][0]
    _wait_for_writer(beside, timeout=60, every=0.1)
    assert not (beside / "summary.json").exists()
    # another folder: a cancelled task that had not yet taken its cell's lock may still make that folder, after
    # any wait here (the cluster outlives the grid), and the same folder would then hold a stray cell
    experiment = load_experiment(path, [f"data.root={tmp_path / 'nowhere'}", "train.rounds=4"])
    experiment.out_dir = tmp_path / "again"
    with pytest.raises(CellsFailed, match=r"^1 of 2 cells failed \(data.dataset=mnist\)"):
        run_experiment(experiment, ray=RayOptions("auto"), progress=False)
    assert (experiment.out_dir / experiment.cells[1][0] / "summary.json").is_file()


@pytest.mark.slow
def test_a_cell_whose_grid_ended_stops_though_its_cancel_was_lost(local_ray) -> None:
    """A Ray cancel that reaches a task as it starts is lost: its cell ran all its rounds after the grid had said it
    stopped (test_a_cells_own_error_on_ray... waited 60 s for it, in vain, on a loaded machine). Each task also
    watches its grid's flag, an actor the grid kills as it stops: gone, the cell is asked to stop (as SIGINT does);
    gone before the task began, the task starts nothing; a slow answer is no stop."""
    from fedaccel.grids.ray_tasks import STOP_POLL_S, GridStop, watching
    from fedaccel.runs.stopping import STOP, clear_stop

    flag = ray.remote(num_cpus=0)(GridStop).options(name="test-grid-stop").remote()
    try:
        with watching("test-grid-stop") as ended:
            assert not ended
            time.sleep(3 * STOP_POLL_S)
            assert not STOP.is_set()  # the grid goes on
            ray.kill(flag)
            deadline = time.monotonic() + 30
            while not STOP.is_set() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert STOP.is_set()
    finally:
        clear_stop()
    with watching("test-grid-stop") as ended:
        assert ended and not STOP.is_set()


@pytest.mark.slow
def test_ctrl_c_cancels_the_cells_each_keeping_its_checkpoint(tmp_path: Path) -> None:
    """`experiment --ray auto` (its own local Ray) gets SIGINT while its two cells run: each
    finishes its round and checkpoints it, and the last line names the command that continues."""
    import subprocess
    import sys

    import torch

    path = grid(tmp_path, "stopped", {"run.seed": [0, 1]}, rounds=3000)
    cells = [tmp_path / "stopped" / f"run.seed={seed}" for seed in (0, 1)]
    env = {**os.environ, "RAY_ADDRESS": ""}
    parent = subprocess.Popen([sys.executable, "-m", "fedaccel.cli", "experiment", str(path), "--ray", "auto"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and parent.poll() is None:
            if all((c / "metrics.jsonl").is_file() and len((c / "metrics.jsonl").read_text().splitlines()) > 3
                   for c in cells):
                break
            time.sleep(0.05)
        parent.send_signal(signal.SIGINT)
        _, err = parent.communicate(timeout=120)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == 130, err
    assert err.strip().splitlines()[-1] == (f"interrupted by SIGINT; `fedaccel experiment {path} --ray auto` continues "
                                           "every unfinished cell from its checkpoint"), err
    for cell in cells:
        saved = torch.load(cell / "checkpoint.pt", weights_only=True)["state"]["round"]
        assert saved == [row["round"] for row in numbers(cell)][-1] and not (cell / "summary.json").exists()


def test_ray_options_on_the_command_line(tmp_path: Path, capsys) -> None:
    from fedaccel.cli import main

    path = grid(tmp_path, "cli", {"run.seed": [0]})
    for argv, message in ((["--cpus-per-cell", "2"], "--cpus-per-cell and --gpus-per-cell go with --ray"),
                          (["--ray", "auto", "-j", "2"], "-j and --ray do not go together"),
                          (["--ray", "auto", "--cpus-per-cell", "0"], "--cpus-per-cell must be > 0")):
        assert main(["experiment", str(path), *argv]) == 2
        assert message in capsys.readouterr().err
