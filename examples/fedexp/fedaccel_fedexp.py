"""FedExP: FedAvg's mean, extrapolated (Jhunjhunwala, Wang and Joshi, ICLR 2023, Algorithm 1).

With Delta_i = w_t - theta_i the uploaded updates and Delta = sum_i p_i Delta_i their mean (FedAvg's step),
the server steps

    eta_g = max(1, sum_i p_i ||Delta_i||^2 / (2 (||Delta||^2 + epsilon)))
    w_{t+1} = w_t - eta_g Delta

p_i: the weights of FedAvg's mean (each client's share of the uploaders' data). With equal weights, 1/M for
M uploaders, this is the paper's sum_i ||Delta_i||^2 / (2M (||Delta||^2 + epsilon)). epsilon is a constant
(the authors' code puts M epsilon in its place and decays it every round with the square of the learning rate's
decay: not done here). The paper's experiments evaluate the mean of the last two iterates; fedaccel evaluates
w_{t+1} itself.

A method written outside fedaccel, as a researcher would: one server part after FedAvg's own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fedaccel import Algorithm, Part, build_algorithm, compose
from fedaccel.algorithms.base import ClientUpdate, RoundInfo
from fedaccel.algorithms.mean import renormalised_weights


def server_step_size(updates: Sequence[ClientUpdate], mean: Tensor, epsilon: float) -> float:
    """eta_g: the updates' mean squared norm over twice the squared norm of their ``mean``, at least 1."""
    spread = sum(p * float(u.delta.square().sum()) for p, u in zip(renormalised_weights(updates), updates))
    return max(1.0, spread / (2 * (float(mean.square().sum()) + epsilon)))


def extrapolation(*, epsilon: float = 1e-3) -> Part:
    """The server step w_t - eta_g Delta in place of FedAvg's w_t - Delta (module docstring)."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")

    def server_end(info: RoundInfo, w: Tensor, w_next: Tensor, updates: Sequence[ClientUpdate],
                   ss: None) -> tuple[Tensor, None]:
        if not updates:
            return w_next, ss
        mean = w - w_next  # FedAvg's step, Delta
        eta = server_step_size(updates, mean, epsilon)
        return (w_next if eta == 1.0 else torch.sub(w, mean, alpha=eta)), ss

    return Part(name="extrapolation", server_end=server_end)


def fedexp(*, epsilon: float = 1e-3) -> Algorithm:
    """FedExP (Jhunjhunwala et al., 2023): FedAvg with the extrapolated server step eta_g >= 1."""
    return compose("fedexp", *build_algorithm("fedavg").parts, extrapolation(epsilon=epsilon))
