"""GraB-FedAvg: online gradient balancing picks the local steps (paper 000, Algorithm 4).

The BHerd paper's baseline replaces offline herding by the online balancing of GraB (Lu et al.,
"GraB: Finding Provably Better Data Permutations than Random Reshuffling", NeurIPS 2022), so nothing but
three d-vectors is stored. Per client and round, with m = s = g = 0, at every local step lambda:

    m += z_lambda / tau_i;  c = z_lambda - m
    if ||s + c|| < ||s - c||:  s += c;  g += z_lambda   (the step is kept)
    else:                      s -= c

Note that m is the running sum divided by tau_i (not the running mean), as the paper writes it. The
comparison is evaluated as ``<s, c> < 0``, the same test (||s+c||^2 - ||s-c||^2 = 4<s, c>) without the
cancellation of two norms.

The client uploads ``eta g_i`` and alpha_i = (#kept) / tau_i; the server rescales every update by
1/alpha_t, alpha_t = sum_i p_i alpha_i (p renormalised over the uploaders), so the weighted mean gives
``w_{t+1} = w_t - (eta/alpha_t) sum_i p_i g_i``. If no client kept a step (alpha_t = 0) every update is zero
and is left as it is.

Two variants (``grab_selection(variant=...)``):

- ``"paper"`` (default): Algorithm 4 exactly as above. Two flaws: (a) client side, the strict test at s = 0
  is a tie, so the first step is never kept (a client with tau_i = 1 keeps nothing); (b) server side, one
  global 1/alpha_t scales every client, so a client that kept few steps is under-scaled and one that kept
  many over-scaled: eta g_i / alpha_t estimates no client's own update.
- ``"fixed"``: (a) a tie keeps the step (``<s, c> <= 0``), so the first step is always kept and alpha_i > 0;
  (b) the server scales each client by its own 1/alpha_i, so every update is eta g_i / alpha_i, an estimate
  of that client's full update eta sum_lambda z_lambda (as BHerd's eta/alpha).

Diagnostic ``estimate_error`` = ||a_i eta g_i - eta sum_lambda z_lambda|| / ||eta sum_lambda z_lambda||, a_i the
scale the server applies (1/alpha_t in "paper", 1/alpha_i in "fixed", 1 when it leaves the update as it is):
the update the server aggregates against the full local update. The client cannot know alpha_t, so it sends
four scalars in its diagnostics (with r = eta g_i / alpha_i - full: ||r||^2, <r, eta g_i>, ||eta g_i||^2,
||full||^2) and the server expands ||r + (a_i - 1/alpha_i) eta g_i||^2 from them (exact in "fixed", where
a_i = 1/alpha_i) and replaces them by ``estimate_error``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientContext, ClientUpdate, Estimator, Part, RoundInfo, State
from fedaccel.algorithms.batched import SMALL_BYTES, Workspace, check_steps, copy_active_rows, relative, row_blocks
from fedaccel.algorithms.mean import renormalised_weights
from fedaccel.errors import ConfigError, shown

VARIANTS = ("paper", "fixed")
# What a client's diagnostics carry for the server's estimate_error (see the module docstring), removed there.
ERROR_TERMS = ("error_residual_sq", "error_cross", "error_estimate_sq", "error_update_sq")


def error_terms(residual: Tensor, estimate: Tensor, full: Tensor) -> Tensor:
    """(K, 4) float64: per row ||r||^2, <r, e>, ||e||^2, ||f||^2 for (K, d) (or (d,)) residual r, estimate e, full f."""
    rows = [torch.linalg.vecdot(a, b) for a, b in ((residual, residual), (residual, estimate), (estimate, estimate),
                                                    (full, full))]
    return torch.stack(rows, dim=-1).to(torch.float64).reshape(-1, 4)


def base_scale(alpha_i: float) -> float:
    """1/alpha_i, the scale the client's residual is taken at (0 when it kept nothing: its estimate is 0)."""
    return 1.0 / alpha_i if alpha_i > 0 else 0.0


def scaled_error(diag: dict[str, Any], alpha_i: float, scale: float) -> float | None:
    """||scale e - f|| / ||f|| from a client's :data:`ERROR_TERMS` (its residual is at :func:`base_scale`)."""
    r2, cross, e2, f2 = (float(diag[k]) for k in ERROR_TERMS)
    shift = scale - base_scale(alpha_i)
    gap_sq = max(0.0, r2 + 2.0 * shift * cross + shift * shift * e2)
    return relative(gap_sq**0.5, f2**0.5)


