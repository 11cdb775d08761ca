"""FedProx's proximal term (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020).

Each client minimises ``F_i(theta) + (mu/2) ||theta - w_t||^2`` instead of ``F_i(theta)``, which keeps
the local model near the global one ``w_t`` of this round. In local SGD that is one extra term at
every step: the mini-batch gradient z becomes ``z + mu (theta - w_t)``. ``mu = 0`` is FedAvg.

The term is added before weight decay and momentum (see :mod:`fedaccel.engine.local`), so with local
momentum it is part of what the momentum buffer accumulates, as in the reference PyTorch
implementations that add it to the loss.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from fedaccel.algorithms.base import ClientContext, LocalTerm, Part, State
from fedaccel.errors import ConfigError


def fedprox(*, mu: float = 0.01) -> Part:
    """The proximal local term ``grad += mu * (theta - w_t)``; ``mu = 0.01`` as in FedGSNR's Table 1.

    Example:
        >>> import torch
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> algorithm = compose("fedprox", fedprox(mu=0.1), mean_aggregate())
        >>> term = fedprox(mu=0.5).local_term(None, torch.zeros(2), None, None)
        >>> grad = torch.ones(2)
        >>> term(torch.tensor([2.0, -2.0]), grad)
        >>> grad.tolist()
        [2.0, 0.0]
    """
    if not mu >= 0:
        raise ConfigError(f"fedprox mu must be >= 0, got {mu}")

    def local_term(ctx: ClientContext, w: Tensor, ss: State, cs: State) -> LocalTerm:
        # Also for mu = 0 (adds exact zeros), so the mu = 0 ≡ FedAvg test runs this code.
        def add_proximal(theta: Tensor, grad: Tensor) -> None:
            grad.add_(theta - w, alpha=mu)

        return add_proximal

    def batched_local_term(contexts: Sequence[ClientContext], w: Tensor, ss: State, css: list) -> LocalTerm:
        def add_proximal(theta: Tensor, grad: Tensor) -> None:  # (K, d); w broadcasts over the rows
            grad.add_(theta - w, alpha=mu)

        return add_proximal

    return Part(name="fedprox", local_term=local_term, batched_local_term=batched_local_term)
