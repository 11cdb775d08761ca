"""Aggregation in O(model) memory: an algorithm whose server stages declare a fold form folds each upload as it
arrives, and gives the numbers of the stored-updates path (to float rounding) in every runtime that streams."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.algorithms.base import ClientUpdate, Part, RoundInfo, compose
from fedaccel.algorithms.fednova import fednova_aggregate
from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.algorithms.registry import RECIPES, build_algorithm
from fedaccel.engine.round import init_state, run_round
from fedaccel.engine.stacked import StackedClients
from test_stacked import algorithm_for, assert_states_close, federation

#: The recipes that opt in (their aggregator and every server_end part fold). A recipe that gains or loses a
#: fold form must be listed or unlisted here on purpose.
STREAMING = {
    "fedavg", "centralized", "fedprox", "fedgsnr", "fedgsnr-fedprox", "fedgsnr-scaffold", "fedumf", "fedumf-fedprox",
    "fedumf-scaffold", "bherd", "bherd-fedavg", "grab-reorder", "fednova", "scaffold", "bherd-fednova",
    "bherd-scaffold", "bherd-fedprox", "fedgsnr-bherd", "fedumf-bherd", "fedgsnr-fedumf",
}


def test_the_recipes_that_stream_are_the_listed_ones() -> None:
    assert {name for name in RECIPES if build_algorithm(name).streams()} == STREAMING & set(RECIPES)
    assert build_algorithm("fednova", gmf=0.5).streams()  # server momentum reads no update: it folds too


def run(name: str, stacked: bool, stream: bool, rounds: int = 3) -> tuple[Any, list[Any]]:
    algorithm = algorithm_for(name)
    fed = federation("2nn")
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    runtime = StackedClients(algorithm, fed, state.clients, stack_size=4) if stacked else None
    reports = []
    for _ in range(rounds):
        state, report = run_round(algorithm, state, fed, fraction=0.7, runtime=runtime, stream=stream)
        reports.append(report)
    return state, reports


@pytest.mark.parametrize("stacked", [False, True], ids=["in-process", "stacked"])
@pytest.mark.parametrize("name", sorted(STREAMING & set(RECIPES)))
def test_streamed_aggregation_equals_the_stored_updates(name: str, stacked: bool) -> None:
    (a, ra), (b, rb) = run(name, stacked, stream=False), run(name, stacked, stream=True)
    assert not torch.equal(a.w, federation("2nn").model.theta)  # it trained
    torch.testing.assert_close(b.w, a.w, atol=1e-6, rtol=1e-5)
    assert_states_close(b.server, a.server)
    assert_states_close(b.clients, a.clients)
    assert [(r.bytes_up, r.bytes_down, r.local_steps, r.uploaded) for r in rb] == \
        [(r.bytes_up, r.bytes_down, r.local_steps, r.uploaded) for r in ra]
    assert_same_diag([r.diag for r in rb], [r.diag for r in ra])  # client diagnostics survive the fold


def assert_same_diag(got: Any, want: Any) -> None:
    """Equal structure and discrete values; floats (computed from the model, so from its rounding) to 1e-5."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), (got, want)
        for key in want:
            assert_same_diag(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert_same_diag(g, w)
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    else:
        assert got == want


def test_a_part_without_a_fold_keeps_the_updates() -> None:
    """grab-fedavg rescales the updates before aggregating (server_adjust) and FedDyn's server_end has no fold:
    both take the stored path, whatever ``stream`` says."""
    for name in ("grab-fedavg", "feddyn"):
        assert not build_algorithm(name).streams()
    lonely = Part(name="reads-updates", server_end=lambda info, w, w_next, updates, ss: (w_next, len(updates)))
    assert not compose("x", lonely, mean_aggregate()).streams()


@pytest.mark.parametrize("stacked", [False, True], ids=["in-process", "stacked"])
def test_no_earlier_update_is_alive_when_the_next_is_folded(stacked: bool) -> None:
    """The O(model) claim itself: when upload k is folded, the tensors of uploads 0..k-1 are gone."""
    alive_at_add: list[int] = []
    refs: list[weakref.ref] = []
    mean = mean_aggregate()

    def probe_fold(info: RoundInfo, w: torch.Tensor) -> Any:
        inner = mean.aggregate_fold(info, w)  # type: ignore[misc]

        class Probe:
            def add(self, update: ClientUpdate) -> None:
                alive_at_add.append(sum(r() is not None for r in refs))
                refs.append(weakref.ref(update.delta))
                inner.add(update)

            def finish(self, w: torch.Tensor) -> torch.Tensor:
                return inner.finish(w)

        return Probe()

    algorithm = compose("probe", Part(name="mean", aggregate=mean.aggregate, aggregate_fold=probe_fold))
    fed = federation("svm")
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    runtime = StackedClients(algorithm, fed, state.clients, stack_size=4) if stacked else None
    run_round(algorithm, state, fed, runtime=runtime)
    assert len(alive_at_add) == fed.n_clients and max(alive_at_add) == 0, alive_at_add


def test_eval_models_that_need_the_updates_take_the_stored_path() -> None:
    """client_mean is computed from every update: with it requested the round keeps them (and still streams
    nothing wrongly)."""
    from fedaccel.engine.evaluated import init_evaluated

    algorithm = build_algorithm("fedavg")
    fed = federation("svm")
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    state.evaluated = init_evaluated(["broadcast", "client_mean"], state.w, fed.n_clients)
    after, _ = run_round(algorithm, state, fed)
    assert not torch.equal(after.evaluated["client_mean"], state.w)


def _updates(weights: list[float], steps: list[int], seed: int) -> list[ClientUpdate]:
    g = torch.Generator().manual_seed(seed)
    return [ClientUpdate(k, w, s, torch.randn(7, generator=g) * 10 ** (k % 3)) for k, (w, s) in
            enumerate(zip(weights, steps))]


@settings(max_examples=60, deadline=None)
@given(
    clients=st.lists(st.tuples(st.floats(1e-6, 1.0), st.integers(1, 40)), min_size=0, max_size=12),
    seed=st.integers(0, 2**16),
    weighting=st.sampled_from(["data", "uniform"]),
    server_lr=st.floats(0.05, 3.0),
    mu=st.sampled_from([0.0, 0.3]),
    momentum=st.sampled_from([0.0, 0.5]),
    tau_eff=st.sampled_from(["normalisers", "steps"]),
)
def test_folds_equal_their_aggregators_on_generated_uploads(
    clients: list[tuple[float, int]], seed: int, weighting: str, server_lr: float, mu: float, momentum: float,
    tau_eff: str,
) -> None:
    """Weights spanning six decades, unequal steps, no upload at all: the fold of each aggregator equals it."""
    updates = _updates([w for w, _ in clients], [s for _, s in clients], seed)
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.ones(12) / 12, seed=0, momentum=momentum)
    w = torch.linspace(-1, 1, 7)
    for part in (mean_aggregate(server_lr=server_lr, weighting=weighting),
                 fednova_aggregate(mu=mu, tau_eff=tau_eff)):
        fold = part.aggregate_fold(info, w)  # type: ignore[misc]
        for u in updates:
            fold.add(u)
        want = part.aggregate(info, w, updates)  # type: ignore[misc]
        torch.testing.assert_close(fold.finish(w), want, atol=1e-5 * (1 + float(want.abs().max())), rtol=1e-5)


def test_a_runtime_whose_train_takes_no_sink_gets_the_stored_path() -> None:
    """A runtime that may still drop an update after training (a subclass filtering uploads, a Flower server)
    never has an update folded before it decides: only a ``train`` that takes ``sink`` streams."""
    from fedaccel.engine.round import InProcessClients, takes_sink

    class DropsClient0(InProcessClients):
        def train(self, contexts, w, server):  # type: ignore[no-untyped-def]
            updates, diag = super().train(contexts, w, server)
            return [u for u in updates if u.client != 0], diag

    algorithm = build_algorithm("fedavg")
    fed = federation("svm")
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    assert takes_sink(InProcessClients(algorithm, fed, state.clients))
    assert takes_sink(StackedClients(algorithm, fed, state.clients))
    runtime = DropsClient0(algorithm, fed, state.clients)
    assert not takes_sink(runtime)
    dropped, report = run_round(algorithm, state, fed, runtime=runtime)
    assert report.uploaded == fed.n_clients - 1
    everyone, _ = run_round(algorithm, state, fed, stream=False)
    assert not torch.allclose(dropped.w, everyone.w)  # client 0's update was left out, not folded in early