class BalancingEstimator:
    """GraB's online balancing over one client-round: three d-vectors, no stored gradients.

    The vectors are created at the first step like the step direction (the model's dtype and device).
    """

    def __init__(
        self, steps: int, dim: int, lr: float, keep_ties: bool = False, stale: Tensor | None = None,
        centre: str = "running",
    ) -> None:
        self.steps, self.dim, self.lr, self.keep_ties = steps, dim, lr, keep_ties
        self.centre, self.stale = centre, stale  # "stale": c = z - (the client's previous mean; 0 at first)
        self.m: Tensor | None = None  # running sum of z / tau_i (the next stale mean once all steps are seen)
        self.s: Tensor | None = None  # signed sum of centred directions
        self.g: Tensor | None = None  # sum of kept raw directions
        self.kept: list[int] = []

    @property
    def next_state(self) -> Tensor | None:
        """With ``centre="stale"``: this round's mean direction, the next round's centre."""
        return self.m

    def observe(self, step: int, direction: Tensor) -> None:
        if self.m is None or self.s is None or self.g is None:
            self.m, self.s, self.g = (torch.zeros_like(direction) for _ in range(3))
        self.m.add_(direction, alpha=1.0 / self.steps)
        if self.centre == "running":
            c = direction - self.m
        else:
            c = direction if self.stale is None else direction - self.stale
        inner = float(torch.dot(self.s, c))
        if inner < 0.0 or (self.keep_ties and inner == 0.0):  # ||s + c|| < ||s - c|| (or = with keep_ties)
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
        diag: dict[str, Any] = {"selected": list(self.kept), "tau": self.steps, "alpha": alpha_i}
        diag["memory_bytes"] = memory
        residual = estimate * base_scale(alpha_i) - full_update
        diag.update(zip(ERROR_TERMS, error_terms(residual, estimate, full_update)[0].tolist(), strict=True))
        return estimate, {"alpha": full_update.new_tensor([alpha_i])}, diag


PER_CLIENT_DIM = 3000  # on the CPU, from this many parameters on each row runs the per-client code: 50 clients of
# 120 steps, the blocks took 0.36, 0.88, 1.42 and 2.60 times the per-client code fed step by step (as the stacked
# runtime feeds it) at d = 785, 2,000, 4,000 and 7,850


