"""Multi-layer perceptrons: the 2NN of McMahan et al. (784-200-200-10 on MNIST)."""

from __future__ import annotations

import math

from torch import Tensor, nn

from fedaccel.models.base import Classifier, Shape, check_positive_int, flatten_batch


class MLP2NN(Classifier):
    """The "2NN" of McMahan et al. 2017: d-200-200-C, ReLU (d = prod(input_shape), 784 on MNIST)."""

    NAME = "2nn"

    def __init__(self, input_shape: Shape, num_classes: int, *, hidden: int = 200) -> None:
        super().__init__()
        hidden = check_positive_int(self.NAME, "hidden", hidden)
        self.net = nn.Sequential(
            nn.Linear(math.prod(input_shape), hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(flatten_batch(x))
