"""Small convolutional networks of the papers: the BHerd CNN, LeNet-5 and the FedDC CIFAR CNN."""

from __future__ import annotations

from torch import Tensor, nn

from fedaccel.errors import ConfigError
from fedaccel.models.base import Classifier, Shape, check_choice, fmt_shape, image_shape


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
    CHANNELS_LAST_FROM = 3  # colour images: 0.93-0.97 of NCHW's step time (benchmarks/channels_last.py, docs/benchmarks.md)

    def __init__(self, input_shape: Shape, num_classes: int, *, lrn: bool = False) -> None:
        super().__init__()
        check_choice(self.NAME, "lrn", lrn, (False, True))
        c, h, w = self.input_shape = image_shape(self.NAME, input_shape)
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

    NAME = "lenet5"  # channels-last measured no faster (0.99-1.06): PyTorch's layout

    def __init__(self, input_shape: Shape, num_classes: int) -> None:
        super().__init__()
        c, h, w = self.input_shape = image_shape(self.NAME, input_shape)
        pad = 2 if min(h, w) < 32 else 0
        h2, w2 = ((h + 2 * pad - 4) // 2 - 4) // 2, ((w + 2 * pad - 4) // 2 - 4) // 2
        if h2 < 1 or w2 < 1:
            raise ConfigError(
                f"model 'lenet5' needs images of at least 12×12, got {fmt_shape(self.input_shape)}"
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
    CHANNELS_LAST_FROM = 3  # 0.78-0.89 of NCHW's step time (benchmarks/channels_last.py, docs/benchmarks.md)

    def __init__(self, input_shape: Shape, num_classes: int) -> None:
        super().__init__()
        c, h, w = self.input_shape = image_shape(self.NAME, input_shape)
        if (h, w) != (32, 32):
            raise ConfigError(
                f"model 'feddc-cnn' takes 32×32 images (CIFAR), got {fmt_shape(self.input_shape)}; "
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
