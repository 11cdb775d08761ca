"""run.device: names, placement of model, data and every state, device-free checkpoints, resume elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from test_dtypes import tensors_in
from torch import nn

from fedaccel import RECIPES, train
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.cli import main
from fedaccel.engine.device import resolve_device, to_device
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, run_round
from fedaccel.errors import ConfigError
from fedaccel.launch import resume, run
from fedaccel.runs.config import load_config
from fedaccel.runs.folder import CHECKPOINT

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine: cpu vs cuda not compared")
SMALL = ["data.dataset=digits", "model=softmax", "data.clients=4", "train.lr=0.1", "train.batch_size=20",
         "train.client_fraction=0.75", "run.progress=false"]


def problem(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, list[np.ndarray]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(48, 4, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return x, y, [np.arange(k, 48, 4) for k in range(4)]


def linear() -> nn.Linear:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return nn.Linear(4, 2)


def metrics_of(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "CPU", "tpu", ""])
def test_misspelt_device_fails_at_load_with_one_line(name: str) -> None:
    with pytest.raises(ConfigError, match="run.device must be one of cpu, cuda, cuda:N, mps, auto") as info:
        load_config(None, [f"run.device={name!r}"])
    assert "\n" not in str(info.value)


def test_device_that_is_not_here_is_one_line_at_start_and_leaves_nothing(tmp_path: Path, capsys) -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cuda", "mps", "cpu")
    with pytest.raises(ConfigError, match=r"run.device cuda:99: ") as info:
        resolve_device("cuda:99")
    assert "\n" not in str(info.value)
    out = tmp_path / "r"
    assert main(["run", "--out", str(out), "--no-progress", *sum((["--set", s] for s in [*SMALL, "run.device=cuda:99"]), [])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: run.device cuda:99: ")
    assert not out.exists()


def test_the_runs_first_line_and_its_summary_name_its_device(tmp_path: Path, capsys) -> None:
    run(load_config(None, [*SMALL, "train.rounds=1", "run.device=auto"]), tmp_path / "r", progress=True)
    first = capsys.readouterr().err.splitlines()[0]
    assert f"device {resolve_device('auto')}, " in first
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())  # where run.device auto ran, kept
    assert summary["device"] == str(resolve_device("auto")) and summary["runtime"].split(" ")[0] in (
        "in-process", "stacked")


def test_flower_runtimes_refuse_another_device_in_one_line() -> None:
    with pytest.raises(ConfigError, match="the Flower runtimes run on the CPU"):
        load_config(None, [*SMALL, "run.runtime=flower-simulation", "run.device=cuda"])


def test_explicit_cpu_gives_the_numbers_of_the_default(tmp_path: Path) -> None:
    x, y, parts = problem()
    default = train(linear(), x, y, parts, x, y, rounds=3, lr=0.1, batch_size=4, progress=False, run_dir=tmp_path / "a")
    explicit = train(linear(), x, y, parts, x, y, rounds=3, lr=0.1, batch_size=4, progress=False,
                     run_dir=tmp_path / "b", device="cpu")
    assert torch.equal(default.w, explicit.w) and explicit.w.device.type == "cpu"
    assert metrics_of(default.run_dir) == metrics_of(explicit.run_dir)


def _on(device: str, value: Any) -> bool:
    found = list(tensors_in(value))
    return bool(found) and all(t.device.type == device for t in found)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_model_data_and_every_state_live_on_the_federations_device(name: str) -> None:
    """"meta" stands in for a GPU: a CPU tensor made by accident anywhere in a round shows up in the
    state. Parts that read numbers on the host (herding order, GraB's sign test, FedGSNR's plan)
    cannot run a round on meta: they are checked at init here and in full by the cuda tests."""
    x, y, parts = problem()
    fed = Federation(linear(), x, y, parts, x, y, LocalOptions(lr=0.1, batch_size=4), device="meta",
                     eval_train_samples=20)
    assert _on("meta", (fed.model.theta, fed.model.grad, list(fed.model.module.parameters()),
                        fed.x_train, fed.y_train, fed.x_test, fed.y_test, fed._train_eval_index))
    algorithm = build_algorithm(name)
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    assert _on("meta", (state.w, state.server, state.clients)) or not list(tensors_in((state.server, state.clients)))
    if algorithm.single("estimator") or algorithm.single("plan_server"):
        return
    for _ in range(2):
        state, report = run_round(algorithm, state, fed, fraction=0.5)
    assert report.participation.train
    assert _on("meta", (state.w, state.server, state.clients))


def test_checkpoints_hold_cpu_tensors_and_a_gpu_run_resumes_on_the_cpu(tmp_path: Path, capsys) -> None:
    """A run whose config names a device this machine lacks (as one started on a GPU) continues with
    ``--set run.device=cpu`` from its checkpoint, with the numbers of an uninterrupted run."""
    reference = run(load_config(None, [*SMALL, "train.rounds=4", "algorithm=scaffold"]), tmp_path / "ref")
    path = run(load_config(None, [*SMALL, "train.rounds=2", "algorithm=scaffold"]), tmp_path / "moved")
    saved = torch.load(path / CHECKPOINT, weights_only=True)  # no map_location: where it was saved
    assert _on("cpu", saved["state"])
    config = yaml.safe_load((path / "config.yaml").read_text())
    config["train"]["rounds"], config["run"]["device"] = 4, "cuda:99"
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match="run.device cuda:99"):
        resume(path, progress=False)
    assert main(["run", "--resume", str(path), "--set", "run.device=cpu", "--no-progress"]) == 0
    assert metrics_of(path) == metrics_of(reference)
    assert main(["run", "--resume", str(path), "--set", "train.rounds=9"]) == 2
    assert "--resume takes the run folder only" in capsys.readouterr().err


def test_to_device_rebuilds_containers_and_state_dataclasses() -> None:
    from fedaccel.algorithms.feddc import FedDCClient

    value = {"a": (torch.ones(2), [FedDCClient(drift=torch.zeros(3))], None, 3)}
    moved = to_device(value, "meta")
    assert moved["a"][0].device.type == "meta" and moved["a"][1][0].drift.device.type == "meta"
    assert moved["a"][1][0].correction is None and moved["a"][2:] == (None, 3)


@GPU
@pytest.mark.parametrize("name", ["fedavg", "scaffold", "bherd-fedavg", "grab-fedavg", "fedgsnr", "fedumf-feddc"])
def test_cuda_gives_the_numbers_of_the_cpu(name: str, tmp_path: Path) -> None:
    x, y, parts = problem()
    runs = {}
    for device in ("cpu", "cuda"):
        runs[device] = train(linear(), x, y, parts, x, y, algorithm=name, rounds=3, lr=0.1, batch_size=4,
                             client_fraction=0.5, progress=False, run_dir=tmp_path / device, device=device)
    state = runs["cuda"].state
    assert _on("cuda", (state.w, state.server, state.clients))
    torch.testing.assert_close(runs["cuda"].w.cpu(), runs["cpu"].w, atol=1e-5, rtol=1e-4)
    for row_gpu, row_cpu in zip(runs["cuda"].metrics, runs["cpu"].metrics, strict=True):
        assert row_gpu["test_loss"] == pytest.approx(row_cpu["test_loss"], abs=1e-5)


@GPU
def test_a_cuda_run_checkpoints_cpu_tensors_and_resumes_on_the_cpu(tmp_path: Path) -> None:
    reference = run(load_config(None, [*SMALL, "train.rounds=4", "algorithm=scaffold"]), tmp_path / "ref")
    path = run(load_config(None, [*SMALL, "train.rounds=2", "algorithm=scaffold", "run.device=cuda"]), tmp_path / "g")
    assert _on("cpu", torch.load(path / CHECKPOINT, weights_only=True)["state"])
    config = yaml.safe_load((path / "config.yaml").read_text())
    config["train"]["rounds"] = 4
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    resume(path, progress=False, device="cpu")
    for got, want in zip(metrics_of(path), metrics_of(reference), strict=True):
        assert got["test_loss"] == pytest.approx(want["test_loss"], abs=1e-4)
