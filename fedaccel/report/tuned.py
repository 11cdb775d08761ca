"""The test of a claim whose sides each choose a best value (docs/statistics.md §1.3).

"a at its best η against b at its best η" compares two *procedures*: choose η on the tuning seeds,
then run at it. Two identical methods choose different η by chance (a near-tie on three tuning seeds
splits them about one time in five), and the judged seeds then rightly see two different η: the plain
sign-flip test rejects "no difference" far more often than 5%. Under no difference between the
methods at any η, swapping the labels a and b of one seed, on a tuning seed as on a judged one, leaves
the distribution unchanged. So the exact test swaps them: for every choice of swapped tuning seeds,
each side chooses again on its (swapped) tuning figures, and the judged seeds' swaps are counted as in
:func:`~fedaccel.report.statistics.swap_p` at those choices, against the observed mean difference.
This needs every candidate value run by both sides on every tuning and judged seed.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from fedaccel.report.statistics import swap_p

ENUMERATE_TUNING_UP_TO = 12  # tuning seeds: every swap choice is enumerated up to here, sampled beyond
TUNING_DRAWS = 4096  # swap choices of the tuning seeds drawn beyond ENUMERATE_TUNING_UP_TO (seeded)


def choice(selection: np.ndarray) -> int:
    """The candidate with the lowest mean selection figure over the tuning seeds (rows: candidates,
    columns: seeds); a non-finite mean never wins, and the first of equal means does."""
    means = selection.mean(axis=1)
    return int(np.argmin(np.where(np.isfinite(means), means, math.inf)))


def tuned_swap_p(selection: np.ndarray, measure: np.ndarray, fixed: tuple[int | None, int | None],
                 *, seed: int = 0) -> float:
    """Two-sided p-value of "a and b do not differ" when the compared values are chosen on tuning seeds.

    ``selection[x, v, t]``: side ``x``'s (0 = a, 1 = b) selection figure at candidate ``v`` on tuning
    seed ``t``; ``measure[x, v, s]``: its claim measure on judged seed ``s``; ``fixed[x]``: the
    candidate side ``x`` always uses, or None where it chooses its best.

    >>> sel = np.array([[[0.0], [1.0]], [[0.0], [1.0]]])  # one tuning seed: both sides choose candidate 0
    >>> m = np.array([[[1.0, 2.0], [9.0, 9.0]], [[0.0, 0.0], [9.0, 9.0]]])
    >>> tuned_swap_p(sel, m, (None, None))  # the sign flip of d = [1, 2]: means ±1.5 and ±0.5
    0.5
    """
    k = selection.shape[2]

    def chosen(swap: np.ndarray) -> tuple[int, int]:
        s = np.where(swap[None, None, :], selection[::-1], selection)
        return tuple(fixed[x] if fixed[x] is not None else choice(s[x]) for x in (0, 1))  # type: ignore[return-value]

    va, vb = chosen(np.zeros(k, dtype=bool))
    observed = float(np.mean(measure[0, va] - measure[1, vb]))
    if k <= ENUMERATE_TUNING_UP_TO:
        swaps = [np.array(bits, dtype=bool) for bits in itertools.product((False, True), repeat=k)]
    else:
        rng = np.random.default_rng(seed)
        swaps = [np.zeros(k, dtype=bool)] + [rng.integers(0, 2, k).astype(bool) for _ in range(TUNING_DRAWS - 1)]
    shares: dict[tuple[int, int], float] = {}
    total = 0.0
    for swap in swaps:
        a, b = chosen(swap)
        if (a, b) not in shares:
            shares[(a, b)] = swap_p(measure[0, a] - measure[1, b], measure[1, a] - measure[0, b],
                                    observed=observed, seed=seed)
        total += shares[(a, b)]
    return min(1.0, total / len(swaps))
