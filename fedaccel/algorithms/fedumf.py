"""FedUMF: unauthorised clients train too, and fuse their update when next authorised.

Li, Chen and Yu, "Model Fusion from Unauthorized Clients in Federated Learning",
Mathematics 10(20):3751, 2022, Algorithm 1. In words (paper notation -> ours):

- every round the server authorises S_t, |S_t| = M = max(1, round(C N)) clients, to upload;
  *all* N clients receive w_t (the paper's theta_t) and run their K local epochs;
- client i stores its update g_t^i = theta_{t+1}^i - theta_{t,0}^i (end minus its own start);
- a client authorised now but not in the previous round (i in S_t minus S_{t-1}) starts from
  theta_{t,0}^i = w_t + alpha (eta_t / eta_{t-1}) g_{t-1}^i: its unsent update is fused in;
- only authorised clients upload theta_{t+1}^i; the server averages them (any aggregator part,
  ``mean_aggregate`` for the paper's FedAvg step).

This module is the participation-and-fusion part; it composes with any local term (FedProx,
SCAFFOLD, FedDC) and aggregator. Choices where the paper is silent (also in
``docs/algorithms.md``):

- Round 0: the paper starts with S_0 = {} and g_0 = 0, so fusion in the first round adds zero;
  here a client with no stored update simply starts from w_t.
- A client unselected for several rounds fuses its *latest* stored update: all clients train
  every round, so that update is always from round t-1 (the paper's g_{t-1}). The
  learning-rate ratio uses the rate the stored update was computed with, which is eta_{t-1}.
- A stored update that went up (the client uploaded in the round it was computed) is never fused: where a
  part plans 0 steps for a client in a round (FedGSNR in ``fedgsnr-fedumf``), the client does not train, and its
  stored update may be one the server already averaged (with every client training every round, as in the
  paper, this changes nothing).
- The stored update is the end of the local trajectory minus the *fused* start, so a fused
  client's next stored update does not contain the fused part again (Algorithm 1, line 113).
- S_t is drawn exactly as FedAvg's sampling (:func:`~fedaccel.algorithms.sampling.sample_clients`,
  stream "sampling"): with the same seed and C, FedAvg and FedUMF authorise the same clients; a
  participation schedule (``train.participation``) fixes S_t for both alike.
- Under client-level DP (``algorithm.dp``) the part declares what keeps it inside the guarantee: its
  uploaders are FedAvg's sample at C (``upload_fraction``; fixed-size or Bernoulli) and its stored update never goes
  up (``no_extras``); the fused upload is clipped as a whole (:mod:`fedaccel.algorithms.dp`).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from fedaccel.algorithms.base import ClientContext, Part, Participation, RoundInfo, State
from fedaccel.algorithms.sampling import sample_clients
from fedaccel.errors import ConfigError


@dataclass(frozen=True)
class FedUMFClient:
    """A client's FedUMF state: its last local update and when it was last authorised."""

    update: Tensor | None = None  # g^i = theta_end - theta_start of the latest round it trained
    update_lr: float = 0.0  # the learning rate g^i was computed with
    authorised_round: int = -1  # the last round the client was in S_t (-1: never)
    sent: bool = False  # whether ``update`` itself went up (a round the client uploaded): never fused again


def fedumf(*, fraction: float = 0.1, alpha: float = 1.0) -> Part:
    """Everybody trains, a fraction C uploads; newly authorised clients fuse their stored update.

    ``fraction`` is C (|S_t| = max(1, round(C N))), ``alpha`` the fusion coefficient in (0, 1]
    (the paper's tables use alpha = 1).

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> algorithm = compose("fedumf", fedumf(fraction=0.1, alpha=1.0), mean_aggregate())
        >>> [p.name for p in algorithm.parts]
        ['fedumf', 'mean']
    """
    if not 0 < fraction <= 1:
        raise ConfigError(f"fedumf fraction C must be in (0, 1], got {fraction}")
    if not 0 < alpha <= 1:
        raise ConfigError(f"fedumf alpha must be in (0, 1], got {alpha}")

    def participation(info: RoundInfo) -> Participation:
        return Participation(train=tuple(range(info.n_clients)), upload=sample_clients(info, fraction))

    def init_client(w0: Tensor) -> FedUMFClient:
        return FedUMFClient()

    def start(ctx: ClientContext, w: Tensor, theta0: Tensor, ss: State, cs: FedUMFClient) -> Tensor:
        newly_authorised = ctx.uploads and cs.authorised_round != ctx.info.round - 1
        if not newly_authorised or cs.update is None or cs.sent:
            return theta0
        coefficient = alpha * ctx.info.lr / cs.update_lr
        return theta0.add(cs.update, alpha=coefficient)  # a new tensor: w is never touched

    def client_end(
        ctx: ClientContext, w: Tensor, theta0: Tensor, theta_end: Tensor, ss: State, cs: FedUMFClient
    ) -> tuple[FedUMFClient, dict[str, Tensor]]:
        authorised = ctx.info.round if ctx.uploads else cs.authorised_round
        state = FedUMFClient(theta_end - theta0, ctx.info.lr, authorised, sent=ctx.uploads)
        return state, {}  # the stored update stays on the client: nothing extra goes up

    return Part(
        name="fedumf",
        init_client=init_client,
        participation=participation,
        start=start,
        client_end=client_end,
        upload_fraction=fraction,  # who uploads is FedAvg's sampling at C: client-level DP's accountant checks it
        no_extras=True,
    )
