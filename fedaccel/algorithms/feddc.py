"""FedDC: local drift decoupling and correction (Gao et al., "FedDC: Federated Learning with Non-IID
Data via Local Drift Decoupling and Correction", CVPR 2022), as in its reference code
(gaoliang13/FedDC, ``utils_methods_FedDC.train_FedDC`` and ``train_model_FedDC``).

Client i keeps a drift h_i and a gradient correction G_i; the server a global correction G.
With ``w~_i = N p_i`` and ``alpha_i = alpha / w~_i`` the client minimises
``f_i(theta) + (alpha_i / 2) ||theta - (w - h_i)||^2 + <theta, G / w~_i - G_i>``, i.e. every local
step adds ``alpha_i (theta - w + h_i) + G / w~_i - G_i`` to the mini-batch gradient. After
training, with ``Delta_i = theta_i - w``:

- ``h_i += Delta_i``;
- ``G_i+ = G_i - G / w~_i - (theta_i - theta_start) / (tau_i eta_t)``, uploaded as
  ``dG_i = G_i+ - G_i``;
- server: ``G += (1/N) sum_{i in S_t} w~_i dG_i`` and
  ``w_next = (aggregate of the uploaded theta_i) + (1/N) sum_{all N} h_i``.

Choices (also in ``docs/algorithms/fedumf.md``):

- As in the reference: the drift mean is over all N clients (never-selected ones count as zero);
  the G update sums over the uploading clients only and divides by N; its client weights are
  w~_i; the reference aggregates theta_i with the unweighted mean (recipe ``feddc`` uses
  ``mean_aggregate(weighting="uniform")``); weight decay stays the optimiser's (the engine adds it
  after this term, which is the same gradient).
- The reference's ``1/(K eta)`` uses one nominal K for every client (epochs x the *average*
  client's batches per epoch) and the *initial* learning rate even when it decays per round;
  by default K is the client's own tau_i and eta is this round's eta_t (the step size the trajectory
  was actually taken with). They agree on equal-size clients without decay; ``control_lr="initial"``
  and ``control_steps="shared"`` give the reference's (:mod:`fedaccel.algorithms.control_step`).
- ``dG_i`` is uploaded with the model (bytes counted); the mean drift is tracked from the uploaded
  updates (``Delta_i = -delta_i``), so it costs nothing extra. Only clients whose update reaches
  the server change h_i and G_i (with FedUMF, unauthorised clients train with the correction
  terms but keep their state), so the server's G and mean drift stay consistent with the clients'.
- With a fused start (FedUMF) the drift is taken against the global model (``theta_i - w``, what
  the server sees), the gradient correction from the real trajectory (``theta_i - theta_start``,
  tau_i steps of step size eta_t); without fusion both are the same.
- The reference clips the whole gradient (data + FedDC terms) at norm 10; here ``train.clip``,
  when set, clips the data gradient before the terms are added.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientContext, ClientUpdate, LocalTerm, Part, RoundInfo
from fedaccel.algorithms.control_step import check_control, control_scale
from fedaccel.errors import ConfigError

DG = "feddc_dG"  # the name of the uploaded gradient-correction delta


@dataclass(frozen=True)
class FedDCServer:
    """The server's FedDC state."""

    mean_drift: Tensor  # (1/N) sum over all clients of h_i
    correction: Tensor  # G


@dataclass(frozen=True)
class FedDCClient:
    """A client's FedDC state (None: still zero, never uploaded)."""

    drift: Tensor | None = None  # h_i
    correction: Tensor | None = None  # G_i


