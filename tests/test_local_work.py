"""Systems heterogeneity (fedaccel/engine/work.py): per-client local work drawn per round, what the
server does with stragglers' partial work, and Bernoulli participation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from tiny_models import linear_federation

from fedaccel.algorithms.base import RoundInfo
from fedaccel.algorithms.registry import RECIPES, build_algorithm
from fedaccel.algorithms.sampling import sample_clients
from fedaccel.engine.federation import Federation
from fedaccel.engine.round import FLState, RoundReport, init_state, run_round
from fedaccel.engine.stacked import StackedClients
from fedaccel.engine.work import LocalWork
from fedaccel.errors import ConfigError
from fedaccel.runs.config import load_config, local_options

SIZES = (5, 8, 11)  # three clients of different sizes
B, LR = 2, 0.1


def federation(work: LocalWork, sizes: tuple[int, ...] = SIZES, seed: int = 3, **options: Any) -> Federation:
    """The tiny least-squares federation (y ~ <a, x> + b), batches in the given order."""
    fed = linear_federation(sizes, work=work, order="given", **options)  # type: ignore[arg-type]
    fed.seed = seed
    return fed


def one_round(fed: Federation, name: str, **params: Any) -> tuple[FLState, RoundReport, np.ndarray]:
    algorithm = build_algorithm(name, **params)
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    w0 = state.w.double().numpy()
    state, report = run_round(algorithm, state, fed, fraction=1.0)
    return state, report, w0


def numpy_local(fed: Federation, client: int, w: np.ndarray, tau: int, mu: float = 0.0) -> np.ndarray:
    """tau SGD steps of 0.5 mean((<a, x> + b - y)^2) (+ mu/2 |theta - w|^2) from w, batches of B read
    cyclically from the client's samples in the given order; returns theta_end."""
    index = fed.partition[client]
    x = np.hstack([fed.x_train[index].double().numpy(), np.ones((len(index), 1))])
    y = fed.y_train[index].double().numpy()
    theta = w.copy()
    for k in range(tau):
        rows = [(k * B + j) % len(index) for j in range(B)]
        xb, yb = x[rows], y[rows]
        grad = xb.T @ (xb @ theta - yb) / B + mu * (theta - w)
        theta = theta - LR * grad
    return theta


def drawn_epochs(report: RoundReport) -> dict[int, int]:
    return {int(i): e for i, e in report.diag["local_epochs"].items()}


def test_fednova_with_random_local_epochs_is_the_reference_normalised_update() -> None:
    """JYWa/FedNova: w - tau_eff sum_i p_i (w - theta_i) / tau_i, tau_eff = sum_i p_i tau_i, with each
    client's epochs drawn this round (read back from the diagnostics) and tau_i = floor(e_i |D_i| / B)."""
    fed = federation(LocalWork("uniform", min_epochs=1, max_epochs=4))
    state, report, w = one_round(fed, "fednova")
    epochs = drawn_epochs(report)
    assert sorted(epochs) == [0, 1, 2] and all(1 <= e <= 4 for e in epochs.values())
    taus = [math.floor(epochs[i] * n / B) for i, n in enumerate(SIZES)]
    assert len(set(epochs.values())) > 1  # the draws differ, so FedNova's normalisation matters
    assert report.local_steps == sum(taus)
    p = np.array(SIZES) / sum(SIZES)
    deltas = [w - numpy_local(fed, i, w, tau) for i, tau in enumerate(taus)]
    tau_eff = float(p @ np.array(taus))
    want = w - tau_eff * sum(pi * d / tau for pi, d, tau in zip(p, deltas, taus))
    np.testing.assert_allclose(state.w.double().numpy(), want, rtol=1e-5, atol=1e-6)
    fedavg = w - sum(pi * d for pi, d in zip(p, deltas))
    assert np.abs(want - fedavg).max() > 1e-3  # FedAvg's plain mean is a different point


