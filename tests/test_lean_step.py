"""The lean local step: index_select gathers, closed-form gradients of the linear models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from fedaccel.algorithms.registry import build_algorithm
from fedaccel.engine.federation import Federation
from fedaccel.engine.flat import FlatModel
from fedaccel.engine.local import BatchGradient, LocalOptions, train_local
from fedaccel.engine.round import init_state, run_round
from fedaccel.algorithms.registry import RECIPES, hyperparameters
from fedaccel.models import MLP2NN, SquaredSVM, build_model, chain_gradient, closed_form_gradient
from fedaccel.models.chain import ChainGradient, chain_layers
from fedaccel.models.conv_gradient import bherd_cnn_gradient


def data(n: int = 120, seed: int = 0, shape: tuple[int, ...] = (1, 6, 6)) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g)


def autograd_gradient(flat: FlatModel, x: Tensor, y: Tensor) -> Tensor:
    module = flat.module
    return flat.gradient(module.loss(module(x), y)).clone()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name,options", [("svm", {}), ("svm", {"l2": 0.0}), ("svm", {"l2": 1.5}),
                                          ("svm", {"labels": "sign"}), ("softmax", {}), ("2nn", {"hidden": 24}),
                                          ("2nn", {"hidden": 1}), ("cnn", {})])
def test_closed_form_gradient_equals_autograd_on_random_batches(name: str, options: dict, dtype: torch.dtype) -> None:
    module = build_model(name, (1, 6, 6), 10, seed=1, **options).to(dtype)
    flat = FlatModel(module)
    kernel = closed_form_gradient(module)
    assert kernel is not None
    x, y = data(200)
    x = x.to(dtype)
    if options.get("labels") == "sign":
        y = 2 * (y % 2) - 1
    targets = kernel.prepare(y)
    g = torch.Generator().manual_seed(2)
    for trial in range(5):
        # parameters where some margins are active and some are not (the SVM starts at w = 0)
        flat.load(torch.randn(flat.size, generator=g, dtype=torch.float64).to(dtype) * 0.3 * trial)
        idx = torch.randperm(200, generator=g)[: 1 + 37 * trial]
        want = autograd_gradient(flat, x[idx], y[idx])
        flat.grad.fill_(float("nan"))  # everything must be written
        kernel(flat.theta, x.index_select(0, idx), targets.index_select(0, idx), flat.grad)
        if name == "cnn" and dtype == torch.float32:  # convolutions summed in another order than the library's,
            # at gradients up to ~1e3 here: close in norm (float64 below and the Hypothesis test: to rounding)
            assert float((flat.grad - want).norm()) <= 1e-5 * float(want.norm())
        else:
            torch.testing.assert_close(flat.grad, want, atol=1e-6, rtol=1e-5)


def test_closed_form_only_for_the_built_in_linear_models_as_they_are() -> None:
    class Hinge(SquaredSVM):
        def loss(self, output: Tensor, y: Tensor) -> Tensor:
            return torch.clamp(1 - self.targets(y, output.dtype) * output, min=0).mean()

    class Tanh2NN(MLP2NN):
        def forward(self, x: Tensor) -> Tensor:
            return super().forward(x).tanh()

    assert closed_form_gradient(build_model("svm", (4,), 2)) is not None
    assert closed_form_gradient(build_model("2nn", (4,), 2)) is not None
    assert closed_form_gradient(Hinge((4,), 2)) is None  # its own loss: autograd
    assert closed_form_gradient(Tanh2NN((4,), 2)) is None  # its own forward
    assert closed_form_gradient(build_model("cnn", (1, 8, 8), 10)) is not None
    assert closed_form_gradient(build_model("cnn", (1, 8, 8), 10, lrn=True)) is None  # LRN: autograd
    assert closed_form_gradient(build_model("cnn", (1, 8, 8), 10).to("meta")) is None  # CPU only
    for change in (lambda m: m.features[0].bias.requires_grad_(False), lambda m: setattr(m.features[2], "ceil_mode", False),
                   lambda m: setattr(m.features[4], "padding", (1, 1)), lambda m: m.classifier.__setitem__(2, torch.nn.Tanh())):
        changed = build_model("cnn", (1, 8, 8), 10)
        change(changed)
        assert closed_form_gradient(changed) is None
    for name, layer in (("softmax", lambda m: m.fc), ("2nn", lambda m: m.net[2])):
        frozen = build_model(name, (4,), 3)
        layer(frozen).bias.requires_grad_(False)
        assert closed_form_gradient(frozen) is None and chain_gradient(frozen) is None
    swapped = build_model("2nn", (4,), 3)
    swapped.net[1] = torch.nn.Tanh()
    assert closed_form_gradient(swapped) is None and chain_gradient(swapped) is None


def test_svm_softmax_2nn_and_cnn_steps_run_without_autograd(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = data()
    for name in ("svm", "softmax", "2nn", "cnn"):
        flat = FlatModel(build_model(name, (1, 6, 6), 10, seed=0))
        batches = [np.arange(k, k + 20) for k in range(0, 100, 20)]
        monkeypatch.setattr(Tensor, "backward", lambda *a, **k: pytest.fail("autograd in the step"))
        end = train_local(flat, x, y, batches, flat.theta.clone(), flat.module.loss, 0.1, LocalOptions())
        monkeypatch.undo()
        assert not torch.equal(end, flat.theta.new_zeros(flat.size))


def reference_steps(flat: FlatModel, x: Tensor, y: Tensor, batches: list[np.ndarray], lr: float) -> Tensor:
    """The step as it was written before: ``x[idx]`` gathers, autograd, theta -= lr * grad."""
    module = flat.module
    for index in batches:
        idx = torch.from_numpy(index)
        grad = flat.gradient(module.loss(module(x[idx]), y[idx]))
        with torch.no_grad():
            flat.theta.sub_(grad, alpha=lr)
    return flat.theta.clone()


@pytest.mark.parametrize("name,sizes", [("2nn", (16, 16, 16, 16)), ("cnn", (16, 16, 16, 16)), ("2nn", (16, 5, 9))])
def test_index_select_gathers_leave_autograd_models_bit_identical(name: str, sizes: tuple[int, ...]) -> None:
    x, y = data(90, shape=(1, 8, 8))
    module = build_model(name, (1, 8, 8), 10, seed=3)
    flat = FlatModel(module)
    w0 = flat.theta.clone()
    rng = np.random.default_rng(0)
    batches = [rng.permutation(90)[:size] for size in sizes]
    want = reference_steps(flat, x, y, batches, 0.05)
    autograd = BatchGradient(flat, x, y, module.loss, closed_form=False)  # the 2nn's closed form is its own test
    got = train_local(flat, x, y, batches, w0, module.loss, 0.05, LocalOptions(), gradient=autograd)
    assert torch.equal(got, want)
    assert torch.equal(x.index_select(0, torch.from_numpy(batches[0])), x[torch.from_numpy(batches[0])])


# FedGSNR's planning at a small size: its per-sample statistics and the steps it plans take both paths all the
# same (at its defaults, 40 per-sample gradients and 80 steps a round, the CNN cases took minutes on 2 cores)
SMALL_PLANNING = {"samples": 8, "e_const": 5}


@pytest.mark.parametrize("model,algorithm", [*((m, a) for m in ("svm", "softmax")
                                                 for a in ("fedavg", "fedprox", "scaffold", "bherd-fedavg")),
                                              *((m, a) for m in ("2nn", "cnn") for a in sorted(RECIPES))])  # every recipe's local terms
def test_a_whole_run_with_the_closed_form_matches_the_autograd_path(model: str, algorithm: str) -> None:
    x, y = data(160)
    parts = [np.arange(k, 160, 4) for k in range(4)]
    options = LocalOptions(lr=0.05, batch_size=8, momentum=0.5, weight_decay=1e-3, clip=2.0)
    small = {k: v for k, v in SMALL_PLANNING.items() if k in hyperparameters(algorithm)}
    finals = []
    for closed_form in (True, False):
        fed = Federation(build_model(model, (1, 6, 6), 10, seed=0), x, y, parts, x, y, options,
                         closed_form=closed_form)
        algo = build_algorithm(algorithm, **small)
        state = init_state(algo, fed.model.theta.clone(), fed.n_clients)
        for _ in range(3):
            state, _ = run_round(algo, state, fed)
        finals.append(state.w)
    assert not torch.equal(finals[0], torch.zeros_like(finals[0]))
    torch.testing.assert_close(finals[0], finals[1], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("model", ["svm", "2nn"])
@pytest.mark.parametrize("reshuffle", [False, True])
def test_batches_laid_out_in_client_order_give_the_numbers_of_gathered_batches(model: str, reshuffle: bool) -> None:
    """A fixed order is laid out once per client and sliced (a batch crossing the end of the order
    included, local_epochs 1.5); reshuffled orders are gathered. Bit-identical either way."""
    x, y = data(150)
    parts = [np.arange(k, 150, 3) for k in range(3)]  # 50 samples each, batch 8: 9 steps, one wraps
    options = LocalOptions(lr=0.05, batch_size=8, local_epochs=1.5, reshuffle=reshuffle, momentum=0.5)
    finals, layouts = [], []
    for cap in (2**40, -1):  # laid out, gathered
        fed = Federation(build_model(model, (1, 6, 6), 10, seed=0), x, y, parts, x, y, options)
        fed.layout_bytes = cap
        algo = build_algorithm("scaffold")
        state = init_state(algo, fed.model.theta.clone(), fed.n_clients)
        for _ in range(3):
            state, _ = run_round(algo, state, fed)
        finals.append(state.w)
        layouts.append(len(fed._layouts))
    assert torch.equal(finals[0], finals[1])
    assert layouts == ([0, 0] if reshuffle else [3, 0])


def test_new_training_data_drops_the_layouts() -> None:
    x, y = data(60)
    fed = Federation(build_model("svm", (1, 6, 6), 10), x, y, [np.arange(60)], x, y, LocalOptions(batch_size=10))
    first = fed.client_batches(0, 0, 2)
    assert isinstance(first[0], tuple) and torch.equal(first[0][0], x[torch.from_numpy(fed.order(0, 0)[:10])])
    fed.set_training_data(-x, 1 - y % 2)  # e.g. an attack from this round on
    again = fed.client_batches(0, 1, 2)
    assert torch.equal(again[0][0], -first[0][0])
    assert not torch.equal(again[0][1], first[0][1])


def test_a_fixed_order_is_drawn_once_and_is_the_seeded_permutation() -> None:
    """The order is cached per client (the same array every round) and is exactly the draw of
    (seed, "order", client): cached or not, the same numbers as before the cache."""
    from fedaccel.algorithms.base import make_rng

    x, y = data(60)
    parts = [np.arange(k, 60, 3) for k in range(3)]
    fed = Federation(build_model("svm", (1, 6, 6), 10), x, y, parts, x, y, LocalOptions(batch_size=4), seed=7)
    for client in range(3):
        first = fed.order(client, 0)
        assert fed.order(client, 5) is first
        want = parts[client][make_rng(7, "order", client).permutation(20)]
        assert np.array_equal(first, want)
    rr = Federation(build_model("svm", (1, 6, 6), 10), x, y, parts, x, y, LocalOptions(batch_size=4, order="reshuffle"))
    assert not np.array_equal(rr.order(0, 0), rr.order(0, 1))  # reshuffled: a new draw every round, never cached


def test_every_clients_layout_is_one_allocation() -> None:
    """All clients' laid-out batches are views of one tensor (no heap of small long-lived blocks)."""
    x, y = data(60)
    parts = [np.arange(k, 60, 3) for k in range(3)]
    fed = Federation(build_model("svm", (1, 6, 6), 10), x, y, parts, x, y, LocalOptions(batch_size=4))
    fed.client_batches(1, 0, 2)
    assert len(fed._layouts) == 3
    bases = {layout[1].untyped_storage().data_ptr() for layout in fed._layouts.values()}
    assert len(bases) == 1
    for client, (order, xs, _) in fed._layouts.items():
        assert torch.equal(xs, x[torch.from_numpy(order)])


