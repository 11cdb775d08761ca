"""Models: the classifiers the papers train, behind one registry.

Every model is a :class:`Classifier`: an ``nn.Module`` with ``forward(x)`` plus ``loss(output, y)``
(scalar batch-mean loss, regulariser included) and ``correct(output, y)`` (count of correct
predictions), the two methods the engine calls. Build one by name::

    >>> model = build_model("cnn", (1, 28, 28), 10, seed=0)
    >>> num_parameters(model)
    430698
    >>> sorted(MODELS)[:3]
    ['2nn', 'cnn', 'feddc-cnn']

``input_shape`` is one sample's shape without the batch dimension, channels first for images:
``(1, 28, 28)`` for MNIST, ``(3, 32, 32)`` for CIFAR; ``(H, W)`` means one channel. Convolutional
models reshape their input to ``(B, *input_shape)``, so flattened ``(B, 784)`` batches work too.

Initialisation. Modules are constructed on the meta device and then initialised from a local
``torch.Generator`` seeded with ``seed``: the caller's global RNG is neither read nor advanced, and
the same seed gives the same parameters. Linear and convolution layers use PyTorch's default
distribution (weight: Kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in));
bias: the same bound); norm layers start at weight 1, bias 0.

Buffers. fedaccel's FL arithmetic works on the flat parameter vector (:mod:`fedaccel.flat`), and
buffers are not part of it: BatchNorm running statistics would stay local to whichever module holds
them and would not be averaged. So no model has a buffer unless the user asks for BatchNorm
(``vgg16`` with ``batch_norm=True``, ``resnet18`` with ``norm="batch"``). No model uses dropout,
which would draw from the global RNG during training.

Users may register their own factory: ``MODELS["mine"] = factory`` where
``factory(input_shape, num_classes, **options) -> Classifier``; :func:`build_model` constructs it
on the meta device, so parameters from layers other than the built-in kinds need a
``reset_parameters()`` method or an overridden :meth:`Classifier.init_parameters`.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaccel.errors import ConfigError

__all__ = [
    "MODELS",
    "BHerdCNN",
    "Classifier",
    "FedDCCNN",
    "LeNet5",
    "MLP2NN",
    "ResNet18",
    "SoftmaxRegression",
    "SquaredSVM",
    "VGG16",
    "build_model",
    "closed_form_gradient",
    "functional_loss",
    "num_parameters",
]

Shape = tuple[int, ...]


# --------------------------------------------------------------------------------------------
# Base class and initialisation
# --------------------------------------------------------------------------------------------


class Classifier(nn.Module):
    """Base class: a module with ``loss`` and ``correct``; cross-entropy and argmax by default.

    ``y`` holds integer class indices, shape ``(B,)``; ``output`` is what ``forward`` returned.
    """

    NAME: ClassVar[str] = "classifier"

    def loss(self, output: Tensor, y: Tensor) -> Tensor:
        """Mean cross-entropy over the batch (``output`` are logits, shape ``(B, C)``)."""
        return F.cross_entropy(output, y)

    def correct(self, output: Tensor, y: Tensor) -> Tensor:
        """Number of samples whose arg-max logit is the label (int64 scalar tensor)."""
        return (output.argmax(dim=1) == y).sum()

    def init_parameters(self, generator: torch.Generator) -> None:
        """(Re-)initialise every parameter and buffer, drawing only from ``generator``."""
        _init_submodules(self, generator)


_NORM_LAYERS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.LayerNorm)


def _init_submodules(root: nn.Module, generator: torch.Generator) -> None:
    for m in root.modules():
        if not any(True for _ in m.parameters(recurse=False)) and not any(
            True for _ in m.buffers(recurse=False)
        ):
            continue
        if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd)):
            nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5), generator=generator)
            if m.bias is not None:
                fan_in = m.weight[0].numel()
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                nn.init.uniform_(m.bias, -bound, bound, generator=generator)
        elif isinstance(m, _NORM_LAYERS):
            m.reset_parameters()  # deterministic: ones, zeros, fresh running statistics
        elif m is not root and callable(getattr(m, "reset_parameters", None)):
            # A layer kind we do not know: let it initialise itself from a seed we draw, with the
            # global RNG forked so the caller's state is restored afterwards.
            sub_seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(sub_seed)
                m.reset_parameters()
        else:
            raise TypeError(
                f"cannot initialise {type(m).__name__}: give it reset_parameters() or "
                "override Classifier.init_parameters"
            )


# --------------------------------------------------------------------------------------------
# Shape helpers
# --------------------------------------------------------------------------------------------


def _image_shape(name: str, shape: Shape) -> tuple[int, int, int]:
    """``(C, H, W)`` from ``shape``; ``(H, W)`` means one channel."""
    if len(shape) == 2:
        return (1, shape[0], shape[1])
    if len(shape) == 3:
        c, h, w = shape
        if c > 4 and w in (1, 3):
            raise ConfigError(
                f"model {name!r}: input shape {shape} looks channels-last; "
                f"fedaccel uses (C, H, W), e.g. ({w}, {c}, {h})"
            )
        return (c, h, w)
    raise ConfigError(f"model {name!r} needs an image input shape (C, H, W), got {shape}")


def _fmt(shape: Sequence[int]) -> str:
    return "×".join(str(s) for s in shape)


def _flatten(x: Tensor) -> Tensor:
    return x.reshape(x.shape[0], -1)


def _check_choice(name: str, option: str, value: object, choices: Sequence[object]) -> None:
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"model {name!r}: {option}={value!r} is not one of {allowed}")


def _check_positive_int(name: str, option: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"model {name!r}: {option} must be a positive integer, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------
# Convex models
# --------------------------------------------------------------------------------------------


class SquaredSVM(Classifier):
    """Linear squared-hinge SVM on even/odd labels (BHerd paper 000, Sec. 2; Wang et al. 2019).

    Follows IBM adaptive-federated-learning (``models/svm_smooth.py``), the code of the paper
    BHerd cites for its models ([40]):

    * score ``s = wᵀx`` on the flattened input; no bias; ``w₀ = 0``;
    * label mapping (``labels="parity"``, default): class index ``y`` even → ``+1``, odd → ``−1``
      (IBM ``get_even_odd_from_one_hot_label``). ``labels="sign"`` takes ``y`` already in {−1, +1};
    * loss ``(1/2)·mean_i max(0, 1 − y_i s_i)² + (λ/2)·‖w‖²`` with ``λ = l2 = 0.1``, whose gradient
      is ``λw − mean_i y_i x_i max(0, 1 − y_i s_i)``, exactly IBM's ``gradient``;
    * ``correct`` counts ``y_i s_i > 0`` (a score of exactly 0 counts as wrong, as in IBM).

    ``forward`` returns the scores, shape ``(B,)``. ``num_classes`` only has to be ≥ 2.
    """

    NAME = "svm"

    def __init__(
        self,
        input_shape: Shape,
        num_classes: int,
        *,
        l2: float = 0.1,
        labels: str = "parity",
    ) -> None:
        super().__init__()
        if isinstance(l2, bool) or not isinstance(l2, (int, float)) or not l2 >= 0:
            raise ConfigError(f"model 'svm': l2 must be a number ≥ 0, got {l2!r}")
        _check_choice(self.NAME, "labels", labels, ("parity", "sign"))
        self.l2 = float(l2)
        self.labels = labels
        self.weight = nn.Parameter(torch.empty(math.prod(input_shape)))

    def forward(self, x: Tensor) -> Tensor:
        return _flatten(x) @ self.weight

    def targets(self, y: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """Labels as ±1 of ``dtype`` (even → +1, odd → −1 under ``labels="parity"``)."""
        if self.labels == "parity":
            return (1 - 2 * torch.remainder(y, 2)).to(dtype)
        return y.to(dtype)

    def loss(self, output: Tensor, y: Tensor) -> Tensor:
        margin = torch.clamp(1 - self.targets(y, output.dtype) * output, min=0)
        return 0.5 * margin.square().mean() + 0.5 * self.l2 * self.weight.square().sum()

    def correct(self, output: Tensor, y: Tensor) -> Tensor:
        return (self.targets(y, output.dtype) * output > 0).sum()

    def init_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.weight.zero_()


class SoftmaxRegression(Classifier):
    """Multinomial logistic regression: one linear layer with bias on the flattened input.

    The convex multi-class model of FedProx (Li et al. 2020, "MCLR") and FedDC's ``Linear``.
    """

    NAME = "softmax"

    def __init__(self, input_shape: Shape, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(_flatten(x))


# --------------------------------------------------------------------------------------------
# Closed-form gradients of the linear models (the engine's lean local step)
# --------------------------------------------------------------------------------------------


class _SquaredSVMGradient:
    """``λw − (1/B) Σ_i t_i x_i max(0, 1 − t_i wᵀx_i)``: :class:`SquaredSVM`'s loss gradient."""

    def __init__(self, model: SquaredSVM) -> None:
        self.model, self.l2 = model, model.l2

    def prepare(self, y: Tensor) -> Tensor:
        return self.model.targets(y, self.model.weight.dtype)  # ±1, once per training set

    def __call__(self, theta: Tensor, x: Tensor, t: Tensor, grad: Tensor) -> None:
        xb = x.reshape(x.shape[0], -1)
        r = torch.mv(xb, theta).mul_(t)  # t_i s_i
        r.neg_().add_(1.0).clamp_(min=0.0).mul_(t).mul_(-1.0 / t.shape[0])  # ∂loss/∂s_i
        torch.addmv(theta, xb.t(), r, beta=self.l2, out=grad)


