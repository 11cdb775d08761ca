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

Eq. 7's factor E: the paper writes ``w_t - eta (E/alpha) sum_i p_i g_i`` and drops E "since E = 1". We use
eta/alpha for every E: tau_i = E |D_i| / B already counts the epochs, so (eta/alpha) g_i ~ eta tau_i mu_i is the
full local update for any E, which is what Proposition 1 (Appendix C: BHerd's step = FedAvg's model average)
needs; a further factor E would scale the server step by E (by 0.1 at Fig. 3b's E = 0.1).

Controls: ``selection="random"`` keeps the same k_i steps chosen uniformly without replacement (drawn from
``make_rng(seed, "bherd-random", round, client)``) with the same eta/alpha, so a run can tell the herding choice
from the larger server step. ``estimate_error`` (diagnostics) = ||estimate - full update|| / ||full update||.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientContext, Estimator, Part
from fedaccel.algorithms.batched import (
    SMALL_BYTES,
    Workspace,
    check_steps,
    copy_active_rows,
    relative,
    row_blocks,
)
from fedaccel.errors import ConfigError, shown


def selected_count(alpha: float, steps: int) -> int:
    """k_i = max(1, round(alpha * tau_i)) with round half up (2.5 -> 3), robust to 14.4999... float products."""
    return max(1, min(steps, math.floor(alpha * steps + 0.5 + 1e-9)))


SELECTIONS = ("herding", "random")


def random_subset(ctx: ClientContext, k: int) -> list[int]:
    """The ``selection="random"`` control: k of the ctx.steps step indices, uniformly without replacement, sorted.

    Drawn from ``make_rng(seed, "bherd-random", round, client)``: the same in every runtime and on resume."""
    rng = ctx.info.rng("bherd-random", ctx.client)
    return sorted(int(j) for j in rng.choice(ctx.steps, size=k, replace=False))


def relative_error(estimate: Tensor, full: Tensor) -> float | None:
    """||estimate - full|| / ||full||; if ||full|| = 0: 0.0 when the estimate is 0 too, else None (not inf)."""
    base = float(torch.linalg.vector_norm(full))
    gap = float(torch.linalg.vector_norm(estimate - full))
    return relative(gap, base)


def centred_gram(gram: Tensor) -> Tensor:
    """Gram matrix of the centred vectors z_j - mean(z), from the Gram matrix of the z_j alone.

    ``<z_i - mu, z_j - mu> = G_ij - r_i - r_j + mean(r)`` with r the row means of G. A no-op (up to
    rounding) on a Gram matrix of vectors that are already centred.
    """
    row = gram.mean(dim=1)  # r_j = <z_j, mu>
    return gram - row[:, None] - row[None, :] + row.mean()


def tie_tolerance(dtype: torch.dtype, dim: int) -> float:
    """Relative score gap under which two herding candidates are tied: 8 eps sqrt(d), the rounding of d-long dot
    products in ``dtype``. Identical directions then tie whatever kernel computed their Gram matrix."""
    return 8.0 * torch.finfo(dtype).eps * math.sqrt(dim)


def herd_order(gram: Tensor, k: int, rtol: float = 0.0) -> list[int]:
    """Algorithm 2 on the vectors whose Gram matrix is ``gram``: the first k indices of the greedy herding order.

    The vectors are centred (through :func:`centred_gram`); then, with s the running sum of the centred
    vectors already chosen, each pick is the unused j minimising ``||s + z_bar_j||`` (ties: lowest index).
    Scores within ``rtol (2p + 1) max_j ||z_bar_j||^2`` of the minimum at pick p count as tied (the
    estimators pass :func:`tie_tolerance`, so rounding noise does not split an exact tie).
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
    slack = rtol * float(sq_norms.max().clamp_min(0.0))
    order: list[int] = []
    for pick in range(k):
        # ||s + z_bar_j||^2 - ||s||^2; ||s||^2 is the same for every candidate
        score = (2.0 * inner + sq_norms).masked_fill(used, math.inf)
        tied = score <= score.min() + slack * (2 * pick + 1)
        j = int(torch.argmax(tied.to(torch.uint8)))  # first (near-)minimum: lowest index on ties
        order.append(j)
        used[j] = True
        inner += centred[j]
    return order


class HerdingEstimator:
    """Stores the tau_i step directions of one client-round and replaces the update by the herd's.

    Memory: one (tau_i x d) matrix, allocated at the first step like the step direction (the
    model's dtype and device), centred in place at the end.
    """

    def __init__(self, steps: int, dim: int, alpha: float, lr: float, picks: list[int] | None = None) -> None:
        self.steps, self.dim, self.alpha, self.lr = steps, dim, alpha, lr
        self.picks = picks  # the selected steps, given (the random control); None: herding chooses
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
        """Herd (or take the given picks), and return ((lr/alpha) g_i, no extras, diagnostics)."""
        assert not self._finished, "finish called twice"
        z, self._z, self._finished = self._z, None, True  # the matrix is freed when this returns
        if z is None or self._seen != self.steps:
            raise RuntimeError(f"BHerd saw {self._seen} local steps, expected {self.steps}")
        memory = z.numel() * z.element_size()
        mu = z.mean(dim=0)  # mu_i (Eq. 5)
        z.sub_(mu)  # centre in place: exact centred inner products, no second matrix
        k = selected_count(self.alpha, self.steps)
        if self.picks is None:
            gram = z @ z.T  # (tau, tau): the only O(tau^2 d) work
            chosen = herd_order(gram, k, tie_tolerance(z.dtype, self.dim))
        else:
            chosen = list(self.picks)
        mask = z.new_zeros(self.steps)
        mask[chosen] = 1.0
        g = mask @ z + k * mu  # sum of the selected raw directions (Eq. 6), without copying rows
        distance = float(torch.linalg.vector_norm(g / (self.alpha * self.steps) - mu))
        estimate = (g * (self.lr / self.alpha)).to(full_update.dtype)
        diag = {
            "selected": sorted(chosen),
            "tau": self.steps,
            "distance": distance,
            "estimate_error": relative_error(estimate, full_update),
            "memory_bytes": memory,
        }
        return estimate, {}, diag


def herd_select_batched(gram: Tensor, steps: Tensor, counts: Tensor, rtol: float = 0.0) -> Tensor:
    """:func:`herd_order` for K clients at once: the (K, T) bool mask of each client's first k_i picks.

    ``gram`` is (K, T, T), the Gram matrices of the clients' vectors padded with zero rows beyond their
    ``steps`` tau_i (a (K,) int tensor); ``counts`` are the k_i. The greedy loop runs max k_i times over all
    clients, with padded and used candidates masked and finished clients frozen; ties go to the lowest
    index within ``rtol``, as in :func:`herd_order`. Bookkeeping in float64 on the CPU, like :func:`herd_order`.
    """
    centred = gram.to(device="cpu", dtype=torch.float64)
    taus = steps.to(device="cpu", dtype=torch.float64)
    counts = counts.to(device="cpu")
    n, t = centred.shape[0], centred.shape[1]
    valid = torch.arange(t)[None, :] < steps.to("cpu")[:, None]  # (K, T)
    row = centred.sum(dim=2) / taus[:, None]  # r_j over the valid columns (padded entries are 0)
    centred = centred - row[:, :, None] - row[:, None, :] + (row.sum(dim=1) / taus)[:, None, None]
    sq_norms = centred.diagonal(dim1=1, dim2=2)  # ||z_bar_j||^2
    inner = torch.zeros(n, t, dtype=torch.float64)  # <s, z_bar_j>
    chosen = torch.zeros(n, t, dtype=torch.bool)
    slack = rtol * sq_norms.masked_fill(~valid, 0.0).amax(dim=1, keepdim=True).clamp_min(0.0)  # (K, 1)
    rows = torch.arange(n)
    for pick in range(int(counts.max()) if n else 0):
        score = (2.0 * inner + sq_norms).masked_fill(chosen | ~valid, math.inf)
        tied = score <= score.amin(dim=1, keepdim=True) + slack * (2 * pick + 1)
        j = torch.argmax(tied.to(torch.uint8), dim=1)  # first (near-)minimum: lowest index on ties
        live = counts > pick  # clients still picking
        chosen[rows, j] |= live
        inner += centred[rows, j] * live[:, None]
    return chosen


class BatchedHerding:
    """:class:`HerdingEstimator` for K clients: one (K, T, d) store (T = max tau_i), zero beyond each tau_i.

    Every tensor is made with the given dtype and device (those of the step directions); the (K, T, T) Gram
    matrices are one ``bmm``, the greedy selection is :func:`herd_select_batched` (or, given ``picks``, those steps).
    """

    def __init__(
        self,
        steps: Sequence[int],
        dim: int,
        alpha: float,
        lrs: Sequence[float],
        dtype: torch.dtype,
        device: Any,
        workspace: Workspace | None = None,
        picks: Sequence[list[int]] | None = None,
    ) -> None:
        steps = check_steps("BHerd", steps)
        self.steps, self.dim, self.alpha, self.lrs = steps, dim, alpha, list(lrs)
        self.picks = None if picks is None else [list(p) for p in picks]  # per client; None: herding chooses
        self._tau = torch.tensor(self.steps, device=device)
        shape = (len(self.steps), max(self.steps, default=0), dim)
        self._workspace = workspace or Workspace()
        self._flat = self._workspace.take(math.prod(shape), dtype, device)  # observe writes every column
        self._z: Tensor | None = self._flat[: math.prod(shape)].view(shape)
        self._observed: set[int] = set()
        self._seen = torch.zeros(len(self.steps), dtype=torch.int64, device=device)
        self._zero = torch.zeros((), dtype=dtype, device=device)

    def observe(self, step: int, directions: Tensor, active: Tensor) -> None:
        assert self._z is not None, "observe after finish"
        active = active.to(self._seen.device)
        copy_active_rows(self._z[:, step], directions, active, self._zero)  # inactive rows: zero padding
        self._observed.add(step)
        self._seen += active

    def finish(self, updates: Tensor) -> list[tuple[Tensor, dict[str, Tensor], dict[str, Any]]]:
        """Herd every client; per client ((lr/alpha) g_i, no extras, diagnostics), as :class:`HerdingEstimator`."""
        z, self._z = self._z, None  # the store goes back to the workspace below
        assert z is not None, "finish called twice"
        seen = self._seen.tolist()
        if seen != self.steps or len(self._observed) != z.shape[1]:
            raise RuntimeError(f"batched BHerd saw {seen} local steps, expected {self.steps}")
        element, t = z.element_size(), z.shape[1]
        estimates = torch.empty(len(self.steps), self.dim, dtype=updates.dtype, device=z.device)
        counts = [selected_count(self.alpha, tau_i) for tau_i in self.steps]
        # A block of clients at a time: on the CPU blocks whose stored rows stay in cache through each pass
        # below (one client at d = 100k), on an accelerator all of them at once. The greedy selection runs once
        # for every client of the chunk between the two passes (block by block, its per-pick work was per client).
        blocks = row_blocks(len(self.steps), (t + 2) * self.dim * element, z.device)
        means, grams = [], []
        for rows in blocks:
            means.append(self._centre(z[rows], rows))
            if self.picks is None:
                grams.append(torch.bmm(z[rows], z[rows].transpose(1, 2)))  # (B, T, T): the only O(B T^2 d) work
        if self.picks is None:
            chosen = herd_select_batched(torch.cat(grams), self._tau, torch.tensor(counts),
                                         tie_tolerance(z.dtype, self.dim))
        else:
            chosen = torch.zeros(len(self.steps), t, dtype=torch.bool)
            for n, picked in enumerate(self.picks):
                chosen[n, picked] = True
        distances: list[float] = []
        errors: list[float | None] = []
        for rows, mu in zip(blocks, means, strict=True):
            block_distances, block_errors = self._estimate(z[rows], rows, mu, chosen[rows], counts[rows],
                                                           estimates[rows], updates[rows])
            distances += block_distances
            errors += block_errors
        selected = [torch.nonzero(row).flatten().tolist() for row in chosen]
        self._workspace.give(self._flat)
        return [
            (
                estimates[i],
                {},
                {
                    "selected": selected[i],
                    "tau": tau_i,
                    "distance": distances[i],
                    "estimate_error": errors[i],
                    "memory_bytes": tau_i * self.dim * element,
                },
            )
            for i, tau_i in enumerate(self.steps)
        ]

    def _centre(self, z: Tensor, rows: slice) -> Tensor:
        """Centre the clients ``rows`` (their store z, (B, T, d)) in place, padding kept at zero; their means mu_i."""
        mu = z.sum(dim=1).div_(self._column([float(tau_i) for tau_i in self.steps[rows]], z))  # mu_i (Eq. 5)
        z.sub_(mu[:, None, :])
        if min(self.steps[rows]) < z.shape[1]:  # padding back to zero
            valid = torch.arange(z.shape[1], device=z.device)[None, :] < self._tau[rows, None]  # (B, T)
            z.masked_fill_(~valid[:, :, None], 0.0)
        return mu

    def _estimate(
        self, z: Tensor, rows: slice, mu: Tensor, chosen: Tensor, counts: list[int], out: Tensor, full: Tensor
    ) -> tuple[list[float], list[float | None]]:
        """The estimates of the clients ``rows`` (centred store z, means mu, selections ``chosen`` of ``counts`` steps)
        into ``out``; their distances to the local means and errors relative to their full updates ``full``.

        One (B, d) allocation (g): everything else is in place or in the store, since fresh large temporaries
        cost page faults on the CPU and count against ``chunk_bytes``.
        """
        steps, lrs = self.steps[rows], self.lrs[rows]
        mask = chosen.to(device=z.device, dtype=z.dtype)
        g = torch.bmm(mask[:, None, :], z).squeeze(1)  # sum of the selected centred rows
        g.addcmul_(mu, self._column([float(k) for k in counts], z))  # + k_i mu_i: the raw directions (Eq. 6)
        gap = torch.div(g, self._column([self.alpha * tau_i for tau_i in steps], z), out=z[:, 0]).sub_(mu)
        distances = torch.linalg.vector_norm(gap, dim=1).tolist()  # ||g_i/(alpha tau_i) - mu_i||
        out.copy_(g.mul_(self._column([lr / self.alpha for lr in lrs], z)))
        gap = z[:, 0].copy_(out).sub_(full)  # estimate - full update, in the store
        gaps = torch.linalg.vector_norm(gap, dim=1).tolist()
        bases = torch.linalg.vector_norm(full, dim=1).tolist()
        return distances, [relative(a, b) for a, b in zip(gaps, bases, strict=True)]

    @staticmethod
    def _column(values: list[float], like: Tensor) -> Tensor:
        return torch.tensor(values, dtype=like.dtype, device=like.device)[:, None]


@dataclass(frozen=True)
class BatchedHerdingFactory:
    """``Part.batched_estimator`` of :func:`bherd_selection`: builds :class:`BatchedHerding` for a chunk."""

    alpha: float
    selection: str = "herding"
    workspace: Workspace = field(default_factory=Workspace, compare=False, repr=False)  # the store, between rounds

    def __call__(
        self, contexts: Sequence[ClientContext], dim: int, dtype: torch.dtype, device: Any
    ) -> BatchedHerding:
        lrs = [ctx.info.lr for ctx in contexts]
        picks = None
        if self.selection == "random":
            picks = [random_subset(ctx, selected_count(self.alpha, ctx.steps)) for ctx in contexts]
        steps = [ctx.steps for ctx in contexts]
        return BatchedHerding(steps, dim, self.alpha, lrs, dtype, device, self.workspace, picks)

    def chunk_bytes(self, clients: int, steps: int, dim: int, dtype: torch.dtype) -> int:
        """The (K, T, d) store (kept for the next round), the (K, d) estimates and means, a block's (B, d) sum and
        the Gram matrices (with their float64 copies)."""
        element = torch.empty((), dtype=dtype).element_size()
        return clients * ((steps + 3) * dim * element + steps * steps * (element + 4 * 8) + SMALL_BYTES)


def bherd_selection(*, alpha: float = 0.5, selection: str = "herding") -> Part:
    """BHerd's update estimator: upload (eta/alpha) times the sum of the herded k_i of tau_i local directions.

    ``alpha = 0.5`` is the paper's recommended proportion (Section 2.3). ``selection="random"`` is the control:
    the same k_i steps chosen uniformly at random (:func:`random_subset`), the same eta/alpha. Diagnostics per
    client and round: ``selected`` (sorted 0-based step indices of the ``tau`` steps), ``distance`` =
    ||g_i/(alpha tau_i) - mu_i|| (Fig. 4d), ``estimate_error`` = ||(eta/alpha) g_i - eta sum_lambda z_lambda|| /
    ||eta sum_lambda z_lambda|| (the uploaded estimate against the full local update; 0.0 at alpha = 1; None
    when the full update is 0 but the estimate is not) and ``memory_bytes`` (the stored gradients, tau_i * d * 4
    for a float32 model).

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> compose("bherd-fedavg", bherd_selection(alpha=0.5), mean_aggregate()).name
        'bherd-fedavg'
    """
    if not 0 < alpha <= 1:
        raise ConfigError(f"bherd alpha must be in (0, 1], got {alpha}")
    if selection not in SELECTIONS:
        raise ConfigError(f"bherd selection must be one of {', '.join(SELECTIONS)}, got {shown(selection)}")

    def estimator(ctx: ClientContext, dim: int) -> Estimator:
        picks = random_subset(ctx, selected_count(alpha, ctx.steps)) if selection == "random" else None
        return HerdingEstimator(ctx.steps, dim, alpha, ctx.info.lr, picks)

    return Part(name="bherd", estimator=estimator, batched_estimator=BatchedHerdingFactory(alpha, selection))