@pytest.mark.parametrize("name", ["2nn", "softmax"])
@pytest.mark.parametrize("groups", [1, 3])
def test_the_chain_moments_are_the_per_sample_gradients_means_and_squares(name: str, groups: int) -> None:
    """FedGSNR's planning statistics through the fused chain: mean_i g_i and mean_i g_i^2 of the per-sample
    gradients over each group of samples (clients' draws, concatenated), against each sample's own autograd
    gradient (float64, so equal to rounding)."""
    module = build_model(name, (1, 6, 6), 10, seed=4, **({"hidden": 7} if name == "2nn" else {})).double()
    flat = FlatModel(module)
    chain = chain_gradient(module)
    x, y = data(24)
    x = x.double()
    per_sample = torch.stack([autograd_gradient(flat, x[i : i + 1], y[i : i + 1]) for i in range(24)])
    per_group = per_sample.view(groups, 24 // groups, -1)
    x_before, theta_before = x.clone(), flat.theta.clone()
    for _ in range(2):  # the second time with the views cached
        first, second = chain.moments(flat.theta, x, y, groups)
        assert first.shape == second.shape == (groups, flat.size)
        torch.testing.assert_close(first, per_group.mean(1), atol=1e-12, rtol=1e-10)
        torch.testing.assert_close(second, per_group.square().mean(1), atol=1e-12, rtol=1e-10)
    assert torch.equal(x, x_before) and torch.equal(flat.theta, theta_before)  # squares taken on copies


@pytest.mark.parametrize("name,shape", [("cnn", (3, 8, 8)), ("lenet5", (3, 16, 16)), ("cnn", (1, 8, 8))])
def test_channels_last_batches_give_the_numbers_of_pytorchs_layout(name: str, shape: tuple[int, ...],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose class asks for channels-last batches (``CHANNELS_LAST_FROM``) trains on NHWC memory in the
    per-client engine, to the same parameters as in NCHW (to float rounding)."""
    x, y = data(60, shape=shape)
    batches = [np.arange(k, k + 12) for k in range(0, 60, 12)]
    finals, layouts = [], []
    for least in (0, 1):
        module = build_model(name, shape, 10, seed=5)
        monkeypatch.setattr(type(module), "CHANNELS_LAST_FROM", least)
        module.features[0].register_forward_pre_hook(
            lambda _, args: layouts.append(args[0].is_contiguous(memory_format=torch.channels_last)
                                           and not args[0].is_contiguous()))
        flat = FlatModel(module)
        autograd = BatchGradient(flat, x, y, module.loss, closed_form=False)  # the CNN's own gradient: its own test
        finals.append(train_local(flat, x, y, batches, flat.theta.clone(), module.loss, 0.05, LocalOptions(),
                                  gradient=autograd))
    torch.testing.assert_close(finals[1], finals[0], atol=1e-6, rtol=1e-5)
    assert layouts == [False] * 5 + [shape[0] > 1] * 5  # one channel: both layouts are the same memory


@settings(max_examples=40, deadline=None)
@given(channels=st.integers(1, 3), height=st.integers(1, 11), width=st.integers(1, 11), batch=st.integers(1, 6),
       levels=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_the_cnn_gradient_is_autograds_on_any_image_size_and_ties(channels: int, height: int, width: int, batch: int,
                                                                  levels: int, seed: int) -> None:
    """The hand-written BHerd CNN gradient against autograd through the module (float64: equal to rounding), on
    odd sizes (the pools' ceil mode) and images of few grey levels, whose flat regions tie inside pool windows
    (the gradient must go where PyTorch's pool sends it, its first maximum)."""
    g = torch.Generator().manual_seed(seed)
    module = build_model("cnn", (channels, height, width), 10, seed=seed).double()
    flat = FlatModel(module)
    kernel = bherd_cnn_gradient(module, max_channels=3)  # (used on one channel only: the faster there)
    assert (closed_form_gradient(module) is None) == (channels > 1)
    x = torch.randint(0, levels + 1, (batch, channels, height, width), generator=g).double() / levels
    y = torch.randint(0, 10, (batch,), generator=g)
    want = autograd_gradient(flat, x, y)
    flat.grad.fill_(float("nan"))
    kernel(flat.theta, x.reshape(batch, -1), kernel.prepare(y), flat.grad)
    torch.testing.assert_close(flat.grad, want, atol=1e-12, rtol=1e-10)


@settings(max_examples=40, deadline=None)
@given(hidden=st.lists(st.integers(1, 12), min_size=0, max_size=3), batches=st.lists(st.integers(1, 9), min_size=1, max_size=3),
       lr=st.floats(1e-3, 2.0), seed=st.integers(0, 2**16))
def test_a_chains_sgd_step_is_theta_minus_lr_times_its_gradient(hidden: list[int], batches: list[int], lr: float,
                                                                 seed: int) -> None:
    """In float64 on chains of 1-4 layers (softmax regression to deeper than the 2NN), any batches one after
    another (the step's constants are kept per batch size): each step in place equals the gradient written out
    and subtracted, though no gradient vector is written."""
    g = torch.Generator().manual_seed(seed)
    sizes = [5, *hidden, 4]
    layers = [torch.nn.Linear(a, b, dtype=torch.float64) for a, b in zip(sizes, sizes[1:])]
    net = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.ReLU())][:-1])
    kernel = ChainGradient(chain_layers(layers, net))
    flat = FlatModel(net)
    theta = torch.randn(flat.size, generator=g, dtype=torch.float64)
    for batch in batches:
        x = torch.randn(batch, 5, generator=g, dtype=torch.float64)
        t = kernel.prepare(torch.randint(0, 4, (batch,), generator=g))
        grad = torch.full_like(theta, float("nan"))
        kernel(theta.clone(), x, t, grad)
        want = theta - lr * grad
        kernel.step(theta, x, t, lr)
        torch.testing.assert_close(theta, want, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("model", ["2nn", "softmax"])
@pytest.mark.parametrize("algorithm", ["fedavg", "fednova", "fedumf", "fedgsnr"])
def test_plain_sgd_takes_the_chains_step_in_place_and_matches_the_autograd_path(model: str, algorithm: str) -> None:
    """Plain local SGD (no clip, decay or momentum): the whole run through the chain's step in place equals
    the autograd path, and the step wrote no gradient vector."""
    x, y = data(160)
    parts = [np.arange(k, 160, 4) for k in range(4)]
    options = LocalOptions(lr=0.05, batch_size=8)
    finals, grads = [], []
    for closed_form in (True, False):
        fed = Federation(build_model(model, (1, 6, 6), 10, seed=0), x, y, parts, x, y, options,
                         closed_form=closed_form)
        fed.model.grad.fill_(float("nan"))
        algo = build_algorithm(algorithm)
        state = init_state(algo, fed.model.theta.clone(), fed.n_clients)
        for _ in range(3):
            state, _ = run_round(algo, state, fed)
        finals.append(state.w)
        grads.append(fed.model.grad)
    assert bool(grads[0].isnan().all()) and not bool(grads[1].isnan().any())  # the step in place; autograd wrote
    torch.testing.assert_close(finals[0], finals[1], atol=1e-5, rtol=1e-4)