def test_fedavg_drops_stragglers_as_if_they_had_not_been_selected() -> None:
    sizes = (5, 8, 11, 6)
    work = LocalWork("stragglers", fraction=0.5)
    fed = federation(work, sizes, local_epochs=3)
    state, report, _ = one_round(fed, "fedavg")  # partial_work auto: FedAvg drops
    stragglers = report.diag["stragglers"]
    assert report.diag["dropped"] == stragglers and len(stragglers) == 2
    remaining = [i for i in range(4) if i not in stragglers]
    assert report.uploaded == 2
    epochs = drawn_epochs(report)
    assert all(1 <= epochs[i] <= 2 for i in stragglers)  # fewer than E = 3 epochs
    full = [math.floor(3 * n / B) for n in sizes]
    partial = {i: math.floor(epochs[i] * sizes[i] / B) for i in stragglers}
    assert report.local_steps == sum(full[i] for i in remaining) + sum(partial.values())  # their work counts

    plain = federation(LocalWork(), sizes, local_epochs=3)
    algorithm = build_algorithm("fedavg")
    reference = init_state(algorithm, plain.model.theta.clone(), 4)
    reference, _ = run_round(algorithm, reference, plain, schedule=[remaining])
    torch.testing.assert_close(state.w, reference.w, atol=1e-10, rtol=0)


def test_fedprox_keeps_stragglers_partial_updates_in_the_mean() -> None:
    sizes, mu = (5, 8, 11, 6), 0.3
    fed = federation(LocalWork("stragglers", fraction=0.5), sizes, local_epochs=3)
    state, report, w = one_round(fed, "fedprox", mu=mu)
    stragglers = report.diag["stragglers"]
    assert len(stragglers) == 2 and "dropped" not in report.diag and report.uploaded == 4
    epochs = {i: drawn_epochs(report).get(i, 3) for i in range(4)}
    taus = [math.floor(epochs[i] * n / B) for i, n in enumerate(sizes)]
    assert any(taus[i] < math.floor(3 * sizes[i] / B) for i in stragglers)
    p = np.array(sizes) / sum(sizes)
    want = sum(pi * numpy_local(fed, i, w, tau, mu) for i, (pi, tau) in enumerate(zip(p, taus)))
    np.testing.assert_allclose(state.w.double().numpy(), want, rtol=1e-5, atol=1e-6)


def test_partial_work_keep_and_drop_override_the_recipes_reference() -> None:
    sizes = (5, 8, 11, 6)
    kept = one_round(federation(LocalWork("stragglers", partial="keep"), sizes, local_epochs=3), "fedavg")[1]
    dropped = one_round(federation(LocalWork("stragglers", partial="drop"), sizes, local_epochs=3), "fedprox")[1]
    assert kept.uploaded == 4 and "dropped" not in kept.diag
    assert dropped.uploaded == 2 and dropped.diag["dropped"] == dropped.diag["stragglers"]


@pytest.mark.parametrize("name", ["fedavg", "fednova", "scaffold"])
def test_fixed_work_is_todays_round(name: str) -> None:
    """fixed (the default) adds nothing to a round: the configured tau_i, no diagnostics, and the same
    numbers bit for bit as stragglers with fraction 0 and as uniform epochs in [E, E]."""
    def run(work: LocalWork) -> tuple[FLState, RoundReport]:
        fed = federation(work, local_epochs=2)
        algorithm = build_algorithm(name)
        state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
        for _ in range(2):
            state, report = run_round(algorithm, state, fed, fraction=0.7)
        return state, report

    fixed, report = run(LocalWork())
    configured = sum(math.floor(2 * SIZES[i] / B) for i in report.participation.train)
    assert report.diag == {} and report.local_steps == configured
    for same in (LocalWork("stragglers", fraction=0.0), LocalWork("uniform", min_epochs=2, max_epochs=2)):
        state, _ = run(same)
        assert torch.equal(state.w, fixed.w)
        assert all(torch.equal(a, b) for a, b in zip(state.server, fixed.server) if isinstance(a, torch.Tensor))


