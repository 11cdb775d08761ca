"""BHerd, GraB-FedAvg, FedNova, SCAFFOLD and their combinations (paper 000 and its baselines).

Hand cases, reductions (alpha = 1 BHerd = FedAvg, equal-tau FedNova = FedAvg, SCAFFOLD's first round =
FedAvg) and composition-equals-manual, where the manual side is written with plain torch.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny_models import scalar_federation
from torch import Tensor, nn

from fedaccel.algorithms.base import ClientContext, ClientUpdate, RoundInfo
from fedaccel.algorithms.bherd import (
    HerdingEstimator,
    bherd_selection,
    herd_order,
    selected_count,
)
from fedaccel.algorithms.fednova import fednova_aggregate, normaliser
from fedaccel.algorithms.grab import BalancingEstimator, grab_selection
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.algorithms.scaffold import scaffold
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, run_round
from fedaccel.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# Tiny federations
# ---------------------------------------------------------------------------------------------


def linear_federation(sizes: tuple[int, ...] = (6, 9, 12), lr: float = 0.3, **options: float) -> Federation:
    """Softmax regression, 3 features, 2 classes (d = 8); batch 3, so tau_i = size / 3."""
    g = torch.Generator().manual_seed(7)
    n = sum(sizes)
    x = torch.randn(n, 3, generator=g)
    y = (x[:, 0] + 0.5 * torch.randn(n, generator=g) > 0).long()
    bounds = np.cumsum((0, *sizes))
    parts = [np.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    torch.manual_seed(0)
    module = nn.Linear(3, 2)
    return Federation(module, x, y, parts, x, y, LocalOptions(lr=lr, batch_size=3, **options), seed=3)


def linear_grad(theta: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy gradient of nn.Linear(3, 2) at the flat theta = [W (2x3) row-major, b (2)]."""
    th = theta.detach().clone().requires_grad_(True)
    logits = x @ th[:6].view(2, 3).T + th[6:]
    F.cross_entropy(logits, y).backward()
    assert th.grad is not None
    return th.grad


def run(name: str, fed: Federation, rounds: int, **params: float) -> tuple[Tensor, list]:  # type: ignore[type-arg]
    algorithm = build_algorithm(name, **params)
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    reports = []
    for _ in range(rounds):
        state, report = run_round(algorithm, state, fed)
        reports.append(report)
    return state, reports  # type: ignore[return-value]


def context(steps: int, lr: float) -> ClientContext:
    info = RoundInfo(round=0, lr=lr, prev_lr=lr, weights=np.array([1.0]), seed=0)
    return ClientContext(info, client=0, steps=steps, uploads=True)


def naive_herd(vectors: Tensor, k: int) -> list[int]:
    """Algorithm 2 literally: centre, then pick the unused vector minimising ||s + z|| (lowest index on ties)."""
    z = vectors - vectors.mean(dim=0)
    s = torch.zeros(z.shape[1], dtype=z.dtype)
    unused = list(range(len(z)))
    order = []
    for _ in range(k):
        best = min(unused, key=lambda j: (float(torch.linalg.vector_norm(s + z[j])), j))
        order.append(best)
        unused.remove(best)
        s = s + z[best]
    return order


# ---------------------------------------------------------------------------------------------
# BHerd: herding order, k_i, the estimator
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tau,d,alpha", [(5, 3, 0.5), (12, 40, 0.3), (30, 7, 0.7), (50, 200, 1.0), (8, 2, 0.1)])
def test_gram_herding_equals_naive_greedy(tau: int, d: int, alpha: float) -> None:
    g = torch.Generator().manual_seed(tau * 1000 + d)
    z = torch.randn(tau, d, generator=g, dtype=torch.float64) + torch.randn(d, generator=g, dtype=torch.float64)
    k = selected_count(alpha, tau)
    assert herd_order(z @ z.T, k) == naive_herd(z, k)


