"""Which models a run scores (``eval.models``): the broadcast model and, on request, the client
models' means that the FedDyn and FedDC reference codes evaluate.

- ``broadcast``: the server's model w_{t+1}; its columns keep the plain names (``test_acc``, ...).
- ``client_mean``: the uniform mean of the end models ``theta_i = w_t - delta_i`` of the clients
  whose updates were aggregated in round t (alpemreacar/FedDyn ``utils_methods.py`` and
  gaoliang13/FedDC ``utils_methods_FedDC.py``: ``np.mean(clnt_params_list[selected_clnts])``).
- ``all_mean``: the uniform mean over all N clients of each one's latest end model, a client that
  never trained counting as the initial model (the references' ``clnt_params_list`` starts as N
  copies of it).

``eval.mean_weighting: data`` weights both means by the clients' data, p_i = |D_i| / sum |D_j| (renormalised
over the aggregated clients for ``client_mean``), as gaoliang13/FedDC's FedAvg and FedProx do
(``utils_methods.py:146-147``, ``:397-398``: ``np.sum(clnt_params_list * weight_list / np.sum(weight_list))``);
``uniform`` (the default) is its FedDyn, FedDC and SCAFFOLD's ``np.mean``. Then ``FLState.evaluated`` keeps
p as well (``weights``).

Both are computed on the server from the updates the aggregator receives (after ``server_adjust``),
so every runtime gives the same numbers; for BHerd and GraB ``delta_i`` is the client's estimate
(GraB's rescaled by 1/alpha), so ``theta_i`` is the end model the server infers, not the one the
client reached. Their tensors live in ``FLState.evaluated`` only when requested and are
checkpointed with it; a round that aggregates nothing leaves ``client_mean`` at the model the
round started from, and round 0 scores the initial model for every entry.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientUpdate

BROADCAST, CLIENT_MEAN, ALL_MEAN = "broadcast", "client_mean", "all_mean"
EVAL_MODELS = (BROADCAST, CLIENT_MEAN, ALL_MEAN)
LATEST = "latest"  # all_mean's table: row i is client i's latest end model (N x d)
WEIGHTS = "weights"  # the clients' p_i (N,) where the means are data-weighted
MEAN_WEIGHTINGS = ("uniform", "data")


def column(model: str, metric: str) -> str:
    """The metrics column of ``metric`` scored on ``model``: plain for the broadcast model,
    ``client_mean/test_acc`` for the others."""
    return metric if model == BROADCAST else f"{model}/{metric}"


def kept(models: Sequence[str], weighting: str = "uniform") -> set[str]:
    """The keys of ``FLState.evaluated`` that ``models`` need, their means weighted by ``weighting``."""
    keys = {key for model, key in ((CLIENT_MEAN, CLIENT_MEAN), (ALL_MEAN, LATEST)) if model in models}
    return keys | {WEIGHTS} if keys and weighting == "data" else keys


def init_evaluated(models: Sequence[str], w0: Tensor, n_clients: int, weights: Sequence[float] | None = None
                   ) -> dict[str, Tensor]:
    """The tensors the requested ``models`` keep, at round 0 (nothing for the broadcast model); ``weights``:
    the clients' p_i where the means are data-weighted."""
    evaluated: dict[str, Tensor] = {}
    if CLIENT_MEAN in models:
        evaluated[CLIENT_MEAN] = w0.clone()
    if ALL_MEAN in models:
        evaluated[LATEST] = w0.expand(n_clients, -1).clone()
    if evaluated and weights is not None:
        evaluated[WEIGHTS] = torch.as_tensor(weights, dtype=w0.dtype, device=w0.device)
    return evaluated


def track(evaluated: dict[str, Tensor], w: Tensor, updates: Sequence[ClientUpdate]) -> dict[str, Tensor]:
    """``evaluated`` after a round that started from ``w`` and aggregated ``updates``."""
    if not evaluated:
        return evaluated
    out = dict(evaluated)
    if CLIENT_MEAN in out:
        clients = [u.client for u in updates]
        out[CLIENT_MEAN] = (w - _mean(torch.stack([u.delta for u in updates]), out.get(WEIGHTS), clients)
                            if updates else w.clone())
    if LATEST in out and updates:
        latest = out[LATEST].clone()
        for u in updates:
            latest[u.client] = w - u.delta
        out[LATEST] = latest
    return out


def scored_models(models: Sequence[str], w: Tensor, evaluated: dict[str, Tensor]) -> list[tuple[str, Tensor]]:
    """``(name, parameters)`` of every model to score, in ``models``' order."""
    tensors = {BROADCAST: lambda: w, CLIENT_MEAN: lambda: evaluated[CLIENT_MEAN],
               ALL_MEAN: lambda: _mean(evaluated[LATEST], evaluated.get(WEIGHTS), None)}
    return [(name, tensors[name]()) for name in models]


def _mean(rows: Tensor, weights: Tensor | None, clients: Sequence[int] | None) -> Tensor:
    """The mean of ``rows`` (one per client: ``clients``, or all): uniform, or weighted by ``weights``
    (indexed by client) renormalised over them."""
    if weights is None:
        return rows.mean(0)
    p = weights if clients is None else weights[list(clients)]
    return (p / p.sum()) @ rows