class _SoftmaxGradient:
    """``(softmax(Wx + b) − onehot(y)) [xᵀ 1] / B``: :class:`SoftmaxRegression`'s cross-entropy gradient."""

    def __init__(self, model: SoftmaxRegression) -> None:
        self.classes, self.features = model.fc.weight.shape
        self.n_weight = self.classes * self.features

    def prepare(self, y: Tensor) -> Tensor:
        return y.reshape(-1, 1).long()  # (N, 1): scatter positions

    def __call__(self, theta: Tensor, x: Tensor, t: Tensor, grad: Tensor) -> None:
        b, n = x.shape[0], self.n_weight
        xb = x.reshape(b, -1)
        weight, bias = theta[:n].view(self.classes, self.features), theta[n:]
        p = torch.addmm(bias, xb, weight.t()).softmax(dim=1)
        p.scatter_add_(1, t, p.new_full((b, 1), -1.0)).div_(b)
        torch.mm(p.t(), xb, out=grad[:n].view(self.classes, self.features))
        torch.sum(p, dim=0, out=grad[n:])


def closed_form_gradient(module: nn.Module) -> _SquaredSVMGradient | _SoftmaxGradient | None:
    """The exact batch gradient of ``module.loss(module(x), y)`` without autograd, for the built-in
    ``svm`` and ``softmax`` as they are (None for anything else, a subclass that overrides
    ``forward``/``loss``/``targets`` included). It is called as ``kernel(theta, x, kernel.prepare(y)[idx],
    grad)`` with ``theta``/``grad`` the flat parameter/gradient vectors (:class:`fedaccel.flat.FlatModel`
    order) and writes ∂loss/∂theta into ``grad``; equal to autograd's to float rounding.
    """
    cls = type(module)
    trainable = [id(p) for p in module.parameters() if p.requires_grad]
    if isinstance(module, SquaredSVM):
        same = all(getattr(cls, m) is getattr(SquaredSVM, m) for m in ("forward", "loss", "targets"))
        if same and trainable == [id(module.weight)] and len(list(module.parameters())) == 1:
            return _SquaredSVMGradient(module)
    if isinstance(module, SoftmaxRegression):
        fc = module.fc
        same = cls.forward is SoftmaxRegression.forward and cls.loss is Classifier.loss
        if (same and type(fc) is nn.Linear and fc.bias is not None
                and trainable == [id(fc.weight), id(fc.bias)] and len(list(module.parameters())) == 2):
            return _SoftmaxGradient(module)
    return None