def test_herding_hand_example_in_2d() -> None:
    # mean (5, 5); centred: (3,0), (0,1), (-1,-1), (-2,0).
    # s=0: norms 3, 1, 1.41, 2 -> step 1.  s=(0,1): |(3,1)|=3.16, |(-1,0)|=1, |(-2,1)|=2.24 -> step 2.
    # s=(-1,0): |(2,0)|=2, |(-3,0)|=3 -> step 0.  Then step 3.
    z = torch.tensor([[8.0, 5.0], [5.0, 6.0], [4.0, 4.0], [3.0, 5.0]])
    assert herd_order(z @ z.T, 4) == [1, 2, 0, 3]
    assert herd_order(z @ z.T, 2) == [1, 2]
    # Centring matters: on the raw vectors the shortest, step 2 (|(4,4)|), would come first.
    assert naive_herd(z, 1) == [1] and int(torch.linalg.vector_norm(z, dim=1).argmin()) == 2


@pytest.mark.parametrize(
    "alpha,tau,k",
    [
        (0.5, 5, 3), (0.5, 3, 2), (0.5, 4, 2), (0.5, 1, 1), (0.1, 4, 1), (0.3, 5, 2),
        (0.29, 50, 15),  # 0.29 * 50 = 14.499999999999998 in floating point
        (0.7, 15, 11), (1.0, 7, 7),
    ],
)
def test_selected_count_rounds_half_up(alpha: float, tau: int, k: int) -> None:
    assert selected_count(alpha, tau) == k


def test_selected_count_is_not_bankers_rounding() -> None:
    assert round(0.5 * 5) == 2 and selected_count(0.5, 5) == 3


def test_herding_estimator_update_distance_and_memory() -> None:
    tau, d, lr, alpha = 7, 5, 0.1, 0.5
    z = torch.randn(tau, d, generator=torch.Generator().manual_seed(1))
    est = HerdingEstimator(tau, d, alpha, lr)
    for step in range(tau):
        est.observe(step, z[step].clone())
    estimate, extras, diag = est.finish(lr * z.sum(dim=0))
    k = selected_count(alpha, tau)  # 3.5 -> 4
    chosen = naive_herd(z.double(), k)
    g = z[chosen].sum(dim=0)
    mu = z.mean(dim=0)
    assert k == 4 and diag["selected"] == sorted(chosen)
    torch.testing.assert_close(estimate, g * lr / alpha, atol=1e-6, rtol=1e-5)
    assert diag["distance"] == pytest.approx(float(torch.linalg.vector_norm(g / (alpha * tau) - mu)), rel=1e-5)
    assert diag["memory_bytes"] == tau * d * 4
    assert extras == {}


def test_bherd_alpha_one_equals_fedavg_over_rounds() -> None:
    for options in ({}, {"momentum": 0.9}):
        bherd, _ = run("bherd", linear_federation(**options), 4, alpha=1.0)
        fedavg, _ = run("fedavg", linear_federation(**options), 4)
        torch.testing.assert_close(bherd.w, fedavg.w, atol=1e-6, rtol=0)
        assert not torch.equal(fedavg.w, linear_federation().model.theta)  # it did move


def test_bherd_diagnostics_in_the_round_report() -> None:
    fed = linear_federation()
    _, reports = run("bherd", fed, 2, alpha=0.5)
    clients = reports[-1].diag["clients"]
    json.dumps(reports[-1].diag)  # JSON-serialisable
    d = fed.model.size
    for i, tau in enumerate(fed.steps.tolist()):
        entry = clients[str(i)]
        assert len(entry["selected"]) == selected_count(0.5, tau)
        assert entry["selected"] == sorted(entry["selected"]) and all(0 <= s < tau for s in entry["selected"])
        assert entry["memory_bytes"] == tau * d * 4 and entry["tau"] == tau
        assert entry["distance"] >= 0.0


