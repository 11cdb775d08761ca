"""FedGSNR's planning phase: optimal local steps per client from gradient statistics.

Paper 003 (FedGSNR: "accelerating federated learning on non-IID data via maximum gradient
signal to noise ratio"), Theorem 3.7, Algorithm 1, Eq. 8-9, Definition 4.1 and Section 5.

Every round starts with a message round of its own, before any local training:

1. ``plan_client``: client k draws B_s of its samples (``samples``), computes their per-sample
   gradients at the global model w_t (``torch.func``, through the engine's client access) and sends
   their mean g_k and per-coordinate variance v_k (the diagonal of the covariance Sigma_k).
   ``batched_plan_client`` sends the same messages for all the clients a process holds, at once.
2. ``plan_server``: with p renormalised over the participants S,
   g = sum_k p_k g_k (Eq. 8) and v = sum_k p_k v_k + sum_k p_k (g_k - g)^2 (Eq. 9, diagonal);
   with B = B_s,

   - M_k = g_k . g + sum_j sqrt(v_kj v_j) / B      (<R_l, R_g>_F of Section 4)
   - Q_k = ||g_k||^2 + sum_j v_kj / B              (||R_l||_F^2, the paper's "N")
   - L   = ||g||^2 + sum_j v_j / B                 (||R_g||_F^2)

   n_k = max(0, M_k / Q_k) minimises the 2-Wasserstein distance between the one-global-step
   Gaussian N(eta g, eta^2 diag(v)/B) and the n-local-steps Gaussian N(n eta g_k, n^2 eta^2
   diag(v_k)/B) (Theorem 3.7); the GSNR score is r_k = max(0, M_k / sqrt(Q_k L - M_k^2))
   (Definition 4.1). The same total work |S| * E_const is redistributed (Section 5):
   E_k = |S| E_const n_k / sum_j n_j local *steps*, rounded by largest remainder so that
   sum_k E_k = |S| E_const exactly. Each client is told ``{"steps": E_k}``.
3. Clients with E_k = 0 (in particular n_k = 0) do not train this round; the engine skips them and
   the aggregator renormalises the weights over the clients that uploaded (Algorithm 1's S~). So does a
   client whose planning answer never reached the server (lost, or rejected by a gate): it is not planned
   (:func:`fedaccel.engine.round.run_round`, ``diag.unplanned``).

``E_const`` counts local SGD steps (iterations), not epochs: the paper's Table 3 says "local steps
E_const = 20" and Section 5 calls E_k "a redistribution of local steps". So FedGSNR ignores the
configured epochs for the clients it plans; a baseline with the same work runs E_const steps each.

Choices where the paper is silent or loose (also in ``docs/algorithms.md``):

- v_k is the population variance (divide by B_s, not B_s - 1), as the paper's Sigma_k = (1/B) sum.
- B in Theorem 3.7 is B_s, the configured ``samples``, for every client (also a client with fewer
  than B_s samples, which sends statistics over all of them); the paper uses one B = 64 for both.
- The statistics are of the plain loss gradient, plus weight decay * w when local weight decay is on
  (it is part of every local step's direction); the FedProx term vanishes at w and SCAFFOLD's
  correction is not included.
- If every n_k is 0 (or their sum is not positive) the steps are split equally and the round's diag
  says ``"fallback": true``. Q_k L - M_k^2 (>= 0 by Cauchy-Schwarz) is clamped at
  1e-12 * Q_k L, so r_k is at most 1e6 (it is +inf in theory when a client's statistics are
  proportional to the global ones, e.g. a single participant).
- The entropy H = -sum q_k log q_k (natural log) is over the q_k = n_k / sum n_j of the
  participants (uniform in the fallback); ``"entropy_max"`` = log |S| is its uniform upper bound.
- A client whose variance has an entry below 0 (no honest client's has) is left out of the plan, as if it had
  not answered, and gets 0 steps; the diag lists it under ``"invalid_statistics"``. Kept in, it would make v
  and so every client's n_k NaN, and the round would fall back to equal steps.

Controls (``plan``, not in the paper): the same total |S| E_const split otherwise, to tell the
GSNR weighting from mere redistribution: ``uniform`` (E_const each), ``random`` (the GSNR plan's
E_k permuted over the participants), ``dirichlet`` (q ~ Dirichlet(1, ..., 1)) and ``data``
(q_k proportional to |D_k|); see :func:`fedgsnr_planning`. Every plan's diag has the per-client
``"steps"`` and the round scalars ``"steps_cv"`` (std / mean of E_k over the participants),
``"steps_zero"`` (how many get 0 steps) and ``"steps_max"``, next to ``"entropy"`` of its q.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedaccel.algorithms.base import ClientAccess, ClientContext, Part, RoundInfo, State
from fedaccel.errors import ConfigError, shown

GSNR_CAP = 1e6  # r_k when Q_k L - M_k^2 vanishes numerically (1 / sqrt(1e-12))
_CHUNK_FLOATS = 1 << 24  # per-sample gradients held at once: at most ~64 MB of float32
_BLOCK_FLOATS = 1 << 17  # float64 entries of the server's (K, block) rows: 1 MB, cache-sized
_GROUP_FLOATS = 1 << 22  # entries of the moments and samples of the clients planned together (float64: 32 MB)


def gradient_statistics(
    access: ClientAccess, w: Tensor, x: Tensor, y: Tensor, *, chunk_floats: int = _CHUNK_FLOATS
) -> tuple[Tensor, Tensor]:
    """Mean and population per-coordinate variance of the per-sample gradients at ``w``.

    Where the client has a closed form (``gradient_moments``: models of linear layers) it is used;
    otherwise per-sample gradients are processed in chunks so that at most ``chunk_floats``
    entries are held, merged with Chan et al.'s pairwise update (no sum-of-squares cancellation).
    """
    if len(y) and (moments := access.gradient_moments(w, x, y)) is not None:
        mean, var = _mean_and_variance(*moments, w.dtype)
        return mean[0], var[0]
    d = w.numel()
    per_chunk = max(1, chunk_floats // max(d, 1))
    count = 0
    mean = torch.zeros_like(w)
    m2 = torch.zeros_like(w)  # sum of squared deviations from the mean
    for lo in range(0, len(y), per_chunk):
        grads = access.per_sample_grads(w, x[lo : lo + per_chunk], y[lo : lo + per_chunk])  # (b, d)
        b = grads.shape[0]
        ones = grads.new_ones(b)
        chunk_mean = (ones @ grads) / b  # sums over samples as matrix-vector products: 3-5x
        chunk_m2 = ones @ grads.sub_(chunk_mean).square_()  # faster than strided column sums
        total = count + b
        shift = chunk_mean - mean
        mean = mean + shift * (b / total)
        m2 = m2 + chunk_m2 + shift.square() * (count * b / total)
        count = total
    if count == 0:
        raise ValueError("no samples to compute gradient statistics on")
    return mean, m2 / count


def grouped_statistics(access: ClientAccess, w: Tensor, draws: Sequence[tuple[Tensor, Tensor]]
                       ) -> list[tuple[Tensor, Tensor]] | None:
    """Each draw's (mean, variance) of the per-sample gradients at ``w`` (:func:`gradient_statistics` of it), the
    draws of one size in one pass over all their samples, where the model has a closed form; None otherwise."""
    by_size: dict[int, list[int]] = {}
    for k, (_, y) in enumerate(draws):
        by_size.setdefault(len(y), []).append(k)
    found: list[tuple[Tensor, Tensor]] = [None] * len(draws)  # type: ignore[list-item]
    for size, members in by_size.items():
        xs, ys = torch.cat([draws[k][0] for k in members]), torch.cat([draws[k][1] for k in members])
        moments = access.gradient_moments(w, xs, ys, groups=len(members)) if size else None
        if moments is None:
            return None
        means, variances = _mean_and_variance(*moments, w.dtype)
        for j, k in enumerate(members):
            found[k] = means[j], variances[j]
    return found


def _mean_and_variance(first: Tensor, second: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Mean and population variance in ``dtype`` from the float64 means of g and of g^2 (fresh tensors: ``second``
    is overwritten): the variance, a difference of moments, is taken in float64 in place, rounded once to ``dtype``,
    then clamped at 0 (no new (K, d) float64 buffer; the same bits as computed into a new one)."""
    var = second.addcmul_(first, first, value=-1).to(dtype)
    return first.to(dtype), var.clamp_(min=0)


