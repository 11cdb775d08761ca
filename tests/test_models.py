"""fedaccel.models: shapes, losses, flat-vector gradients, hand cases, determinism, errors."""

from __future__ import annotations

import math

import pytest
import torch

from fedaccel.engine.flat import FlatModel
from fedaccel.errors import ConfigError
from fedaccel.models import (
    MODELS,
    Classifier,
    build_model,
    functional_loss,
    num_parameters,
)

MNIST = (1, 28, 28)
CIFAR = (3, 32, 32)

# Every model with the input shapes it is meant for.
CASES = [
    ("svm", MNIST),
    ("svm", (784,)),
    ("softmax", MNIST),
    ("softmax", CIFAR),
    ("2nn", MNIST),
    ("2nn", CIFAR),
    ("cnn", MNIST),
    ("cnn", CIFAR),
    ("lenet5", MNIST),
    ("lenet5", CIFAR),
    ("feddc-cnn", CIFAR),
    ("vgg16", CIFAR),
    ("resnet18", CIFAR),
    ("resnet18", MNIST),
]
CASE_IDS = [f"{n}-{'x'.join(map(str, s))}" for n, s in CASES]


def test_every_registered_model_is_covered() -> None:
    assert {name for name, _ in CASES} == set(MODELS)


@pytest.mark.parametrize(("name", "shape"), CASES, ids=CASE_IDS)
def test_forward_loss_backward_through_flat_model(name: str, shape: tuple[int, ...]) -> None:
    # Prepare
    model = build_model(name, shape, 10, seed=1)
    flat = FlatModel(model)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, *shape, generator=g)
    y = torch.tensor([0, 3, 7])
    if name == "svm":  # from w0 = 0 the hinge is active everywhere; move off 0 for a generic point
        flat.load(0.01 * torch.randn(flat.size, generator=g))
    # Execute
    out = model(x)
    loss = model.loss(out, y)
    grad = flat.gradient(loss)
    correct = model.correct(out, y)
    # Assert
    assert isinstance(model, Classifier)
    assert out.shape == ((3,) if name == "svm" else (3, 10))
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert grad.shape == (num_parameters(model),) == flat.theta.shape
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    assert correct.dtype == torch.int64 and 0 <= int(correct) <= 3
    assert list(model.buffers()) == []  # nothing outside the flat vector matters for training


def test_flattened_input_is_accepted_by_conv_models() -> None:
    model = build_model("cnn", MNIST, 10)
    x = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(model(x.reshape(2, 784)), model(x))
    assert build_model("lenet5", (28, 28), 10)(x).shape == (2, 10)  # (H, W) means one channel


def test_bherd_cnn_parameter_count_matches_hand_count() -> None:
    conv1 = 5 * 5 * 1 * 32 + 32
    conv2 = 5 * 5 * 32 * 32 + 32
    fc1 = 1568 * 256 + 256
    fc2 = 256 * 10 + 10
    model = build_model("cnn", MNIST, 10)
    assert num_parameters(model) == conv1 + conv2 + fc1 + fc2 == 430_698
    assert model.classifier[1].in_features == 1568
    assert build_model("cnn", CIFAR, 10).classifier[1].in_features == 2048


def test_reference_parameter_counts() -> None:
    assert num_parameters(build_model("2nn", MNIST, 10)) == 784 * 200 + 200 + 200 * 200 + 200 + 2010
    assert num_parameters(build_model("lenet5", MNIST, 10)) == 61_706
    assert num_parameters(build_model("feddc-cnn", CIFAR, 10)) == (
        (5 * 5 * 3 * 64 + 64) + (5 * 5 * 64 * 64 + 64) + (1600 * 384 + 384) + (384 * 192 + 192)
        + (192 * 10 + 10)
    )
    assert num_parameters(build_model("svm", MNIST, 10)) == 784  # no bias