class BatchedBalancing:
    """:class:`BalancingEstimator` for K clients: m, s, g as (K, d) matrices and a (K, T) record of the kept steps.

    The sign choice is one row-wise dot product and ``torch.where`` per step, for every client at once;
    inactive rows (clients past their tau_i) are left as they are. Tensors follow the given dtype and device.
    On the CPU, from :data:`PER_CLIENT_DIM` parameters on, each row is one :class:`BalancingEstimator` fed step
    by step: there a row's vectors no longer share a cache-sized block with other rows', and the per-client code,
    which makes fewer passes over them, is faster (``benchmarks/batched_estimators.py --clients 50 --tau 120``).
    """

    def __init__(
        self,
        steps: Sequence[int],
        dim: int,
        lrs: Sequence[float],
        dtype: torch.dtype,
        device: Any,
        workspace: Workspace | None = None,
        keep_ties: bool = False,
    ) -> None:
        steps = check_steps("GraB", steps)
        self.steps, self.dim, self.lrs, self.keep_ties = steps, dim, list(lrs), keep_ties
        self._clients: list[BalancingEstimator] | None = None
        if torch.device(device).type == "cpu" and dim >= PER_CLIENT_DIM:
            self._clients = [BalancingEstimator(tau, dim, lr, keep_ties) for tau, lr in zip(steps, self.lrs)]
            self._fed = [0] * len(steps)  # steps each row was given, checked at finish as the batched form checks
            return
        n = len(self.steps)
        self._workspace = workspace or Workspace()
        self._flat = self._workspace.take(5 * n * dim, dtype, device)
        self.m, self.s, self.g, self._z, self._c = self._flat[: 5 * n * dim].view(5, n, dim).unbind(0)
        self._flat[: 3 * n * dim].zero_()  # m, s, g; z and c are per-step buffers
        self._inv_tau = torch.tensor([[1.0 / tau] for tau in self.steps], dtype=dtype, device=device)
        self._kept = torch.zeros(n, max(self.steps, default=0), dtype=torch.bool, device=device)
        self._seen = torch.zeros(n, dtype=torch.int64, device=device)
        self._zero = torch.zeros((), dtype=dtype, device=device)
        element = self.m.element_size()
        self._blocks = row_blocks(n, 6 * dim * element, device)  # rows of m, s, g, z, c and the directions

    def observe(self, step: int, directions: Tensor, active: Tensor) -> None:
        if self._clients is not None:
            for i in active.nonzero().flatten().tolist():
                self._clients[i].observe(step, directions[i])
                self._fed[i] += 1
            return
        # Every (K, d) result goes to a preallocated buffer (fresh large tensors cost page faults on the CPU),
        # a block of rows at a time (on the CPU, blocks that stay in cache; one block on an accelerator).
        on = active.to(self._seen.device)[:, None]
        on_float = on.to(self.m.dtype)
        for rows in self._blocks:
            m, s, g = self.m[rows], self.s[rows], self.g[rows]
            z = copy_active_rows(self._z[rows], directions[rows], on[rows, 0], self._zero)  # inactive rows: 0
            m.addcmul_(z, self._inv_tau[rows])
            c = torch.addcmul(z, m, on_float[rows], value=-1.0, out=self._c[rows])  # z - m; inactive rows: 0
            inner = torch.linalg.vecdot(s, c)[:, None]
            keep = inner <= 0.0 if self.keep_ties else inner < 0.0  # ||s + c|| < ||s - c||, row by row
            keep &= on[rows]  # an inactive row's c = 0 ties: never a kept step
            s.addcmul_(c, keep.to(c.dtype) * 2.0 - 1.0)  # s + c or s - c, exactly
            g.add_(torch.where(keep, z, self._zero, out=z))
            self._kept[rows, step] = keep[:, 0]
        self._seen += on[:, 0]

    def finish(self, updates: Tensor) -> list[tuple[Tensor, dict[str, Tensor], dict[str, Any]]]:
        """Per client (eta g_i, {"alpha": [alpha_i]}, diagnostics), as :class:`BalancingEstimator`."""
        if self._clients is not None:
            if self._fed != self.steps:
                raise RuntimeError(f"batched GraB saw {self._fed} local steps, expected {self.steps}")
            return [client.finish(updates[i]) for i, client in enumerate(self._clients)]
        seen = self._seen.tolist()
        if seen != self.steps:
            raise RuntimeError(f"batched GraB saw {seen} local steps, expected {self.steps}")
        lrs = torch.tensor([[lr] for lr in self.lrs], dtype=self.g.dtype, device=self.g.device)
        kept = self._kept.cpu()
        alphas = [int(kept[i].sum()) / tau for i, tau in enumerate(self.steps)]
        scales = torch.tensor([[base_scale(a)] for a in alphas], dtype=self._c.dtype, device=self._c.device)
        estimates = torch.empty(self.g.shape, dtype=updates.dtype, device=self.g.device)
        parts = []
        for rows in self._blocks:  # a block of rows at a time, as observe: on the CPU its five passes stay in cache
            estimate = torch.mul(self.g[rows], lrs[rows]).to(updates.dtype)
            estimates[rows] = estimate
            residual = self._c[rows].copy_(estimate).mul_(scales[rows]).sub_(updates[rows])  # the step buffer's rows
            parts.append(error_terms(residual, estimate, updates[rows]))
        terms = torch.cat(parts).tolist()
        self._workspace.give(self._flat)
        memory = 3 * self.dim * self.g.element_size()
        out = []
        for i, tau in enumerate(self.steps):
            selected = torch.nonzero(kept[i]).flatten().tolist()
            alpha_i = alphas[i]
            diag: dict[str, Any] = {"selected": selected, "tau": tau, "alpha": alpha_i, "memory_bytes": memory}
            diag.update(zip(ERROR_TERMS, terms[i], strict=True))
            out.append((estimates[i], {"alpha": updates.new_tensor([alpha_i])}, diag))
        return out


@dataclass(frozen=True)
class BatchedBalancingFactory:
    """``Part.batched_estimator`` of :func:`grab_selection`: builds :class:`BatchedBalancing` for a chunk."""

    keep_ties: bool = False
    workspace: Workspace = field(default_factory=Workspace, compare=False, repr=False)  # the vectors, between rounds

    def __call__(
        self, contexts: Sequence[ClientContext], dim: int, dtype: torch.dtype, device: Any
    ) -> BatchedBalancing:
        lrs = [ctx.info.lr for ctx in contexts]
        steps = [ctx.steps for ctx in contexts]
        return BatchedBalancing(steps, dim, lrs, dtype, device, self.workspace, self.keep_ties)

    def chunk_bytes(self, clients: int, steps: int, dim: int, dtype: torch.dtype) -> int:
        """m, s, g and two step buffers (kept for the next round), the (K, d) estimates, the (K, T) record, and
        the (K, d) product that ``torch.linalg.vecdot`` makes on CUDA (measured on an H200: 7 (K, d), not 6)."""
        element = torch.empty((), dtype=dtype).element_size()
        return clients * (7 * dim * element + steps + SMALL_BYTES)


