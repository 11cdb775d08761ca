"""Tiny models and federations whose gradients are easy to compute by hand (shared by the tests)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions


class Scalar(nn.Module):
    """y ~ w x with loss 0.5 mean((w x - y)^2): the gradient is (w x - y) x per sample; w0 = 0."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor) -> Tensor:
        return self.w * x[:, 0]

    def loss(self, out: Tensor, y: Tensor) -> Tensor:
        return 0.5 * ((out - y) ** 2).mean()

    def correct(self, out: Tensor, y: Tensor) -> Tensor:
        return ((out - y).abs() < 0.5).sum()


class Linear(Scalar):
    """y ~ <a, x> + b with the same loss; flat parameters are (a_1, a_2, a_3, b), seeded without global effects."""

    def __init__(self) -> None:
        nn.Module.__init__(self)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            self.lin = nn.Linear(3, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.lin(x)[:, 0]


def scalar_federation(lr: float = 0.1, **options: float) -> Federation:
    """Client 0: one sample (x=1, y=2), tau = 1; client 1: two samples (x=2, y=2), tau = 2; p = (1/3, 2/3)."""
    x = torch.tensor([[1.0], [2.0], [2.0]])
    y = torch.tensor([2.0, 2.0, 2.0])
    parts = [np.array([0]), np.array([1, 2])]
    return Federation(Scalar(), x, y, parts, x, y, LocalOptions(lr=lr, batch_size=1, **options))


def linear_federation(sizes: tuple[int, ...] = (3, 4, 5, 6), **options: float) -> Federation:
    """Clients of the given (unequal) sizes with y = x (1, -2, 0.5) + noise, for :class:`Linear`; lr 0.1, B = 2."""
    g = torch.Generator().manual_seed(5)
    n = sum(sizes)
    x = torch.randn(n, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3 * torch.randn(n, generator=g)
    bounds = np.cumsum((0, *sizes))
    parts = [np.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    settings = {"lr": 0.1, "batch_size": 2, **options}
    return Federation(Linear(), x, y, parts, x, y, LocalOptions(**settings), seed=3)
