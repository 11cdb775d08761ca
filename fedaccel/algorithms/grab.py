"""GraB-FedAvg: online gradient balancing picks the local steps (paper 000, Algorithm 4).

The BHerd paper's baseline replaces offline herding by the online balancing of GraB (Lu et al.,
"GraB: Finding Provably Better Data Permutations than Random Reshuffling", NeurIPS 2022), so nothing but
three d-vectors is stored. Per client and round, with m = s = g = 0, at every local step lambda:

    m += z_lambda / tau_i;  c = z_lambda - m
    if ||s + c|| < ||s - c||:  s += c;  g += z_lambda   (the step is kept)
    else:                      s -= c

Note that m is the running sum divided by tau_i (not the running mean), as the paper writes it. The
comparison is evaluated as ``<s, c> < 0``, the same test (||s+c||^2 - ||s-c||^2 = 4<s, c>) without the
cancellation of two norms. The first step is never kept (s = 0 gives a tie, and the test is strict).

The client uploads ``eta g_i`` and alpha_i = (#kept) / tau_i; the server rescales every update by
1/alpha_t, alpha_t = sum_i p_i alpha_i (p renormalised over the uploaders), so the weighted mean gives
``w_{t+1} = w_t - (eta/alpha_t) sum_i p_i g_i``. If no client kept a step (alpha_t = 0) every update is zero
and is left as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientContext, ClientUpdate, Estimator, Part, RoundInfo, State
from fedaccel.algorithms.mean import renormalised_weights


class BalancingEstimator:
    """GraB's online balancing over one client-round: three d-vectors, no stored gradients.

    The vectors are created at the first step like the step direction (the model's dtype and device).
    """

    def __init__(self, steps: int, dim: int, lr: float) -> None:
        self.steps, self.dim, self.lr = steps, dim, lr
        self.m: Tensor | None = None  # running sum of z / tau_i
        self.s: Tensor | None = None  # signed sum of centred directions
        self.g: Tensor | None = None  # sum of kept raw directions
        self.kept: list[int] = []

    def observe(self, step: int, direction: Tensor) -> None:
        if self.m is None or self.s is None or self.g is None:
            self.m, self.s, self.g = (torch.zeros_like(direction) for _ in range(3))
        self.m.add_(direction, alpha=1.0 / self.steps)
        c = direction - self.m
        if float(torch.dot(self.s, c)) < 0.0:  # ||s + c|| < ||s - c||
            self.s.add_(c)
            self.g.add_(direction)
            self.kept.append(step)
        else:
            self.s.sub_(c)

    def finish(self, full_update: Tensor) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        """Return (eta g_i, {"alpha": [alpha_i]}, diagnostics)."""
        alpha_i = len(self.kept) / self.steps
        g = torch.zeros_like(full_update) if self.g is None else self.g
        estimate = (g * self.lr).to(full_update.dtype)
        memory = 3 * self.dim * g.element_size()
        diag = {"selected": list(self.kept), "tau": self.steps, "alpha": alpha_i, "memory_bytes": memory}
        return estimate, {"alpha": full_update.new_tensor([alpha_i])}, diag


def grab_selection() -> Part:
    """GraB online selection on the client plus the server's 1/alpha_t rescaling (Algorithm 4).

    Diagnostics per client and round: ``selected`` (0-based kept steps of the ``tau``), ``alpha`` (alpha_i) and
    ``memory_bytes`` (the three d-vectors).

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> compose("grab-fedavg", grab_selection(), mean_aggregate()).name
        'grab-fedavg'
    """

    def estimator(ctx: ClientContext, dim: int) -> Estimator:
        return BalancingEstimator(ctx.steps, dim, ctx.info.lr)

    def server_adjust(info: RoundInfo, updates: Sequence[ClientUpdate], ss: State) -> list[ClientUpdate]:
        if not updates:
            return list(updates)
        p = renormalised_weights(updates)
        alpha_t = sum(pk * float(u.extras["alpha"]) for pk, u in zip(p, updates, strict=True))
        if alpha_t <= 0.0:
            return list(updates)
        return [replace(u, delta=u.delta / alpha_t) for u in updates]

    return Part(name="grab", estimator=estimator, server_adjust=server_adjust)