def test_fixed_is_the_default_of_a_config() -> None:
    options = local_options(load_config(None, []))
    assert options.work == LocalWork() and options.sampling == "fixed"
    options = local_options(load_config(None, ["train.local_work={name: uniform, min_epochs: 2, max_epochs: 5}",
                                               "train.partial_work=keep", "train.sampling=bernoulli"]))
    assert options.work == LocalWork("uniform", min_epochs=2, max_epochs=5, partial="keep")
    assert options.sampling == "bernoulli"


@pytest.mark.parametrize(("overrides", "says"), [
    (["train.local_work=stragglers"], "raise train.local_epochs"),
    (["train.local_work={name: uniform}"], "needs max_epochs"),
    (["train.local_work={name: uniform, max_epochs: 2.5}"], "must be an integer"),
    (["train.local_work={name: stragglers, fraction: 1.5}", "train.local_epochs=3"], "fraction must be in"),
    (["train.partial_work=sometimes"], "train.partial_work must be one of"),
    (["train.sampling=poisson"], "train.sampling must be one of"),
    (["train.sampling=bernoulli", "train.participation=[[0]]"], "leave train.sampling at fixed"),
])
def test_bad_settings_fail_in_one_line(overrides: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        load_config(None, overrides)
    assert "\n" not in str(caught.value)


def bernoulli_info(round_: int, seed: int = 0, n: int = 20) -> RoundInfo:
    return RoundInfo(round=round_, lr=0.1, prev_lr=0.1, weights=np.full(n, 1 / n), seed=seed, sampling="bernoulli")


def test_bernoulli_participation_has_mean_cn_and_varies_seeded() -> None:
    n, c, rounds = 20, 0.3, 400
    sizes = [len(sample_clients(bernoulli_info(t, n=n), c)) for t in range(rounds)]
    # the mean of |S| is C N = 6 with standard error sqrt(N C (1 - C) / rounds) = 0.10
    assert abs(np.mean(sizes) - c * n) < 0.4
    assert len(set(sizes)) > 3  # rounds differ in size
    assert np.var(sizes) == pytest.approx(n * c * (1 - c), rel=0.3)  # binomial variance 4.2
    again = [sample_clients(bernoulli_info(t, n=n), c) for t in range(20)]
    assert again == [sample_clients(bernoulli_info(t, n=n), c) for t in range(20)]
    assert again != [sample_clients(bernoulli_info(t, seed=1, n=n), c) for t in range(20)]
    scheduled = RoundInfo(0, 0.1, 0.1, np.full(n, 1 / n), 0, scheduled=(2, 5), sampling="bernoulli")
    assert sample_clients(scheduled, c) == (2, 5)  # a schedule still wins


@pytest.mark.parametrize("name", ["feddyn", "feddc", "scaffold", "fedumf", "fedgsnr", "grab-fedavg"])
def test_a_round_that_selects_nobody_keeps_the_model_and_server_state(name: str) -> None:
    fed = federation(LocalWork(), sampling="bernoulli")
    c = 0.2
    empty = next(t for t in range(100) if not sample_clients(bernoulli_info(t, seed=fed.seed, n=3), c))
    algorithm = build_algorithm(name, **({"fraction": c} if name == "fedumf" else {}))
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    for _ in range(empty):
        state, _ = run_round(algorithm, state, fed, fraction=c)
    before = state
    state, report = run_round(algorithm, state, fed, fraction=c)
    assert report.uploaded == 0 and report.bytes_up == 0
    assert torch.equal(state.w, before.w)
    assert all(a is b for a, b in zip(state.server, before.server))
    if name == "fedumf":  # every client trains; nobody uploads
        assert report.local_steps > 0
    else:
        assert report.local_steps == 0 and report.participation.train == ()


WORKS = [LocalWork("uniform", min_epochs=1, max_epochs=3), LocalWork("stragglers", fraction=0.5, partial="drop")]


@pytest.mark.parametrize("work", WORKS, ids=["uniform", "stragglers-dropped"])
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_stacked_runtime_gives_the_in_process_model(name: str, work: LocalWork) -> None:
    """Every recipe with drawn local work (clients of unequal tau_i in one stack) and Bernoulli
    participation: the same model, states, steps and diagnostics as in process."""
    from test_stacked import algorithm_for, assert_states_close

    def make() -> Federation:
        return federation(work, sizes=(5, 8, 11, 6, 9), local_epochs=2, sampling="bernoulli")

    runs = []
    for stacked in (False, True):
        fed = make()
        algorithm = algorithm_for(name)
        state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
        runtime = StackedClients(algorithm, fed, state.clients, stack_size=3) if stacked else None
        reports = []
        for _ in range(3):
            state, report = run_round(algorithm, state, fed, fraction=0.7, runtime=runtime)
            reports.append(report)
        runs.append((state, reports))
    (a, ra), (b, rb) = runs
    torch.testing.assert_close(b.w, a.w, atol=1e-5, rtol=1e-4)
    assert_states_close(b.clients, a.clients)
    assert_states_close(b.server, a.server)
    assert [r.local_steps for r in rb] == [r.local_steps for r in ra]
    assert [r.uploaded for r in rb] == [r.uploaded for r in ra]
    work_keys = ("local_epochs", "stragglers", "dropped")
    assert [{k: r.diag.get(k) for k in work_keys} for r in rb] == [{k: r.diag.get(k) for k in work_keys} for r in ra]
    assert any("local_epochs" in r.diag for r in ra)


def test_planned_steps_are_scaled_by_the_drawn_share_of_the_work() -> None:
    """FedGSNR plans E_k; a client that drew e epochs of the configured E runs floor(e / E * E_k)
    steps (at least 1; a plan of 0 stays 0)."""
    fed = federation(LocalWork("uniform", min_epochs=1, max_epochs=3), sizes=(5, 8, 11, 6, 9), local_epochs=2)
    _, report, _ = one_round(fed, "fedgsnr", samples=4, e_const=3)
    planned = {int(i): s for i, s in report.diag["steps"].items()}
    epochs = drawn_epochs(report)
    assert len(set(epochs.values())) > 1
    want = [0 if planned[i] == 0 else max(1, math.floor(epochs[i] / 2 * planned[i])) for i in planned]
    assert report.local_steps == sum(want) != sum(planned.values())


@pytest.mark.parametrize(("fraction", "client_fraction", "partial", "refused"), [
    (1.0, 1.0, "auto", True), (0.6, 0.2, "auto", True),  # 1 of 4 selected, a straggler: dropped
    (0.5, 1.0, "auto", False), (1.0, 1.0, "keep", False),
    (0.6, 0.25, "drop fedumf", False),  # FedUMF: the stragglers are drawn among all 4 that train, the uploader may
])                                      # not be one (a review found it refused)
def test_stragglers_so_many_that_no_round_uploads_are_refused_at_load(
        fraction: float, client_fraction: float, partial: str, refused: bool) -> None:
    """FedAvg with every selected client a straggler (whose update it drops) ran to the end with exit 0 and the
    model of round 0."""
    from fedaccel.errors import ConfigError
    from fedaccel.runs.config import load_config

    partial, *recipe = partial.split()
    sets = ["data.clients=4", "train.local_epochs=2", f"train.client_fraction={client_fraction}",
            f"train.local_work={{name: stragglers, fraction: {fraction}}}", f"train.partial_work={partial}",
            *(f"algorithm={name}" for name in recipe)]
    if refused:
        with pytest.raises(ConfigError, match="no round uploads anything"):
            load_config(None, sets)
    else:
        load_config(None, sets)