def test_bherd_round_equals_manual_herding() -> None:
    """One BHerd-FedAvg round: w - (eta/alpha) sum p_i g_i with g_i from a naive herd over by-hand gradients."""
    fed, alpha, lr = linear_federation(), 0.5, 0.3
    w = fed.model.theta.clone()
    expected = w.clone()
    for i in range(fed.n_clients):
        theta, rows = w.clone(), []
        for index in fed.batches(i, 0, int(fed.steps[i])):
            idx = torch.from_numpy(index)
            z = linear_grad(theta, fed.x_train[idx], fed.y_train[idx])
            rows.append(z)
            theta = theta - lr * z
        z = torch.stack(rows)
        chosen = naive_herd(z.double(), selected_count(alpha, len(rows)))
        expected -= (lr / alpha) * fed.weights[i] * z[chosen].sum(dim=0)
    state, _ = run("bherd", fed, 1, alpha=alpha)
    torch.testing.assert_close(state.w, expected, atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# GraB-FedAvg
# ---------------------------------------------------------------------------------------------


def test_grab_kept_set_on_a_hand_example() -> None:
    # tau = 4. m = running sum / 4; c = z - m; keep iff ||s + c|| < ||s - c||.
    # 1: m=(.5,0)  c=(1.5,0)   s=0 -> tie, not kept; s=(-1.5,0)
    # 2: m=(1,.5)  c=(1,1.5)   |s+c|^2=2.5 < |s-c|^2=8.5 -> kept; s=(-.5,1.5)
    # 3: m=(1,0)   c=(-1,-2)   2.5 < 12.5 -> kept; s=(-1.5,-.5)
    # 4: m=(.5,.5) c=(-2.5,1.5) 17 > 5 -> not kept
    z = torch.tensor([[2.0, 0.0], [2.0, 2.0], [0.0, -2.0], [-2.0, 2.0]])
    est = BalancingEstimator(4, 2, lr=0.1)
    for step in range(4):
        est.observe(step, z[step].clone())
    estimate, extras, diag = est.finish(0.1 * z.sum(dim=0))
    assert diag["selected"] == [1, 2] and diag["alpha"] == 0.5
    torch.testing.assert_close(estimate, torch.tensor([0.2, 0.0]))  # 0.1 * ((2,2) + (0,-2))
    torch.testing.assert_close(extras["alpha"], torch.tensor([0.5]))


def test_grab_server_rescales_by_weighted_alpha() -> None:
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.array([0.2, 0.4, 0.4]), seed=0)
    updates = [
        ClientUpdate(0, 0.2, 4, torch.tensor([1.0]), {"alpha": torch.tensor([0.5])}),
        ClientUpdate(2, 0.4, 4, torch.tensor([2.0]), {"alpha": torch.tensor([0.25])}),
    ]
    # p renormalised over the uploaders: (1/3, 2/3); alpha_t = 1/6 + 1/6 = 1/3
    adjusted = grab_selection().server_adjust(info, updates, None)  # type: ignore[misc]
    assert [float(u.delta) for u in adjusted] == pytest.approx([3.0, 6.0])
    assert [float(u.delta) for u in updates] == [1.0, 2.0]  # the inputs are not modified


def test_grab_fedavg_round_equals_manual() -> None:
    fed, lr = linear_federation(), 0.3
    w = fed.model.theta.clone()
    sums, alphas = [], []
    for i in range(fed.n_clients):
        tau = int(fed.steps[i])
        theta = w.clone()
        m, s, g, kept = torch.zeros_like(w), torch.zeros_like(w), torch.zeros_like(w), 0
        for index in fed.batches(i, 0, tau):
            idx = torch.from_numpy(index)
            z = linear_grad(theta, fed.x_train[idx], fed.y_train[idx])
            m = m + z / tau
            c = z - m
            if torch.linalg.vector_norm(s + c) < torch.linalg.vector_norm(s - c):
                s, g, kept = s + c, g + z, kept + 1
            else:
                s = s - c
            theta = theta - lr * z
        sums.append(g)
        alphas.append(kept / tau)
    p = fed.weights
    alpha_t = float(sum(p[i] * alphas[i] for i in range(3)))
    expected = w - (lr / alpha_t) * sum(p[i] * sums[i] for i in range(3))
    state, reports = run("grab-fedavg", fed, 1)
    torch.testing.assert_close(state.w, expected, atol=1e-6, rtol=1e-5)
    assert [reports[0].diag["clients"][str(i)]["alpha"] for i in range(3)] == pytest.approx(alphas)


