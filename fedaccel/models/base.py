"""The model base class, its seeded initialisation, shape checks, and the functional loss.

Initialisation. Modules are constructed on the meta device and then initialised from a local
``torch.Generator`` seeded with ``seed``: the caller's global RNG is neither read nor advanced, and
the same seed gives the same parameters. Linear and convolution layers use PyTorch's default
distribution (weight: Kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in));
bias: the same bound); norm layers start at weight 1, bias 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaccel.errors import ConfigError, shown

Shape = tuple[int, ...]


class Classifier(nn.Module):
    """Base class: a module with ``loss`` and ``correct``; cross-entropy and argmax by default.

    ``y`` holds integer class indices, shape ``(B,)``; ``output`` is what ``forward`` returned.
    """

    NAME: ClassVar[str] = "classifier"
    # image batches in channels-last (NHWC) memory for the per-client engine's autograd step, on input shapes
    # with at least this many channels (0: never); set per model from benchmarks/channels_last.py
    CHANNELS_LAST_FROM: ClassVar[int] = 0

    def loss(self, output: Tensor, y: Tensor) -> Tensor:
        """Mean cross-entropy over the batch (``output`` are logits, shape ``(B, C)``)."""
        return F.cross_entropy(output, y)

    def correct(self, output: Tensor, y: Tensor) -> Tensor:
        """Number of samples whose arg-max logit is the label (int64 scalar tensor)."""
        return (output.argmax(dim=1) == y).sum()

    def init_parameters(self, generator: torch.Generator) -> None:
        """(Re-)initialise every parameter and buffer, drawing only from ``generator``."""
        init_submodules(self, generator)


_NORM_LAYERS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.LayerNorm)


def init_submodules(root: nn.Module, generator: torch.Generator) -> None:
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


def image_shape(name: str, shape: Shape) -> tuple[int, int, int]:
    """``(C, H, W)`` from ``shape``; ``(H, W)`` means one channel."""
    if len(shape) == 2:
        return (1, shape[0], shape[1])
    if len(shape) == 3:
        c, h, w = shape
        if c > 4 and w in (1, 3):
            raise ConfigError(
                f"model {shown(name)}: input shape {shape} looks channels-last; "
                f"fedaccel uses (C, H, W), e.g. ({w}, {c}, {h})"
            )
        return (c, h, w)
    raise ConfigError(f"model {shown(name)} needs an image input shape (C, H, W), got {shape}")


def fmt_shape(shape: Sequence[int]) -> str:
    return "×".join(str(s) for s in shape)


def flatten_batch(x: Tensor) -> Tensor:
    return x.reshape(x.shape[0], -1)


def check_choice(name: str, option: str, value: object, choices: Sequence[object]) -> None:
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"model {shown(name)}: {option}={shown(value)} is not one of {allowed}")


def check_positive_int(name: str, option: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"model {shown(name)}: {option} must be a positive integer, got {shown(value)}")
    return value


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
