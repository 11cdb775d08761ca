"""Server optimisers: the method's aggregated step treated as a pseudo-gradient.

Reddi et al., "Adaptive Federated Optimization" (ICLR 2021), Algorithm 2 (FedAdagrad, FedAdam, FedYogi)
and Hsu, Qi and Brown, "Measuring the Effects of Non-Identical Data Distribution for Federated Visual
Classification" (2019), FedAvgM. With w_t the global model and w~ the model the rest of the algorithm
proposes (its aggregate and every other ``server_end``: SCAFFOLD's step with eta_g, FedDyn's drift, ...),
Delta_t = w~ - w_t is Algorithm 2's Delta_t (minus the pseudo-gradient), and this part's ``server_end``
replaces w~ by

    sgd / avgm:  m_t = beta m_{t-1} + Delta_t;                  w_{t+1} = w_t + eta_s m_t
    adagrad:     v_t = v_{t-1} + Delta_t^2
    adam:        v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2
    yogi:        v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)
    (adaptive)   m_t = beta1 m_{t-1} + (1 - beta1) Delta_t;     w_{t+1} = w_t + eta_s m_t / (sqrt(v_t) + tau)

with m_{-1} = 0 and v_{-1} = tau^2 (Algorithm 2 asks v_{-1} >= tau^2; its smallest value). State: the
moments m and v (d-vectors) and the number of steps taken, all plain tensors and integers, so a checkpoint
holds them and ``torch.load(weights_only=True)`` reads them back. A round that aggregates nothing takes no
step (the state stays).

``variant="flower"`` is Flower's arithmetic (``flwr/serverapp/strategy``, the same in 1.41 and 1.42): v_{-1} = 0
(``fedadam.py:153``, ``fedyogi.py:153``, ``fedadagrad.py:147``) and, for Adam only, the step eta_s
sqrt(1 - beta2^(k+1)) / (1 - beta1^(k+1)) at its k-th step, k = 1, 2, ... (``fedadam.py:163``: Flower's
``server_round + 1`` with rounds counted from 1). Flower's FedAdagrad fixes beta1 = 0 (``fedadagrad.py:115``):
set ``beta1: 0`` for it. docs/algorithms.md "Server optimisers" has the table.

``sgd`` with ``momentum = 0`` and ``lr = 1`` is the identity: it returns the method's own model, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientUpdate, Part, RoundInfo
from fedaccel.errors import ConfigError, shown

VARIANTS = ("paper", "flower")
PART_NAME = "server_opt"


@dataclass(frozen=True)
class ServerMoments:
    """A server optimiser's state: steps taken, first moment (the momentum buffer), second moment (None: none)."""

    steps: int
    m: Tensor
    v: Tensor | None = None


def check_settings(prefix: str, lr: float, lr_key: str = "lr", **betas: float) -> None:
    """The step size > 0 and each beta in [0, 1), else one line naming the key as the user spelled it:
    ``prefix`` + key (``"server_opt adam: "``, or ``"algorithm."`` for a recipe's own ``server_lr``)."""
    if not lr > 0:
        raise ConfigError(f"{prefix}{lr_key} must be > 0, got {shown(lr)}")
    for key, value in betas.items():
        if not 0 <= value < 1:
            raise ConfigError(f"{prefix}{key} must be in [0, 1), got {shown(value)}")


def _check(name: str, lr: float, **betas: float) -> None:
    check_settings(f"server_opt {name}: ", lr, **betas)


def server_sgd(*, lr: float = 1.0, momentum: float = 0.0) -> Part:
    """Server SGD with heavy-ball momentum (FedAvgM, Hsu et al. 2019): m = beta m + Delta, w + eta_s m.

    Example:
        >>> server_sgd(lr=1.0, momentum=0.9).name
        'server_opt'
    """
    _check("sgd", lr, momentum=momentum)

    def init(w0: Tensor) -> ServerMoments:
        return ServerMoments(0, torch.zeros_like(w0))

    def step(info: RoundInfo, w: Tensor, w_next: Tensor, updates: Sequence[ClientUpdate],
             ss: ServerMoments) -> tuple[Tensor, ServerMoments]:
        if not updates:
            return w_next, ss
        if momentum == 0 and lr == 1:
            return w_next, ServerMoments(ss.steps + 1, ss.m)  # the identity: the method's model as it is
        m = ss.m.mul(momentum).add_(w_next - w)  # beta m + Delta_t
        return torch.add(w, m, alpha=lr), ServerMoments(ss.steps + 1, m)

    return Part(name=PART_NAME, init_server=init, server_end=step, models_only=True)


