"""BHerd: keep the herd of local gradients closest to their mean (paper 000, Algorithms 2-3, Eq. 5-7).

"Accelerating Federated Learning by Selecting Beneficial Herd of Local Gradients". A client runs its
tau_i local steps as usual and keeps every step direction z_lambda. After training it

1. centres them, z_bar = z - mu_i with mu_i the mean over all tau_i steps (Eq. 5),
2. orders them greedily (Algorithm 2): starting from s = 0, repeatedly take the unused step whose
   centred direction gives the smallest ||s + z_bar||, and stops after k_i = max(1, round(alpha tau_i)),
3. uploads the sum of the selected *raw* directions, g_i (Eq. 6), as the estimate ``(eta/alpha) g_i`` of
   its full update ``eta sum_lambda z_lambda``; the server's weighted mean then is Eq. 7,
   ``w_{t+1} = w_t - (eta/alpha) sum_i p_i g_i``. alpha = 1 selects every step: FedAvg.

The greedy loop works on the Gram matrix only: ``||s + z_bar_j||^2 = ||s||^2 + 2<s, z_bar_j> + ||z_bar_j||^2``,
and ``<s, z_bar_j>`` grows by one row of the centred Gram matrix per pick. So a client does one
(tau x d) @ (d x tau) matmul and O(k tau) scalar bookkeeping, never a loop over d-sized vectors.

Rounding: ``round(alpha tau_i)`` is round half *up* (floor(x + 1/2)), what the paper's "rounding" reads as;
Python's ``round`` would send 2.5 to 2. The step indices in the diagnostics are 0-based.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientContext, Estimator, Part
from fedaccel.errors import ConfigError


def selected_count(alpha: float, steps: int) -> int:
    """k_i = max(1, round(alpha * tau_i)) with round half up (2.5 -> 3), robust to 14.4999... float products."""
    return max(1, min(steps, math.floor(alpha * steps + 0.5 + 1e-9)))


def centred_gram(gram: Tensor) -> Tensor:
    """Gram matrix of the centred vectors z_j - mean(z), from the Gram matrix of the z_j alone.

    ``<z_i - mu, z_j - mu> = G_ij - r_i - r_j + mean(r)`` with r the row means of G. A no-op (up to
    rounding) on a Gram matrix of vectors that are already centred.
    """
    row = gram.mean(dim=1)  # r_j = <z_j, mu>
    return gram - row[:, None] - row[None, :] + row.mean()


def herd_order(gram: Tensor, k: int) -> list[int]:
    """Algorithm 2 on the vectors whose Gram matrix is ``gram``: the first k indices of the greedy herding order.

    The vectors are centred (through :func:`centred_gram`); then, with s the running sum of the centred
    vectors already chosen, each pick is the unused j minimising ``||s + z_bar_j||`` (ties: lowest index).
    Bookkeeping in float64, O(k tau) after the Gram matrix.

    Example:
        >>> z = torch.tensor([[3.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [-2.0, 0.0]])
        >>> herd_order(z @ z.T, 4)
        [1, 2, 0, 3]
    """
    tau = gram.shape[0]
    if gram.shape != (tau, tau):
        raise ValueError(f"herd_order needs a square Gram matrix, got shape {tuple(gram.shape)}")
    if not 1 <= k <= tau:
        raise ValueError(f"herd_order: k must be in [1, {tau}], got {k}")
    # O(k tau) scalar steps: on the CPU in float64, wherever the Gram matrix was computed
    centred = centred_gram(gram.to(device="cpu", dtype=torch.float64))
    sq_norms = centred.diagonal().clone()  # ||z_bar_j||^2
    inner = torch.zeros(tau, dtype=torch.float64)  # <s, z_bar_j>
    used = torch.zeros(tau, dtype=torch.bool)
    order: list[int] = []
    for _ in range(k):
        # ||s + z_bar_j||^2 - ||s||^2; ||s||^2 is the same for every candidate
        score = (2.0 * inner + sq_norms).masked_fill(used, math.inf)
        j = int(torch.argmin(score))  # first minimum: lowest index on ties
        order.append(j)
        used[j] = True
        inner += centred[j]
    return order


class HerdingEstimator:
    """Stores the tau_i step directions of one client-round and replaces the update by the herd's.

    Memory: one (tau_i x d) matrix, allocated at the first step like the step direction (the
    model's dtype and device), centred in place at the end.
    """

    def __init__(self, steps: int, dim: int, alpha: float, lr: float) -> None:
        self.steps, self.dim, self.alpha, self.lr = steps, dim, alpha, lr
        self._z: Tensor | None = None  # row lambda = z_lambda
        self._seen = 0
        self._finished = False

    def observe(self, step: int, direction: Tensor) -> None:
        assert not self._finished, "observe after finish"
        if self._z is None:
            self._z = direction.new_empty((self.steps, self.dim))
        self._z[step].copy_(direction)
        self._seen += 1

    def finish(self, full_update: Tensor) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        """Herd, and return ((lr/alpha) g_i, no extras, diagnostics)."""
        assert not self._finished, "finish called twice"
        z, self._z, self._finished = self._z, None, True  # the matrix is freed when this returns
        if z is None or self._seen != self.steps:
            raise RuntimeError(f"BHerd saw {self._seen} local steps, expected {self.steps}")
        memory = z.numel() * z.element_size()
        mu = z.mean(dim=0)  # mu_i (Eq. 5)
        z.sub_(mu)  # centre in place: exact centred inner products, no second matrix
        gram = z @ z.T  # (tau, tau): the only O(tau^2 d) work
        k = selected_count(self.alpha, self.steps)
        chosen = herd_order(gram, k)
        mask = z.new_zeros(self.steps)
        mask[chosen] = 1.0
        g = mask @ z + k * mu  # sum of the selected raw directions (Eq. 6), without copying rows
        distance = float(torch.linalg.vector_norm(g / (self.alpha * self.steps) - mu))
        estimate = (g * (self.lr / self.alpha)).to(full_update.dtype)
        diag = {"selected": sorted(chosen), "tau": self.steps, "distance": distance, "memory_bytes": memory}
        return estimate, {}, diag


def bherd_selection(*, alpha: float = 0.5) -> Part:
    """BHerd's update estimator: upload (eta/alpha) times the sum of the herded k_i of tau_i local directions.

    ``alpha = 0.5`` is the paper's recommended proportion (Section 2.3). Diagnostics per client and
    round: ``selected`` (sorted 0-based step indices of the ``tau`` steps), ``distance`` = ||g_i/(alpha tau_i) - mu_i|| (Fig. 4d)
    and ``memory_bytes`` (the stored gradients, tau_i * d * 4 for a float32 model).

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> compose("bherd-fedavg", bherd_selection(alpha=0.5), mean_aggregate()).name
        'bherd-fedavg'
    """
    if not 0 < alpha <= 1:
        raise ConfigError(f"bherd alpha must be in (0, 1], got {alpha}")

    def estimator(ctx: ClientContext, dim: int) -> Estimator:
        return HerdingEstimator(ctx.steps, dim, alpha, ctx.info.lr)

    return Part(name="bherd", estimator=estimator)
