"""FedNova: normalised averaging (Wang et al., "Tackling the Objective Inconsistency Problem in
Heterogeneous Federated Optimization", NeurIPS 2020; reference code JYWa/FedNova).

Clients that run more local steps move further; FedAvg's plain mean then drifts towards the
objective of the busiest clients. FedNova divides each update Delta_i = w_t - theta_i by its
normaliser a_i (how far the client's local optimiser moves, in units of eta, per unit gradient) and
rescales the mean by tau_eff = sum_i p_i a_i:

    w_{t+1} = w_t - tau_eff * sum_i p_i Delta_i / a_i,   p renormalised over the uploaders.

a_i for the local optimisers of :mod:`fedaccel.engine.local`:

- plain SGD: a_i = tau_i;
- heavy-ball momentum rho: a_i = [tau_i - rho (1 - rho^tau_i) / (1 - rho)] / (1 - rho);
- proximal term mu (FedProx): a_i = [1 - (1 - eta mu)^tau_i] / (eta mu).

All three (and their combination) are what :func:`normaliser` computes: it runs the client's update
rule on a scalar whose every stochastic gradient is 1 and reads off the distance moved over eta. Where
the paper is silent we follow the engine's order of operations: the proximal term is added to the
gradient *before* momentum (so with both, a_i is the engine's exact value, not the reference code's
recurrence, which adds the proximal term after momentum). Weight decay counts as part of the
gradient, as in the reference code, and does not change a_i. Equal tau_i and plain SGD give a_i = tau,
tau_eff = tau: exactly FedAvg.

Reference-code options (docs/algorithms.md "Reference code"):

- ``tau_eff="normalisers"`` (default, the paper): tau_eff = sum_i p_i a_i. ``tau_eff="steps"``: the reference
  code's rule (JYWa/FedNova ``distoptim/FedNova.py``, ``average``) that uses sum_i p_i tau_i whenever mu > 0
  (a larger server step); with mu = 0 it is the paper's rule.
- ``gmf`` (default 0: off): the reference's server momentum. With D_t = w_t - (the step above) the
  aggregated update, buf <- gmf buf + D_t / eta_t (buf = 0 before round 0) and w_{t+1} = w_t - eta_t buf.
  The buffer is server state (a d-vector); gmf = 0 leaves the step as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientUpdate, Part, RoundInfo, State, updates_ignored
from fedaccel.algorithms.mean import renormalised_weights
from fedaccel.errors import ConfigError, shown

TAU_EFF_RULES = ("normalisers", "steps")


def normaliser(steps: int, *, lr: float = 1.0, momentum: float = 0.0, mu: float = 0.0) -> float:
    """a_i: the local update, over eta, of tau_i steps whose every gradient is the scalar 1.

    With ``y = (theta - w)/eta``: ``v <- rho v + 1 + eta mu y; y <- y - v``; a_i = -y after tau_i steps.

    Example:
        >>> normaliser(5)
        5.0
        >>> normaliser(2, momentum=0.5)  # 1 + (1 + 0.5)
        2.5
    """
    y, v = 0.0, 0.0
    for _ in range(steps):
        v = momentum * v + 1.0 + lr * mu * y
        y -= v
    return -y


def fednova_aggregate(*, mu: float = 0.0, tau_eff: str = "normalisers", gmf: float = 0.0) -> Part:
    """FedNova's server step. ``mu`` is the proximal coefficient of the clients' local steps (0: none).

    The momentum rho is read from the run's local optimiser (``RoundInfo.momentum``); ``mu`` must be
    the same value as the FedProx part that adds the proximal term (the ``fednova`` recipe does both).
    ``tau_eff`` and ``gmf``: the reference code's options (module docstring).

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> compose("fednova", fednova_aggregate()).name
        'fednova'
    """
    if not mu >= 0:
        raise ConfigError(f"fednova mu must be >= 0, got {mu}")
    if tau_eff not in TAU_EFF_RULES:
        raise ConfigError(f"fednova tau_eff must be one of {', '.join(TAU_EFF_RULES)}, got {shown(tau_eff)}")
    if not 0 <= gmf < 1:
        raise ConfigError(f"fednova gmf must be in [0, 1), got {gmf}")

    def aggregate(info: RoundInfo, w: Tensor, updates: Sequence[ClientUpdate]) -> Tensor:
        if not updates:
            return w.clone()
        p = renormalised_weights(updates)
        a = [normaliser(u.steps, lr=info.lr, momentum=info.momentum, mu=mu) for u in updates]
        scales = [float(u.steps) for u in updates] if tau_eff == "steps" and mu > 0 else a
        effective = sum(pk * sk for pk, sk in zip(p, scales, strict=True))
        step = torch.zeros_like(w)
        for pk, ak, u in zip(p, a, updates, strict=True):
            step.add_(u.delta, alpha=pk / ak)
        return torch.sub(w, step, alpha=effective)

    def aggregate_fold(info: RoundInfo, w: Tensor) -> NormalisedFold:
        def terms(u: ClientUpdate) -> tuple[float, float]:  # (a_k, the k-th term's scale in tau_eff)
            a = normaliser(u.steps, lr=info.lr, momentum=info.momentum, mu=mu)
            return a, (float(u.steps) if tau_eff == "steps" and mu > 0 else a)

        return NormalisedFold(torch.zeros_like(w), terms)

    def init_momentum(w0: Tensor) -> Tensor:
        return torch.zeros_like(w0)

    def server_momentum(
        info: RoundInfo, w: Tensor, w_next: Tensor, updates: Sequence[ClientUpdate], ss: State
    ) -> tuple[Tensor, State]:
        buffer = ss.mul(gmf).add_(w - w_next, alpha=1.0 / info.lr)  # gmf buf + D_t / eta_t
        return torch.sub(w, buffer, alpha=info.lr), buffer

    if gmf == 0:
        return Part(name="fednova", aggregate=aggregate, aggregate_fold=aggregate_fold)
    return Part(name="fednova", aggregate=aggregate, init_server=init_momentum, server_end=server_momentum,
                aggregate_fold=aggregate_fold, server_end_fold=updates_ignored(server_momentum), models_only=True)


@dataclass
class NormalisedFold:
    """FedNova's step as running sums (one d-vector): with W = sum w_k (raw weights), p_k = w_k / W,
    ``w - tau_eff sum p_k delta_k / a_k = w - (sum w_k s_k / W^2) sum (w_k / a_k) delta_k``."""

    total: Tensor  # sum_k (w_k / a_k) delta_k
    terms: Callable[[ClientUpdate], tuple[float, float]]  # (a_k, s_k)
    weight: float = 0.0  # W
    scaled: float = 0.0  # sum_k w_k s_k

    def add(self, update: ClientUpdate) -> None:
        a, s = self.terms(update)
        self.total.add_(update.delta, alpha=update.weight / a)
        self.weight += update.weight
        self.scaled += update.weight * s

    def finish(self, w: Tensor) -> Tensor:
        if self.weight == 0:
            return w.clone()
        return torch.sub(w, self.total, alpha=self.scaled / self.weight**2)
