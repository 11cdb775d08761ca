"""SCAFFOLD's control variates, option II (Karimireddy et al., "SCAFFOLD: Stochastic Controlled
Averaging for Federated Learning", ICML 2020, Algorithm 1).

The server holds a control c, every client a control c_i (both zero at start; c_i is kept per
client across rounds). They estimate the global and the local gradient; the local step is corrected
by their difference so each client follows the global direction rather than drifting to its optimum:

    local step:   y <- y - eta (z - c_i + c)                      (the term c - c_i, added to z)
    client end:   c_i+ = c_i - c + (y_0 - y_end) / (tau_i eta)    (option II), upload dc_i = c_i+ - c_i
    server end:   c <- c + sum_{i in S} q_i dc_i

The model step ``x <- x + eta_g mean_S (y_i - x)`` is the mean aggregator with ``server_lr = eta_g``
(the ``scaffold`` recipe composes the two). Choices where the paper is silent or assumes equal
clients, written down here once:

- Weighting. ``weighting="data"`` (default, as the rest of fedaccel): the model mean is data-weighted
  (p renormalised over S) and q_i = p_i, which keeps c = sum_i p_i c_i, the gradient of the weighted
  objective. ``weighting="uniform"`` is the paper's algorithm exactly: uniform mean, q_i = 1/N. With
  equal client sizes the two coincide. ``weighting="reference"`` is what the reference code does
  (gaoliang13/FedDC ``utils_methods.train_SCAFFOLD``): a uniform model mean, data-weighted controls
  (q_i = p_i) and the local correction ``c / (N p_i) - c_i``; on equal clients it is ``uniform``.
- The step 1/(tau_i eta_t) of option II, or the reference code's 1/(K eta_0): options ``control_lr`` and
  ``control_steps`` (:mod:`fedaccel.algorithms.control_step`).
- The real trajectory. c_i+ uses ``theta0 - theta_end`` of the local run (theta0 = w_t unless a start
  part moves it), not an estimate of it: in BHerd-SCAFFOLD the herded update goes to the model step and
  the control variates still follow what the client actually did.
- A client whose update does not reach the server (FedUMF-style participation) keeps its c_i, so the
  server's c stays consistent with the clients' controls.
- The correction is a local term, added to the mini-batch gradient before weight decay and momentum
  (:mod:`fedaccel.engine.local`).

State: c is a d-vector; c_i is ``None`` (meaning 0) until client i first trains, then a d-vector.
Bytes: c is broadcast with the model (``broadcast``) and dc_i is uploaded with the update.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientContext, ClientUpdate, LocalTerm, Part, RoundInfo, State
from fedaccel.algorithms.control_step import check_control, control_scale
from fedaccel.errors import ConfigError, shown


WEIGHTINGS = ("data", "uniform", "reference")


def model_weighting(weighting: str) -> str:
    """The model mean's weighting that goes with the controls' ``weighting`` (the reference's is uniform)."""
    return "uniform" if weighting == "reference" else weighting


def scaffold(*, weighting: str = "data", control_lr: str = "current", control_steps: str = "client") -> Part:
    """SCAFFOLD's controls: the local correction c - c_i, the option-II client update and the server's c.

    Compose with ``mean_aggregate(server_lr=eta_g, weighting=model_weighting(weighting))``.

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> compose("scaffold", scaffold(), mean_aggregate(server_lr=1.0)).name
        'scaffold'
    """
    if weighting not in WEIGHTINGS:
        raise ConfigError(f"scaffold weighting must be one of {', '.join(WEIGHTINGS)}, got {shown(weighting)}")
    check_control("scaffold", control_lr, control_steps)

    def global_control(info: RoundInfo, client: int, ss: Tensor) -> Tensor:
        """c as the client's correction uses it: c, or the reference code's c / (N p_i)."""
        if weighting != "reference":
            return ss
        return ss / (info.n_clients * float(info.weights[client]))

    def zeros(w0: Tensor) -> Tensor:
        return torch.zeros_like(w0)

    def no_control_yet(w0: Tensor) -> None:
        return None  # c_i = 0 until the client first trains: no N x d zeros up front

    def broadcast(ss: State) -> dict[str, Tensor]:
        return {"c": ss}

    def local_term(ctx: ClientContext, w: Tensor, ss: State, cs: State) -> LocalTerm:
        c = global_control(ctx.info, ctx.client, ss)
        correction = c if cs is None else c - cs  # c - c_i, once per client-round

        def add_correction(theta: Tensor, grad: Tensor) -> None:
            grad.add_(correction)

        return add_correction

    def batched_local_term(contexts: Sequence[ClientContext], w: Tensor, ss: State, css: list) -> LocalTerm:
        controls = [global_control(ctx.info, ctx.client, ss) for ctx in contexts]
        correction = torch.stack([c if cs is None else c - cs for c, cs in zip(controls, css)])  # (K, d): c - c_i

        def add_correction(theta: Tensor, grad: Tensor) -> None:
            grad.add_(correction)

        return add_correction

    def client_end(
        ctx: ClientContext, w: Tensor, theta0: Tensor, theta_end: Tensor, ss: State, cs: State
    ) -> tuple[State, dict[str, Tensor]]:
        if not ctx.uploads:
            return cs, {}
        c_old = torch.zeros_like(ss) if cs is None else cs
        step = control_scale(ctx, control_lr, control_steps)  # 1 / (tau_i eta_t), or 1 / (K eta_0)
        c_new = c_old - ss + (theta0 - theta_end) * step  # option II
        return c_new, {"dc": c_new - c_old}

    def server_end_fold(info: RoundInfo, ss: State) -> ControlFold:
        return ControlFold(info, weighting, ss.clone())

    def server_end(
        info: RoundInfo, w: Tensor, w_next: Tensor, updates: Sequence[ClientUpdate], ss: State
    ) -> tuple[Tensor, State]:
        fold = server_end_fold(info, ss)
        for u in updates:
            fold.add(u)
        return fold.finish(w, w_next)

    return Part(
        name="scaffold",
        init_server=zeros,
        init_client=no_control_yet,
        broadcast=broadcast,
        local_term=local_term,
        batched_local_term=batched_local_term,
        client_end=client_end,
        server_end=server_end,
        server_end_fold=server_end_fold,
    )


@dataclass
class ControlFold:
    """The server's ``c <- c + sum_{i in S} q_i dc_i`` as a running sum (one d-vector), added upload by upload."""

    info: RoundInfo
    weighting: str
    c: Tensor

    def add(self, update: ClientUpdate) -> None:
        q = 1.0 / self.info.n_clients if self.weighting == "uniform" else float(self.info.weights[update.client])
        self.c.add_(update.extras["dc"], alpha=q)

    def finish(self, w: Tensor, w_next: Tensor) -> tuple[Tensor, State]:
        return w_next, self.c
