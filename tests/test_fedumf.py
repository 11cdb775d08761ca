"""FedUMF (paper 004, Algorithm 1): C = 1 is FedAvg, fusion on a hand-made schedule, accounting."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientUpdate, Part, Participation, RoundInfo, compose
from fedaccel.algorithms.fedumf import fedumf
from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.algorithms.sampling import sample_clients
from fedaccel.engine.federation import Federation
from fedaccel.engine.round import init_state, round_info, run_round
from fedaccel.errors import ConfigError
from tiny_models import linear_federation

SIZES = (3, 4, 5, 6)  # unequal, so data weights and tau_i differ: tau = (1, 2, 2, 3) with B = 2


def federation(**options: float) -> Federation:
    return linear_federation(SIZES, **options)


def naive_local(fed: Federation, client: int, round_: int, start: Tensor) -> Tensor:
    """Plain-torch local SGD (momentum, weight decay) of client ``client`` from ``start``."""
    opt = fed.options
    lr = opt.lr * opt.lr_decay**round_
    theta, buffer = start.clone(), None
    for index in fed.batches(client, round_, int(fed.steps[client])):
        v = theta.clone().requires_grad_(True)
        xb, yb = fed.x_train[index], fed.y_train[index]
        loss = 0.5 * ((xb @ v[:3] + v[3] - yb) ** 2).mean()
        (grad,) = torch.autograd.grad(loss, v)
        direction = grad + opt.weight_decay * theta
        buffer = direction if buffer is None else opt.momentum * buffer + direction
        theta = theta - lr * buffer
    return theta


def test_full_participation_is_fedavg() -> None:
    """C = 1: every client is authorised every round, so nobody ever fuses."""
    fed = federation(momentum=0.5, weight_decay=5e-4, lr_decay=0.8)
    umf, avg = build_algorithm("fedumf", fraction=1.0, alpha=1.0), build_algorithm("fedavg")
    w0 = fed.model.theta.clone()
    s_umf, s_avg = init_state(umf, w0, 4), init_state(avg, w0, 4)
    for _ in range(4):
        s_umf, r_umf = run_round(umf, s_umf, fed)
        s_avg, r_avg = run_round(avg, s_avg, fed, fraction=1.0)
        torch.testing.assert_close(s_umf.w, s_avg.w, atol=1e-6, rtol=0)
        assert r_umf.participation == r_avg.participation
        assert (r_umf.bytes_up, r_umf.bytes_down, r_umf.local_steps) == (
            r_avg.bytes_up, r_avg.bytes_down, r_avg.local_steps,
        )
    assert not torch.equal(s_umf.w, w0)


@pytest.mark.parametrize(
    "name,extra,base,base_params",
    [
        ("fedumf-fedprox", {"mu": 0.1}, "fedprox", {"mu": 0.1}),
        ("fedumf-scaffold", {}, "scaffold", {}),
        ("fedumf-feddc", {"feddc_alpha": 0.1}, "feddc", {"alpha": 0.1}),
    ],
)
def test_full_participation_composed_is_the_base_method(
    name: str, extra: dict[str, float], base: str, base_params: dict[str, float]
) -> None:
    fed = federation(momentum=0.5, lr_decay=0.8)
    umf, plain = build_algorithm(name, fraction=1.0, **extra), build_algorithm(base, **base_params)
    w0 = fed.model.theta.clone()
    s_umf, s_plain = init_state(umf, w0, 4), init_state(plain, w0, 4)
    for _ in range(3):
        s_umf, _ = run_round(umf, s_umf, fed)
        s_plain, _ = run_round(plain, s_plain, fed, fraction=1.0)
        torch.testing.assert_close(s_umf.w, s_plain.w, atol=1e-6, rtol=0)

SCHEDULE = ((0, 1), (1, 2), (0, 3))  # S_0, S_1, S_2
# Round 1: client 2 is new (not in S_0) -> fuses g_0^2; client 1 was in S_0 -> no fusion.
# Round 2: client 0 was in S_0 but not S_1 -> fuses g_1^0 (its latest update, not g_0^0);
#          client 3 was never authorised -> fuses g_1^3.
EXPECTED_FUSIONS = {1: {2}, 2: {0, 3}}


def test_three_round_hand_case_fuses_the_right_update_with_the_lr_ratio() -> None:
    alpha, decay = 0.7, 0.5
    fed = federation(lr_decay=decay, momentum=0.5)

    def schedule(info: RoundInfo) -> Participation:
        return Participation(train=(0, 1, 2, 3), upload=SCHEDULE[info.round])

    starts: dict[tuple[int, int], Tensor] = {}
    ends: dict[tuple[int, int], Tensor] = {}
    uploads: dict[tuple[int, int], Tensor] = {}

    def spy_start(ctx, w, theta0, ss, cs):  # noqa: ANN001, ANN202
        starts[ctx.info.round, ctx.client] = theta0.clone()
        return theta0

    def spy_end(ctx, w, theta0, theta_end, ss, cs):  # noqa: ANN001, ANN202
        ends[ctx.info.round, ctx.client] = theta_end.clone()
        return cs, {}

    mean = mean_aggregate()

    def recording_mean(info: RoundInfo, w: Tensor, updates: list[ClientUpdate]) -> Tensor:
        for u in updates:
            uploads[info.round, u.client] = u.delta.clone()
        return mean.aggregate(info, w, updates)  # type: ignore[misc]

    part = replace(fedumf(fraction=0.5, alpha=alpha), participation=schedule)
    spy = Part("spy", start=spy_start, client_end=spy_end)
    algorithm = compose("fedumf-spied", part, spy, Part("mean", aggregate=recording_mean))
    state = init_state(algorithm, fed.model.theta.clone(), 4)

    # An independent plain-torch run of Algorithm 1 on the same schedule.
    w = state.w.clone()
    stored: dict[int, Tensor] = {}
    for t, chosen in enumerate(SCHEDULE):
        lr, prev_lr = 0.1 * decay**t, 0.1 * decay ** max(t - 1, 0)
        before = state.w.clone()  # w_t, equal to the naive run's w (checked below)
        torch.testing.assert_close(before, w, atol=1e-6, rtol=0)
        state, report = run_round(algorithm, state, fed)
        assert report.participation.upload == chosen and report.participation.train == (0, 1, 2, 3)

        fused = {i for i in range(4) if not torch.equal(starts[t, i], before)}
        assert fused == EXPECTED_FUSIONS.get(t, set())
        ends_naive = {}
        for i in range(4):
            start = w.clone()
            if i in chosen and (t == 0 or i not in SCHEDULE[t - 1]) and i in stored:
                start = start + alpha * (lr / prev_lr) * stored[i]
                # the stored update is the previous round's own trajectory, end minus start
                expected = alpha * decay * (ends[t - 1, i] - starts[t - 1, i])
                torch.testing.assert_close(starts[t, i] - before, expected, atol=1e-7, rtol=1e-6)
            torch.testing.assert_close(starts[t, i], start, atol=1e-6, rtol=0)
            ends_naive[i] = naive_local(fed, i, t, start)
            torch.testing.assert_close(ends[t, i], ends_naive[i], atol=1e-6, rtol=0)
            stored[i] = ends_naive[i] - start
        for i in chosen:  # the uploaded delta is w_t - theta_end, fused start included
            torch.testing.assert_close(uploads[t, i], before - ends[t, i], atol=1e-6, rtol=0)
        p = fed.weights[list(chosen)] / fed.weights[list(chosen)].sum()
        w = sum(float(pk) * ends_naive[i] for pk, i in zip(p, chosen))
        torch.testing.assert_close(state.w, w, atol=1e-6, rtol=0)

    # client 0 fused its round-1 update in round 2, which differs from its round-0 one
    assert not torch.allclose(ends[1, 0] - starts[1, 0], ends[0, 0] - starts[0, 0])
    # the client state remembers the last authorisation and the latest update
    last = state.clients[3][0]
    assert last.authorised_round == 2 and last.update_lr == pytest.approx(0.1 * decay**2)
    torch.testing.assert_close(last.update, ends[2, 3] - starts[2, 3])


def test_accounting_uploads_from_authorised_clients_steps_from_all() -> None:
    fed = federation()
    algorithm = build_algorithm("fedumf", fraction=0.5)
    state = init_state(algorithm, fed.model.theta.clone(), 4)
    model_bytes = 4 * 4  # four float32 parameters
    for t in range(3):
        state, report = run_round(algorithm, state, fed)
        authorised = sample_clients(round_info(fed, t), 0.5)
        assert report.participation.upload == authorised and len(authorised) == 2
        assert report.participation.train == (0, 1, 2, 3)
        assert report.bytes_up == 2 * model_bytes
        assert report.bytes_down == 4 * model_bytes
        assert report.local_steps == 1 + 2 + 2 + 3
    assert state.totals == {"bytes_up": 3 * 2 * model_bytes, "bytes_down": 3 * 4 * model_bytes, "local_steps": 24}


@pytest.mark.parametrize(
    "kwargs", [{"alpha": 0.0}, {"alpha": 1.5}, {"alpha": -0.1}, {"fraction": 0.0}, {"fraction": 1.2}]
)
def test_invalid_hyperparameters_fail_with_one_line(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError) as err:
        fedumf(**kwargs)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError):
        build_algorithm("fedumf", **kwargs)


def test_alpha_one_is_allowed_and_recipes_build() -> None:
    fedumf(alpha=1.0, fraction=1.0)
    for name in ("fedumf", "fedumf-feddc", "fedumf-fedprox", "fedumf-scaffold"):
        assert build_algorithm(name).parts[0].name == "fedumf"


@pytest.mark.parametrize(("name", "plain"), [("fedumf", "FedAvg"), ("fedumf-feddc", "feddc"), ("fedumf-scaffold", "scaffold"),
                                             ("fedumf-bherd", "bherd"), ("fedgsnr-fedumf", "fedgsnr"),
                                             ("fedumf weighting=uniform", "FedAvg with an unweighted mean"),
                                             ("fedumf-feddc weighting=data", "feddc with a data-weighted mean")])
def test_the_full_participation_note_names_the_method_fedumf_is_combined_with(
        name: str, plain: str, capsys: pytest.CaptureFixture) -> None:
    """At C = 1 FedUMF-X authorises every client every round: it is X, not FedAvg (a new user saw "fedumf-feddc ...
    it is FedAvg"), with X's mean or the other one (FedUMF's unweighted mean was called FedAvg, which weights by
    data); below 1, no note."""
    from fedaccel.runs.config import load_config, warn_if_fedavg_in_disguise

    name, *options = name.split()
    warn_if_fedavg_in_disguise(load_config(None, [f"algorithm={name}", *(f"algorithm.{o}" for o in options)]))
    assert f"note: {name} with C = 1 authorises every client every round: it is {plain};" in capsys.readouterr().err
    warn_if_fedavg_in_disguise(load_config(None, [f"algorithm={name}", "train.client_fraction=0.5"]))
    assert capsys.readouterr().err == ""
