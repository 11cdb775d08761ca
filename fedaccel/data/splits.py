"""Data splits (partitions) of a labelled dataset over federated clients.

Every split maps ``(labels, n_clients, rng, **args)`` to one sorted ``int64`` index array per client.
All randomness comes from the given :class:`numpy.random.Generator`; every split terminates; no sample
is given to two clients. Impossible requests raise :class:`~fedaccel.errors.ConfigError`.

Splits that work with "labels" by position (``case2``, ``case3``, ``label-k``, ``nonbalance``,
``pareto``) use the rank of a label among the distinct labels present, which equals the label value for
the usual ``0..C-1`` labels.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedaccel.disk import save_png
from fedaccel.errors import ConfigError, check_png_output, listed, shown

Parts = list[np.ndarray]

__all__ = ["SPLITS", "split", "label_counts", "format_report", "plot_heatmap"]

#: How many fresh Dirichlet draws ``dirichlet`` tries before repairing the best one.
DIRICHLET_TRIES = 100


# ----------------------------------------------------------------------------------------------
# Shared helpers
# ----------------------------------------------------------------------------------------------


def _group(client_of: np.ndarray, n_clients: int) -> Parts:
    """Index arrays of the samples assigned to each client by ``client_of`` (sample -> client)."""
    order = np.argsort(client_of, kind="stable").astype(np.int64)
    counts = np.bincount(client_of, minlength=n_clients)
    return [np.sort(p) for p in np.split(order, np.cumsum(counts)[:-1])]


def _ranks(labels: np.ndarray) -> tuple[np.ndarray, int]:
    """Rank of every label among the distinct labels present, and the number of distinct labels."""
    uniq, inv = np.unique(labels, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), len(uniq)


def _shuffled_classes(ranks: np.ndarray, n_classes: int, rng: np.random.Generator) -> list[np.ndarray]:
    """For every class, the indices of its samples in random order."""
    order = rng.permutation(len(ranks))
    order = order[np.argsort(ranks[order], kind="stable")]
    return np.split(order, np.cumsum(np.bincount(ranks, minlength=n_classes))[:-1])


def _cut(class_idx: list[np.ndarray], counts: np.ndarray) -> Parts:
    """Deal each class's (shuffled) samples to clients: ``counts[c, k]`` samples of class c to client k.

    Samples of a class beyond ``counts[c].sum()`` are dropped.
    """
    n_clients = counts.shape[1]
    pieces: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for c, idx in enumerate(class_idx):
        bounds = np.cumsum(counts[c])
        for k, piece in enumerate(np.split(idx[: bounds[-1]], bounds[:-1])):
            pieces[k].append(piece)
    return [np.sort(np.concatenate(p)).astype(np.int64) if p else np.empty(0, np.int64) for p in pieces]


def _raise_floor(counts: np.ndarray, floor: int) -> np.ndarray:
    """Move samples from the largest clients until every client holds at least ``floor``.

    ``counts`` is a classes x clients count matrix (one row for class-free sizes); a donor gives away
    samples of its most abundant class. Needs ``floor * n_clients <= counts.sum()``. Deterministic.
    """
    counts = counts.copy()
    sizes = counts.sum(axis=0)
    for receiver in np.flatnonzero(sizes < floor):
        while sizes[receiver] < floor:
            donor = int(np.argmax(sizes))
            c = int(np.argmax(counts[:, donor]))
            k = int(min(floor - sizes[receiver], sizes[donor] - floor, counts[c, donor]))
            counts[c, donor] -= k
            counts[c, receiver] += k
            sizes[donor] -= k
            sizes[receiver] += k
    return counts


def _client_sizes(
    kind: str | None, n: int, n_clients: int, sigma: float, rng: np.random.Generator, floor: int
) -> np.ndarray:
    """Target client sizes summing to ``n``: equal, or proportional to lognormal(0, sigma) draws.

    Lognormal sizes (quantity skew, as in FedDC's data code) are rounded down, the remainder goes to
    the largest fractional parts, then every client is raised to ``floor`` from the largest ones.
    """
    if kind in (None, "equal"):
        return np.full(n_clients, n // n_clients, np.int64) + (np.arange(n_clients) < n % n_clients)
    if kind != "lognormal":
        raise ConfigError(f"unknown sizes {shown(kind)}: use 'equal' or 'lognormal'")
    if not sigma >= 0:
        raise ConfigError(f"sigma must be >= 0 for lognormal sizes, got {sigma}")
    share = rng.lognormal(0.0, sigma, n_clients)
    exact = share / share.sum() * n
    sizes = np.floor(exact).astype(np.int64)
    extra = np.argsort(-(exact - sizes), kind="stable")[: n - sizes.sum()]
    sizes[extra] += 1
    return _raise_floor(sizes[None, :], floor)[0]


def _dirichlet_rows(rng: np.random.Generator, alpha: float, dim: int, rows: int) -> np.ndarray:
    """``rows`` draws of Dir(alpha * 1_dim); a degenerate draw (underflow) becomes a random one-hot."""
    p = rng.dirichlet(np.full(dim, alpha), size=rows)
    bad = ~np.isfinite(p).all(axis=1) | (p.sum(axis=1) <= 0)
    if bad.any():
        p[bad] = 0.0
        p[bad, rng.integers(dim, size=int(bad.sum()))] = 1.0
    return p


def _even_holder_counts(
    holders: list[np.ndarray], class_sizes: np.ndarray, n_clients: int, rng: np.random.Generator
) -> np.ndarray:
    """Count matrix that divides each class as evenly as possible among the clients holding it.

    Which holders get the one extra sample is random. A class without holders is dropped.
    """
    counts = np.zeros((len(holders), n_clients), np.int64)
    for c, h in enumerate(holders):
        if len(h) == 0:
            continue
        base, rest = divmod(int(class_sizes[c]), len(h))
        counts[c, h] = base
        counts[c, rng.permutation(h)[:rest]] += 1
    return counts


def _holders_from_sets(label_sets: list[np.ndarray], n_classes: int) -> list[np.ndarray]:
    """Invert client -> classes into class -> clients."""
    holders: list[list[int]] = [[] for _ in range(n_classes)]
    for k, s in enumerate(label_sets):
        for c in s:
            holders[int(c)].append(k)
    return [np.asarray(h, np.int64) for h in holders]


def _split_by_label_sets(
    labels: np.ndarray, label_sets: list[np.ndarray], rng: np.random.Generator
) -> Parts:
    """Give every client samples of its label set, each class divided evenly among its holders."""
    ranks, n_classes = _ranks(labels)
    class_idx = _shuffled_classes(ranks, n_classes, rng)
    holders = _holders_from_sets(label_sets, n_classes)
    sizes = np.asarray([len(i) for i in class_idx])
    return _cut(class_idx, _even_holder_counts(holders, sizes, len(label_sets), rng))


def _largest_remainder(total: int, fractions: Sequence[float]) -> np.ndarray:
    """Integers proportional to ``fractions`` summing to ``total`` (ties to the earlier entry)."""
    f = np.asarray(fractions, float)
    exact = f / f.sum() * total
    out = np.floor(exact).astype(np.int64)
    out[np.argsort(-(exact - out), kind="stable")[: total - out.sum()]] += 1
    return out


# ----------------------------------------------------------------------------------------------
# The splits
# ----------------------------------------------------------------------------------------------


def iid(
    labels: np.ndarray, n_clients: int, rng: np.random.Generator, *, sizes: str | None = None,
    sigma: float = 0.3,
) -> Parts:
    """IID: shuffle, then cut into equal sizes (differing by at most one), covering every sample.

    ``sizes='lognormal'`` draws client sizes proportional to lognormal(0, sigma) instead (quantity
    skew, FedDC, Gao et al. 2022); every client still gets at least one sample.
    """
    n = len(labels)
    counts = _client_sizes(sizes, n, n_clients, sigma, rng, floor=1)
    perm = rng.permutation(n).astype(np.int64)
    return [np.sort(p) for p in np.split(perm, np.cumsum(counts)[:-1])]


def case1(labels: np.ndarray, n_clients: int, rng: np.random.Generator) -> Parts:
    """BHerd Case 1 (IID): sample i goes to client i mod N. Deterministic; covers every sample."""
    return _group(np.arange(len(labels)) % n_clients, n_clients)


def case2(labels: np.ndarray, n_clients: int, rng: np.random.Generator) -> Parts:
    """BHerd Case 2 (one label per client): with N <= L, every sample of label l goes to client l mod N.

    With N <= L labels a client holds the labels congruent to it mod N (N = 5, 10 labels: two each).
    With N > L, label l is spread, sample by sample in index order, over the clients n with
    n mod L = l, each sample to the least-filled one (lowest index on ties), i.e. round robin.
    Deterministic; covers every sample (a client can stay empty if a label has too few samples).
    """
    ranks, n_labels = _ranks(labels)
    client_of = ranks % n_clients
    if n_clients > n_labels:
        # Position of each sample among the samples of its label, in index order.
        order = np.argsort(ranks, kind="stable")
        starts = np.concatenate([[0], np.cumsum(np.bincount(ranks, minlength=n_labels))[:-1]])
        pos = np.empty(len(ranks), np.int64)
        pos[order] = np.arange(len(ranks)) - starts[ranks[order]]
        # Clients congruent to label l: l, l + L, l + 2L, ... below N.
        n_congruent = (n_clients - 1 - np.arange(n_labels)) // n_labels + 1
        client_of = ranks + n_labels * (pos % n_congruent[ranks])
    return _group(client_of, n_clients)


def case3(labels: np.ndarray, n_clients: int, rng: np.random.Generator) -> Parts:
    """BHerd Case 3 (mixed), as in IBM adaptive-federated-learning's mixed case.

    With M = min(N, L) and t = ceil(M / 2): a sample whose label is in the first half of the labels
    (rank < L / 2) goes to client i mod t (its index i; IID over the first t clients); any other sample
    goes to client t + (label mod (M - t)). For N = 5 and 10 labels: labels 0-4 over clients 0-2,
    labels 6, 8 on client 3, labels 5, 7, 9 on client 4. Deterministic; covers every sample. Clients
    M..N-1 (only when N > L) get no samples; with M = 1 everything goes to client 0.
    """
    ranks, n_labels = _ranks(labels)
    m = min(n_clients, n_labels)
    t = -(-m // 2)
    if m - t == 0:
        return _group(np.zeros(len(labels), np.int64), n_clients)
    first_half = 2 * ranks < n_labels
    client_of = np.where(first_half, np.arange(len(labels)) % t, t + ranks % (m - t))
    return _group(client_of, n_clients)


def dirichlet(
    labels: np.ndarray, n_clients: int, rng: np.random.Generator, *, alpha: float = 0.5,
    min_size: int = 10, sizes: str | None = None, sigma: float = 0.3,
) -> Parts:
    """Dirichlet label skew (class-major as NIID-Bench; FedGSNR D.1; client-major with sizes). Covers every sample.

    Default: per class, shares over clients ~ Dir(alpha * 1_N) (NIID-Bench, Li et al. 2022). Every client
    must get at least ``min(min_size, n // N)`` samples: up to ``DIRICHLET_TRIES`` draws are tried, then the
    best one is repaired by moving samples from the largest clients (so it always terminates).

    ``sizes='equal'|'lognormal'`` switches to the client-major form (Hsu et al. 2019, as FedDC's code
    draws it): each client has a label prior ~ Dir(alpha * 1_C) and a target size (equal, or lognormal(0, sigma)
    quantity skew); clients draw labels from their priors, renormalised over the labels not yet used up.
    """
    if not alpha > 0:
        raise ConfigError(f"dirichlet alpha must be > 0, got {alpha}")
    if min_size < 0:
        raise ConfigError(f"dirichlet min_size must be >= 0, got {min_size}")
    n = len(labels)
    floor = min(int(min_size), n // n_clients)
    ranks, n_classes = _ranks(labels)
    class_idx = _shuffled_classes(ranks, n_classes, rng)
    class_sizes = np.asarray([len(i) for i in class_idx], np.int64)

    if sizes is not None:
        targets = _client_sizes(sizes, n, n_clients, sigma, rng, floor)
        prior = _dirichlet_rows(rng, alpha, n_classes, n_clients)
        return _cut(class_idx, _fill_from_priors(targets, prior, class_sizes, rng))

    best, best_min = None, -1
    for _ in range(DIRICHLET_TRIES):
        shares = _dirichlet_rows(rng, alpha, n_clients, n_classes)
        cuts = np.floor(np.cumsum(shares, axis=1) * class_sizes[:, None]).astype(np.int64)
        cuts = np.minimum(cuts, class_sizes[:, None])
        cuts[:, -1] = class_sizes
        counts = np.diff(cuts, axis=1, prepend=0)
        smallest = int(counts.sum(axis=0).min())
        if smallest > best_min:
            best, best_min = counts, smallest
        if smallest >= floor:
            break
    assert best is not None
    return _cut(class_idx, _raise_floor(best, floor))


def _fill_from_priors(
    targets: np.ndarray, prior: np.ndarray, class_sizes: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Classes x clients counts with column sums ``targets``, row sums ``class_sizes``, drawn by priors.

    Each round every unfilled client requests its remaining need from its prior restricted to the
    classes still available; an over-requested class is shared by a multivariate hypergeometric draw
    and is then used up, so there are at most C + 1 rounds.
    """
    n_classes, n_clients = len(class_sizes), len(targets)
    counts = np.zeros((n_classes, n_clients), np.int64)
    need, left = targets.astype(np.int64).copy(), class_sizes.astype(np.int64).copy()
    while need.sum() > 0:
        avail = left > 0
        want = np.zeros((n_clients, n_classes), np.int64)
        for k in np.flatnonzero(need > 0):
            q = prior[k] * avail
            q = q / q.sum() if q.sum() > 0 else avail / avail.sum()
            want[k] = rng.multinomial(need[k], q)
        for c in np.flatnonzero(want.sum(axis=0) > 0):
            got = want[:, c]
            if got.sum() > left[c]:
                got = rng.multivariate_hypergeometric(got, int(left[c]))
            counts[c] += got
            need -= got
            left[c] -= got.sum()
    return counts


def label_k(labels: np.ndarray, n_clients: int, rng: np.random.Generator, *, k: int = 2) -> Parts:
    """Pathological label skew, "Label k" (Hsu et al. 2019; FedGSNR's "Label 2"): k classes per client.

    The N*k class slots (k consecutive ones per client) are filled by passes, each a fresh random
    permutation of the classes, reordered at its start so no client gets a class twice; so every class
    is held by floor(Nk/C) or ceil(Nk/C) clients and a client's k classes are distinct; each class's samples
    are divided as evenly as possible among its holders. Covers every sample: N*k < C, where some classes
    would have no holder and their samples would go to no client, is refused. A client has fewer than k labels
    only if some class has fewer samples than holders.
    """
    ranks, n_classes = _ranks(labels)
    if k < 1:
        raise ConfigError(f"label-k needs k >= 1, got k={k}")
    if k > n_classes:
        raise ConfigError(f"label-k k={k} is larger than the number of classes ({n_classes})")
    _check_every_label_held("label-k", n_clients * k, n_classes, f"{n_clients} clients x k = {k}")
    slots: list[int] = []
    while len(slots) < n_clients * k:
        perm = [int(c) for c in rng.permutation(n_classes)]
        done = len(slots) % k  # slots the current client already has from the previous pass
        tail = set(slots[len(slots) - done:])
        head = [c for c in perm if c not in tail][: k - done] if done else []
        slots += head + [c for c in perm if c not in head]
    label_sets = [np.asarray(slots[j * k:(j + 1) * k]) for j in range(n_clients)]
    return _split_by_label_sets(labels, label_sets, rng)


def shards(
    labels: np.ndarray, n_clients: int, rng: np.random.Generator, *, shards_per_client: int = 2
) -> Parts:
    """McMahan et al. 2017 shards: sort by label, cut into N * shards_per_client shards, deal randomly.

    Samples of a label are in random order before cutting; shard sizes differ by at most one.
    Covers every sample.
    """
    if shards_per_client < 1:
        raise ConfigError(f"shards_per_client must be >= 1, got {shards_per_client}")
    n, n_shards = len(labels), n_clients * shards_per_client
    if n_shards > n:
        raise ConfigError(
            f"shards: {n_clients} clients x {shards_per_client} shards = {n_shards} exceeds the {n} samples"
        )
    ranks, n_classes = _ranks(labels)
    order = np.concatenate(_shuffled_classes(ranks, n_classes, rng)).astype(np.int64)
    pieces = np.array_split(order, n_shards)
    deal = rng.permutation(n_shards).reshape(n_clients, shards_per_client)
    return [np.sort(np.concatenate([pieces[s] for s in row])) for row in deal]


def nonbalance(
    labels: np.ndarray, n_clients: int, rng: np.random.Generator, *,
    client_fractions: Sequence[float] = (0.1, 0.4, 0.5),
    label_fractions: Sequence[float] = (1.0, 0.5, 0.2),
) -> Parts:
    """FedGSNR Appendix D.1 NonBalance: imbalanced information across three client groups.

    10% of the clients (at least one) hold all labels, 40% hold half of the labels, 50% hold 20% of
    the labels (rounded, at least one). Groups are positional: the first clients are the abundant
    ones, then medium, then less. Each client's labels are chosen at random; each class's samples are
    divided as evenly as possible among the clients holding it. Covers every sample: where no group holds
    every label and a class drawn for nobody remains, a label held twice is swapped for it
    (:func:`_cover_every_label`); where the clients hold fewer labels in all than there are classes, refused.
    """
    cf = list(client_fractions)
    if not cf or len(cf) != len(label_fractions) or min(cf) < 0 or sum(cf) <= 0:
        raise ConfigError(
            "nonbalance needs client_fractions and label_fractions: non-empty lists of equal length, fractions >= 0"
        )
    if not all(0 < f <= 1 for f in label_fractions):
        raise ConfigError(f"nonbalance label_fractions must lie in (0, 1], got {list(label_fractions)}")
    _, n_classes = _ranks(labels)
    groups = _largest_remainder(n_clients, client_fractions)
    richest = int(np.argmax(label_fractions))
    if groups[richest] == 0:  # keep one client holding the most labels, so every label is held
        groups[int(np.argmax(groups))] -= 1
        groups[richest] += 1
    sizes = [max(1, int(np.floor(frac * n_classes + 0.5))) for frac in label_fractions]
    _check_every_label_held("nonbalance", sum(g * m for g, m in zip(groups, sizes)), n_classes,
                            f"its groups of {', '.join(map(str, groups))} clients with "
                            f"{', '.join(map(str, sizes))} labels each")
    label_sets = []
    for size, n_labels in zip(groups, sizes):
        label_sets += [rng.choice(n_classes, n_labels, replace=False) for _ in range(size)]
    return _split_by_label_sets(labels, _cover_every_label(label_sets, n_classes, rng), rng)


def _check_every_label_held(split: str, slots: int, n_classes: int, holders: str) -> None:
    """One line where ``slots`` labels held in all cannot cover the ``n_classes`` classes: the samples of a class
    nobody holds would go to no client."""
    if slots < n_classes:
        raise ConfigError(f"{split}: {holders} hold {slots} labels in all, fewer than the {n_classes} classes, so "
                          "the samples of some classes would go to no client; give the clients more labels, or "
                          "more clients")


def _cover_every_label(label_sets: list[np.ndarray], n_classes: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``label_sets`` with every class held by some client: each class nobody holds takes the place of a label,
    drawn at random, that another client holds too (one exists while a class is missing and the sets hold at least
    ``n_classes`` labels). Each client keeps its number of distinct labels; sets that cover every class are
    returned as they are (no draw)."""
    sets = [np.array(s) for s in label_sets]
    missing = np.setdiff1d(np.arange(n_classes), np.concatenate(sets))
    for label in missing:
        held = np.bincount(np.concatenate(sets), minlength=n_classes)
        shared = [(j, i) for j, s in enumerate(sets) for i, c in enumerate(s) if held[c] > 1]
        j, i = shared[int(rng.integers(len(shared)))]
        sets[j][i] = label
    return sets


def pareto(
    labels: np.ndarray, n_clients: int, rng: np.random.Generator, *, shape: float = 1.16
) -> Parts:
    """FedGSNR Appendix D.1 Pareto: long-tailed number of labels per client.

    Draws x_i ~ Pareto(shape, x_min = 1) per client and normalises by the largest; client i holds
    max(1, round(x_i / max x * C)) labels, chosen at random (so the top client holds all labels).
    Each class's samples are divided as evenly as possible among its holders. Covers every sample.
    The paper gives no shape; the default 1.16 is the "80/20" Pareto index.
    """
    if not shape > 0:
        raise ConfigError(f"pareto shape must be > 0, got {shape}")
    _, n_classes = _ranks(labels)
    x = 1.0 + rng.pareto(shape, n_clients)
    ratio = x / x.max()
    n_labels = np.clip(np.floor(ratio * n_classes + 0.5).astype(np.int64), 1, n_classes)
    label_sets = [rng.choice(n_classes, int(m), replace=False) for m in n_labels]
    return _split_by_label_sets(labels, label_sets, rng)


def natural(
    labels: np.ndarray, n_clients: int, rng: np.random.Generator, *,
    partition: Sequence[Sequence[int]] | None = None,
) -> Parts:
    """The dataset's own partition (e.g. writers, users), validated: one index list per client,
    indices in range, no index on two clients. Covers what the given partition covers."""
    if partition is None:
        raise ConfigError("split 'natural' needs a dataset that provides a natural partition")
    if len(partition) != n_clients:
        raise ConfigError(f"the dataset's natural partition has {len(partition)} clients, not {n_clients}: "
                          f"set data.clients={len(partition)}")
    return [np.sort(a) for a in checked_partition(partition, len(labels), "natural partition")]


def checked_partition(partition: Sequence[Sequence[int]], n: int, what: str) -> list[np.ndarray]:
    """``partition`` as int64 index arrays, in its own order, once checked: integer indices in ``0..n-1``, no index
    on two clients (or twice on one); ``what`` names it in the one-line ConfigError."""
    if isinstance(partition, (str, bytes, Mapping)) or not isinstance(partition, Iterable):
        raise ConfigError(f"{what} must be one index array per client (a list of arrays), got "
                          f"{type(partition).__name__}")
    parts = []
    for p in partition:
        a = np.asarray(p)
        if a.ndim == 0:  # np.arange(n) itself: each index would be a client of one sample
            raise ConfigError(f"{what} must be one index array per client (a list of arrays); it holds a single "
                              f"number, {a.item()!r}, where a client's indices go (np.array_split(indices, clients) "
                              "makes one array per client)")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise ConfigError(f"{what} must hold integer sample indices")
        a = a.astype(np.int64).reshape(-1)
        if a.size and (a.min() < 0 or a.max() >= n):
            raise ConfigError(f"{what} has an index outside 0..{n - 1}")
        parts.append(a)
    allidx = np.concatenate(parts) if parts else np.empty(0, np.int64)
    if len(np.unique(allidx)) != len(allidx):
        raise ConfigError(f"{what} gives a sample to two clients (or twice to one)")
    return parts


SPLITS: dict[str, Callable[..., Parts]] = {
    "iid": iid,
    "case1": case1,
    "case2": case2,
    "case3": case3,
    "dirichlet": dirichlet,
    "label-k": label_k,
    "shards": shards,
    "nonbalance": nonbalance,
    "pareto": pareto,
    "natural": natural,
}


def split(
    name: str, labels: np.ndarray, n_clients: int, rng: np.random.Generator, **args: Any
) -> Parts:
    """Split ``labels`` (one integer label per sample) over ``n_clients`` with the split ``name``.

    Returns one sorted int64 array of sample indices per client.
    """
    if name not in SPLITS:
        raise ConfigError(f"unknown split {shown(name)}; known splits: {listed(SPLITS, near=name)}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise ConfigError("labels must be a 1-D array of integer class labels")
    if isinstance(n_clients, bool) or not isinstance(n_clients, (int, np.integer)) or n_clients < 1:
        raise ConfigError(f"n_clients must be an integer >= 1, got {shown(n_clients)}")
    n_clients = int(n_clients)
    if n_clients > len(labels):
        raise ConfigError(f"split {shown(name)}: {n_clients} clients but only {len(labels)} samples")
    fn = SPLITS[name]
    accepted = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(args) - set(accepted))
    if unknown:
        raise ConfigError(
            f"split {shown(name)} got unknown argument(s) {listed(unknown)}; "
            f"accepted: {listed(accepted, near=unknown[0])}"
        )
    return fn(labels, n_clients, rng, **args)


# ----------------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------------


def label_counts(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> np.ndarray:
    """N x C matrix: ``[k, c]`` = number of samples of label c on client k."""
    labels = np.asarray(labels)
    out = np.zeros((len(parts), num_classes), np.int64)
    for k, p in enumerate(parts):
        out[k] = np.bincount(labels[np.asarray(p, np.int64)], minlength=num_classes)[:num_classes]
    return out


def format_report(counts: np.ndarray) -> str:
    """Text table: one row per client with its total and per-label counts, then a total row."""
    counts = np.asarray(counts, np.int64)
    n_clients, n_classes = counts.shape
    rows = [["client", "total", *map(str, range(n_classes))]]
    for k in range(n_clients):
        rows.append([str(k), str(counts[k].sum()), *map(str, counts[k])])
    rows.append(["all", str(counts.sum()), *map(str, counts.sum(axis=0))])
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(r, widths)) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    return "\n".join(lines)


def plot_heatmap(counts: np.ndarray, path: str | Path, title: str = "", force: bool = False) -> Path:
    """Save a clients x labels heat map of ``counts`` as PNG (counts written in cells up to 20 x 20;
    an existing file that is not a PNG is left alone unless ``force``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    counts = np.asarray(counts)
    n_clients, n_classes = counts.shape
    path = Path(path)
    check_png_output(path, force)
    fig = Figure(figsize=(min(2 + 0.5 * n_classes, 16), min(1.5 + 0.35 * n_clients, 20)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    im = ax.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    fig.colorbar(im, ax=ax, label="samples")
    ax.set_xlabel("label")
    ax.set_ylabel("client")
    if title:
        ax.set_title(title)
    if n_clients <= 20 and n_classes <= 20:
        ax.set_xticks(range(n_classes))
        ax.set_yticks(range(n_clients))
        cut = counts.min() + 0.5 * (counts.max() - counts.min())
        for k in range(n_clients):
            for c in range(n_classes):
                ax.text(c, k, str(counts[k, c]), ha="center", va="center", fontsize=7,
                        color="black" if counts[k, c] > cut else "white")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_png(fig, path, dpi=100)