# --------------------------------------------------------------------------------------------
# Neural networks
# --------------------------------------------------------------------------------------------


class MLP2NN(Classifier):
    """The "2NN" of McMahan et al. 2017: d-200-200-C, ReLU (d = prod(input_shape), 784 on MNIST)."""

    NAME = "2nn"

    def __init__(self, input_shape: Shape, num_classes: int, *, hidden: int = 200) -> None:
        super().__init__()
        hidden = _check_positive_int(self.NAME, "hidden", hidden)
        self.net = nn.Sequential(
            nn.Linear(math.prod(input_shape), hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(_flatten(x))


class BHerdCNN(Classifier):
    """The BHerd CNN (paper 000, Sec. 2), i.e. IBM adaptive-FL's ``cnn_mnist`` / ``cnn_cifar10``.

    conv 5×5×32 'same' + ReLU + max-pool 2 → conv 5×5×32 'same' + ReLU + max-pool 2 → fc 256 + ReLU
    → fc C. The fc input is 32·⌈H/4⌉·⌈W/4⌉: 1568 for 1×28×28, 2048 for 3×32×32. Pooling rounds up
    (``ceil_mode``), like TensorFlow's 'SAME' pooling in the reference; for 28 and 32 it is exact.

    ``lrn=True`` adds the reference code's local response normalisation (after the first pool and
    after the second ReLU; TF ``depth_radius=4, bias=1, alpha=0.001/9, beta=0.75``), which the
    paper does not mention; it has no parameters. Default off, as the paper describes the model.
    """

    NAME = "cnn"

    def __init__(self, input_shape: Shape, num_classes: int, *, lrn: bool = False) -> None:
        super().__init__()
        _check_choice(self.NAME, "lrn", lrn, (False, True))
        c, h, w = self.input_shape = _image_shape(self.NAME, input_shape)
        h4, w4 = (h + 1) // 2, (w + 1) // 2
        h4, w4 = (h4 + 1) // 2, (w4 + 1) // 2

        def norm() -> nn.Module:
            # PyTorch's LRN divides alpha by the window size (9); TF does not.
            return nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0) if lrn else nn.Identity()

        self.features = nn.Sequential(
            nn.Conv2d(c, 32, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True),
            norm(),
            nn.Conv2d(32, 32, 5, padding=2),
            nn.ReLU(),
            norm(),
            nn.MaxPool2d(2, ceil_mode=True),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * h4 * w4, 256),
            nn.ReLU(),
            nn.Linear(256, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x.reshape(x.shape[0], *self.input_shape)))