# ---------------------------------------------------------------------------------------------
# FedNova
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tau", [1, 2, 7, 30])
def test_fednova_normaliser_closed_forms(tau: int) -> None:
    assert normaliser(tau) == tau
    rho = 0.9
    assert normaliser(tau, momentum=rho) == pytest.approx((tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho))
    lr, mu = 0.1, 0.5
    assert normaliser(tau, lr=lr, mu=mu) == pytest.approx((1 - (1 - lr * mu) ** tau) / (lr * mu))


def test_fednova_equal_tau_plain_sgd_equals_fedavg() -> None:
    nova, _ = run("fednova", linear_federation(sizes=(9, 9, 9)), 4)
    fedavg, _ = run("fedavg", linear_federation(sizes=(9, 9, 9)), 4)
    torch.testing.assert_close(nova.w, fedavg.w, atol=1e-6, rtol=0)


def test_fednova_unequal_tau_by_hand() -> None:
    # Scalar federation: Delta_0 = -0.2 (tau 1), Delta_1 = -0.64 (tau 2), p = (1/3, 2/3).
    # tau_eff = 1/3 + 4/3 = 5/3; sum p Delta/a = -0.2/3 - 2*0.32/3 = -0.28; w = 0 + 5/3 * 0.28
    state, _ = run("fednova", scalar_federation(), 1)
    assert state.w.item() == pytest.approx(5 / 3 * 0.28, abs=1e-7)
    fedavg, _ = run("fedavg", scalar_federation(), 1)
    assert fedavg.w.item() != pytest.approx(state.w.item(), abs=1e-3)


def test_fednova_reads_momentum_and_proximal_normalisers() -> None:
    # a_0 = 1 (tau 1); with rho = 0.5, a_1 = 1 + 1.5 = 2.5 (tau 2); p = (1/2, 1/2).
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.array([0.5, 0.5]), seed=0, momentum=0.5)
    updates = [ClientUpdate(0, 0.5, 1, torch.tensor([1.0])), ClientUpdate(1, 0.5, 2, torch.tensor([5.0]))]
    w_next = fednova_aggregate().aggregate(info, torch.tensor([0.0]), updates)  # type: ignore[misc]
    assert w_next.item() == pytest.approx(-(0.5 * 1 + 0.5 * 2.5) * (0.5 * 1.0 + 0.5 * 5.0 / 2.5))
    # proximal mu = 2, eta = 0.1: a_1 = 1 + (1 - 0.2) = 1.8
    plain = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.array([0.5, 0.5]), seed=0)
    w_next = fednova_aggregate(mu=2.0).aggregate(plain, torch.tensor([0.0]), updates)  # type: ignore[misc]
    assert w_next.item() == pytest.approx(-(0.5 * 1 + 0.5 * 1.8) * (0.5 * 1.0 + 0.5 * 5.0 / 1.8))


def test_fednova_with_mu_adds_the_proximal_term() -> None:
    names = [p.name for p in build_algorithm("fednova", mu=0.1).parts]
    assert names == ["fedprox", "fednova"] and [p.name for p in build_algorithm("fednova").parts] == ["fednova"]


# ---------------------------------------------------------------------------------------------
# SCAFFOLD
# ---------------------------------------------------------------------------------------------