def test_svm_hand_case_loss_gradient_and_correct() -> None:
    # Two 2-D samples; label 0 is even -> +1, label 3 is odd -> -1; w = (1, -1), lambda = 0.1.
    #   s1 = 1 - 2 = -1, y1 s1 = -1, hinge 2 -> squared 4
    #   s2 = 2 - 3 = -1, y2 s2 = +1, hinge 0
    #   loss = 1/2 * mean(4, 0) + 0.1/2 * ||w||^2 = 1 + 0.1 = 1.1
    #   grad = lambda w - mean_i y_i x_i hinge_i = (0.1, -0.1) - (1/2)(1*(1, 2)*2) = (-0.9, -2.1)
    model = build_model("svm", (2,), 2)
    flat = FlatModel(model)
    torch.testing.assert_close(flat.theta, torch.zeros(2))  # w0 = 0
    flat.load(torch.tensor([1.0, -1.0]))
    x = torch.tensor([[1.0, 2.0], [2.0, 3.0]])
    y = torch.tensor([0, 3])
    out = model(x)
    loss = model.loss(out, y)
    grad = flat.gradient(loss)
    torch.testing.assert_close(out, torch.tensor([-1.0, -1.0]))
    torch.testing.assert_close(loss, torch.tensor(1.1))
    torch.testing.assert_close(grad, torch.tensor([-0.9, -2.1]))
    assert int(model.correct(out, y)) == 1


def test_svm_options() -> None:
    x = torch.tensor([[1.0, 2.0], [2.0, 3.0]])
    sign = build_model("svm", (2,), 2, labels="sign", l2=0.0)
    FlatModel(sign).load(torch.tensor([1.0, -1.0]))
    out = sign(x)
    # labels given as +-1 directly, no L2 term: 1/2 * mean(4, 0) = 1
    torch.testing.assert_close(sign.loss(out, torch.tensor([1, -1])), torch.tensor(1.0))
    parity = build_model("svm", (2,), 10)
    assert parity.targets(torch.arange(4)).tolist() == [1.0, -1.0, 1.0, -1.0]
    # at w0 = 0 every score is 0, which counts as wrong
    assert int(parity.correct(parity(x), torch.tensor([0, 1]))) == 0


def test_softmax_loss_is_cross_entropy_and_correct_is_argmax() -> None:
    model = build_model("softmax", (2,), 3)
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    y = torch.tensor([0, 1])
    expected = -0.5 * (math.log(math.e**2 / (math.e**2 + 2)) + math.log(1 / (2 + math.e)))
    torch.testing.assert_close(model.loss(logits, y), torch.tensor(expected))
    assert int(model.correct(logits, y)) == 1


@pytest.mark.parametrize("name", sorted(MODELS))
def test_init_is_deterministic_in_seed(name: str) -> None:
    shape = CIFAR if name in ("feddc-cnn", "vgg16", "resnet18") else MNIST
    a = FlatModel(build_model(name, shape, 10, seed=5)).theta
    b = FlatModel(build_model(name, shape, 10, seed=5)).theta
    c = FlatModel(build_model(name, shape, 10, seed=6)).theta
    assert torch.equal(a, b)
    if name == "svm":
        assert torch.equal(a, c) and not a.any()  # w0 = 0 whatever the seed
    else:
        assert not torch.equal(a, c)


def test_init_follows_pytorch_default_bounds() -> None:
    model = build_model("2nn", MNIST, 10, seed=0)
    fc1 = model.net[0]
    bound = 1 / math.sqrt(784)
    assert fc1.weight.abs().max() <= bound and fc1.bias.abs().max() <= bound
    # uniform on [-b, b] has std b / sqrt(3)
    assert abs(fc1.weight.std().item() - bound / math.sqrt(3)) < 0.02 * bound


def test_global_rng_is_untouched() -> None:
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    for name in ("cnn", "resnet18", "svm"):
        build_model(name, CIFAR, 10, seed=9)
    build_model("vgg16", CIFAR, 10, batch_norm=True)
    assert torch.equal(before, torch.random.get_rng_state())


