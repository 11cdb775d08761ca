"""FedProx: a hand case, mu = 0 ≡ FedAvg, and the proximal pull towards w_t."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedaccel.algorithms.fedprox import fedprox
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, run_round
from fedaccel.errors import ConfigError
from tiny_models import Scalar


def scalar_federation() -> Federation:
    # client 0: one sample (x=1, y=2); client 1: two samples (x=2, y=2)
    x = torch.tensor([[1.0], [2.0], [2.0]])
    y = torch.tensor([2.0, 2.0, 2.0])
    parts = [np.array([0]), np.array([1, 2])]
    return Federation(Scalar(), x, y, parts, x, y, LocalOptions(lr=0.1, batch_size=1))


def test_fedprox_round_by_hand() -> None:
    fed = scalar_federation()
    algorithm = build_algorithm("fedprox", mu=1.0)
    state, _ = run_round(algorithm, init_state(algorithm, fed.model.theta.clone(), 2), fed)
    # client 0, one step from w = 0: z = -2, prox 1*(0 - 0) = 0 -> 0.2
    # client 1: z = (0*2 - 2)*2 = -4 -> 0.4;
    #           z = (0.8 - 2)*2 = -2.4, prox 1*(0.4 - 0) = 0.4 -> 0.4 - 0.1*(-2.0) = 0.6
    assert state.w.item() == pytest.approx(0.2 / 3 + 2 * 0.6 / 3, abs=1e-7)


def non_iid_federation(momentum: float = 0.0) -> Federation:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(90, 6, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()  # 3 classes
    order = np.argsort(y.numpy(), kind="stable")
    parts = [order[0:20], order[20:55], order[55:90]]
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    options = LocalOptions(lr=0.1, batch_size=8, local_epochs=2, momentum=momentum)
    return Federation(module, x, y, parts, x, y, options, seed=1)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_mu_zero_is_fedavg(momentum: float) -> None:
    runs = {}
    for name, params in (("fedavg", {}), ("fedprox", {"mu": 0.0}), ("fedprox", {"mu": 0.1})):
        fed = non_iid_federation(momentum)
        algorithm = build_algorithm(name, **params)
        state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
        for _ in range(4):
            state, _ = run_round(algorithm, state, fed)
        runs[(name, params.get("mu"))] = state.w
    torch.testing.assert_close(runs[("fedprox", 0.0)], runs[("fedavg", None)], atol=1e-7, rtol=0)
    # and the term is really there when mu > 0
    assert (runs[("fedprox", 0.1)] - runs[("fedavg", None)]).abs().max() > 1e-4


def test_proximal_term_keeps_clients_near_the_global_model() -> None:
    """A larger mu gives a smaller local move ||theta_end - w_t|| (one client, one round)."""
    moves = []
    for mu in (0.0, 1.0, 10.0):
        fed = non_iid_federation()
        algorithm = build_algorithm("fedprox", mu=mu)
        w0 = fed.model.theta.clone()
        state, _ = run_round(algorithm, init_state(algorithm, w0, fed.n_clients), fed)
        moves.append(float((state.w - w0).norm()))
    assert moves[0] > moves[1] > moves[2] > 0


def test_local_term_adds_mu_times_distance() -> None:
    w = torch.tensor([1.0, -1.0, 0.5])
    term = fedprox(mu=0.25).local_term(None, w, None, None)
    grad = torch.tensor([1.0, 2.0, 3.0])
    term(torch.tensor([3.0, -1.0, -1.5]), grad)
    torch.testing.assert_close(grad, torch.tensor([1.5, 2.0, 2.5]))


def test_invalid_mu_fails_with_one_line() -> None:
    for mu in (-0.1, float("nan")):
        with pytest.raises(ConfigError) as err:
            build_algorithm("fedprox", mu=mu)
        assert "\n" not in str(err.value)
