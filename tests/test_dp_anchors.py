"""Client-level DP checked against outside anchors: Flower 1.42's DP strategies on the same updates with the same
noise draws, Opacus's accountants on a grid of (q, z, rounds), the exact (analytic) Gaussian mechanism of Balle and
Wang (ICML 2018) where no sampling amplifies, and the noise's moments over many rounds."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch
from test_server_opt import DIM, SHAPES, NodeGrid, as_arrays, as_flat, flower_in_process

from fedaccel.algorithms.base import ClientUpdate, RoundInfo
from fedaccel.algorithms.dp import DPSettings, _round_rdp, dp_mean, epsilon

pytest.importorskip("dp_accounting")


def info(round_: int, n: int = 5, seed: int = 0) -> RoundInfo:
    return RoundInfo(round=round_, lr=0.1, prev_lr=0.1, weights=np.full(n, 1.0 / n), seed=seed)


def uploads(w: np.ndarray, models: np.ndarray) -> list[ClientUpdate]:
    return [ClientUpdate(i, 1.0, 1, torch.tensor(w - theta)) for i, theta in enumerate(models)]


def flower_draws(seed: int, count: int) -> np.ndarray:
    """The standard normals numpy's global generator gives after ``np.random.seed(seed)``: Flower draws its noise
    there (``np.random.normal(0, std, shape)`` is std times these, array after array, in its legacy stream)."""
    np.random.seed(seed)
    return np.random.standard_normal(count)


def flower_round(strategy: Any, t: int, w: np.ndarray, models: np.ndarray, seed: int, client_mod: Any = None
                 ) -> np.ndarray:
    """One Flower round in process: configure, the clients' replies (through ``client_mod`` where the clients
    clip), aggregate with numpy's global generator seeded; the new model, flat."""
    from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict

    messages = list(strategy.configure_train(t, as_arrays(w), ConfigRecord(), NodeGrid(len(models))))
    replies = []
    for msg, theta in zip(messages, models, strict=True):
        content = RecordDict({"arrays": as_arrays(theta), "metrics": MetricRecord({"num-examples": 7})})
        if client_mod is None:
            replies.append(Message(content, dst_node_id=msg.metadata.dst_node_id, message_type="train"))
        else:
            context = Context(run_id=1, node_id=msg.metadata.dst_node_id, node_config={}, state=RecordDict(),
                              run_config={})
            replies.append(client_mod(msg, context, lambda m, _c, content=content: Message(content, reply_to=m)))
    np.random.seed(seed)
    arrays, _ = strategy.aggregate_train(t, replies)
    return as_flat(arrays)