class LeNet5(Classifier):
    """LeNet-5 (LeCun et al. 1998): conv 6@5×5 → pool → conv 16@5×5 → pool → fc 120 → 84 → C.

    Modern variant, as used in FL benchmarks: ReLU and max-pooling instead of scaled tanh and
    trainable sub-sampling, a full C3 connection table, a linear output instead of RBF units.
    Images smaller than 32×32 get 2-pixel padding in the first convolution, so MNIST's 28×28
    becomes LeNet's original 32×32 field; both 1×28×28 and 3×32×32 end in a 16×5×5 map.
    """

    NAME = "lenet5"

    def __init__(self, input_shape: Shape, num_classes: int) -> None:
        super().__init__()
        c, h, w = self.input_shape = _image_shape(self.NAME, input_shape)
        pad = 2 if min(h, w) < 32 else 0
        h2, w2 = ((h + 2 * pad - 4) // 2 - 4) // 2, ((w + 2 * pad - 4) // 2 - 4) // 2
        if h2 < 1 or w2 < 1:
            raise ConfigError(
                f"model 'lenet5' needs images of at least 12×12, got {_fmt(self.input_shape)}"
            )
        self.features = nn.Sequential(
            nn.Conv2d(c, 6, 5, padding=pad),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * h2 * w2, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x.reshape(x.shape[0], *self.input_shape)))


class FedDCCNN(Classifier):
    """FedDC's CIFAR CNN (Gao et al. 2022; gaoliang13/FedDC ``cifar10_LeNet``), also FedDyn's.

    conv 5×5 64 (valid) + ReLU + max-pool 2 → conv 5×5 64 + ReLU + max-pool 2 → fc 1600 → 384 →
    192 → C, ReLU between. Takes 32×32 images only (fc 1600 = 64·5·5); any channel count.
    """

    NAME = "feddc-cnn"

    def __init__(self, input_shape: Shape, num_classes: int) -> None:
        super().__init__()
        c, h, w = self.input_shape = _image_shape(self.NAME, input_shape)
        if (h, w) != (32, 32):
            raise ConfigError(
                f"model 'feddc-cnn' takes 32×32 images (CIFAR), got {_fmt(self.input_shape)}; "
                "use 'cnn' or 'lenet5' for other sizes"
            )
        self.features = nn.Sequential(
            nn.Conv2d(c, 64, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 5 * 5, 384),
            nn.ReLU(),
            nn.Linear(384, 192),
            nn.ReLU(),
            nn.Linear(192, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x.reshape(x.shape[0], *self.input_shape)))


