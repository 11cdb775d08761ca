"""Deep convolutional networks: VGG-16 and ResNet-18 (BatchNorm only on request: buffers are
not part of the flat parameter vector, so running statistics would stay local)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from fedaccel.errors import ConfigError
from fedaccel.models.base import Classifier, Shape, check_choice, fmt_shape, image_shape

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
        check_choice(self.NAME, "batch_norm", batch_norm, (False, True))
        c, h, w = self.input_shape = image_shape(self.NAME, input_shape)
        if h < 32 or w < 32:
            raise ConfigError(
                f"model 'vgg16' needs images of at least 32×32 (five 2×2 poolings), "
                f"got {fmt_shape(self.input_shape)}"
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
        check_choice(self.NAME, "norm", norm, ("group", "batch", "none"))
        check_choice(self.NAME, "stem", stem, ("cifar", "imagenet"))
        c, _, _ = self.input_shape = image_shape(self.NAME, input_shape)
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