def global_statistics(means: Tensor, variances: Tensor, p: np.ndarray) -> tuple[Tensor, Tensor]:
    """Eq. 8-9 with diagonal covariances: g = sum p_k g_k, v = sum p_k v_k + sum p_k (g_k - g)^2.

    ``means`` and ``variances`` are (K, d); ``p`` (K,) sums to 1.
    """
    weights = torch.as_tensor(p, dtype=means.dtype, device=means.device)
    g = weights @ means
    spread = (means - g).square_()  # one (K, d) temporary, squared in place
    return g, torch.addmv(weights @ variances, spread.t(), weights)


def gsnr_scores(
    means: Tensor, variances: Tensor, g: Tensor, v: Tensor, batch: int
) -> tuple[np.ndarray, np.ndarray]:
    """(n_k, r_k) for each row k: Theorem 3.7's optimal step ratio and Definition 4.1's GSNR (on whole (K, d)
    matrices: the reference that :func:`client_scores` computes by blocks)."""
    m = means @ g + variances.sqrt() @ v.sqrt() / batch  # (K,): sum_j sqrt(v_kj v_j) as a matrix-vector product
    q = means.square().sum(dim=1) + variances.sum(dim=1) / batch  # (K,)
    big_l = g.square().sum() + v.sum() / batch
    return scores_from_sums(m.double().cpu().numpy(), q.double().cpu().numpy(), float(big_l))