def test_scaffold_first_round_equals_fedavg() -> None:
    sc, _ = run("scaffold", linear_federation(), 1)
    fedavg, _ = run("fedavg", linear_federation(), 1)
    torch.testing.assert_close(sc.w, fedavg.w, atol=0, rtol=0)
    sc2, _ = run("scaffold", linear_federation(), 2)
    fedavg2, _ = run("fedavg", linear_federation(), 2)
    assert not torch.allclose(sc2.w, fedavg2.w, atol=1e-6)  # the controls act from round 2 on


def test_scaffold_controls_by_hand_over_two_rounds() -> None:
    lr = 0.1
    # Round 1 (c = c_i = 0) is FedAvg: client 0 -> 0.2, client 1 -> 0.64, w1 = 1.48/3.
    c0, c1 = (0 - 0.2) / (1 * lr), (0 - 0.64) / (2 * lr)  # option II: -2, -3.2
    c = 1 / 3 * c0 + 2 / 3 * c1  # data-weighted: -2.8
    w1 = 0.2 / 3 + 2 * 0.64 / 3
    # Round 2, client 0 (x=1, y=2): one step with correction c - c0
    t0 = w1 - lr * ((w1 - 2) + (c - c0))
    c0_new = c0 - c + (w1 - t0) / lr
    # client 1 (x=2, y=2): two steps with correction c - c1, gradient (2t - 2) * 2
    t = w1
    for _ in range(2):
        t = t - lr * ((2 * t - 2) * 2 + (c - c1))
    c1_new = c1 - c + (w1 - t) / (2 * lr)
    w2 = w1 + (1 / 3 * (t0 - w1) + 2 / 3 * (t - w1))
    c2 = c + 1 / 3 * (c0_new - c0) + 2 / 3 * (c1_new - c1)

    state, reports = run("scaffold", scalar_federation(lr), 2)
    assert c == pytest.approx(-2.8) and c0_new == pytest.approx(w1 - 2)  # c_i+ is the mean local gradient
    assert state.w.item() == pytest.approx(w2, abs=1e-6)
    assert state.server[0].item() == pytest.approx(c2, abs=1e-5)
    assert state.clients[0][0].item() == pytest.approx(c0_new, abs=1e-5)
    assert state.clients[1][0].item() == pytest.approx(c1_new, abs=1e-5)
    # bytes: c travels down with the model, dc up with the update (d = 1, float32)
    assert reports[1].bytes_down == 2 * (4 + 4) and reports[1].bytes_up == 2 * (4 + 4)


def test_scaffold_uniform_weighting_is_the_papers_mean() -> None:
    state, _ = run("scaffold", scalar_federation(0.1), 1, weighting="uniform")
    assert state.server[0].item() == pytest.approx((-2 - 3.2) / 2, abs=1e-5)
    assert state.w.item() == pytest.approx((0.2 + 0.64) / 2, abs=1e-7)


def test_scaffold_server_learning_rate() -> None:
    state, _ = run("scaffold", scalar_federation(0.1), 1, server_lr=0.5)
    assert state.w.item() == pytest.approx(0.5 * (0.2 / 3 + 2 * 0.64 / 3), abs=1e-7)


# ---------------------------------------------------------------------------------------------
# Combinations: composition equals applying the parts by hand
# ---------------------------------------------------------------------------------------------


