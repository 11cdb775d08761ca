"""Robust aggregation: rules that replace the weighted mean of the uploaded updates.

Each rule is an ``aggregate`` part: w_{t+1} = w_t - server_lr * A(delta_1, ..., delta_n), delta_i = w_t - theta_i
(or its estimate). Every rule is unweighted: a robust rule cannot trust the data counts clients report.

- ``median``: coordinate-wise median (Yin et al., "Byzantine-Robust Distributed Learning: Towards Optimal
  Statistical Rates", ICML 2018); with n even, the mean of the two middle values.
- ``trimmed_mean(beta)``: coordinate-wise, drop the floor(beta n) smallest and largest values, average the
  rest (Yin et al. 2018). beta = 0 is the unweighted mean.
- ``krum(f)``: the update with the smallest score s_i = sum of its squared distances to its n - f - 2 nearest
  other updates (Blanchard et al., "Machine Learning with Adversaries: Byzantine Tolerant Gradient
  Descent", NeurIPS 2017). Equal scores go to the update whose values come first (compared coordinate by
  coordinate), never to the first uploaded: no rule depends on the order in which uploads arrive.
- ``multikrum(f, m)``: the uniform mean of the m updates with the smallest scores (Blanchard et al. 2017,
  Section 5; m = n - f when not given).
- ``bulyan(f)``: select theta = n - 2f updates by Krum applied again and again to the updates not yet
  selected (the same f); then per coordinate average the beta = theta - 2f selected values closest to their
  median (El Mhamdi, Guerraoui and Rouault, "The Hidden Vulnerability of Distributed Learning in
  Byzantium", ICML 2018). It needs n >= 4f + 3: a round with fewer uploads leaves the model as it is
  (Flower's choice; warned once). Its last picks run Krum on the n' = 2f + 1 ... updates left, where
  n' - f - 2 < 1 for f = 1: no neighbour to count, every score 0. There the pick is the update left whose
  squared distances to the updates already selected sum least (the one nearest the majority chosen so far),
  which the paper leaves open and the upload order used to decide.

Each rule's condition, checked at load against the most clients that upload in a round (``check_uploads``;
one line when no round can meet it): Krum and Multi-Krum n > 2f + 2, Bulyan n >= 4f + 3, the trimmed mean
2 floor(beta n) < n (always true for beta < 0.5). A direct call with fewer updates (a round of partial
participation) scores with max(0, n - f - 2) distances.
``variant="flower"`` is Flower's arithmetic (``flwr/serverapp/strategy``, the same in 1.41 and 1.42): at least one neighbour
(``multikrum.py:232``), Multi-Krum's mean weighted by the reported sample counts (``multikrum.py:149``), and
Bulyan's theta updates chosen at once by Multi-Krum scores over all n (``bulyan.py:158``) instead of Krum
applied again after each choice. docs/algorithms.md "Robust aggregation" has the table and which recipes
refuse a rule.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from fedaccel.algorithms.base import Algorithm, ClientUpdate, Part, RoundInfo, compose
from fedaccel.algorithms.mean import renormalised_weights
from fedaccel.errors import ConfigError, shown

VARIANTS = ("paper", "flower")
CHUNK_ELEMENTS = 2**22  # coordinate-wise rules sort (n, c) column blocks of about this many entries

# Parts whose maths assumes the server takes the mean of the updates: a robust rule would break them.
NEEDS_THE_MEAN = {
    "scaffold": "SCAFFOLD's control update c += sum_i q_i dc_i estimates the gradient of the same clients the mean "
                "averages, and its model step is that mean",
    "feddyn": "FedDyn's server state h and step (mean of the models plus the mean drift) are the mean",
    "feddc": "FedDC's server step (mean of the models plus the mean drift) and its correction G are the mean",
    "fednova": "FedNova's aggregate is its method: the normalised average tau_eff sum_i p_i delta_i / a_i",
}

Rule = Callable[[Tensor, Sequence[ClientUpdate]], Tensor]  # ((n, d) stacked updates, the updates) -> (d,)


def by_columns(stacked: Tensor, rule: Callable[[Tensor], Tensor]) -> Tensor:
    """``rule`` applied to column blocks of the (n, d) ``stacked`` updates (it maps (n, c) to (c,))."""
    n, d = stacked.shape
    width = max(1, CHUNK_ELEMENTS // max(n, 1))
    return torch.cat([rule(stacked[:, lo:lo + width]) for lo in range(0, d, width)])


def coordinate_median(block: Tensor) -> Tensor:
    """Per column the median; for an even count the mean of the two middle values (as numpy's)."""
    ordered = block.sort(dim=0).values
    n = ordered.shape[0]
    if n % 2:
        return ordered[n // 2]
    return ordered[n // 2 - 1] / 2 + ordered[n // 2] / 2  # halves first: no overflow near the dtype's max


def trimmed(beta: float) -> Callable[[Tensor], Tensor]:
    """Per column the mean of the values left after dropping floor(beta n) at each end."""

    def rule(block: Tensor) -> Tensor:
        n = block.shape[0]
        cut = int(beta * n)
        return block.sort(dim=0).values[cut:n - cut].mean(dim=0)

    return rule


def squared_distances(stacked: Tensor) -> Tensor:
    """(n, n) squared Euclidean distances between the rows: |a|^2 + |b|^2 - 2 a.b in float64 over column blocks
    (exact for small integers), symmetric, clamped at 0, zero on the diagonal."""
    n = stacked.shape[0]
    total = torch.zeros(n, n, dtype=torch.float64, device=stacked.device)
    width = max(1, CHUNK_ELEMENTS // max(n, 1))
    for lo in range(0, stacked.shape[1], width):
        block = stacked[:, lo:lo + width].to(torch.float64)
        norms = block.square().sum(dim=1)
        total += norms[:, None] + norms[None, :] - 2 * block @ block.T
    total = (total + total.T) / 2  # exactly symmetric: a pair of mutual nearest neighbours ties exactly
    return total.clamp_min_(0).fill_diagonal_(0)


def krum_scores(distances: Tensor, f: int, variant: str) -> Tensor:
    """s_i: the sum of row i's k smallest distances to the other rows, k = n - f - 2 (module docstring)."""
    n = distances.shape[0]
    k = n - f - 2
    k = max(1, k) if variant == "flower" else max(0, k)
    others = distances + torch.diag(torch.full((n,), float("inf"), dtype=distances.dtype, device=distances.device))
    k = min(k, n - 1)
    return others.sort(dim=1).values[:, :k].sum(dim=1)


def lowest(scores: Tensor, m: int, rows: Tensor, then: Tensor | None = None,
           weights: Sequence[float] | None = None) -> list[int]:
    """The indices of the m smallest scores. Equal scores go by ``then`` (Krum: the sum of squared distances to
    every other update, the one nearer the rest), then by the ``rows``' values (the first coordinate where two
    differ decides), then by ``weights`` where the chosen rows are weighted (the same update twice with two sample
    counts): the choice never depends on the order of the rows."""
    keys = [[v if v == v else math.inf for v in x.tolist()] for x in (scores, scores if then is None else then)]

    def before(i: int, j: int) -> int:
        for key in keys:
            if key[i] != key[j]:
                return -1 if key[i] < key[j] else 1
        differ = torch.nonzero(rows[i] != rows[j])
        if not differ.numel():
            if weights is None or weights[i] == weights[j]:
                return 0  # the same update twice, of one weight: either is the same choice
            return -1 if weights[i] < weights[j] else 1
        k = int(differ[0, 0])
        return -1 if bool(rows[i][k] < rows[j][k]) else 1

    return sorted(range(len(keys[0])), key=functools.cmp_to_key(before))[:m]


def krum_lowest(distances: Tensor, f: int, variant: str, m: int, rows: Tensor,
                weights: Sequence[float] | None = None) -> list[int]:
    """The m rows with the lowest Krum scores (ties: :func:`lowest`)."""
    return lowest(krum_scores(distances, f, variant), m, rows, distances.sum(dim=1), weights)


def _check_f(name: str, f: int) -> None:
    if isinstance(f, bool) or not isinstance(f, int) or f < 0:
        raise ConfigError(f"aggregate {name}: f must be an integer >= 0, got {shown(f)}")


def _check_variant(name: str, variant: str) -> None:
    if variant not in VARIANTS:
        raise ConfigError(f"aggregate {name}: variant must be one of {', '.join(VARIANTS)}, got {shown(variant)}")


def _part(name: str, rule: Rule, server_lr: float) -> Part:
    if not server_lr > 0:
        raise ConfigError(f"server_lr must be > 0, got {shown(server_lr)}")

    def aggregate(info: RoundInfo, w: Tensor, updates: Sequence[ClientUpdate]) -> Tensor:
        if not updates:
            return w.clone()
        stacked = torch.stack([u.delta for u in updates])  # (n, d)
        return torch.sub(w, rule(stacked, updates), alpha=server_lr)

    return Part(name=name, aggregate=aggregate)


def median(*, server_lr: float = 1.0) -> Part:
    """Coordinate-wise median of the updates (FedMedian).

    Example:
        >>> median().name
        'median'
    """
    return _part("median", lambda stacked, _: by_columns(stacked, coordinate_median), server_lr)


def trimmed_mean(*, beta: float = 0.1, server_lr: float = 1.0) -> Part:
    """Coordinate-wise beta-trimmed mean (FedTrimmedAvg); beta in [0, 0.5).

    Example:
        >>> trimmed_mean(beta=0.2).name
        'trimmed_mean'
    """
    if isinstance(beta, bool) or not 0 <= beta < 0.5:
        raise ConfigError(f"aggregate trimmed_mean: beta must be in [0, 0.5), got {shown(beta)}")
    return _part("trimmed_mean", lambda stacked, _: by_columns(stacked, trimmed(beta)), server_lr)


def multikrum(*, f: int = 1, m: int | None = None, variant: str = "paper", server_lr: float = 1.0) -> Part:
    """The mean of the m updates with the lowest Krum scores (m = n - f when None).

    Example:
        >>> multikrum(f=1, m=3).name
        'multikrum'
    """
    _check_f("multikrum", f)
    _check_variant("multikrum", variant)
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
        raise ConfigError(f"aggregate multikrum: m must be an integer >= 1 (or null: n - f), got {shown(m)}")
    return _part("multikrum", _multikrum_rule(f, m, variant), server_lr)


def _multikrum_rule(f: int, m: int | None, variant: str) -> Rule:
    def rule(stacked: Tensor, updates: Sequence[ClientUpdate]) -> Tensor:
        n = stacked.shape[0]
        weighted = [u.weight for u in updates] if variant == "flower" else None
        keep = krum_lowest(squared_distances(stacked), f, variant, min(n, max(1, n - f) if m is None else m), stacked,
                           weighted)
        if variant == "flower":  # Flower averages the chosen updates by their sample counts
            weights = renormalised_weights([updates[i] for i in keep])
            return sum((stacked[i] * p for i, p in zip(keep, weights, strict=True)), torch.zeros_like(stacked[0]))
        return stacked[keep].mean(dim=0)

    return rule


def krum(*, f: int = 1, variant: str = "paper", server_lr: float = 1.0) -> Part:
    """The update with the lowest Krum score.

    Example:
        >>> krum(f=1).name
        'krum'
    """
    _check_f("krum", f)
    _check_variant("krum", variant)

    def rule(stacked: Tensor, updates: Sequence[ClientUpdate]) -> Tensor:
        return stacked[krum_lowest(squared_distances(stacked), f, variant, 1, stacked)[0]].clone()

    return _part("krum", rule, server_lr)


def bulyan_selection(distances: Tensor, f: int, count: int, variant: str, rows: Tensor) -> list[int]:
    """The ``count`` rows Bulyan keeps: Krum again and again on the rest (paper), or at once (flower). A pick
    with no neighbour to count (n' - f - 2 < 1) takes the row nearest those already chosen (module docstring)."""
    if variant == "flower":
        return krum_lowest(distances, f, variant, count, rows)
    left = list(range(distances.shape[0]))
    chosen: list[int] = []
    for _ in range(count):
        sub = distances[left][:, left]
        if len(left) - f - 2 < 1 and chosen:
            best = left[lowest(distances[left][:, chosen].sum(dim=1), 1, rows[left], sub.sum(dim=1))[0]]
        else:
            best = left[krum_lowest(sub, f, variant, 1, rows[left])[0]]
        chosen.append(best)
        left.remove(best)
    return chosen


def closest_to_median(beta: int) -> Callable[[Tensor], Tensor]:
    """Per column the mean of the beta values nearest the column's median."""

    def rule(block: Tensor) -> Tensor:
        centre = coordinate_median(block)
        nearest = (block - centre).abs().topk(beta, dim=0, largest=False).indices  # (beta, c)
        return block.gather(0, nearest).mean(dim=0)

    return rule


def bulyan(*, f: int = 1, variant: str = "paper", server_lr: float = 1.0) -> Part:
    """Bulyan: Krum-selected theta = n - 2f updates, then per coordinate the mean of the beta = theta - 2f
    values closest to their median; needs n >= 4f + 3 uploads.

    Example:
        >>> bulyan(f=1).name
        'bulyan'
    """
    _check_f("bulyan", f)
    _check_variant("bulyan", variant)
    warned: list[bool] = []

    def rule(stacked: Tensor, updates: Sequence[ClientUpdate]) -> Tensor:
        n = stacked.shape[0]
        if n < 4 * f + 3:
            if not warned:
                print(f"note: bulyan(f={f}) needs at least {4 * f + 3} uploads, a round had {n}: "
                      "such rounds leave the model as it is", file=sys.stderr)
                warned.append(True)
            return torch.zeros_like(stacked[0])
        theta = n - 2 * f
        chosen = bulyan_selection(squared_distances(stacked), f, theta, variant, stacked)
        return by_columns(stacked[chosen], closest_to_median(theta - 2 * f))

    return _part("bulyan", rule, server_lr)


RULES: dict[str, Callable[..., Part]] = {
    "median": median, "trimmed_mean": trimmed_mean, "krum": krum, "multikrum": multikrum, "bulyan": bulyan,
}


#: Each rule's condition on the n updates of a round, as the papers state it, and the options it reads.
CONDITIONS: dict[str, tuple[str, Callable[[int, dict], bool], tuple[str, ...]]] = {
    "krum": ("n > 2f + 2", lambda n, o: n > 2 * o["f"] + 2, ("f",)),
    "multikrum": ("n > 2f + 2", lambda n, o: n > 2 * o["f"] + 2, ("f",)),
    "bulyan": ("n >= 4f + 3", lambda n, o: n >= 4 * o["f"] + 3, ("f",)),
    "trimmed_mean": ("2 floor(beta n) < n", lambda n, o: 2 * int(o["beta"] * n) < n, ("beta",)),
}


def fewest_uploads(spec: object) -> tuple[str, str, int] | None:
    """For ``algorithm.aggregate`` as a config holds it (a name or ``{name, options}``): the rule, its condition
    in words and the fewest updates a round needs to meet it; None without a rule or a condition."""
    name = spec if isinstance(spec, str) else spec.get("name") if isinstance(spec, dict) else None
    if name not in CONDITIONS:
        return None
    options = {k: v for k, v in spec.items() if k != "name"} if isinstance(spec, dict) else {}
    words, holds, _ = CONDITIONS[str(name)]
    settings = {**{k: p.default for k, p in inspect.signature(RULES[str(name)]).parameters.items()}, **options}
    return str(name), words, next(n for n in range(1, 10_000) if holds(n, settings))


def check_uploads(rule: str, options: dict, most: int, knobs: str = "data.clients, train.client_fraction") -> None:
    """A one-line ConfigError when ``rule`` with ``options`` cannot meet its condition (:data:`CONDITIONS`)
    in any round, the most updates a round uploads being ``most`` (bounded by the settings ``knobs``): Krum with
    f = 9 of 10 clients would take one fixed update every round, Bulyan with f = 2 of 10 would never change the
    model; and Multi-Krum whose m exceeds every round's updates (it would take them all: the plain mean)."""
    settings = {**{k: p.default for k, p in inspect.signature(RULES[rule]).parameters.items()}, **options}
    if rule == "multikrum" and settings.get("m") is not None and settings["m"] > most:
        raise ConfigError(f"algorithm.aggregate multikrum m {settings['m']} exceeds the {most} updates a round has "
                          f"at most here: it would average all of them, the plain mean; lower m ({knobs} bound "
                          "the updates)")
    if rule not in CONDITIONS:
        return
    words, holds, keys = CONDITIONS[rule]
    if holds(most, settings):
        return
    least = next(n for n in range(most + 1, 4 * most + 8) if holds(n, settings))
    raise ConfigError(f"algorithm.aggregate {rule} ({', '.join(f'{k} {settings[k]}' for k in keys)}) needs {words} "
                      f"updates a round, at least {least}; at most {most} clients upload in a round here: lower "
                      f"{' or '.join(keys)}, or let more clients upload ({knobs})")


def with_robust_aggregate(algorithm: Algorithm, rule: str, params: dict, server_lr: float = 1.0) -> Algorithm:
    """``algorithm`` with its weighted mean replaced by the robust ``rule``; one-line ConfigError where the
    method's maths needs the mean (:data:`NEEDS_THE_MEAN`)."""
    for part in algorithm.parts:
        if part.name in NEEDS_THE_MEAN:
            raise ConfigError(f"algorithm.aggregate {rule} cannot replace the mean of {algorithm.name}: "
                              f"{NEEDS_THE_MEAN[part.name]}")
    found = algorithm.single("aggregate")
    assert found is not None
    k, mean = found
    if mean.name != "mean":
        raise ConfigError(f"algorithm.aggregate {rule}: {algorithm.name} aggregates with {mean.name}, not a mean")
    parts = list(algorithm.parts)
    parts[k] = RULES[rule](**params, server_lr=server_lr)
    return compose(algorithm.name, *parts)
