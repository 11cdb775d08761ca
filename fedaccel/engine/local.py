"""Local training on one client: tau_i SGD steps on the flat parameter vector.

A step is ``theta <- theta - eta * d`` where the direction d is built from the mini-batch
gradient z in this order: clip z (optional), add the algorithm's local terms (FedProx,
SCAFFOLD, ...), add weight decay, apply heavy-ball momentum (PyTorch's convention). An
estimator part (BHerd, GraB) observes every d; with plain SGD, d = z + local terms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedaccel.algorithms.base import Estimator, LocalTerm
from fedaccel.errors import ConfigError
from fedaccel.flat import FlatModel


ORDERS = ("fixed", "reshuffle", "given")


def batch_order(order: str, reshuffle: bool = False) -> str:
    """The batch order, with ``reshuffle: true`` read as the older spelling of ``order: reshuffle``.

    fixed: one seeded permutation of the client's samples for all rounds (BHerd's default);
    reshuffle: a new permutation every round (RR); given: the client's index array as it is.
    """
    if order not in ORDERS:
        raise ConfigError(f"train.order must be one of {', '.join(ORDERS)}, got {order!r}")
    if reshuffle and order == "given":
        raise ConfigError("train.reshuffle: true (the old spelling of train.order: reshuffle) contradicts "
                          "train.order: given; set train.order alone")
    return "reshuffle" if reshuffle else order


@dataclass(frozen=True)
class LocalOptions:
    """Client optimiser settings (the same on every client)."""

    lr: float = 0.01  # eta_0
    batch_size: int = 50  # B
    local_epochs: float = 1.0  # E, fractional allowed
    local_steps: int | None = None  # tau_i for every client, in place of E |D_i| / B
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_decay: float = 1.0  # gamma: eta_t = eta_0 * gamma^t
    clip: float | None = None  # max L2 norm of each mini-batch gradient
    order: str = "fixed"  # batches of the sample order: fixed, reshuffle (RR) or given (see batch_order)
    reshuffle: bool = False  # the older spelling of order="reshuffle"; always equal to order == "reshuffle"

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", batch_order(self.order, self.reshuffle))
        object.__setattr__(self, "reshuffle", self.order == "reshuffle")
        if not self.lr > 0:
            raise ConfigError(f"train.lr must be > 0, got {self.lr}")
        if self.batch_size < 1:
            raise ConfigError(f"train.batch_size must be >= 1, got {self.batch_size}")
        if not self.local_epochs > 0:
            raise ConfigError(f"train.local_epochs must be > 0, got {self.local_epochs}")
        if self.local_steps is not None and self.local_steps < 1:
            raise ConfigError(f"train.local_steps must be >= 1 or null, got {self.local_steps}")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"train.momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise ConfigError(f"train.weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 < self.lr_decay <= 1:
            raise ConfigError(f"train.lr_decay must be in (0, 1], got {self.lr_decay}")
        if self.clip is not None and not self.clip > 0:
            raise ConfigError(f"train.clip must be > 0 or null, got {self.clip}")

    def lr_at(self, round_: int) -> float:
        """eta_t = eta_0 * gamma^t."""
        return self.lr * self.lr_decay**round_

    def steps(self, n_samples: int) -> int:
        """tau_i = floor(E * |D_i| / B), at least 1; or ``local_steps`` when it is set."""
        if self.local_steps is not None:
            return self.local_steps
        return max(1, math.floor(self.local_epochs * n_samples / self.batch_size + 1e-9))


def batch_positions(order: np.ndarray, steps: int, batch_size: int) -> list[np.ndarray]:
    """Indices of each of ``steps`` mini-batches, reading ``order`` cyclically.

    Batches run through the order epoch after epoch; a batch that crosses the end of the
    order continues at its start, so every batch has exactly ``batch_size`` samples (or all
    of the client's data when it has fewer).
    """
    n = len(order)
    size = min(batch_size, n)
    reps = math.ceil(steps * size / n)
    stream = np.tile(order, reps) if reps > 1 else order
    return [stream[k * size : (k + 1) * size] for k in range(steps)]


def train_local(
    model: FlatModel,
    x: Tensor,
    y: Tensor,
    batches: Sequence[np.ndarray],
    start: Tensor,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    lr: float,
    options: LocalOptions,
    terms: Sequence[LocalTerm] = (),
    estimator: Estimator | None = None,
) -> Tensor:
    """Run one SGD step per batch from ``start``; return the final parameters (a new tensor)."""
    model.load(start)
    theta = model.theta
    module = model.module
    module.train()
    buffer: Tensor | None = None
    for step, index in enumerate(batches):
        idx = torch.from_numpy(index)
        xb, yb = x[idx], y[idx]
        grad = model.gradient(loss_fn(module(xb), yb))
        with torch.no_grad():
            if options.clip is not None:
                norm = float(grad.norm())
                if norm > options.clip:
                    grad.mul_(options.clip / norm)
            for term in terms:
                term(theta, grad)
            if options.weight_decay:
                grad.add_(theta, alpha=options.weight_decay)
            direction = grad
            if options.momentum:
                if buffer is None:
                    buffer = grad.clone()
                else:
                    buffer.mul_(options.momentum).add_(grad)
                direction = buffer
            if estimator is not None:
                estimator.observe(step, direction)
            theta.sub_(direction, alpha=lr)
    return theta.clone()