def random_models(rng: np.random.Generator, w: np.ndarray, n: int) -> np.ndarray:
    """n client models around w whose updates' norms straddle 1 (some clipped at S = 1, some not)."""
    directions = rng.normal(0, 1, (n, DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return w + directions * rng.uniform(0.3, 2.5, (n, 1))


@pytest.mark.parametrize("where", ["server", "client"])
def test_fixed_clipping_is_flowers_on_the_same_updates_and_noise(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's DifferentialPrivacy{Server,Client}SideFixedClipping around its FedAvg (equal sample counts), five
    clients, three rounds: fedaccel's DP mean, given the standard normals Flower drew (negated: fedaccel subtracts
    the noised mean of w - theta_i, Flower adds that of theta_i - w), gives Flower's model to 1e-6."""
    strategies = pytest.importorskip("flwr.serverapp.strategy")
    from flwr.clientapp.mod import fixedclipping_mod

    from fedaccel.algorithms import dp

    flower_in_process(monkeypatch)
    z, clip, n = 1.3, 1.0, 5
    wrapper = (strategies.DifferentialPrivacyServerSideFixedClipping if where == "server"
               else strategies.DifferentialPrivacyClientSideFixedClipping)
    strategy = wrapper(strategies.FedAvg(), noise_multiplier=z, clipping_norm=clip, num_sampled_clients=n)
    settings = DPSettings(clip, z, 1e-5, n, 1.0, "fixed", 3)
    rng = np.random.default_rng(0)
    w = rng.normal(0, 1, DIM)
    ours = torch.tensor(w)
    for t in range(3):
        models = random_models(rng, w, n)
        w = flower_round(strategy, t + 1, w, models, seed=10 + t, client_mod=None if where == "server" else fixedclipping_mod)
        xi = torch.tensor(flower_draws(10 + t, DIM))
        monkeypatch.setattr(dp, "standard_normal", lambda _info, shape, xi=xi: -xi.reshape(shape).clone())
        sent = uploads(ours.numpy(), models)
        # without the noise, or without the clipping, fedaccel's step would miss Flower's by far more than 1e-6
        for changed in (replace(settings, noise_multiplier=0.0), replace(settings, clip=1e9)):
            assert float((dp_mean(changed).aggregate(info(t), ours, sent) - torch.tensor(w)).abs().max()) > 1e-2
        ours = dp_mean(settings).aggregate(info(t), ours, sent)
        np.testing.assert_allclose(ours.numpy(), w, atol=1e-6, rtol=0, err_msg=f"round {t}")


# --- the accountant against Opacus's ------------------------------------------------------------------------------

GRID = [(q, z, rounds) for q in (0.01, 0.1, 0.5) for z in (0.8, 1.5) for rounds in (1, 30, 200)]


def opacus_epsilon(kind: str, q: float, z: float, rounds: int, delta: float, orders: Any = None) -> float:
    accountants = pytest.importorskip("opacus.accountants")
    accountant = accountants.RDPAccountant() if kind == "rdp" else accountants.PRVAccountant()
    for _ in range(rounds):
        accountant.step(noise_multiplier=z, sample_rate=q)
    with warnings.catch_warnings():  # the PRV's numpy divides by zero on its grid's edge; the RDP's advice on its
        warnings.simplefilter("ignore")  # orders' range: Opacus's own business
        return float(accountant.get_epsilon(delta, **({} if orders is None else {"alphas": orders})))


def bernoulli(q: float, z: float, rounds: int) -> DPSettings:
    return DPSettings(1.0, z, 1e-5, 1000, q, "bernoulli", rounds)


@pytest.mark.parametrize(("q", "z", "rounds"), GRID)
def test_epsilon_is_opacuss_rdp_to_one_percent(q: float, z: float, rounds: int) -> None:
    """Bernoulli participation is Poisson sampling with rate q = C, the case Opacus's RDP accountant covers
    (add-or-remove-one, its own implementation of the bound and of the conversion). At every integer Renyi order
    one round's RDP is Opacus's to 1e-9; epsilon is Opacus's (on its own orders) to 1% for q <= 0.1. At q = 0.5
    dp-accounting's bound at fractional orders is looser than Opacus's (and it drops those below 1.8 at z = 0.8),
    so epsilon is larger, the safe side: never smaller than Opacus's by more than 1%."""
    analysis = pytest.importorskip("opacus.accountants.analysis.rdp")
    settings = bernoulli(q, z, rounds)
    orders, rdp = _round_rdp(settings, z)
    whole = [(a, r) for a, r in zip(orders, rdp, strict=True) if float(a).is_integer()]
    theirs_rdp = analysis.compute_rdp(q=q, noise_multiplier=z, steps=1, orders=[a for a, _ in whole])
    np.testing.assert_allclose([r for _, r in whole], theirs_rdp, rtol=1e-9)
    ours, theirs = epsilon(settings, rounds), opacus_epsilon("rdp", q, z, rounds, 1e-5)
    assert ours >= 0.99 * theirs
    if q <= 0.1:
        assert math.isclose(ours, theirs, rel_tol=0.01)


def test_a_wrong_sampling_rate_misses_opacus_by_more_than_the_tolerance() -> None:
    """The 1% above has the power to catch an accountant handed the wrong rate: 10% off moves epsilon by more."""
    for q, z, rounds in GRID:
        if q <= 0.1:
            theirs = opacus_epsilon("rdp", q, z, rounds, 1e-5)
            assert not math.isclose(epsilon(bernoulli(q * 1.1, z, rounds), rounds), theirs, rel_tol=0.01)


@pytest.mark.parametrize(("q", "z", "rounds"), [(0.01, 1.5, 200), (0.1, 0.8, 30), (0.5, 1.5, 30)])
def test_the_rdp_bound_is_never_below_opacuss_prv_estimate(q: float, z: float, rounds: int) -> None:
    """The PRV accountant (Gopi et al., 2021) is near-exact; RDP is an upper bound, so it must not be smaller
    (beyond the PRV's default error, 0.01 in epsilon), and it is within 30% here."""
    ours, prv = epsilon(bernoulli(q, z, rounds), rounds), opacus_epsilon("prv", q, z, rounds, 1e-5)
    assert prv - 0.01 <= ours <= 1.3 * prv


# --- the exact Gaussian mechanism (Balle and Wang, ICML 2018) -------------------------------------------------------


def exact_gaussian_epsilon(sensitivity_over_sigma: float, delta: float) -> float:
    """Balle and Wang's Theorem 8: N(0, sigma^2) on a query of L2 sensitivity Delta is (eps, delta)-DP exactly
    when Phi(D/2 - eps/D) - e^eps Phi(-D/2 - eps/D) <= delta, D = Delta/sigma; the smallest such eps (the
    left side decreases in eps), by bisection."""
    from scipy.stats import norm

    d = sensitivity_over_sigma

    def excess(eps: float) -> float:
        return float(norm.cdf(d / 2 - eps / d) - math.exp(eps) * norm.cdf(-d / 2 - eps / d)) - delta

    low, high = 0.0, 1.0
    while excess(high) > 0:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if excess(mid) > 0 else (low, mid)
    return high


@pytest.mark.parametrize(("sampling", "z", "delta"), [("bernoulli", 1.0, 1e-5), ("bernoulli", 4.0, 1e-5),
                                                      ("fixed", 2.0, 1e-5), ("fixed", 8.0, 1e-3)])
def test_one_round_with_every_client_is_bounded_by_the_exact_gaussian_mechanism(
        sampling: str, z: float, delta: float) -> None:
    """q = 1, one round: no amplification, the release is one Gaussian mechanism of noise z S on a sum of
    sensitivity S (add-or-remove, Bernoulli) or 2S (replace-one, fixed). The RDP bound is at least the exact
    epsilon, and within 20% of it (8% to 16% on these four)."""
    settings = DPSettings(1.0, z, delta, 10, 1.0, sampling, 1)
    exact = exact_gaussian_epsilon((1.0 if sampling == "bernoulli" else 2.0) / z, delta)
    ours = epsilon(settings, 1)
    assert exact <= ours <= 1.2 * exact
    # handed the other neighbouring relation (half or twice the sensitivity), the bound would be off the mark
    other = exact_gaussian_epsilon((2.0 if sampling == "bernoulli" else 1.0) / z, delta)
    assert not other <= ours <= 1.2 * other


# --- the noise's moments over many draws ----------------------------------------------------------------------------


def test_the_noise_has_mean_zero_and_variance_z_s_over_m_squared_over_many_rounds() -> None:
    """200 rounds of a 500-parameter model with every upload zero: the step is the noise alone. Over its 100,000
    coordinates the mean is 0 and the variance (z S / m)^2 within five standard errors; rounds are independent."""
    z, clip, m = 1.1, 0.5, 4
    settings = DPSettings(clip, z, 1e-5, m, 1.0, "fixed", 200)
    zero = torch.zeros(500, dtype=torch.float64)
    steps = torch.stack([dp_mean(settings).aggregate(info(t, m), zero, uploads(zero.numpy(), np.zeros((m, 500))))
                         for t in range(200)])
    sigma, count = z * clip / m, steps.numel()
    assert abs(float(steps.mean())) < 5 * sigma / math.sqrt(count)
    assert abs(float(steps.var()) / sigma**2 - 1) < 5 * math.sqrt(2 / (count - 1))
    correlation = float(torch.corrcoef(steps[:, :2].T.reshape(2, -1))[0, 1])  # coordinates 0 and 1 across rounds
    assert abs(correlation) < 5 / math.sqrt(200)
    assert float(torch.corrcoef(torch.stack([steps[:-1].flatten(), steps[1:].flatten()]))[0, 1]) < 5 / math.sqrt(count)