def scores_from_sums(m: np.ndarray, q: np.ndarray, big_l: float) -> tuple[np.ndarray, np.ndarray]:
    """(n_k, r_k) from M_k, Q_k (K,) and L of the module docstring (float64)."""
    m_np, q_np, l_val = np.asarray(m, dtype=np.float64), np.asarray(q, dtype=np.float64), float(big_l)
    n = np.zeros_like(m_np)
    positive = q_np > 0
    n[positive] = np.maximum(0.0, m_np[positive] / q_np[positive])
    gap = np.maximum(q_np * l_val - m_np**2, 1e-12 * q_np * l_val)
    r = np.zeros_like(m_np)
    ok = positive & (m_np > 0) & (l_val > 0)
    r[ok] = np.minimum(m_np[ok] / np.sqrt(gap[ok]), GSNR_CAP)
    return n, r


def client_scores(means: list[Tensor], variances: list[Tensor], p: np.ndarray, batch: int,
                  *, block_floats: int = _BLOCK_FLOATS) -> tuple[np.ndarray, np.ndarray]:
    """(n_k, r_k) of the clients' statistics (their g_k, v_k as sent): :func:`global_statistics` and
    :func:`gsnr_scores` by blocks of coordinates (g and v are taken coordinate by coordinate, M_k, Q_k and L are
    sums over the coordinates), in float64, instead of K x d float64 matrices: each block's (K, block) rows, at
    most ``block_floats`` entries (1 MB: cache-sized), are copied from the messages into one buffer, reused for
    every block and overwritten in place. In numpy, on the CPU: its float64 sqrt is correctly rounded (torch's is
    not) and the same steps ran faster than in torch. Its BLAS runs on one thread here: the products are
    matrix-vector, bound by memory, and OpenBLAS's threads spin for a while after a call, taking cores from torch's
    training that follows (rounds ran 1.5x longer with two threads, ``benchmarks/fedgsnr_overhead.py``)."""
    k = len(means)
    block = max(1, block_floats // k)
    vectors = [[x.detach().reshape(-1).cpu().numpy() for x in xs] for xs in (means, variances)]
    d = len(vectors[0][0])
    rows = np.empty((2, k, min(block, d)))
    weights = np.asarray(p, dtype=np.float64)
    m, q, big_l = np.zeros(k), np.zeros(k), 0.0
    with _one_blas_thread(), np.errstate(invalid="ignore", over="ignore"):  # NaN, inf as torch
        for lo in range(0, d, block):
            means_b, variances_b = rows[:, :, : min(block, d - lo)]
            for i in range(k):
                means_b[i], variances_b[i] = vectors[0][i][lo : lo + block], vectors[1][i][lo : lo + block]
            g = weights @ means_b  # Eq. 8
            m += means_b @ g
            q += np.einsum("kj,kj->k", means_b, means_b) + variances_b.sum(axis=1) / batch
            means_b -= g
            v = weights @ variances_b + weights @ np.square(means_b, out=means_b)  # Eq. 9
            m += np.sqrt(variances_b, out=variances_b) @ np.sqrt(v) / batch
            big_l += g @ g + v.sum() / batch
    return scores_from_sums(m, q, big_l)


@functools.cache
def _blas_controller() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _one_blas_thread() -> Any:
    """numpy's BLAS on one thread inside the ``with`` block."""
    return _blas_controller().limit(limits=1, user_api="blas")


def allocate_steps(n: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """Split ``total`` local steps in proportion to ``n`` by largest remainder.

    Returns (steps, q, fallback) with q = n / sum(n), or the equal split (fallback) when sum(n) is
    not positive. ``sum(steps) == total`` exactly; a client with n_k = 0 gets 0 steps.
    """
    n = np.asarray(n, dtype=np.float64)
    s = float(n.sum())
    fallback = not (s > 0 and math.isfinite(s))
    q = np.full(len(n), 1.0 / len(n)) if fallback else n / s
    raw = total * q
    steps = np.floor(raw).astype(np.int64)
    fractions = np.where(q > 0, raw - steps, -1.0)  # clients with q = 0 never get a leftover step
    leftover = int(total - steps.sum())
    if leftover > 0:
        order = np.argsort(-fractions, kind="stable")
        steps[order[:leftover]] += 1
    return steps, q, fallback


def entropy(q: np.ndarray) -> float:
    """H = -sum q log q (natural log, 0 log 0 = 0)."""
    q = np.asarray(q, dtype=np.float64)
    nz = q[q > 0]
    return float(-(nz * np.log(nz)).sum())


PLANS = ("gsnr", "uniform", "random", "dirichlet", "data")
_NEEDS_STATISTICS = ("gsnr", "random")


def steps_summary(steps: np.ndarray) -> dict[str, Any]:
    """Round scalars of the planned E_k over the participants: coefficient of variation
    (population std / mean; 0 when the mean is 0), how many get 0 steps, the largest E_k."""
    e = np.asarray(steps, dtype=np.float64)
    mean = float(e.mean()) if len(e) else 0.0
    return {
        "steps_cv": float(e.std() / mean) if mean > 0 else 0.0,
        "steps_zero": int((e == 0).sum()),
        "steps_max": int(e.max()) if len(e) else 0,
    }


def fedgsnr_planning(*, samples: int = 64, e_const: int = 20, plan: str = "gsnr") -> Part:
    """FedGSNR's planning phase: E_k local steps per client from Theorem 3.7, GSNR scores.

    ``samples`` is B_s, the per-client sample for the gradient statistics (the paper's batch 64);
    ``e_const`` the baseline's local steps per client (paper: 20), redistributed over the clients.
    ``plan`` chooses how the same total |S| E_const is split (controls for the GSNR plan):

    - ``"gsnr"``: E_k proportional to Theorem 3.7's n_k (the paper);
    - ``"uniform"``: E_const each (the baseline's work, with FedGSNR's plumbing);
    - ``"random"``: the round's GSNR E_k, permuted at random over the participants (the same
      multiset of E_k, hence the same total, zeros and spread; only who gets which is broken);
    - ``"dirichlet"``: in proportion to q ~ Dirichlet(1, ..., 1) drawn over the participants;
    - ``"data"``: in proportion to the participants' data sizes |D_k|.

    All by largest remainder. Random draws come from ``info.rng("plan")`` (run seed, round), so a
    run is reproducible. ``uniform``, ``dirichlet`` and ``data`` do not use the statistics: their
    clients send an empty planning message and compute nothing, and the diag has no ``n``/``gsnr``.

    Example:
        >>> from fedaccel.algorithms.base import compose
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> algorithm = compose("fedgsnr", fedgsnr_planning(samples=32, e_const=10), mean_aggregate())
        >>> [p.name for p in algorithm.parts]
        ['fedgsnr', 'mean']
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
        raise ConfigError(f"fedgsnr samples (B_s) must be an integer >= 2, got {shown(samples)}")
    if isinstance(e_const, bool) or not isinstance(e_const, int) or e_const < 1:
        raise ConfigError(f"fedgsnr e_const (local steps) must be an integer >= 1, got {shown(e_const)}")
    if plan not in PLANS:
        raise ConfigError(f"fedgsnr plan must be one of {', '.join(PLANS)}; got {shown(plan)}")
    statistics = plan in _NEEDS_STATISTICS

    def draw(ctx: ClientContext, access: ClientAccess) -> tuple[Tensor, Tensor]:
        return access.sample(samples, ctx.info.rng("gsnr", ctx.client))

    def message(ctx: ClientContext, w: Tensor, mean: Tensor, var: Tensor) -> dict[str, Tensor]:
        if ctx.info.weight_decay:
            mean = mean + ctx.info.weight_decay * w
        return {"mean": mean, "var": var}

    def plan_client(
        ctx: ClientContext, w: Tensor, ss: State, cs: State, access: ClientAccess
    ) -> dict[str, Tensor]:
        if not statistics:
            return {}
        return message(ctx, w, *gradient_statistics(access, w, *draw(ctx, access)))

    def batched_plan_client(
        contexts: Sequence[ClientContext], w: Tensor, ss: State, css: Sequence[State], accesses: Sequence[ClientAccess]
    ) -> dict[int, dict[str, Tensor]]:
        if not statistics:
            return {ctx.client: {} for ctx in contexts}
        messages: dict[int, dict[str, Tensor]] = {}

        def plan(group: list[tuple[ClientContext, ClientAccess, tuple[Tensor, Tensor]]]) -> None:
            found = grouped_statistics(group[0][1], w, [drawn for *_, drawn in group])
            for j, (ctx, access, drawn) in enumerate(group):
                mean, var = found[j] if found else gradient_statistics(access, w, *drawn)
                messages[ctx.client] = message(ctx, w, mean, var)

        group: list[tuple[ClientContext, ClientAccess, tuple[Tensor, Tensor]]] = []
        held = 0  # the group's moments and samples, in entries
        for ctx, access in zip(contexts, accesses, strict=True):
            drawn = draw(ctx, access)
            size = w.numel() + drawn[0].numel()
            if group and held + size > _GROUP_FLOATS:
                plan(group)
                group, held = [], 0
            group.append((ctx, access, drawn))
            held += size
        if group:
            plan(group)
        return messages

    def plan_server(
        info: RoundInfo, messages: Mapping[int, Mapping[str, Tensor]], ss: State
    ) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
        clients = sorted(messages)
        # a variance below 0 no honest client sends (its statistics' are clamped at 0): that client is not planned
        # (it would make v, and every client's n_k, NaN) and does not train this round
        invalid = [k for k in clients
                   if statistics and messages[k]["var"].numel() and bool(messages[k]["var"].amin() < 0)]
        if invalid:
            clients = [k for k in clients if k not in invalid]
            instructions, diag = plan_server(info, {k: messages[k] for k in clients}, ss)
            instructions.update({k: {"steps": 0} for k in invalid})
            return instructions, {**diag, "invalid_statistics": invalid}
        if not clients:
            return {}, {}
        total = len(clients) * e_const
        p = np.asarray([info.weights[k] for k in clients], dtype=np.float64)
        diag: dict[str, Any] = {}
        if statistics:
            n, r = client_scores([messages[k]["mean"] for k in clients], [messages[k]["var"] for k in clients],
                                 p / p.sum(), samples)
            steps, q, fallback = allocate_steps(n, total)
            diag["n"] = {str(k): float(x) for k, x in zip(clients, n, strict=True)}
            diag["gsnr"] = {str(k): float(x) for k, x in zip(clients, r, strict=True)}
            if plan == "random":
                order = info.rng("plan").permutation(len(clients))
                steps, q = steps[order], q[order]
        elif plan == "dirichlet":
            steps, q, fallback = allocate_steps(info.rng("plan").dirichlet(np.ones(len(clients))), total)
        else:  # uniform, data
            steps, q, fallback = allocate_steps(np.ones(len(clients)) if plan == "uniform" else p, total)
        instructions = {k: {"steps": int(e)} for k, e in zip(clients, steps, strict=True)}
        diag.update({
            "steps": {str(k): int(e) for k, e in zip(clients, steps, strict=True)},
            **steps_summary(steps),
            "entropy": entropy(q),
            "entropy_max": math.log(len(clients)),
            "fallback": fallback,
        })
        return instructions, diag

    return Part(name="fedgsnr", plan_client=plan_client, batched_plan_client=batched_plan_client,
                plan_server=plan_server)