def server_avgm(*, lr: float = 1.0, momentum: float = 0.9) -> Part:
    """FedAvgM's server step: :func:`server_sgd` with the momentum of Hsu et al.'s experiments (0.9)."""
    return server_sgd(lr=lr, momentum=momentum)


SecondMoment = Callable[[Tensor, Tensor], Tensor]  # (v_{t-1}, Delta_t^2) -> v_t


def _adaptive(name: str, second: SecondMoment, *, lr: float, beta1: float, tau: float, variant: str,
              bias_correction: Callable[[int], float] | None = None) -> Part:
    """Algorithm 2 of Reddi et al. with the second-moment rule ``second`` (module docstring)."""
    if not tau > 0:
        raise ConfigError(f"server_opt {name}: tau must be > 0, got {shown(tau)}")
    if variant not in VARIANTS:
        raise ConfigError(f"server_opt {name}: variant must be one of {', '.join(VARIANTS)}, got {shown(variant)}")

    def init(w0: Tensor) -> ServerMoments:
        v0 = torch.zeros_like(w0) if variant == "flower" else torch.full_like(w0, tau * tau)  # v_{-1}
        return ServerMoments(0, torch.zeros_like(w0), v0)

    def step(info: RoundInfo, w: Tensor, w_next: Tensor, updates: Sequence[ClientUpdate],
             ss: ServerMoments) -> tuple[Tensor, ServerMoments]:
        if not updates:
            return w_next, ss
        assert ss.v is not None
        delta = w_next - w  # Delta_t
        m = ss.m.mul(beta1).add_(delta, alpha=1 - beta1)
        v = second(ss.v, delta * delta)
        steps = ss.steps + 1
        eta = lr * (bias_correction(steps) if bias_correction and variant == "flower" else 1.0)
        return torch.addcdiv(w, m, v.sqrt().add_(tau), value=eta), ServerMoments(steps, m, v)

    return Part(name=PART_NAME, init_server=init, server_end=step, models_only=True)


def server_adagrad(*, lr: float = 0.01, beta1: float = 0.9, tau: float = 1e-3, variant: str = "paper") -> Part:
    """FedAdagrad (Reddi et al. 2021, Algorithm 2): v_t = v_{t-1} + Delta_t^2.

    Example:
        >>> server_adagrad(lr=0.1).name
        'server_opt'
    """
    _check("adagrad", lr, beta1=beta1)
    return _adaptive("adagrad", lambda v, d2: v + d2, lr=lr, beta1=beta1, tau=tau, variant=variant)


def server_adam(
    *, lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3, variant: str = "paper"
) -> Part:
    """FedAdam (Reddi et al. 2021, Algorithm 2): v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2, no bias correction
    (``variant="flower"``: Flower's, module docstring).

    Example:
        >>> server_adam(lr=0.01).name
        'server_opt'
    """
    _check("adam", lr, beta1=beta1, beta2=beta2)

    def flower_bias_correction(k: int) -> float:
        return (1 - beta2 ** (k + 1)) ** 0.5 / (1 - beta1 ** (k + 1))

    return _adaptive("adam", lambda v, d2: v.mul(beta2).add_(d2, alpha=1 - beta2), lr=lr, beta1=beta1, tau=tau,
                     variant=variant, bias_correction=flower_bias_correction)


def server_yogi(
    *, lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3, variant: str = "paper"
) -> Part:
    """FedYogi (Reddi et al. 2021, Algorithm 2): v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2).

    Example:
        >>> server_yogi(lr=0.01).name
        'server_opt'
    """
    _check("yogi", lr, beta1=beta1, beta2=beta2)
    return _adaptive("yogi", lambda v, d2: v - (1 - beta2) * d2 * torch.sign(v - d2), lr=lr, beta1=beta1,
                     tau=tau, variant=variant)


SERVER_OPTIMISERS: dict[str, Callable[..., Part]] = {
    "sgd": server_sgd, "avgm": server_avgm, "adagrad": server_adagrad, "adam": server_adam, "yogi": server_yogi,
}
