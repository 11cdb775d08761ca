"""FedGSNR's plan made differentially private: the planning part ``with_dp`` puts in place of FedGSNR's.

FedGSNR's plan couples the clients: every E_k depends on every client's statistics (g_k, v_k) through g and v
(Eq. 8-9) and through the normalisation sum_j n_j, so one client's data would move the other clients' uploads
and the clipped sum's sensitivity would no longer be 2S. Here the server (trusted, as in server-side DP-FedAvg)
releases only noised sums of clipped statistics, over the round's sampled clients, with m the public expected
number of uploads and z the run's noise multiplier (``algorithm.dp.plan_clip: {g: C_g, s: C_s, n: n_max}``):

    g^ = (sum_k clip(g_k, C_g) + N(0, (z C_g)^2 I)) / m
    s^ = (sum_k clip(s_k, C_s) + N(0, (z C_s)^2 I)) / m,   s_k = v_k + g_k^2    (second moment, per coordinate)
    v^ = max(0, s^ - g^2)                                                       (Eq. 9 with uniform weights)
    n_k = max(0, M_k / Q_k)      from client k's own (g_k, v_k) and (g^, v^) only (fedgsnr.scores_from_sums)
    n^ = (sum_k min(n_k, n_max) + N(0, (z n_max)^2)) / m
    E_k = min(m E_const, round(E_const min(n_k, n_max) / max(n^, tiny)))        (each client on its own)

E_k depends on client k's data and the three releases only; another client's upload depends on k only through
the releases (FedGSNR's largest-remainder rounding would couple the clients again: here each rounds half up).
The cap m E_const is the most FedGSNR gives one client; a noised n^ near or below 0 gives every client with
n_k > 0 the cap. With the model's noised sum, a round is four Gaussian releases of the same sampled clients, each
of sensitivity 1 once normalised by its clip (2 under replace-one, as dp.py accounts; for s^ and n^, whose inputs
are >= 0, that is on the safe side). Their adaptive composition is one Gaussian whose noise multiplier z_eff has
1 / z_eff^2 = 1 / z^2 + 3 / z^2, z_eff = z / 2 (with ``algorithm.dp.plan_noise: r`` the releases here are
handed r z: 1 / z_eff^2 = 1 / z^2 + 3 / (r z)^2), and the round's sampling amplifies it as it does one Gaussian (the
composition's dominating pair is a single Gaussian's): the accountant's event is that one
(:meth:`fedaccel.algorithms.dp.DPSettings.round_noise_multiplier`). The releases go to the round's diag
(``plan_release``); the per-client n_k, r_k and E_k there are outside the guarantee (each E_k is told to client k
alone: the guarantee is joint, for the models and the other clients' steps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedaccel.algorithms.base import Part, RoundInfo, State, seeded_normal
from fedaccel.algorithms.fedgsnr import entropy, scores_from_sums, steps_summary


def clipped_vector(x: np.ndarray, clip: float) -> np.ndarray:
    """``x`` scaled down to norm ``clip`` where it is longer."""
    norm = float(np.linalg.norm(x))
    return x * (clip / norm) if norm > clip else x


RELEASES = ("g", "s", "n")  # the plan's noised releases: g^, s^ and n^


def plan_normal(info: RoundInfo, release: str, size: int) -> np.ndarray:
    """N(0, I) of ``size`` from (seed, "dp-plan", round, release index): each plan release its own draw."""
    return seeded_normal(size, info.seed, "dp-plan", info.round, RELEASES.index(release)).numpy()


def noised_mean_of_clipped(vectors: list[np.ndarray], clip: float, std: float, m: float, draw: np.ndarray
                           ) -> np.ndarray:
    """(sum_k clip(x_k, clip) + std * draw) / m."""
    total = np.zeros_like(draw)
    for x in vectors:
        total += clipped_vector(x, clip)
    return (total + std * draw) / m


def own_ratio(g_k: np.ndarray, v_k: np.ndarray, g: np.ndarray, v: np.ndarray, batch: int) -> tuple[float, float]:
    """(n_k, r_k) of one client from its own statistics and the released global ones (FedGSNR's M_k, Q_k, L)."""
    m_k = float(g_k @ g + np.sqrt(v_k) @ np.sqrt(v) / batch)
    q_k = float(g_k @ g_k + v_k.sum() / batch)
    big_l = float(g @ g + v.sum() / batch)
    n, r = scores_from_sums(np.array([m_k]), np.array([q_k]), big_l)
    return float(n[0]), float(r[0])


TINY = 1e-12  # the floor of the noised n^ (a noised mean may fall to 0 or below)


def private_steps(n: np.ndarray, n_bar: float, e_const: int, n_max: float, m: float) -> np.ndarray:
    """E_k = min(m E_const, round(E_const min(n_k, n_max) / max(n_bar, TINY))), half up, each client on its own."""
    cap = math.floor(m * e_const + 1e-9)
    ratio = np.minimum(np.minimum(n, n_max) * (e_const / max(n_bar, TINY)), cap)
    return np.floor(ratio + 0.5).astype(np.int64)


def private_planning(planning: Part, *, clip_g: float, clip_s: float, n_max: float, noise_multiplier: float,
                     expected_uploads: float, samples: int, e_const: int) -> Part:
    """FedGSNR's ``planning`` part (its clients' messages unchanged) with the private plan of the module docstring
    as its ``plan_server``; ``noise_multiplier`` z for each release, ``expected_uploads`` m."""
    z, m = noise_multiplier, expected_uploads

    def valid(message: Mapping[str, Tensor]) -> bool:
        mean, var = message.get("mean"), message.get("var")
        return (mean is not None and var is not None and bool(torch.isfinite(mean).all())
                and bool(torch.isfinite(var).all()) and not bool((var < 0).any()))

    def plan_server(info: RoundInfo, messages: Mapping[int, Mapping[str, Tensor]], _ss: State
                    ) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
        clients = sorted(messages)
        if not clients:
            return {}, {}
        # a client whose statistics no honest client sends (not finite, a variance below 0) adds nothing and gets 0
        # steps: a choice on its own message only
        invalid = [k for k in clients if not valid(messages[k])]
        planned = [k for k in clients if k not in invalid]
        stats = {k: (messages[k]["mean"].detach().double().cpu().reshape(-1).numpy(),
                     messages[k]["var"].detach().double().cpu().reshape(-1).numpy()) for k in planned}
        d = len(next(iter(stats.values()))[0]) if stats else 0
        g = noised_mean_of_clipped([stats[k][0] for k in planned], clip_g, z * clip_g, m, plan_normal(info, "g", d))
        s = noised_mean_of_clipped([stats[k][1] + stats[k][0] ** 2 for k in planned], clip_s, z * clip_s, m,
                                   plan_normal(info, "s", d))
        v = np.maximum(0.0, s - g**2)
        scores = {k: own_ratio(*stats[k], g, v, samples) for k in planned}
        n = np.array([scores[k][0] for k in planned])
        n_bar = float((np.minimum(n, n_max).sum() + z * n_max * plan_normal(info, "n", 1)[0]) / m)
        steps = dict(zip(planned, private_steps(n, n_bar, e_const, n_max, m).tolist(), strict=True))
        steps.update({k: 0 for k in invalid})
        every = np.array([steps[k] for k in clients])
        share = every / every.sum() if every.sum() > 0 else np.full(len(clients), 1 / len(clients))
        diag: dict[str, Any] = {
            "n": {str(k): scores[k][0] for k in planned},
            "gsnr": {str(k): scores[k][1] for k in planned},
            "steps": {str(k): int(steps[k]) for k in clients},
            **steps_summary(every),
            "entropy": entropy(share),
            "entropy_max": math.log(len(clients)),
            "fallback": False,
            "plan_release": {"n_bar": n_bar, "g_norm": float(np.linalg.norm(g)), "v_sum": float(v.sum())},
        }
        if invalid:
            diag["invalid_statistics"] = invalid
        return {k: {"steps": int(steps[k])} for k in clients}, diag

    return Part(name=planning.name, plan_client=planning.plan_client,
                batched_plan_client=planning.batched_plan_client, plan_server=plan_server)
