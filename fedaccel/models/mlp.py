"""Multi-layer perceptrons: the 2NN of McMahan et al. (784-200-200-10 on MNIST)."""

from __future__ import annotations

import math

from torch import Tensor, nn

from fedaccel.models.base import Classifier, Shape, check_positive_int, flatten_batch
from fedaccel.models.chain import ChainGradient, chain_layers


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


def mlp_chain_gradient(module: nn.Module) -> ChainGradient | None:
    """The fused gradient (:mod:`fedaccel.models.chain`) of a :class:`MLP2NN` as built (its forward, loss and
    Linear/ReLU layers unchanged, every parameter trainable); None for anything else."""
    cls = type(module)
    if not (isinstance(module, MLP2NN) and cls.forward is MLP2NN.forward and cls.loss is Classifier.loss):
        return None
    kinds = [type(layer) for layer in module.net]
    if kinds[-1] is not nn.Linear or any(k is not (nn.Linear if i % 2 == 0 else nn.ReLU) for i, k in enumerate(kinds)):
        return None
    layers = chain_layers(list(module.net)[::2], module)
    return ChainGradient(layers) if layers else None