def feddc(*, alpha: float = 0.01, control_lr: str = "current", control_steps: str = "client") -> Part:
    """FedDC's local terms, client drift and correction, and the server's G and drift correction.

    ``alpha = 0.01`` as in the FedDC reference code and the FedUMF paper's Table A1.

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> algorithm = compose("feddc", feddc(alpha=0.01), mean_aggregate(weighting="uniform"))
        >>> algorithm.parts[0].name
        'feddc'
    """
    if not alpha >= 0:
        raise ConfigError(f"feddc alpha must be >= 0, got {alpha}")
    check_control("feddc", control_lr, control_steps)

    def scale(info: RoundInfo, client: int) -> float:
        return info.n_clients * float(info.weights[client])  # w~_i = N p_i

    def init_server(w0: Tensor) -> FedDCServer:
        return FedDCServer(torch.zeros_like(w0), torch.zeros_like(w0))

    def init_client(w0: Tensor) -> FedDCClient:
        return FedDCClient()

    def broadcast(ss: FedDCServer) -> dict[str, Tensor]:
        return {"feddc_G": ss.correction}  # clients need G for their local term

    def local_term(ctx: ClientContext, w: Tensor, ss: FedDCServer, cs: FedDCClient) -> LocalTerm:
        w_i = scale(ctx.info, ctx.client)
        a = alpha / w_i
        # grad += a theta + [a (h_i - w) + G / w~_i - G_i]; the bracket is fixed during the round
        constant = torch.mul(w, -a).add_(ss.correction, alpha=1.0 / w_i)
        if cs.drift is not None:
            constant.add_(cs.drift, alpha=a)
        if cs.correction is not None:
            constant.sub_(cs.correction)

        def add_correction(theta: Tensor, grad: Tensor) -> None:
            grad.add_(theta, alpha=a).add_(constant)

        return add_correction

    def batched_local_term(contexts: Sequence[ClientContext], w: Tensor, ss: FedDCServer, css: list) -> LocalTerm:
        scales = [scale(c.info, c.client) for c in contexts]
        a = torch.tensor([[alpha / s] for s in scales], dtype=w.dtype, device=w.device)  # (K, 1)
        rows = []
        for s, cs in zip(scales, css):  # the bracket of local_term, one row per client
            row = torch.mul(w, -alpha / s).add_(ss.correction, alpha=1.0 / s)
            if cs.drift is not None:
                row.add_(cs.drift, alpha=alpha / s)
            if cs.correction is not None:
                row.sub_(cs.correction)
            rows.append(row)
        constant = torch.stack(rows)

        def add_correction(theta: Tensor, grad: Tensor) -> None:
            grad.addcmul_(theta, a).add_(constant)

        return add_correction

    def client_end(
        ctx: ClientContext, w: Tensor, theta0: Tensor, theta_end: Tensor, ss: FedDCServer, cs: FedDCClient
    ) -> tuple[FedDCClient, dict[str, Tensor]]:
        if not ctx.uploads:
            return cs, {}
        drift = theta_end - w
        if cs.drift is not None:
            drift = drift + cs.drift
        step = control_scale(ctx, control_lr, control_steps)  # 1 / (tau_i eta_t), or 1 / (K eta_0)
        # dG_i = G_i+ - G_i = -G / w~_i - (theta_end - theta0) / (tau_i eta_t)
        d_correction = torch.sub(theta_end, theta0).mul_(-step)
        d_correction.sub_(ss.correction, alpha=1.0 / scale(ctx.info, ctx.client))
        correction = d_correction if cs.correction is None else cs.correction + d_correction
        return FedDCClient(drift, correction), {DG: d_correction}

    def server_end(
        info: RoundInfo, w: Tensor, w_next: Tensor, updates: Sequence[ClientUpdate], ss: FedDCServer
    ) -> tuple[Tensor, FedDCServer]:
        n = info.n_clients
        mean_drift, correction = ss.mean_drift.clone(), ss.correction.clone()
        for u in updates:
            mean_drift.sub_(u.delta, alpha=1.0 / n)  # h_i += theta_i - w = -delta_i
            correction.add_(u.extras[DG], alpha=scale(info, u.client) / n)
        return w_next + mean_drift, FedDCServer(mean_drift, correction)

    return Part(
        name="feddc",
        init_server=init_server,
        init_client=init_client,
        local_term=local_term,
        batched_local_term=batched_local_term,
        client_end=client_end,
        server_end=server_end,
        broadcast=broadcast,
    )
