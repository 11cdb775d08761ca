"""FedGSNR: Theorem 3.7 against a numerical Wasserstein minimum, statistics against a per-sample loop,
step allocation, hand cases through the engine, and GSNR under a label-flipping attack."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_models import Scalar
from torch import Tensor, nn

from fedaccel.algorithms.base import ClientContext
from fedaccel.algorithms.fedgsnr import (
    client_scores,
    allocate_steps,
    entropy,
    fedgsnr_planning,
    global_statistics,
    gradient_statistics,
    gsnr_scores,
    steps_summary,
)
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.data.attacks import apply_attack, attack_clients
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import InProcessClients, init_state, round_info, run_round
from fedaccel.errors import ConfigError
from fedaccel.models import Classifier, build_model

# ---------------------------------------------------------------------------------------------
# Theorem 3.7 and Definition 4.1
# ---------------------------------------------------------------------------------------------


def psd_sqrt(a: np.ndarray) -> np.ndarray:
    """Square root of a symmetric positive semi-definite matrix (eigendecomposition)."""
    values, vectors = scipy.linalg.eigh(a)
    return (vectors * np.sqrt(np.clip(values, 0, None))) @ vectors.T


def wasserstein2_squared(m1: np.ndarray, s1: np.ndarray, m2: np.ndarray, s2: np.ndarray) -> float:
    """W2^2 between N(m1, s1) and N(m2, s2), the general formula (no diagonal shortcut)."""
    root2 = psd_sqrt(s2)
    cross = psd_sqrt(root2 @ s1 @ root2)
    return float(np.sum((m1 - m2) ** 2) + np.trace(s1 + s2 - 2 * cross))


@pytest.mark.parametrize("case", range(12))
def test_n_minimises_the_wasserstein_distance_of_theorem_3_7(case: int) -> None:
    rng = np.random.default_rng(case)
    d, batch, eta = 5, int(rng.integers(1, 9)), 0.3
    mu_g, mu_l = rng.normal(size=d), rng.normal(size=d)
    if case % 3 == 0:  # a local gradient against the global one: the optimum is n = 0
        mu_l = -2 * mu_g + 0.1 * rng.normal(size=d)
    var_g, var_l = rng.gamma(1.0, size=d), rng.gamma(1.0, size=d)
    if case % 3 == 0:
        var_l *= 0.01

    def distance(n: float) -> float:  # one global step vs n local steps (Theorem 3.7)
        return wasserstein2_squared(
            eta * mu_g,
            eta**2 * np.diag(var_g) / batch,
            n * eta * mu_l,
            n**2 * eta**2 * np.diag(var_l) / batch,
        )

    best = scipy.optimize.minimize_scalar(
        distance, bounds=(0.0, 20.0), method="bounded", options={"xatol": 1e-9}
    )
    grid = np.linspace(0, 20, 801)
    assert abs(grid[np.argmin([distance(n) for n in grid])] - best.x) < 0.03  # no other, better minimum

    as_t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    n, r = gsnr_scores(as_t(mu_l)[None], as_t(var_l)[None], as_t(mu_g), as_t(var_g), batch)
    assert n[0] == pytest.approx(best.x, abs=1e-6)
    # Definition 4.1: r = cot(theta) with csc^2 = L / Delta^2, i.e. r^2 = L / Delta^2 - 1 (0 if n = 0)
    big_l = mu_g @ mu_g + var_g.sum() / batch
    delta2 = best.fun / eta**2
    expected_r = math.sqrt(max(big_l / delta2 - 1, 0.0)) if n[0] > 0 else 0.0
    assert r[0] == pytest.approx(expected_r, rel=1e-4, abs=1e-6)
    if case % 3 == 0:
        assert n[0] == 0 and r[0] == 0


def test_plan_server_by_hand() -> None:
    """Two clients, d = 2, B_s = 2, E_const = 7; client 0 is not sampled (its weight is renormalised away)."""
    part = fedgsnr_planning(samples=2, e_const=7)
    fed = scalar_federation([[1.0]] * 3)  # only for a RoundInfo
    info = replace(round_info(fed, 0), weights=np.array([0.2, 0.3, 0.3]))
    messages = {
        1: {"mean": torch.tensor([1.0, 0.0]), "var": torch.tensor([4.0, 0.0])},
        2: {"mean": torch.tensor([0.0, 1.0]), "var": torch.tensor([0.0, 0.0])},
    }
    instructions, diag = part.plan_server(info, messages, None)
    # g = (0.5, 0.5); v = 0.5*(4, 0) + (0.25, 0.25) = (2.25, 0.25); L = 0.5 + 2.5/2 = 1.75
    # client 1: M = 0.5 + sqrt(4*2.25)/2 = 2, Q = 1 + 4/2 = 3 -> n = 2/3, r = 2/sqrt(3*1.75 - 4)
    # client 2: M = 0.5, Q = 1 -> n = 1/2, r = 0.5/sqrt(1.75 - 0.25)
    assert diag["n"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(0.5)}
    assert diag["gsnr"] == {"1": pytest.approx(2 / math.sqrt(1.25)), "2": pytest.approx(0.5 / math.sqrt(1.5))}
    # q = (4/7, 3/7) of 2 * 7 = 14 steps
    assert instructions == {1: {"steps": 8}, 2: {"steps": 6}}
    assert diag["steps"] == {"1": 8, "2": 6}
    assert diag["entropy"] == pytest.approx(-(4 / 7) * math.log(4 / 7) - (3 / 7) * math.log(3 / 7))
    assert diag["entropy_max"] == pytest.approx(math.log(2)) and diag["fallback"] is False
    # E_k = (8, 6): mean 7, population std 1
    assert diag["steps_cv"] == pytest.approx(1 / 7) and diag["steps_zero"] == 0 and diag["steps_max"] == 8
    json.dumps(diag)  # everything serialisable, keys are strings


@settings(max_examples=30, deadline=None)
@given(k=st.integers(1, 6), d=st.integers(1, 40), block_floats=st.integers(1, 90), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_the_servers_scores_by_blocks_of_coordinates_are_the_whole_vectors(k: int, d: int, block_floats: int,
                                                                           seed: int, dtype: torch.dtype) -> None:
    """plan_server's blocked pass (any block size, one that does not divide d, smaller than K) gives the n_k and
    r_k of Eq. 8-9 and Theorem 3.7 on the whole float64 vectors, to rounding."""
    g = torch.Generator().manual_seed(seed)
    means = [torch.randn(d, generator=g, dtype=torch.float64).to(dtype) for _ in range(k)]
    variances = [torch.rand(d, generator=g, dtype=torch.float64).to(dtype) for _ in range(k)]
    p = np.random.default_rng(seed).dirichlet(np.ones(k))
    rows = torch.stack(means).double(), torch.stack(variances).double()
    want = gsnr_scores(*rows, *global_statistics(*rows, p), 64)
    got = client_scores(means, variances, p, 64, block_floats=block_floats)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_the_servers_scores_run_numpys_blas_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """client_scores' matrix products (numpy's BLAS) run on one thread, inside the call only (OpenBLAS's idle
    threads would spin on the cores torch trains on next), whatever torch's threads. BLAS is given two threads
    first: the suite runs with one (tests/conftest.py), where the limit would have nothing to do."""
    import threadpoolctl

    def blas() -> list[int]:
        return [lib["num_threads"] for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"]

    seen: list[int] = []
    einsum = np.einsum

    def spy(*args: Any, **kwargs: Any) -> Any:  # called once a block, next to the products
        seen.extend(blas())
        return einsum(*args, **kwargs)

    monkeypatch.setattr(np, "einsum", spy)
    threads = torch.get_num_threads()
    try:
        with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
            before = blas()
            torch.set_num_threads(2)
            client_scores([torch.ones(5), torch.zeros(5)], [torch.ones(5), torch.ones(5)], np.array([0.5, 0.5]), 4)
            after = blas()
    finally:
        torch.set_num_threads(threads)
    assert before and set(before) == {2}, before  # what the call found
    assert seen and set(seen) == {1}
    assert after == before


finite32 = st.floats(allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=40, deadline=None)
@given(values=st.integers(1, 5).flatmap(lambda k: st.integers(1, 12).flatmap(
           lambda d: st.lists(st.lists(finite32, min_size=d, max_size=d), min_size=2 * k, max_size=2 * k))),
       block_floats=st.integers(1, 30))
def test_hostile_finite_statistics_score_alike_by_blocks_and_whole(values: list[list[float]], block_floats: int) -> None:
    """Any finite float32 answers a client may send (negative variances, values near float32's limits): the blocked
    pass gives what the whole matrices give, NaN where they give NaN, and raises nothing."""
    k = len(values) // 2
    means, variances = ([torch.tensor(row, dtype=torch.float32) for row in rows] for rows in (values[:k], values[k:]))
    p = np.full(k, 1.0 / k)
    rows = torch.stack(means).double(), torch.stack(variances).double()
    want = gsnr_scores(*rows, *global_statistics(*rows, p), 64)
    got = client_scores(means, variances, p, 64, block_floats=block_floats)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True)


@settings(max_examples=30, deadline=None)
@given(k=st.integers(1, 5), d=st.integers(1, 8), seed=st.integers(0, 2**16),
       hostile=st.sets(st.integers(0, 4), min_size=1),
       depth=st.floats(1e-30, 1e30).map(lambda v: float(np.float32(v))).filter(lambda v: v > 0))
def test_a_client_with_a_negative_variance_is_left_out_of_the_plan(k: int, d: int, seed: int, hostile: set[int],
                                                                   depth: float) -> None:
    """Clients sending a variance with an entry below 0 (of any size) get 0 steps and are listed; the others get
    the plan they would get without them, whatever those sent."""
    part = fedgsnr_planning(samples=4, e_const=5)
    fed = scalar_federation([[1.0]] * 5)  # only for a RoundInfo
    info = round_info(fed, 1)
    g = torch.Generator().manual_seed(seed)
    messages = {c: {"mean": torch.randn(d, generator=g), "var": torch.rand(d, generator=g)} for c in range(k)}
    bad = sorted(hostile & set(messages))
    for c in bad:
        messages[c]["var"][int(torch.randint(d, (1,), generator=g))] = -depth
    instructions, diag = part.plan_server(info, messages, None)
    honest = {c: m for c, m in messages.items() if c not in bad}
    alone, alone_diag = part.plan_server(info, honest, None)
    assert instructions == {**alone, **{c: {"steps": 0} for c in bad}}
    assert diag == ({**alone_diag, "invalid_statistics": bad} if bad else alone_diag)
    if honest:
        assert not alone_diag["fallback"] or all(x == 0 for x in alone_diag["n"].values())
        assert sum(i["steps"] for i in instructions.values()) == 5 * len(honest)


def test_global_statistics_are_eq_8_and_9_on_the_diagonal() -> None:
    """v equals the diagonal of sum p_k Sigma_k + sum p_k (g_k - g)(g_k - g)^T built with full matrices."""
    rng = np.random.default_rng(3)
    k, d = 4, 6
    means, p = rng.normal(size=(k, d)), rng.dirichlet(np.ones(k))
    covs = [np.cov(rng.normal(size=(d, 10))) for _ in range(k)]
    g, v = global_statistics(torch.tensor(means), torch.tensor(np.stack([np.diag(c) for c in covs])), p)
    g_ref = p @ means
    sigma = sum(pk * (c + np.outer(m - g_ref, m - g_ref)) for pk, c, m in zip(p, covs, means))
    np.testing.assert_allclose(g.numpy(), g_ref, atol=1e-12)
    np.testing.assert_allclose(v.numpy(), np.diag(sigma), atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Step allocation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_steps_sum_to_the_same_total_work(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = rng.gamma(0.5, size=int(rng.integers(2, 30)))
    n[rng.random(len(n)) < 0.2] = 0.0
    total = len(n) * 20
    steps, q, fallback = allocate_steps(n, total)
    assert steps.sum() == total and not fallback
    assert np.all(np.abs(steps - total * n / n.sum()) < 1)  # within one step of the exact share
    assert np.all(steps[n == 0] == 0)
    np.testing.assert_allclose(q, n / n.sum())


def test_all_zero_n_falls_back_to_an_equal_split() -> None:
    steps, q, fallback = allocate_steps(np.zeros(3), 10)
    assert fallback and steps.sum() == 10 and sorted(steps.tolist()) == [3, 3, 4]
    assert entropy(q) == pytest.approx(math.log(3))
    assert entropy(np.array([1.0, 0.0])) == 0.0


# ---------------------------------------------------------------------------------------------
# Per-sample statistics
# ---------------------------------------------------------------------------------------------


def naive_statistics(fed: Federation, w: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """One backward pass per sample through the engine's flat model."""
    grads = []
    for i in range(len(y)):
        fed.model.load(w)
        grads.append(fed.model.gradient(fed.loss_fn(fed.model.module(x[i : i + 1]), y[i : i + 1])).clone())
    stacked = torch.stack(grads)
    return stacked.mean(0), stacked.var(0, unbiased=False)


def small_conv() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 3, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3 * 3 * 3, 4)
    )