def test_bherd_scaffold_equals_manual_over_two_rounds() -> None:
    fed, lr, alpha, server_lr = linear_federation(), 0.3, 0.5, 0.8
    p = torch.tensor(fed.weights, dtype=torch.float32)
    w = fed.model.theta.clone()
    c = torch.zeros_like(w)
    ci = [torch.zeros_like(w) for _ in range(fed.n_clients)]
    for r in range(2):
        estimates, dcs = [], []
        for i in range(fed.n_clients):
            tau = int(fed.steps[i])
            theta, rows = w.clone(), []
            for index in fed.batches(i, r, tau):
                idx = torch.from_numpy(index)
                d = linear_grad(theta, fed.x_train[idx], fed.y_train[idx]) + (c - ci[i])  # corrected direction
                rows.append(d)
                theta = theta - lr * d
            z = torch.stack(rows)
            chosen = naive_herd(z.double(), selected_count(alpha, tau))  # herd the corrected directions
            estimates.append((lr / alpha) * z[chosen].sum(dim=0))
            new = ci[i] - c + (w - theta) / (tau * lr)  # control from the real trajectory
            dcs.append(new - ci[i])
            ci[i] = new
        w = w - server_lr * sum(p[i] * estimates[i] for i in range(3))
        c = c + sum(p[i] * dcs[i] for i in range(3))

    state, _ = run("bherd-scaffold", fed, 2, alpha=alpha, server_lr=server_lr)
    torch.testing.assert_close(state.w, w, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(state.server[0], c, atol=1e-5, rtol=1e-5)
    for i in range(3):
        torch.testing.assert_close(state.clients[i][0], ci[i], atol=1e-5, rtol=1e-5)


def test_bherd_fednova_normalises_the_estimate() -> None:
    fed, lr, alpha = linear_federation(), 0.3, 0.5
    w = fed.model.theta.clone()
    p, tau = fed.weights, fed.steps
    step = torch.zeros_like(w)
    for i in range(fed.n_clients):
        theta, rows = w.clone(), []
        for index in fed.batches(i, 0, int(tau[i])):
            idx = torch.from_numpy(index)
            rows.append(linear_grad(theta, fed.x_train[idx], fed.y_train[idx]))
            theta = theta - lr * rows[-1]
        z = torch.stack(rows)
        estimate = (lr / alpha) * z[naive_herd(z.double(), selected_count(alpha, len(rows)))].sum(dim=0)
        step += p[i] * estimate / float(tau[i])  # a_i = tau_i for plain SGD
    tau_eff = float(sum(p * tau))
    state, _ = run("bherd-fednova", fed, 1, alpha=alpha)
    torch.testing.assert_close(state.w, w - tau_eff * step, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("combined,base", [("bherd-scaffold", "scaffold"), ("bherd-fednova", "fednova")])
def test_combinations_with_alpha_one_are_the_base_method(combined: str, base: str) -> None:
    herded, _ = run(combined, linear_federation(), 3, alpha=1.0)
    plain, _ = run(base, linear_federation(), 3)
    torch.testing.assert_close(herded.w, plain.w, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: bherd_selection(alpha=0.0),
        lambda: bherd_selection(alpha=1.5),
        lambda: fednova_aggregate(mu=-1.0),
        lambda: scaffold(weighting="median"),
        lambda: build_algorithm("bherd", alpha=-0.1),
        lambda: build_algorithm("scaffold", eta=1.0),
    ],
)
def test_invalid_hyperparameters_fail_with_one_line(make) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError) as err:
        make()
    assert "\n" not in str(err.value)


def test_recipes_are_registered_by_composition() -> None:
    expected = {
        "bherd": ["bherd", "mean"],
        "bherd-fedavg": ["bherd", "mean"],
        "grab-fedavg": ["grab", "mean"],
        "fednova": ["fednova"],
        "scaffold": ["scaffold", "mean"],
        "bherd-fednova": ["bherd", "fednova"],
        "bherd-scaffold": ["scaffold", "bherd", "mean"],
    }
    for name, parts in expected.items():
        assert [p.name for p in build_algorithm(name).parts] == parts


def test_selection_heat_map_spans_all_steps_and_rounds_and_greys_what_was_no_step() -> None:
    """Selected 1, taken but not selected 0, no step at all (a round not trained, a step past that round's tau, as
    FedGSNR plans it) light grey: a white cell there would read as a step BHerd left out."""
    from fedaccel.report.diagnostics import NO_STEP, selection_image

    image = selection_image([2, 3, 5], [[0, 3], [1], [4]], [6, 3, 6])  # did not train in round 4; 3 steps in round 3
    expected = np.zeros((4, 6))
    expected[1, 3:] = expected[2, :] = NO_STEP
    expected[0, [0, 3]] = expected[1, 1] = expected[3, 4] = 1.0
    np.testing.assert_array_equal(image, expected)
    older = selection_image([1, 2], [[0, 2], [1]], None)  # older runs: no tau recorded, up to the last selected step
    np.testing.assert_array_equal(older, [[1, 0, 1], [0, 1, 0]])
    planned_none = selection_image([1, 2], [[0, 1], []], [2, 0])  # a round planned 0 steps: grey, not white
    np.testing.assert_array_equal(planned_none, [[1, 1], [NO_STEP, NO_STEP]])