TIES = ("strict", "keep")


CENTRES = ("running", "stale")


def grab_selection(*, variant: str = "paper", ties: str | None = None, centre: str = "running") -> Part:
    """GraB online selection on the client plus the server's 1/alpha_t rescaling (Algorithm 4).

    ``variant="fixed"`` keeps ties (the first step) and rescales each client by its own 1/alpha_i (module
    docstring). ``ties`` overrides the variant's tie rule: ``"strict"`` (a tie is not kept, Algorithm 4) or
    ``"keep"`` (a tie counts as +1, as GraB's reference code ``deterministic_balance`` does). ``centre``: the
    vector each direction is centred on, ``"running"`` (m, Algorithm 4) or ``"stale"`` (the mean direction of
    the client's previous round, 0 in its first, as GraB's ``MeanBalance``; kept as client state, so the
    stacked runtime trains these clients one after another).

    Diagnostics per client and round: ``selected`` (0-based kept steps of the ``tau``), ``alpha`` (alpha_i),
    ``estimate_error`` (the rescaled upload against the full local update; None if that is 0 and the upload is
    not) and ``memory_bytes`` (the three d-vectors).

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> compose("grab-fedavg", grab_selection(), mean_aggregate()).name
        'grab-fedavg'
    """

    if variant not in VARIANTS:
        raise ConfigError(f"grab variant must be one of {', '.join(VARIANTS)}, got {shown(variant)}")
    if ties is not None and ties not in TIES:
        raise ConfigError(f"grab ties must be one of {', '.join(TIES)} (or null: the variant's), got {shown(ties)}")
    if centre not in CENTRES:
        raise ConfigError(f"grab centre must be one of {', '.join(CENTRES)}, got {shown(centre)}")
    fixed = variant == "fixed"
    keep_ties = fixed if ties is None else ties == "keep"

    def estimator(ctx: ClientContext, dim: int, cs: State = None, *_: Any) -> Estimator:
        return BalancingEstimator(ctx.steps, dim, ctx.info.lr, keep_ties=keep_ties, stale=cs, centre=centre)

    def same_order(ctx: ClientContext, cs: State, default: Any) -> Any:
        return default  # only so that the engine hands the estimator its state (the stale mean)

    def server_adjust(info: RoundInfo, updates: Sequence[ClientUpdate], ss: State) -> list[ClientUpdate]:
        if not updates:
            return list(updates)
        alphas = [float(u.extras["alpha"]) for u in updates]
        if fixed:
            divisors = alphas  # each client its own alpha_i
        else:
            alpha_t = sum(pk * a for pk, a in zip(renormalised_weights(updates), alphas, strict=True))
            divisors = [alpha_t] * len(updates)
        out = []
        for u, alpha_i, divisor in zip(updates, alphas, divisors, strict=True):
            if divisor <= 0.0:  # nothing kept: the update is zero and stays as it is
                out.append(replace(u, diag=with_error(u.diag, alpha_i, 1.0)))
            else:
                out.append(replace(u, delta=u.delta / divisor, diag=with_error(u.diag, alpha_i, 1.0 / divisor)))
        return out

    if centre == "stale":
        return Part(name="grab", estimator=estimator, order=same_order, server_adjust=server_adjust)
    return Part(
        name="grab",
        estimator=estimator,
        batched_estimator=BatchedBalancingFactory(keep_ties=keep_ties),
        server_adjust=server_adjust,
    )


def with_error(diag: dict[str, Any], alpha_i: float, scale: float) -> dict[str, Any]:
    """A client's diagnostics with its :data:`ERROR_TERMS` replaced by ``estimate_error`` at the applied ``scale``."""
    if not all(k in diag for k in ERROR_TERMS):
        return diag
    kept = {k: v for k, v in diag.items() if k not in ERROR_TERMS}
    return {**kept, "estimate_error": scaled_error(diag, alpha_i, scale)}
