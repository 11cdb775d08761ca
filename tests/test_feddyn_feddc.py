"""FedDyn and FedDC against a plain-torch run of their formulas (DESIGN.md section 3), the alpha = 0
reduction, bytes, and FedUMF + FedDC composed equals the same done by hand."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch
from torch import Tensor

from fedaccel.algorithms.base import Part, Participation, RoundInfo, compose
from fedaccel.algorithms.feddc import feddc
from fedaccel.algorithms.feddyn import feddyn
from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.algorithms.sampling import sample_clients
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, round_info, run_round
from fedaccel.errors import ConfigError
from tiny_models import Linear


def federation(sizes: Sequence[int], **options: float) -> Federation:
    g = torch.Generator().manual_seed(11)
    n = sum(sizes)
    x = torch.randn(n, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3 * torch.randn(n, generator=g)
    y[: sizes[0]] += 2.0  # client 0 is different: drifts matter
    bounds = np.cumsum((0, *sizes))
    parts = [np.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    settings = {"lr": 0.1, "batch_size": 2, "local_epochs": 1.0, **options}
    return Federation(Linear(), x, y, parts, x, y, LocalOptions(**settings), seed=1)


def naive_local(
    fed: Federation, client: int, round_: int, start: Tensor, extra: Callable[[Tensor], Tensor]
) -> Tensor:
    """Plain-torch local SGD: gradient + extra(theta) + weight decay, then momentum."""
    opt = fed.options
    lr = opt.lr * opt.lr_decay**round_
    theta, buffer = start.clone(), None
    for index in fed.batches(client, round_, int(fed.steps[client])):
        v = theta.clone().requires_grad_(True)
        xb, yb = fed.x_train[index], fed.y_train[index]
        (grad,) = torch.autograd.grad(0.5 * ((xb @ v[:3] + v[3] - yb) ** 2).mean(), v)
        direction = grad + extra(theta) + opt.weight_decay * theta
        buffer = direction if buffer is None else opt.momentum * buffer + direction
        theta = theta - lr * buffer
    return theta


def naive_run(
    fed: Federation,
    rounds: int,
    choose: Callable[[int], tuple[tuple[int, ...], tuple[int, ...]]],
    method: str,
    alpha: float,
    fusion: float | None = None,
) -> dict[str, object]:
    """FedDyn / FedDC (optionally with FedUMF fusion) written straight from the formulas."""
    n, d = fed.n_clients, fed.model.size
    scale = n * fed.weights  # w~_i = N p_i
    w = fed.model.theta.clone()
    h, g_i, g = torch.zeros(n, d), torch.zeros(n, d), torch.zeros(d)
    stored: dict[int, Tensor] = {}
    last_authorised: dict[int, int] = {}
    fused_count, history = 0, []
    for t in range(rounds):
        lr = fed.options.lr * fed.options.lr_decay**t
        prev_lr = fed.options.lr * fed.options.lr_decay ** max(t - 1, 0)
        train, upload = choose(t)
        starts, ends = {}, {}
        for i in train:
            start = w.clone()
            if fusion is not None and i in upload and last_authorised.get(i) != t - 1 and i in stored:
                start = w + fusion * (lr / prev_lr) * stored[i]
                fused_count += 1
            a = alpha / float(scale[i])
            if method == "feddyn":
                extra = lambda th, a=a, i=i: a * (th - w + h[i])  # noqa: E731
            else:
                extra = lambda th, a=a, i=i: a * (th - (w - h[i])) + g / float(scale[i]) - g_i[i]  # noqa: E731
            starts[i], ends[i] = start, naive_local(fed, i, t, start, extra)
            stored[i] = ends[i] - start
        g_sum = torch.zeros(d)
        for i in upload:
            last_authorised[i] = t
            h[i] += ends[i] - w
            if method == "feddc":
                new = g_i[i] - g / float(scale[i]) - (ends[i] - starts[i]) / (int(fed.steps[i]) * lr)
                g_sum += float(scale[i]) * (new - g_i[i])
                g_i[i] = new
        g = g + g_sum / n
        w = torch.stack([ends[i] for i in upload]).mean(0) + h.mean(0)
        history.append(w.clone())
    return {"w": history, "h": h, "G_i": g_i, "G": g, "fused": fused_count}


SCHEDULE = ((0, 1), (1, 2))  # client 0 only in round 0, client 2 only in round 1


def fixed_schedule(info: RoundInfo) -> Participation:
    return Participation(SCHEDULE[info.round], SCHEDULE[info.round])


@pytest.mark.parametrize("method", ["feddyn", "feddc"])
def test_two_rounds_match_the_formulas(method: str) -> None:
    fed = federation((3, 5, 4), lr_decay=0.9, weight_decay=1e-3)
    part = (feddyn if method == "feddyn" else feddc)(alpha=0.5)
    schedule = Part("schedule", participation=fixed_schedule)
    algorithm = compose(method, schedule, part, mean_aggregate(weighting="uniform"))
    state = init_state(algorithm, fed.model.theta.clone(), 3)
    expected = naive_run(fed, 2, lambda t: (SCHEDULE[t], SCHEDULE[t]), method, alpha=0.5)
    for t in range(2):
        state, _ = run_round(algorithm, state, fed)
        torch.testing.assert_close(state.w, expected["w"][t], atol=1e-6, rtol=0)

    h, g_i = expected["h"], expected["G_i"]
    for i in range(3):
        cs = state.clients[i][1]
        drift = cs if method == "feddyn" else cs.drift
        torch.testing.assert_close(drift, h[i], atol=1e-6, rtol=0)
        if method == "feddc":
            torch.testing.assert_close(cs.correction, g_i[i], atol=1e-5, rtol=1e-6)
    ss = state.server[1]
    mean_drift = ss if method == "feddyn" else ss.mean_drift
    torch.testing.assert_close(mean_drift, h.mean(0), atol=1e-6, rtol=0)  # over all N, not S_t
    if method == "feddc":
        torch.testing.assert_close(ss.correction, expected["G"], atol=1e-5, rtol=1e-6)
        assert float(ss.correction.abs().sum()) > 0


@pytest.mark.parametrize("method", ["feddyn", "feddc"])
def test_alpha_zero_first_round_is_the_average_plus_the_mean_drift(method: str) -> None:
    """alpha = 0 and zero state: local training is FedAvg's; w_1 = avg + (1/N) sum_S (theta_i - w_0)."""
    fed = federation((3, 5, 4), momentum=0.5)
    schedule = Part("schedule", participation=fixed_schedule)
    part = (feddyn if method == "feddyn" else feddc)(alpha=0.0)
    algorithm = compose(method, schedule, part, mean_aggregate(weighting="uniform"))
    plain = compose("fedavg-uniform", schedule, mean_aggregate(weighting="uniform"))
    w0 = fed.model.theta.clone()
    state, _ = run_round(algorithm, init_state(algorithm, w0, 3), fed)
    average, _ = run_round(plain, init_state(plain, w0, 3), fed)
    # S_0 = {0, 1} of N = 3: the mean drift is (2/3) (avg - w_0)
    torch.testing.assert_close(state.w, average.w + (2 / 3) * (average.w - w0), atol=1e-6, rtol=0)
    assert not torch.allclose(state.w, average.w)