def test_a_selection_heat_map_says_no_step_only_where_a_cell_had_none(tmp_path: pathlib.Path) -> None:
    from fedaccel.report.diagnostics import selection_figure

    def legend(taus: list[int], rounds: list[int]) -> list[str]:
        folder = tmp_path / f"{taus}-{rounds}"
        folder.mkdir()
        rows = [{"round": r, "clients": {"0": {"selected": [0], "tau": t}}} for r, t in zip(rounds, taus)]
        (folder / "diagnostics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        return [t.get_text() for t in selection_figure(folder).legends[0].get_texts()]

    assert legend([4, 4], [1, 2]) == ["selected", "not selected"]  # every step taken: the figures of BHerd as before
    assert legend([4, 2], [1, 2])[2:] == ["no step (not trained, or past τ)"]
    assert legend([4, 4], [1, 3])[2:] == ["no step (not trained, or past τ)"]


def test_a_selection_heat_map_of_many_clients_draws_the_first_twenty_and_says_so(tmp_path: pathlib.Path) -> None:
    """1,000 clients would be 1,000 panels (minutes to draw, unreadable): the first MAX_SELECTION_PANELS are drawn,
    and the title says how many trained; a run with fewer clients draws every one, its title unchanged."""
    from fedaccel.report.diagnostics import MAX_SELECTION_PANELS, selection_figure

    def run(clients: int) -> pathlib.Path:
        folder = tmp_path / f"clients-{clients}"
        folder.mkdir()
        rows = [{"round": r, "clients": {str(c): {"selected": [0, 2], "tau": 4} for c in range(clients)}}
                for r in (1, 2)]
        (folder / "diagnostics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        return folder

    many = selection_figure(run(60))
    assert sum(ax.get_visible() for ax in many.axes) == MAX_SELECTION_PANELS == 20
    assert [ax.get_title() for ax in many.axes if ax.get_visible()][-1] == "client 19"
    assert many._suptitle.get_text().endswith(": the first 20 of 60 clients that trained")
    few = selection_figure(run(7))
    assert sum(ax.get_visible() for ax in few.axes) == 7 and few._suptitle.get_text().endswith("(clients-7)")


def test_a_selection_heat_map_says_what_black_and_white_mean(tmp_path: pathlib.Path) -> None:
    """The heat maps of selected steps had no legend: a reader could not tell selected from not. A legend below says
    black is selected, white not; and a client that selected every step (alpha = 1) is drawn black, not white as an
    image of one value was scaled."""
    from matplotlib.colors import to_hex

    from fedaccel.report.diagnostics import selection_figure

    rows = [{"round": r, "clients": {"0": {"selected": [0, 2], "tau": 4}, "1": {"selected": [0, 1, 2, 3], "tau": 4}}}
            for r in (1, 2)]
    (tmp_path / "diagnostics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    fig = selection_figure(tmp_path)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["selected", "not selected"]
    assert [to_hex(h.get_facecolor()) for h in legend.legend_handles] == ["#000000", "#ffffff"]
    some, every = (ax.images[0] for ax in fig.axes[:2])
    assert [to_hex(c) for c in some.to_rgba(some.get_array()[0])] == ["#000000", "#ffffff", "#000000", "#ffffff"]
    assert {to_hex(c) for c in every.to_rgba(every.get_array()).reshape(-1, 4)} == {"#000000"}