class TanhMLP(Classifier):
    """Linear layers that are no Linear/ReLU chain: the closed-form moments through forward hooks."""

    def __init__(self, inputs: int, classes: int) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(inputs, 6), nn.Tanh(), nn.Linear(6, classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


@pytest.mark.parametrize("model", ["svm", "conv", "lenet5", "2nn", "softmax", "tanh"])
def test_statistics_equal_a_per_sample_loop(model: str) -> None:
    """The SVM (its L2 term lives in ``loss``), a plain nn.Sequential conv net, a Classifier CNN
    (all through vmap), the 2NN and softmax regression (closed-form moments by their fused chain) and a tanh MLP
    (closed form through hooks)."""
    g = torch.Generator().manual_seed(2)
    side = 12 if model == "lenet5" else 8
    x, y = torch.randn(60, 1, side, side, generator=g), torch.randint(0, 4, (60,), generator=g)
    module = (small_conv() if model == "conv" else TanhMLP(side * side, 4) if model == "tanh"
              else build_model(model, (1, side, side), 4, seed=0))
    fed = Federation(module, x, y, [np.arange(30), np.arange(30, 60)], x, y, LocalOptions(batch_size=5))
    w = fed.model.theta + 0.1 * torch.randn(fed.model.size, generator=g)  # the SVM starts at 0
    part = fedgsnr_planning(samples=16)
    info = round_info(fed, 3)
    ctx = ClientContext(info, 1, 0, True)
    message = part.plan_client(ctx, w, None, None, fed.access(1))
    closed_form = fed.access(1).gradient_moments(w, x[:4], y[:4]) is not None
    assert closed_form == (model in ("2nn", "softmax", "tanh"))
    assert (fed.chain() is not None) == (model in ("2nn", "softmax"))

    xs, ys = fed.access(1).sample(16, info.rng("gsnr", 1))  # the same draw as plan_client's
    assert len(ys) == 16 and set(ys.tolist()) <= set(y[30:].tolist())
    mean, var = naive_statistics(fed, w, xs, ys)
    torch.testing.assert_close(message["mean"], mean, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(message["var"], var, atol=1e-6, rtol=1e-5)
    assert var.abs().sum() > 0
    # chunked accumulation (3 samples at a time) gives the same numbers
    chunked = gradient_statistics(fed.access(1), w, xs, ys, chunk_floats=3 * fed.model.size)
    torch.testing.assert_close(chunked[0], mean, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(chunked[1], var, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("model", ["2nn", "softmax", "tanh", "conv"])
@pytest.mark.parametrize("group_floats", [1, 1 << 22])
def test_the_clients_planned_together_send_what_each_would_alone(model: str, group_floats: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """batched_plan_client (the in-process runtimes') gives every client plan_client's message: the chain's
    moments for all the draws in one pass (groups of one client, or all), the per-client statistics where there
    is no closed form (tanh through hooks, the conv net through vmap) or the draws differ in size (client 3 holds
    5 samples, fewer than B_s), weight decay included."""
    import fedaccel.algorithms.fedgsnr as module_under_test

    monkeypatch.setattr(module_under_test, "_GROUP_FLOATS", group_floats)
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(65, 1, 8, 8, generator=g), torch.randint(0, 4, (65,), generator=g)
    module = (small_conv() if model == "conv" else TanhMLP(64, 4) if model == "tanh"
              else build_model(model, (1, 8, 8), 4, seed=0))
    parts = [np.arange(0, 20), np.arange(20, 40), np.arange(40, 60), np.arange(60, 65)]
    fed = Federation(module, x, y, parts, x, y, LocalOptions(batch_size=5, weight_decay=0.01))
    w = fed.model.theta + 0.1 * torch.randn(fed.model.size, generator=g)
    part = fedgsnr_planning(samples=12)
    info = round_info(fed, 2)
    contexts = [ClientContext(info, k, 0, True) for k in range(4)]
    accesses = [fed.access(k) for k in range(4)]
    asked: list[int] = []  # the groups of each closed-form pass
    moments = type(accesses[0]).gradient_moments
    monkeypatch.setattr(type(accesses[0]), "gradient_moments",
                        lambda self, *args, groups=1: asked.append(groups) or moments(self, *args, groups=groups))
    together = part.batched_plan_client(contexts, w, None, [None] * 4, accesses)
    assert list(together) == [0, 1, 2, 3]
    if model in ("2nn", "softmax"):  # clients 0-2 (12 samples each) together, client 3 (5 samples) alone
        assert asked == ([3, 1] if group_floats > 1 else [1, 1, 1, 1])
    for ctx, access in zip(contexts, accesses):
        alone = part.plan_client(ctx, w, None, None, access)
        for key in ("mean", "var"):
            torch.testing.assert_close(together[ctx.client][key], alone[key], atol=1e-7, rtol=1e-6)
        assert alone["var"].abs().sum() > 0
    uniform = fedgsnr_planning(samples=12, plan="uniform")
    assert uniform.batched_plan_client(contexts, w, None, [None] * 4, accesses) == {k: {} for k in range(4)}


# ---------------------------------------------------------------------------------------------
# Through the engine
# ---------------------------------------------------------------------------------------------


def scalar_federation(samples: list[list[float]]) -> Federation:
    """Client i holds the single sample (x=1, y=samples[i][0])."""
    x = torch.ones(len(samples), 1)
    y = torch.tensor([s[0] for s in samples])
    parts = [np.array([i]) for i in range(len(samples))]
    return Federation(Scalar(), x, y, parts, x, y, LocalOptions(lr=0.1, batch_size=1))


def test_a_client_against_the_others_does_not_train_and_bytes_are_counted() -> None:
    """Clients with y = 2, -2, 2 (x = 1): at w = 0 their gradients are -2, +2, -2."""
    fed = scalar_federation([[2.0], [-2.0], [2.0]])
    algorithm = build_algorithm("fedgsnr", samples=2, e_const=2)
    state, report = run_round(algorithm, init_state(algorithm, fed.model.theta.clone(), 3), fed)
    # g = -2/3, v = 0 + (16/9 + 64/9 + 16/9)/3 = 32/9; M_1 = 2*(-2/3) < 0 -> n_1 = 0
    # M_0 = 4/3 (variances 0), Q_0 = 4 -> n_0 = n_2 = 1/3; 3 * 2 = 6 steps -> 3, 0, 3
    assert report.diag["steps"] == {"0": 3, "1": 0, "2": 3}
    assert report.diag["n"] == {"0": pytest.approx(1 / 3), "1": 0.0, "2": pytest.approx(1 / 3)}
    assert report.diag["gsnr"]["1"] == 0.0
    # E_k = (3, 0, 3): mean 2, population std sqrt((1 + 4 + 1) / 3)
    assert report.diag["steps_cv"] == pytest.approx(math.sqrt(2) / 2)
    assert report.diag["steps_zero"] == 1 and report.diag["steps_max"] == 3
    # clients 0 and 2: w <- 0.9 w + 0.2 three times = 0.542; client 1 is left out of the mean
    assert state.w.item() == pytest.approx(0.542, abs=1e-6)
    assert report.local_steps == 6
    # up: 3 planning messages (mean + var, 1 float each) + 2 models; down: 3 models + 3 instructions
    assert report.bytes_up == 3 * 2 * 4 + 2 * 4
    assert report.bytes_down == 3 * 4 + 3 * 8


def test_partial_participation_plans_only_the_sampled_clients() -> None:
    """With half the clients a round, only the sampled ones plan and train, and they are the ones
    FedAvg samples in that round (the same seeded draw); E_k sum to |S| * E_const."""
    fed = scalar_federation([[2.0], [1.0], [3.0], [2.5], [1.5], [0.5]])
    gsnr, fedavg = build_algorithm("fedgsnr", samples=2, e_const=3), build_algorithm("fedavg")
    gsnr_state = init_state(gsnr, fed.model.theta.clone(), 6)
    avg_state = init_state(fedavg, fed.model.theta.clone(), 6)
    seen = set()
    for _ in range(4):
        gsnr_state, report = run_round(gsnr, gsnr_state, fed, fraction=0.5)
        avg_state, avg_report = run_round(fedavg, avg_state, fed, fraction=0.5)
        planned = sorted(int(k) for k in report.diag["steps"])
        assert planned == sorted(report.participation.train) == sorted(avg_report.participation.train)
        assert len(planned) == 3 and sum(report.diag["steps"].values()) == 3 * 3
        assert report.bytes_up == 3 * 2 * 4 + sum(1 for e in report.diag["steps"].values() if e) * 4
        seen.update(planned)
    assert len(seen) > 3  # different clients in different rounds


class LosingPlans(InProcessClients):
    """In-process clients whose planning answers from ``lost`` never reach the server (rejected by a gate, or
    silent): the runtime reports them as the Flower runtimes do."""

    def __init__(self, *args: Any, lost: set[int]) -> None:
        super().__init__(*args)
        self.lost = lost

    def plan(self, contexts: Any, w: Tensor, server: Any) -> tuple[dict[int, dict[str, Tensor]], dict[str, Any]]:
        messages, diag = super().plan(contexts, w, server)
        gone = sorted(self.lost & set(messages))
        return ({k: m for k, m in messages.items() if k not in gone},
                {**diag, "rejected": {str(k): "planted" for k in gone}} if gone else diag)


@settings(max_examples=12, deadline=None)
@given(lost=st.sets(st.integers(0, 4)), plan=st.sampled_from(["gsnr", "uniform"]), round_=st.integers(0, 3))
def test_a_client_whose_planning_answer_never_came_does_not_train(lost: set[int], plan: str, round_: int) -> None:
    """Whichever answers are lost: their clients train no step and upload nothing, and the round is the one in which
    only the others were selected (the same plan of |S~| E_const steps, the same model); all lost: nothing moves."""
    fed = distinct_federation(local_steps=None, clients=5)
    algorithm = build_algorithm("fedgsnr", samples=8, e_const=3, plan=plan)
    state = replace(init_state(algorithm, fed.model.theta.clone(), 5), round=round_)
    after, report = run_round(algorithm, state, fed, runtime=LosingPlans(algorithm, fed, state.clients, lost=lost))
    answered = [c for c in range(5) if c not in lost]
    assert report.diag.get("unplanned", []) == sorted(lost)
    assert sorted(int(k) for k in report.diag.get("steps", {})) == answered
    assert report.local_steps == 3 * len(answered) and report.uploaded == sum(
        1 for e in report.diag.get("steps", {}).values() if e)
    if not answered:
        assert torch.equal(after.w, state.w)
        return
    alone, alone_report = run_round(algorithm, state, fed, schedule=[answered])
    assert report.diag["steps"] == alone_report.diag["steps"]
    torch.testing.assert_close(after.w, alone.w, atol=1e-7, rtol=0)


def duplicated_federation(local_epochs: float, copies: int = 3) -> Federation:
    """``copies`` clients holding identical data (20 samples each), a small non-linear model."""
    g = torch.Generator().manual_seed(5)
    x0, y0 = torch.randn(20, 6, generator=g), torch.randint(0, 3, (20,), generator=g)
    x, y = x0.repeat(copies, 1), y0.repeat(copies)
    parts = [np.arange(20 * i, 20 * (i + 1)) for i in range(copies)]
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    options = LocalOptions(lr=0.1, batch_size=5, local_epochs=local_epochs)
    return Federation(module, x, y, parts, x, y, options, seed=4)


@pytest.mark.parametrize("base", ["fedavg", "fedprox", "scaffold"])
def test_equal_n_is_the_base_algorithm_with_e_const_steps(base: str) -> None:
    """Identical clients: n_k all equal (= 1), so FedGSNR runs E_const = 6 steps each, whatever the
    configured epochs give (here tau = 1), and equals the base algorithm run with tau = 6."""
    e_const = 6
    base_fed = duplicated_federation(local_epochs=1.5)  # tau = 1.5 * 20 / 5 = 6
    gsnr_fed = duplicated_federation(local_epochs=0.25)  # tau = 1, overridden by the plan
    assert base_fed.steps.tolist() == [e_const] * 3 and gsnr_fed.steps.tolist() == [1] * 3
    mu = {"mu": 0.05} if base == "fedprox" else {}
    base_alg = build_algorithm(base, **mu)
    gsnr_name = "fedgsnr" if base == "fedavg" else f"fedgsnr-{base}"
    gsnr_alg = build_algorithm(gsnr_name, samples=32, e_const=e_const, **mu)
    s_base = init_state(base_alg, base_fed.model.theta.clone(), 3)
    s_gsnr = init_state(gsnr_alg, gsnr_fed.model.theta.clone(), 3)
    d = base_fed.model.size
    for _ in range(3):
        s_base, r_base = run_round(base_alg, s_base, base_fed)
        s_gsnr, r_gsnr = run_round(gsnr_alg, s_gsnr, gsnr_fed)
        assert r_gsnr.diag["steps"] == {"0": e_const, "1": e_const, "2": e_const}
        assert all(n == pytest.approx(1.0, abs=1e-5) for n in r_gsnr.diag["n"].values())
        assert r_gsnr.diag["entropy"] == pytest.approx(math.log(3))
        assert r_gsnr.local_steps == r_base.local_steps == 3 * e_const
        # planning bytes: mean + var (d floats each) up per client, one instruction down per client
        assert r_gsnr.bytes_up == r_base.bytes_up + 3 * 2 * d * 4
        assert r_gsnr.bytes_down == r_base.bytes_down + 3 * 8
    torch.testing.assert_close(s_gsnr.w, s_base.w, atol=1e-7, rtol=0)
    if base == "scaffold":  # the server control c is the same too
        torch.testing.assert_close(s_gsnr.server[1], s_base.server[0], atol=1e-7, rtol=0)


# ---------------------------------------------------------------------------------------------
# Controls: the same total work split otherwise (plan = uniform, random, dirichlet, data)
# ---------------------------------------------------------------------------------------------


def random_messages(clients: list[int], d: int = 5, seed: int = 0) -> dict[int, dict[str, Tensor]]:
    """Statistics that give unequal n_k, some 0 (means around a shared direction, a few against it)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(d, generator=g)
    sign = torch.tensor([(-1.0 if k % 4 == 3 else 1.0) for k in clients])
    means = sign[:, None] * base + 0.8 * torch.randn(len(clients), d, generator=g)
    variances = 0.1 * torch.rand(len(clients), d, generator=g)
    return {k: {"mean": means[i], "var": variances[i]} for i, k in enumerate(clients)}


def plan_round(plan: str, t: int, messages: dict[int, Any], weights: np.ndarray, e_const: int = 5,
               seed: int = 0) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    fed = scalar_federation([[1.0]] * len(weights))  # only for a RoundInfo
    info = replace(round_info(fed, t), weights=weights, seed=seed)
    return fedgsnr_planning(samples=4, e_const=e_const, plan=plan).plan_server(info, messages, None)


def test_random_plan_permutes_the_gsnr_plans_steps_reproducibly() -> None:
    clients = [0, 2, 3, 5, 6, 7, 9, 11]
    weights = np.full(12, 1 / 12)
    moved = 0
    for t in range(6):
        messages = random_messages(clients, seed=t)
        gsnr, gsnr_diag = plan_round("gsnr", t, messages, weights)
        rand, rand_diag = plan_round("random", t, messages, weights)
        e_gsnr = [gsnr[k]["steps"] for k in clients]
        e_rand = [rand[k]["steps"] for k in clients]
        assert sorted(e_rand) == sorted(e_gsnr) and sum(e_rand) == len(clients) * 5
        assert len(set(e_gsnr)) > 2 and 0 in e_gsnr  # a plan worth permuting
        moved += e_rand != e_gsnr
        assert rand_diag["n"] == gsnr_diag["n"] and rand_diag["gsnr"] == gsnr_diag["gsnr"]  # clients' own
        assert rand_diag["entropy"] == pytest.approx(gsnr_diag["entropy"])
        for key in ("steps_cv", "steps_zero", "steps_max"):
            assert rand_diag[key] == pytest.approx(gsnr_diag[key])
        assert plan_round("random", t, messages, weights)[0] == rand  # reproducible
    assert moved >= 5  # the assignment is broken, round after round
    again = [plan_round("random", t, random_messages(clients, seed=t), weights, seed=1)[0] for t in range(6)]
    assert any(a != plan_round("random", t, random_messages(clients, seed=t), weights)[0]
               for t, a in enumerate(again))  # another run seed, other permutations


def test_dirichlet_plan_splits_the_same_total_reproducibly() -> None:
    clients = list(range(6))
    plans = [plan_round("dirichlet", t, {k: {} for k in clients}, np.full(6, 1 / 6))[0] for t in range(4)]
    for t, plan in enumerate(plans):
        assert sum(v["steps"] for v in plan.values()) == 30
        assert plan == plan_round("dirichlet", t, {k: {} for k in clients}, np.full(6, 1 / 6))[0]
    assert len({tuple(v["steps"] for v in p.values()) for p in plans}) == 4  # a new draw every round


def test_data_plan_is_proportional_to_client_sizes_with_the_exact_total() -> None:
    weights = np.array([0.1, 0.15, 0.25, 0.5])  # client 0 is not sampled
    instructions, diag = plan_round("data", 0, {1: {}, 2: {}, 3: {}}, weights, e_const=3)
    # q = (0.15, 0.25, 0.5) / 0.9 = (1/6, 5/18, 5/9) of 9 steps: 1.5, 2.5, 5 -> 1, 2, 5 + one leftover
    # step to the largest remainder (0.5, 0.5: the first by a stable sort)
    assert instructions == {1: {"steps": 2}, 2: {"steps": 2}, 3: {"steps": 5}}
    assert "n" not in diag and "gsnr" not in diag and diag["fallback"] is False
    assert diag["entropy"] == pytest.approx(entropy(np.array([3, 5, 10]) / 18))
    instructions, _ = plan_round("data", 0, {0: {}, 1: {}, 2: {}, 3: {}}, weights, e_const=5)
    assert instructions == {0: {"steps": 2}, 1: {"steps": 3}, 2: {"steps": 5}, 3: {"steps": 10}}


def test_steps_summary_by_hand() -> None:
    assert steps_summary(np.array([0, 0, 4, 12])) == {
        "steps_cv": pytest.approx(math.sqrt((16 + 16 + 0 + 64) / 4) / 4), "steps_zero": 2, "steps_max": 12}
    assert steps_summary(np.array([5, 5])) == {"steps_cv": 0.0, "steps_zero": 0, "steps_max": 5}


def distinct_federation(local_steps: int | None, local_epochs: float = 1.0, clients: int = 3) -> Federation:
    """``clients`` clients of 20 samples with different data and labels (random, then all 0, then all 2, and so on),
    a small non-linear model."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(20 * clients, 6, generator=g)
    y = torch.cat([torch.randint(0, 3, (20,), generator=g),
                   *(torch.full((20,), 2 * (i % 2), dtype=torch.long) for i in range(clients - 1))])
    parts = [np.arange(20 * i, 20 * (i + 1)) for i in range(clients)]
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    options = LocalOptions(lr=0.1, batch_size=5, local_epochs=local_epochs, local_steps=local_steps)
    return Federation(module, x, y, parts, x, y, options, seed=4)


@pytest.mark.parametrize("base", ["fedavg", "fedprox", "scaffold"])
def test_uniform_plan_is_the_base_algorithm_with_local_steps_e_const(base: str) -> None:
    """Non-IID clients (the GSNR plan is unequal), plan = uniform: every client runs E_const = 6
    steps, no statistics are computed or sent, and the model equals the base run with
    train.local_steps = 6."""
    e_const = 6
    mu = {"mu": 0.05} if base == "fedprox" else {}
    gsnr_name = "fedgsnr" if base == "fedavg" else f"fedgsnr-{base}"
    base_alg, uniform = build_algorithm(base, **mu), build_algorithm(gsnr_name, samples=8, e_const=e_const,
                                                                        plan="uniform", **mu)
    gsnr = build_algorithm(gsnr_name, samples=8, e_const=e_const, **mu)
    base_fed, fed = distinct_federation(local_steps=e_const), distinct_federation(None, local_epochs=0.25)
    s_base = init_state(base_alg, base_fed.model.theta.clone(), 3)
    s_uni = init_state(uniform, fed.model.theta.clone(), 3)
    _, r_gsnr = run_round(gsnr, init_state(gsnr, fed.model.theta.clone(), 3), fed)
    assert len(set(r_gsnr.diag["steps"].values())) > 1  # the GSNR plan would differ
    for _ in range(3):
        s_base, r_base = run_round(base_alg, s_base, base_fed)
        s_uni, r_uni = run_round(uniform, s_uni, fed)
        assert r_uni.diag["steps"] == {"0": e_const, "1": e_const, "2": e_const}
        assert r_uni.diag["steps_cv"] == 0.0 and r_uni.diag["steps_zero"] == 0
        assert r_uni.diag["steps_max"] == e_const and "n" not in r_uni.diag and "gsnr" not in r_uni.diag
        assert r_uni.diag["entropy"] == pytest.approx(math.log(3))
        assert r_uni.local_steps == r_base.local_steps == 3 * e_const
        assert r_uni.bytes_up == r_base.bytes_up  # no statistics sent
        assert r_uni.bytes_down == r_base.bytes_down + 3 * 8  # the instructions
    torch.testing.assert_close(s_uni.w, s_base.w, atol=1e-7, rtol=0)
    if base == "scaffold":
        torch.testing.assert_close(s_uni.server[1], s_base.server[0], atol=1e-7, rtol=0)


@pytest.mark.parametrize("plan", ["uniform", "dirichlet", "data"])
def test_controls_without_statistics_compute_none(plan: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedaccel.algorithms.fedgsnr as module

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("statistics computed")

    monkeypatch.setattr(module, "gradient_statistics", refuse)
    fed = distinct_federation(None)
    algorithm = build_algorithm("fedgsnr", samples=8, e_const=4, plan=plan)
    _, report = run_round(algorithm, init_state(algorithm, fed.model.theta.clone(), 3), fed)
    assert sum(report.diag["steps"].values()) == 12 and report.local_steps == 12
    assert report.bytes_up == sum(1 for e in report.diag["steps"].values() if e) * fed.model.size * 4


def test_a_client_with_zero_steps_keeps_its_scaffold_control() -> None:
    fed = scalar_federation([[2.0], [-2.0], [2.0]])  # client 1 gets 0 steps (see above)
    algorithm = build_algorithm("fedgsnr-scaffold", samples=2, e_const=2)
    state, report = run_round(algorithm, init_state(algorithm, fed.model.theta.clone(), 3), fed)
    assert report.diag["steps"]["1"] == 0
    assert state.clients[1][1] is None and state.clients[0][1] is not None
    # c_i = (w - theta_end) / (tau_i eta) = (0 - 0.542) / (3 * 0.1) for clients 0 and 2;
    # c = (1/N) sum of dc_i over them (p_i = 1/N = 1/3 here, so data and uniform weighting agree)
    assert state.clients[0][1].item() == pytest.approx(-0.542 / 0.3, abs=1e-5)
    assert state.server[1].item() == pytest.approx(-2 / 3 * 0.542 / 0.3, abs=1e-5)


def blob_data(n_per_class: int, seed: int) -> tuple[Tensor, Tensor]:
    """Four well-separated Gaussian classes in 8 dimensions."""
    g = torch.Generator().manual_seed(seed)
    centres = 3 * torch.eye(4, 8)
    y = torch.arange(4).repeat_interleave(n_per_class)
    x = centres[y] + torch.randn(len(y), 8, generator=g)
    return x, y


def blob_federation(parts: list[np.ndarray], x: Tensor, y: Tensor) -> Federation:
    module = build_model("softmax", (8,), 4, seed=0)
    return Federation(module, x, y, parts, x, y, LocalOptions(lr=0.1, batch_size=16), seed=0)


def last_plan(fed: Federation, rounds: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(n_k, r_k) of the last of ``rounds`` FedGSNR rounds."""
    algorithm = build_algorithm("fedgsnr", samples=128, e_const=5)
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    for _ in range(rounds):
        state, report = run_round(algorithm, state, fed)
    return np.array(list(report.diag["n"].values())), np.array(list(report.diag["gsnr"].values()))


def test_iid_clients_get_similar_n_and_non_iid_clients_do_not() -> None:
    """IID: local = global distribution, so n_k is near 1 for all (Theorem 3.7 with equal statistics)."""
    x, y = blob_data(150, seed=1)
    iid = np.random.default_rng(0).permutation(len(y))
    by_label = np.argsort(y.numpy(), kind="stable")  # clients hold one or two classes
    n_iid, r_iid = last_plan(blob_federation(list(np.array_split(iid, 6)), x, y))
    n_skew, r_skew = last_plan(blob_federation(list(np.array_split(by_label, 6)), x, y))
    spread = lambda n: n.std() / n.mean()  # noqa: E731
    assert np.all(np.abs(n_iid - 1) < 0.2) and spread(n_iid) < 0.1
    assert spread(n_skew) > 3 * spread(n_iid) and n_skew.max() < 0.6
    assert r_iid.min() > r_skew.max()


@pytest.mark.parametrize("kind", ["label-flip", "noise"])
def test_an_attacked_client_gets_the_lowest_gsnr(kind: str) -> None:
    x, y = blob_data(100, seed=2)
    parts = list(np.array_split(np.random.default_rng(1).permutation(len(y)), 5))
    attacked = 3
    x_bad, y_bad = apply_attack(kind, x, y, parts[attacked], 4, np.random.default_rng(0), shift=1)
    fed = blob_federation(parts, x_bad, y_bad)
    algorithm = build_algorithm("fedgsnr", samples=64, e_const=5)
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    for _ in range(3):
        state, report = run_round(algorithm, state, fed)
        gsnr = {int(k): v for k, v in report.diag["gsnr"].items()}
        assert min(gsnr, key=gsnr.get) == attacked
        # a noise client has small gradients (small Q_k), so n_k = M_k / Q_k need not be low
        if kind == "label-flip":
            steps = {int(k): v for k, v in report.diag["steps"].items()}
            assert min(steps, key=steps.get) == attacked


# ---------------------------------------------------------------------------------------------
# Attacks and configuration
# ---------------------------------------------------------------------------------------------


def test_label_flip_and_noise_touch_only_the_client_rows() -> None:
    x, y = torch.randn(10, 3), torch.arange(10) % 4
    index = np.array([1, 4, 7])
    x1, y1 = apply_attack("label-flip", x, y, index, 4, np.random.default_rng(0), shift=2)
    assert y1.tolist() == [0, 3, 2, 3, 2, 1, 2, 1, 0, 1]  # (l + 2) mod 4 at rows 1, 4, 7
    assert torch.equal(x1, x) and y.tolist() == (torch.arange(10) % 4).tolist()  # input untouched
    x2, y2 = apply_attack("noise", x, y, index, 4, np.random.default_rng(0))
    x3, _ = apply_attack("noise", x, y, index, 4, np.random.default_rng(0))
    assert torch.equal(x2, x3) and torch.equal(y2, y)  # seeded; labels kept
    assert torch.equal(x2[[0, 2, 3, 5, 6, 8, 9]], x[[0, 2, 3, 5, 6, 8, 9]])
    assert x2[index].abs().max() <= 1 and not torch.equal(x2[index], x[index])
    x4, y4 = attack_clients("label-flip", x, y, [np.array([0, 1]), np.array([2]), np.array([3])], [0, 2], 4,
                            np.random.default_rng(0))
    assert y4.tolist()[:4] == [1, 2, 2, 0]


def test_invalid_settings_fail_with_one_line() -> None:
    bad = [
        lambda: fedgsnr_planning(samples=1),
        lambda: fedgsnr_planning(e_const=0),
        lambda: fedgsnr_planning(e_const=2.5),
        lambda: build_algorithm("fedgsnr", e_consts=3),
        lambda: build_algorithm("fedgsnr-scaffold", plan="shuffle"),
        lambda: apply_attack("flip", torch.zeros(2, 1), torch.zeros(2), np.array([0]), 4,
                             np.random.default_rng()),
        lambda: apply_attack("label-flip", torch.zeros(2, 1), torch.zeros(2), np.array([0]), 4,
                             np.random.default_rng(), shift=4),
        lambda: attack_clients("noise", torch.zeros(2, 1), torch.zeros(2), [np.array([0])], [3], 4,
                               np.random.default_rng()),
    ]
    for make in bad:
        with pytest.raises(ConfigError) as err:
            make()
        assert "\n" not in str(err.value)
