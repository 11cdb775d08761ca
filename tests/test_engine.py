"""The round engine: a FedAvg round by hand, the local optimiser against torch.optim, composition."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedaccel.algorithms.base import Part, Participation, compose, make_rng
from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.algorithms.sampling import sample_clients
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions, batch_positions
from fedaccel.engine.round import init_state, round_info, run_round
from fedaccel.errors import ConfigError
from tiny_models import Scalar, scalar_federation


def test_two_client_fedavg_round_by_hand() -> None:
    fed = scalar_federation()
    algorithm = build_algorithm("fedavg")
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    state, report = run_round(algorithm, state, fed)
    # client 0, one step from 0: grad = (0*1 - 2)*1 = -2 -> w = 0.2
    # client 1, two steps: grad = (0*2-2)*2 = -4 -> 0.4; grad = (0.8-2)*2 = -2.4 -> 0.64
    # p = (1/3, 2/3): w = 0.2/3 + 2*0.64/3
    assert state.w.item() == pytest.approx(0.2 / 3 + 2 * 0.64 / 3, abs=1e-7)
    assert report.local_steps == 3
    assert state.totals["bytes_up"] == 2 * 4 and state.totals["bytes_down"] == 2 * 4


def test_server_learning_rate_scales_the_average_update() -> None:
    fed = scalar_federation()
    algorithm = build_algorithm("fedavg", server_lr=0.5)
    state, _ = run_round(algorithm, init_state(algorithm, fed.model.theta.clone(), 2), fed)
    assert state.w.item() == pytest.approx(0.5 * (0.2 / 3 + 2 * 0.64 / 3), abs=1e-7)


def test_learning_rate_decay_per_round() -> None:
    fed = scalar_federation(lr=0.1, lr_decay=0.5)
    assert round_info(fed, 0).lr == pytest.approx(0.1)
    assert round_info(fed, 3).lr == pytest.approx(0.1 * 0.5**3)
    assert round_info(fed, 3).prev_lr == pytest.approx(0.1 * 0.5**2)


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


@pytest.mark.parametrize("momentum,weight_decay,clip", [(0.0, 0.0, None), (0.9, 1e-3, None), (0.5, 0.0, 0.1)])
def test_local_training_matches_torch_sgd(momentum: float, weight_decay: float, clip: float | None) -> None:
    """One client, one round: the engine's steps equal torch.optim.SGD on the same batches."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 1, 8, 8, generator=g), torch.randint(0, 3, (40,), generator=g)
    reference = small_cnn()
    fed = Federation(
        small_cnn(), x, y, [np.arange(40)], x, y,
        LocalOptions(lr=0.05, batch_size=8, local_epochs=2, momentum=momentum, weight_decay=weight_decay, clip=clip),
    )
    algorithm = build_algorithm("fedavg")
    state, _ = run_round(algorithm, init_state(algorithm, fed.model.theta.clone(), 1), fed)

    opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay)
    for index in fed.batches(0, 0, int(fed.steps[0])):
        opt.zero_grad()
        nn.functional.cross_entropy(reference(x[index]), y[index]).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(reference.parameters(), clip)
        opt.step()
    expected = torch.cat([p.detach().reshape(-1) for p in reference.parameters()])
    assert fed.steps[0] == 10
    torch.testing.assert_close(state.w, expected, atol=1e-6, rtol=1e-5)


def test_local_steps_and_batches() -> None:
    options = LocalOptions(batch_size=10, local_epochs=0.5)
    assert options.steps(100) == 5
    assert options.steps(7) == 1  # at least one step
    assert LocalOptions(batch_size=50, local_epochs=1.5).steps(100) == 3
    order = np.arange(25)
    batches = batch_positions(order, 3, 10)
    assert [b.tolist() for b in batches][2] == list(range(20, 25)) + list(range(5))
    assert all(len(b) == 10 for b in batches)


def test_fixed_local_steps_for_every_client_whatever_its_size() -> None:
    x, y = torch.randn(130, 1), torch.zeros(130)
    parts = [np.arange(0, 10), np.arange(10, 130)]
    fed = Federation(Scalar(), x, y, parts, x, y, LocalOptions(batch_size=10, local_steps=4))
    assert fed.steps.tolist() == [4, 4]
    assert LocalOptions(batch_size=10).steps(120) == 12  # without it: E |D_i| / B