_VGG16_CONFIG: tuple[int | str, ...] = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
)  # fmt: skip


class VGG16(Classifier):
    """VGG-16 (Simonyan & Zisserman 2015, configuration D) for CIFAR-sized images.

    13 conv 3×3 layers (64-64-M-128-128-M-256×3-M-512×3-M-512×3-M) and a CIFAR-sized classifier
    of three fc layers 512 → 512 → 512 → C with ReLU (no dropout). For 32×32 inputs the features
    end at 512×1×1; larger inputs are global-average-pooled to that. ``batch_norm=True`` adds
    BatchNorm after every convolution (its running statistics are buffers, not parameters: they
    are not averaged by the FL algorithms), default off.
    """

    NAME = "vgg16"

    def __init__(self, input_shape: Shape, num_classes: int, *, batch_norm: bool = False) -> None:
        super().__init__()
        _check_choice(self.NAME, "batch_norm", batch_norm, (False, True))
        c, h, w = self.input_shape = _image_shape(self.NAME, input_shape)
        if h < 32 or w < 32:
            raise ConfigError(
                f"model 'vgg16' needs images of at least 32×32 (five 2×2 poolings), "
                f"got {_fmt(self.input_shape)}"
            )
        layers: list[nn.Module] = []
        for v in _VGG16_CONFIG:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
                continue
            assert isinstance(v, int)
            layers.append(nn.Conv2d(c, v, 3, padding=1, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm2d(v))
            layers.append(nn.ReLU())
            c = v
        layers.append(nn.AdaptiveAvgPool2d(1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x.reshape(x.shape[0], *self.input_shape)))


def _norm_layer(kind: str, channels: int) -> nn.Module:
    if kind == "group":
        return nn.GroupNorm(2, channels)
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    return nn.Identity()


class _BasicBlock(nn.Module):
    """ResNet basic block: two 3×3 convs with a (projected when needed) identity shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int, norm: str) -> None:
        super().__init__()
        bias = norm == "none"
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=bias)
        self.norm1 = _norm_layer(norm, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=bias)
        self.norm2 = _norm_layer(norm, c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=bias), _norm_layer(norm, c_out)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(Classifier):
    """ResNet-18 (He et al. 2016), CIFAR-style by default: 3×3 stride-1 stem, no max-pool.

    Stages of two basic blocks at 64, 128, 256, 512 channels (strides 1, 2, 2, 2), global average
    pool, fc 512 → C.

    ``norm="group"`` (default) uses GroupNorm(2, C) in place of BatchNorm, as FedDC's code does
    (after Hsieh et al. 2020): BatchNorm's running statistics are buffers, not parameters, so
    they are not part of the flat vector the FL algorithms average, and batch statistics are
    themselves non-IID across clients. ``norm="batch"`` gives BatchNorm2d (buffers stay local),
    ``norm="none"`` no normalisation (convs then get biases).

    ``stem="imagenet"`` uses the torchvision stem (7×7 stride-2 conv + 3×3 stride-2 max-pool) that
    FedDC's ResNet-18 keeps even on CIFAR.
    """

    NAME = "resnet18"

    def __init__(
        self,
        input_shape: Shape,
        num_classes: int,
        *,
        norm: str = "group",
        stem: str = "cifar",
    ) -> None:
        super().__init__()
        _check_choice(self.NAME, "norm", norm, ("group", "batch", "none"))
        _check_choice(self.NAME, "stem", stem, ("cifar", "imagenet"))
        c, _, _ = self.input_shape = _image_shape(self.NAME, input_shape)
        bias = norm == "none"
        if stem == "cifar":
            self.stem = nn.Sequential(
                nn.Conv2d(c, 64, 3, padding=1, bias=bias), _norm_layer(norm, 64), nn.ReLU()
            )
        else:
            self.stem = nn.Sequential(
                nn.Conv2d(c, 64, 7, stride=2, padding=3, bias=bias),
                _norm_layer(norm, 64),
                nn.ReLU(),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
        blocks: list[nn.Module] = []
        c_in = 64
        for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks.append(_BasicBlock(c_in, c_out, stride, norm))
            blocks.append(_BasicBlock(c_out, c_out, 1, norm))
            c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x.reshape(x.shape[0], *self.input_shape)
        return self.head(self.blocks(self.stem(x)))


# --------------------------------------------------------------------------------------------
# Registry and public helpers
# --------------------------------------------------------------------------------------------

ModelFactory = Callable[..., Classifier]

MODELS: dict[str, ModelFactory] = {
    "svm": SquaredSVM,
    "softmax": SoftmaxRegression,
    "2nn": MLP2NN,
    "cnn": BHerdCNN,
    "lenet5": LeNet5,
    "feddc-cnn": FedDCCNN,
    "vgg16": VGG16,
    "resnet18": ResNet18,
}
"""Model name → factory ``(input_shape, num_classes, **options) -> Classifier``."""


def _check_options(name: str, factory: ModelFactory, options: dict[str, object]) -> None:
    params = inspect.signature(factory).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    accepted = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(
            f"model {name!r} has no option {', '.join(unknown)}; "
            f"it accepts: {', '.join(accepted) or 'no options'}"
        )


def _check_input_shape(name: str, input_shape: Sequence[int]) -> Shape:
    items = list(input_shape) if isinstance(input_shape, (tuple, list, torch.Size)) else None
    if not items or any(
        isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 1 for s in items
    ):
        raise ConfigError(
            f"model {name!r}: input shape must be a tuple of positive ints, got {input_shape!r}"
        )
    return tuple(int(s) for s in items)


def build_model(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    *,
    seed: int = 0,
    **options: object,
) -> Classifier:
    """Build model ``name`` for samples of ``input_shape`` and ``num_classes`` classes.

    Parameters are initialised deterministically from ``seed`` through a local generator; the
    global RNG is untouched. ``options`` are the model's keyword options (e.g. ``l2`` for
    ``svm``, ``norm`` for ``resnet18``). Raises :class:`~fedaccel.errors.ConfigError` for an unknown
    name or option, or an input shape the model cannot take.

    Example:
        >>> model = build_model("svm", (1, 28, 28), 10)
        >>> model(torch.zeros(4, 1, 28, 28)).shape
        torch.Size([4])
    """
    factory = MODELS.get(name)
    if factory is None:
        raise ConfigError(f"unknown model {name!r}; choose one of: {', '.join(sorted(MODELS))}")
    shape = _check_input_shape(name, input_shape)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ConfigError(
            f"model {name!r}: num_classes must be an integer ≥ 2, got {num_classes!r}"
        )
    _check_options(name, factory, options)
    # Construct without touching any RNG (meta tensors have no data), then allocate and
    # initialise from our own generator.
    with torch.device("meta"):
        model = factory(shape, num_classes, **options)
    model = model.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(seed)
    model.init_parameters(generator)
    return model


def num_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (the length of the flat vector ``FlatModel(model).theta``)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class _Objective(nn.Module):
    def __init__(self, model: Classifier) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return self.model.loss(self.model(x), y)


def functional_loss(model: Classifier, params: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
    """``model.loss(model(x), y)`` with the parameters replaced by ``params`` (name → tensor).

    For ``torch.func`` transforms such as per-sample gradients::

        grads = torch.func.vmap(torch.func.grad(per_sample), in_dims=(None, 0, 0))(params, x, y)

    with ``per_sample = lambda p, x, y: functional_loss(model, p, x[None], y[None])``. A plain
    ``functional_call(model, ...)`` substitutes the parameters only inside ``forward``; the SVM's
    L2 term reads the weight inside ``loss`` and would then be missed by the transform.
    """
    prefixed = {f"model.{k}": v for k, v in params.items()}
    return torch.func.functional_call(_Objective(model), prefixed, (x, y))
