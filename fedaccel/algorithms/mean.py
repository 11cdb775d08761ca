"""Weighted mean of the uploaded updates: the FedAvg server step (McMahan et al., 2017).

``w_{t+1} = w_t - server_lr * sum_k p~_k delta_k`` with ``p~`` the data weights p_k renormalised
over the clients that uploaded (``weighting="data"``) or uniform (``weighting="uniform"``).
With ``server_lr = 1`` and ``delta_k = w_t - theta_k`` this is ``sum_k p~_k theta_k``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientUpdate, Part, RoundInfo, weighted_sum
from fedaccel.errors import ConfigError, shown


def renormalised_weights(updates: Sequence[ClientUpdate], weighting: str = "data") -> list[float]:
    """p~_k over the uploaded clients (sums to 1)."""
    raw = [u.weight if weighting == "data" else 1.0 for u in updates]
    total = sum(raw)
    return [r / total for r in raw]


def mean_aggregate(*, server_lr: float = 1.0, weighting: str = "data") -> Part:
    """The FedAvg aggregator.

    Example:
        >>> part = mean_aggregate(server_lr=1.0)
        >>> part.name
        'mean'
    """
    if server_lr <= 0:
        raise ConfigError(f"server_lr must be > 0, got {server_lr}")
    if weighting not in ("data", "uniform"):
        raise ConfigError(f"weighting must be 'data' or 'uniform', got {shown(weighting)}")

    def aggregate(info: RoundInfo, w: Tensor, updates: Sequence[ClientUpdate]) -> Tensor:
        if not updates:
            return w.clone()
        step = weighted_sum(updates, renormalised_weights(updates, weighting))
        return torch.sub(w, step, alpha=server_lr)

    def aggregate_fold(info: RoundInfo, w: Tensor) -> WeightedMeanFold:
        return WeightedMeanFold(torch.zeros_like(w), lambda u: u.weight if weighting == "data" else 1.0, server_lr)

    return Part(name="mean", aggregate=aggregate, aggregate_fold=aggregate_fold)


@dataclass
class WeightedMeanFold:
    """``w - server_lr * sum_k c_k delta_k / sum_k c_k`` as a running sum: one d-vector, whatever the
    number of clients. ``coefficient(update)`` is c_k (the data weight p_k, or 1 for a uniform mean)."""

    total: Tensor
    coefficient: Callable[[ClientUpdate], float]
    server_lr: float = 1.0
    masses: list[float] = field(default_factory=list)

    def add(self, update: ClientUpdate) -> None:
        c = float(self.coefficient(update))
        self.total.add_(update.delta, alpha=c)
        self.masses.append(c)

    def finish(self, w: Tensor) -> Tensor:
        if not self.masses:
            return w.clone()
        return torch.sub(w, self.total, alpha=self.server_lr / sum(self.masses))