def test_bytes_count_feddc_correction_both_ways() -> None:
    fed = federation((3, 5, 4))
    model = 4 * 4
    for name, up, down in (("feddyn", model, model), ("feddc", 2 * model, 2 * model)):
        algorithm = build_algorithm(name)
        _, report = run_round(algorithm, init_state(algorithm, fed.model.theta.clone(), 3), fed, fraction=1.0)
        assert (report.bytes_up, report.bytes_down) == (3 * up, 3 * down), name


def test_fedumf_feddc_composition_equals_manual() -> None:
    """All clients train with FedDC's terms; the authorised ones fuse, upload and update their state."""
    fed = federation((3, 4, 5, 6), momentum=0.5, weight_decay=1e-3, lr_decay=0.9)
    algorithm = build_algorithm("fedumf-feddc", fraction=0.5, alpha=0.8, feddc_alpha=0.3)
    state = init_state(algorithm, fed.model.theta.clone(), 4)

    def choose(t: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (0, 1, 2, 3), sample_clients(round_info(fed, t), 0.5)

    rounds = 5
    expected = naive_run(fed, rounds, choose, "feddc", alpha=0.3, fusion=0.8)
    assert expected["fused"] >= 2  # the schedule exercises fusion, else this test proves little
    for t in range(rounds):
        state, report = run_round(algorithm, state, fed)
        assert report.participation.upload == choose(t)[1]
        torch.testing.assert_close(state.w, expected["w"][t], atol=1e-5, rtol=1e-5)
    for i in range(4):
        feddc_state = state.clients[i][1]
        if feddc_state.drift is not None:
            torch.testing.assert_close(feddc_state.drift, expected["h"][i], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(feddc_state.correction, expected["G_i"][i], atol=1e-4, rtol=1e-5)
        else:
            assert float(expected["h"][i].abs().sum()) == 0
    torch.testing.assert_close(state.server[1].correction, expected["G"], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("build", [feddyn, feddc])
def test_negative_alpha_is_rejected(build: Callable[..., Part]) -> None:
    with pytest.raises(ConfigError) as err:
        build(alpha=-0.01)
    assert "\n" not in str(err.value)
