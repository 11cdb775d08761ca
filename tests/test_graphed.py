"""Stacked chunks replayed as CUDA graphs (fedaccel.engine.graphed): the numbers of the eager loop, bit for bit.

The GPU tests skip on a machine without CUDA; the CPU tests check that nothing is captured or remembered there."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedaccel.algorithms.registry import build_algorithm
from fedaccel.engine import graphed
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, run_round
from fedaccel.engine.stacked import StackedClients
from fedaccel.models import build_model

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine: no graph to capture")


def federation(model: str, device: str, clients: int = 6, **options) -> Federation:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(clients * 40, 1, 28, 28, generator=g).to(device)
    y = torch.randint(0, 10, (clients * 40,), generator=g).to(device)
    parts = [np.arange(k, clients * 40, clients) for k in range(clients)]
    module = build_model(model, (1, 28, 28), 10, seed=0).to(device)
    settings = {"lr": 0.05, "batch_size": 10, "local_steps": 3, **options}
    return Federation(module, x, y, parts, x[:20], y[:20], LocalOptions(**settings), seed=0)


def rounds(fed: Federation, algorithm: str = "fedavg", n: int = 4) -> list[torch.Tensor]:
    alg = build_algorithm(algorithm)
    state = init_state(alg, fed.model.theta.clone(), fed.n_clients)
    runtime = StackedClients(alg, fed, state.clients)
    out = []
    for _ in range(n):
        state, _ = run_round(alg, state, fed, fraction=1.0, runtime=runtime)
        out.append(state.w.clone())
    return out


def test_nothing_is_captured_or_remembered_on_the_cpu() -> None:
    graphed.GRAPHS.graphs.clear()
    graphed.GRAPHS.seen.clear()
    rounds(federation("svm", "cpu"), n=3)
    assert not graphed.GRAPHS.graphs and not graphed.GRAPHS.seen


def test_the_switch_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDACCEL_CUDA_GRAPHS", "0")
    assert not graphed.enabled()
    monkeypatch.setenv("FEDACCEL_CUDA_GRAPHS", "1")
    assert graphed.enabled()


@GPU
@pytest.mark.parametrize("model", ["svm", "2nn", "cnn"])
@pytest.mark.parametrize("options", [{}, {"momentum": 0.9, "weight_decay": 1e-3, "clip": 0.5}],
                         ids=["plain", "momentum-decay-clip"])
def test_replayed_rounds_equal_eager_rounds_bit_for_bit(model: str, options: dict,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    graphed.GRAPHS.graphs.clear()
    graphed.GRAPHS.seen.clear()
    monkeypatch.setenv("FEDACCEL_CUDA_GRAPHS", "0")
    eager = rounds(federation(model, "cuda", **options))
    assert not graphed.GRAPHS.graphs
    monkeypatch.setenv("FEDACCEL_CUDA_GRAPHS", "1")
    replayed = rounds(federation(model, "cuda", **options))
    # the CNN is not captured (cuDNN chose other algorithms under capture: 7e-6 apart on an H200)
    assert len(graphed.GRAPHS.graphs) == (model != "cnn"), "the second round of a static shape is captured"
    for a, b in zip(eager, replayed):
        assert torch.equal(a, b)


@GPU
def test_a_decaying_step_size_is_never_captured_and_keeps_its_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    graphed.GRAPHS.graphs.clear()
    graphed.GRAPHS.seen.clear()
    replayed = rounds(federation("2nn", "cuda", lr_decay=0.9))
    assert not graphed.GRAPHS.graphs
    monkeypatch.setenv("FEDACCEL_CUDA_GRAPHS", "0")
    for a, b in zip(rounds(federation("2nn", "cuda", lr_decay=0.9)), replayed):
        assert torch.equal(a, b)


@GPU
@pytest.mark.parametrize("algorithm", ["fedprox", "scaffold", "bherd", "fednova"])
def test_recipes_with_per_round_terms_stay_eager_and_equal_the_cpu(algorithm: str) -> None:
    graphed.GRAPHS.graphs.clear()
    graphed.GRAPHS.seen.clear()
    on_gpu = rounds(federation("2nn", "cuda"), algorithm, n=3)
    on_cpu = rounds(federation("2nn", "cpu"), algorithm, n=3)
    for a, b in zip(on_gpu, on_cpu):
        assert float((a.cpu() - b).abs().max()) <= 1e-5