def test_batch_order_fixed_or_reshuffled() -> None:
    x, y = torch.randn(30, 1), torch.zeros(30)
    parts = [np.arange(30)]
    fixed = Federation(Scalar(), x, y, parts, x, y, LocalOptions(batch_size=5), seed=3)
    assert (fixed.order(0, 0) == fixed.order(0, 7)).all()
    rr = Federation(Scalar(), x, y, parts, x, y, LocalOptions(batch_size=5, reshuffle=True), seed=3)
    assert not (rr.order(0, 0) == rr.order(0, 1)).all()
    assert sorted(rr.order(0, 1).tolist()) == list(range(30))


def test_client_sampling_is_seeded_and_sized() -> None:
    fed = scalar_federation()
    info = round_info(fed, 4)
    weights = np.full(20, 0.05)
    from dataclasses import replace

    info = replace(info, weights=weights)
    first = sample_clients(info, 0.25)
    assert len(first) == 5 and len(set(first)) == 5
    assert first == sample_clients(info, 0.25)
    assert first != sample_clients(replace(info, round=5), 0.25)
    assert len(sample_clients(info, 0.01)) == 1
    assert len(sample_clients(info, 0.125)) == 3  # C N = 2.5 rounds up
    assert len(sample_clients(info, 0.175)) == 4  # 3.5 too (Python's round would give 2 and 4)


def test_compose_rejects_two_owners_of_an_exclusive_stage() -> None:
    def everyone(info):  # noqa: ANN001, ANN202
        return Participation(tuple(range(info.n_clients)), ())

    a, b = Part("a", participation=everyone), Part("b", participation=everyone)
    with pytest.raises(ValueError, match="participation"):
        compose("bad", a, b, mean_aggregate())
    with pytest.raises(ValueError, match="aggregates"):
        compose("bad", a)


def test_parts_stages_run_in_order_with_explicit_state() -> None:
    """A toy part with every client-side stage: state goes in and comes back out per client."""
    calls: list[str] = []

    def start(ctx, w, theta0, ss, cs):  # noqa: ANN001, ANN202
        calls.append(f"start{ctx.client}")
        return theta0

    def local_term(ctx, w, ss, cs):  # noqa: ANN001, ANN202
        return lambda theta, grad: grad.add_(0.0)

    def client_end(ctx, w, theta0, theta_end, ss, cs):  # noqa: ANN001, ANN202
        calls.append(f"end{ctx.client}")
        return cs + 1, {"count": torch.tensor([float(cs + 1)])}

    def server_end(info, w, w_next, updates, ss):  # noqa: ANN001, ANN202
        return w_next, ss + sum(int(u.extras["count"]) for u in updates)

    counter = Part(
        "counter", init_server=lambda w: 0, init_client=lambda w: 0, start=start,
        local_term=local_term, client_end=client_end, server_end=server_end,
    )
    algorithm = compose("counting-fedavg", counter, mean_aggregate())
    fed = scalar_federation()
    state = init_state(algorithm, fed.model.theta.clone(), 2)
    for _ in range(2):
        state, _ = run_round(algorithm, state, fed)
    assert calls == ["start0", "end0", "start1", "end1"] * 2
    assert [c[0] for c in state.clients] == [2, 2]
    assert state.server[0] == 1 + 1 + 2 + 2
    # the extra tensor was counted as uploaded bytes: 2 rounds x 2 clients x (model + count)
    assert state.totals["bytes_up"] == 2 * 2 * (4 + 4)


def test_invalid_local_options_fail_with_one_line() -> None:
    for kwargs in ({"lr": -0.1}, {"batch_size": 0}, {"momentum": 1.0}, {"lr_decay": 0.0}, {"local_epochs": 0},
                   {"local_steps": 0}):
        with pytest.raises(ConfigError) as err:
            LocalOptions(**kwargs)
        assert "\n" not in str(err.value)


def test_rng_streams_are_independent_and_reproducible() -> None:
    a = make_rng(0, "sampling", 1).random(3)
    assert (a == make_rng(0, "sampling", 1).random(3)).all()
    assert not (a == make_rng(0, "order", 1).random(3)).all()
    assert not (a == make_rng(1, "sampling", 1).random(3)).all()