def test_batch_norm_only_when_asked() -> None:
    assert list(build_model("resnet18", CIFAR, 10, norm="group").buffers()) == []
    assert list(build_model("resnet18", CIFAR, 10, norm="none").buffers()) == []
    bn = build_model("resnet18", CIFAR, 10, norm="batch")
    running_var = [b for n, b in bn.named_buffers() if n.endswith("running_var")]
    assert running_var and all(torch.equal(v, torch.ones_like(v)) for v in running_var)
    vgg_bn = build_model("vgg16", CIFAR, 10, batch_norm=True)
    assert any(n.endswith("running_mean") for n, _ in vgg_bn.named_buffers())


def test_model_options() -> None:
    img = build_model("resnet18", CIFAR, 10, stem="imagenet")
    assert img(torch.randn(2, *CIFAR)).shape == (2, 10)
    lrn = build_model("cnn", MNIST, 10, lrn=True, seed=3)
    plain = build_model("cnn", MNIST, 10, seed=3)
    assert num_parameters(lrn) == num_parameters(plain)
    x = torch.randn(2, *MNIST)
    assert not torch.equal(lrn(x), plain(x))
    narrow = build_model("2nn", MNIST, 10, hidden=100)
    assert num_parameters(narrow) == 784 * 100 + 100 + 100 * 100 + 100 + 1010


def test_functional_loss_per_sample_gradients_include_regulariser() -> None:
    model = build_model("svm", (2,), 2)
    flat = FlatModel(model)
    flat.load(torch.tensor([1.0, -1.0]))
    x = torch.tensor([[1.0, 2.0], [2.0, 3.0]])
    y = torch.tensor([0, 3])
    params = {k: v.detach() for k, v in model.named_parameters()}

    def per_sample(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return functional_loss(model, p, xi[None], yi[None])

    grads = torch.func.vmap(torch.func.grad(per_sample), in_dims=(None, 0, 0))(params, x, y)
    # sample 1: 0.1 w - y1 x1 * 2 = (0.1, -0.1) - (2, 4); sample 2: hinge inactive, 0.1 w only
    torch.testing.assert_close(grads["weight"], torch.tensor([[-1.9, -4.1], [0.1, -0.1]]))
    # their mean is the batch gradient
    torch.testing.assert_close(grads["weight"].mean(0), flat.gradient(model.loss(model(x), y)))


def test_unknown_model_name() -> None:
    with pytest.raises(ConfigError, match="unknown model 'cnn2'.*cnn"):
        build_model("cnn2", MNIST, 10)


@pytest.mark.parametrize(
    ("name", "shape", "pattern"),
    [
        ("feddc-cnn", MNIST, "feddc-cnn.*32×32.*1×28×28"),
        ("vgg16", MNIST, "vgg16.*at least 32×32"),
        ("cnn", (784,), "image input shape"),
        ("lenet5", (1, 8, 8), "at least 12×12"),
        ("cnn", (28, 28, 1), "channels-last"),
        ("svm", (), "positive ints"),
        ("svm", (0, 28), "positive ints"),
        ("svm", (28.5,), "positive ints"),
    ],
)
def test_bad_input_shapes(name: str, shape: tuple[int, ...], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as info:
        build_model(name, shape, 10)
    assert "\n" not in str(info.value)


def test_bad_options_and_classes() -> None:
    with pytest.raises(ConfigError, match="'cnn' has no option batch_norm; it accepts: lrn"):
        build_model("cnn", MNIST, 10, batch_norm=True)
    with pytest.raises(ConfigError, match="no options"):
        build_model("softmax", MNIST, 10, l2=0.1)
    with pytest.raises(ConfigError, match="norm='layer' is not one of"):
        build_model("resnet18", CIFAR, 10, norm="layer")
    with pytest.raises(ConfigError, match="l2 must be"):
        build_model("svm", MNIST, 10, l2=-1.0)
    with pytest.raises(ConfigError, match="num_classes"):
        build_model("softmax", MNIST, 1)
