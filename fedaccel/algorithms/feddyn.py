"""FedDyn: a dynamic regulariser per client (Acar et al., "Federated Learning Based on Dynamic
Regularization", ICLR 2021), as run in the FedDC reference code (gaoliang13/FedDC, ``train_FedDyn``).

Client i keeps h_i, the sum of its past drifts theta_i - w (zero at first). It minimises
``f_i(theta) + alpha_i <theta, h_i> + (alpha_i / 2) ||theta - w||^2`` with
``alpha_i = alpha / w~_i`` and ``w~_i = N p_i`` (p_i its data share), so every local step adds
``alpha_i (theta - w + h_i)`` to the mini-batch gradient. After training, ``h_i += theta_i - w``.
The server keeps hbar = (1/N) sum over *all* N clients of h_i and sets
``w_next = (aggregate of the uploaded theta_i) + hbar``; the reference's aggregate is the
unweighted mean over S_t (recipe ``feddyn`` uses ``mean_aggregate(weighting="uniform")``).

Details taken from the reference where the paper is vague (also in ``docs/algorithms.md``):

- hbar is averaged over all N clients, never-selected ones counting as zero, not over S_t.
- Weight decay is separate from alpha: the reference gives SGD ``weight_decay = alpha_i + wd`` and
  a linear loss term ``alpha_i <theta, h_i - w>``, whose gradient is exactly
  ``alpha_i (theta - w + h_i) + wd theta`` - the term here plus the engine's weight decay.
- The server tracks hbar from the uploaded updates (theta_i - w = -delta_i): FedDyn uploads
  nothing but the model, so no extra bytes. Only clients whose update reaches the server change
  h_i (with FedUMF, unauthorised clients train with the term but keep h_i as it is), so every h_i
  and hbar stay consistent.
- The reference clips the whole gradient (data + FedDyn term) at norm 10; here ``train.clip``,
  when set, clips the data gradient before the term is added.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientContext, ClientUpdate, LocalTerm, Part, RoundInfo, State
from fedaccel.errors import ConfigError


def client_alpha(alpha: float, info: RoundInfo, client: int) -> float:
    """alpha_i = alpha / w~_i with w~_i = N p_i (1 for equal client sizes)."""
    return alpha / (info.n_clients * float(info.weights[client]))


def feddyn(*, alpha: float = 0.01) -> Part:
    """FedDyn's local term, client drift h_i and server correction ``w += mean_all h_i``.

    ``alpha = 0.01`` as in the FedDC reference code and the FedUMF paper's Table A1.

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> algorithm = compose("feddyn", feddyn(alpha=0.01), mean_aggregate(weighting="uniform"))
        >>> algorithm.parts[0].name
        'feddyn'
    """
    if not alpha >= 0:
        raise ConfigError(f"feddyn alpha must be >= 0, got {alpha}")

    def init_server(w0: Tensor) -> Tensor:
        return torch.zeros_like(w0)  # hbar = (1/N) sum_i h_i

    def init_client(w0: Tensor) -> Tensor | None:
        return None  # h_i = 0 until the client first uploads

    def local_term(ctx: ClientContext, w: Tensor, ss: State, h: Tensor | None) -> LocalTerm:
        a = client_alpha(alpha, ctx.info, ctx.client)
        anchor = -w if h is None else h - w  # grad += a (theta + h_i - w)

        def add_dynamic(theta: Tensor, grad: Tensor) -> None:
            grad.add_(theta, alpha=a).add_(anchor, alpha=a)

        return add_dynamic

    def batched_local_term(contexts: Sequence[ClientContext], w: Tensor, ss: State, hs: list) -> LocalTerm:
        a = torch.tensor([[client_alpha(alpha, c.info, c.client)] for c in contexts], dtype=w.dtype, device=w.device)
        anchor = torch.stack([-w if h is None else h - w for h in hs]).mul_(a)  # (K, d): a_k (h_k - w)

        def add_dynamic(theta: Tensor, grad: Tensor) -> None:
            grad.addcmul_(theta, a).add_(anchor)

        return add_dynamic

    def client_end(
        ctx: ClientContext, w: Tensor, theta0: Tensor, theta_end: Tensor, ss: State, h: Tensor | None
    ) -> tuple[Tensor | None, dict[str, Tensor]]:
        if not ctx.uploads:
            return h, {}
        drift = theta_end - w
        return (drift if h is None else h + drift), {}

    def server_end(
        info: RoundInfo, w: Tensor, w_next: Tensor, updates: Sequence[ClientUpdate], hbar: Tensor
    ) -> tuple[Tensor, Tensor]:
        hbar = hbar.clone()
        for u in updates:
            hbar.sub_(u.delta, alpha=1.0 / info.n_clients)  # h_i += theta_i - w = -delta_i
        return w_next + hbar, hbar

    return Part(
        name="feddyn",
        init_server=init_server,
        init_client=init_client,
        local_term=local_term,
        batched_local_term=batched_local_term,
        client_end=client_end,
        server_end=server_end,
    )
