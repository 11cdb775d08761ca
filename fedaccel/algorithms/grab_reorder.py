"""GraB's own algorithm in FL (recipe ``grab-reorder``): balancing orders the client's next epoch.

GraB (Lu et al., NeurIPS 2022; reference code EugeneLYC/GraB, ``src/orderedsampler/sorter/meanbalance.py``)
does not drop steps: every local step is taken, and the signs of the online balancing decide the order of
the examples in the *next* epoch. Here the unit is a mini-batch (GraB's ``per_batch_order``) and an epoch
is a client's pass over its data in one round. Per client and round, with the stale mean m (the mean
direction of the balanced steps of the client's previous round; none in its first), s = 0, and the steps k
of the first pass over the order (batch k = positions [kB, (k+1)B) of this round's order):

    c = z_k - m;   sign_k = +1 if ||s + c|| <= ||s - c|| else -1   (a tie counts +1, as the reference)
    s += sign_k c

The next round's order puts the +1 batches first, in the order they were seen, the -1 batches last, in
reverse, and whatever was not balanced (a last partial batch, or batches past the round's steps) in
between, in its order (the reference's ``first_idx`` / ``last_idx``). The model update is the plain local
update, aggregated by FedAvg's mean: no subset, no 1/alpha. ``train.order`` gives only the first round's
order. The mean m is that of the raw directions (the paper's stale mean; the reference's
``next_mean_estimator`` adds the already-centred vectors, ``meanbalance.py:70,73``).

State per client: :class:`ReorderState` (its order as sample indices and m), None before it first trains;
the stacked runtime trains these clients one after another (the order comes from each client's state).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientContext, Part


@dataclass(frozen=True)
class ReorderState:
    """A client's GraB ordering: the sample order of its next round and the stale mean direction."""

    order: tuple[int, ...]  # sample indices (plain integers: model tensors alone follow the run's dtype and device)
    mean: Tensor | None = None


def balanced_order(order: np.ndarray, batch_size: int, signs: Sequence[int]) -> np.ndarray:
    """The order GraB derives from the signs of the first ``len(signs)`` batches of ``order``.

    Example:
        >>> balanced_order(np.arange(7), 2, [1, -1, 1]).tolist()  # batches (0 1) (2 3) (4 5), 6 unbalanced
        [0, 1, 4, 5, 6, 2, 3]
    """
    size = min(batch_size, len(order))
    blocks = [order[k * size : (k + 1) * size] for k in range(len(signs))]
    front = [b for b, sign in zip(blocks, signs) if sign > 0]
    back = [b for b, sign in zip(blocks, signs) if sign <= 0][::-1]
    middle = order[len(signs) * size :]
    return np.concatenate([*front, middle, *back]) if len(order) else order


class ReorderBalancing:
    """Watches one client-round's step directions; leaves the next round's order and mean in ``next_state``."""

    def __init__(self, state: ReorderState | None, order: np.ndarray, batches: Sequence[np.ndarray]) -> None:
        self.order = np.asarray(order)
        self.size = len(batches[0]) if len(batches) else 1
        self.balanced = min(len(batches), len(self.order) // self.size)  # the first pass's whole batches
        self.mean = None if state is None else state.mean
        self.s: Tensor | None = None
        self.total: Tensor | None = None
        self.signs: list[int] = []
        self.next_state: ReorderState | None = state

    def observe(self, step: int, direction: Tensor) -> None:
        if step >= self.balanced:
            return
        if self.s is None or self.total is None:
            self.s, self.total = torch.zeros_like(direction), torch.zeros_like(direction)
        c = direction if self.mean is None else direction - self.mean.to(direction)
        sign = 1 if float(torch.dot(self.s, c)) <= 0.0 else -1  # ||s + c|| <= ||s - c||
        self.s.add_(c, alpha=sign)
        self.total.add_(direction)
        self.signs.append(sign)

    def finish(self, full_update: Tensor) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        """The full update unchanged; the next order and mean go to ``next_state``."""
        order = balanced_order(self.order, self.size, self.signs)
        mean = None if self.total is None else self.total / len(self.signs)
        self.next_state = ReorderState(tuple(int(i) for i in order), mean)
        return full_update, {}, {"front": sum(1 for s in self.signs if s > 0), "balanced": len(self.signs)}


def grab_reordering() -> Part:
    """GraB's ordering of each client's samples (module docstring); compose with ``mean_aggregate()``.

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> compose("grab-reorder", grab_reordering(), mean_aggregate()).name
        'grab-reorder'
    """

    def order(ctx: ClientContext, cs: ReorderState | None, default: np.ndarray) -> np.ndarray:
        return default if cs is None else np.asarray(cs.order, dtype=np.int64)

    def estimator(ctx: ClientContext, dim: int, cs: ReorderState | None, order_: np.ndarray,
                  batches: Sequence[np.ndarray]) -> ReorderBalancing:
        return ReorderBalancing(cs, order_, batches)

    return Part(name="grab-reorder", order=order, estimator=estimator)
