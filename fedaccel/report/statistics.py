"""The statistics behind every verdict (docs/statistics.md states them for a reviewer).

All tests are on the per-seed differences ``d_s = m(a_s) - m(b_s)`` of paired runs:

- :func:`sign_flip_p`: the exact paired sign-flip (randomisation) test of the mean difference: under
  no effect each ``d_s`` is as likely to have either sign, so the p-value is the share of the
  ``2^n`` sign vectors whose mean is at least as extreme as the observed one (all of them up to
  :data:`EXACT_UP_TO` pairs, a seeded Monte Carlo sample beyond, counting the observed vector);
- :func:`t_interval`: Student's t interval of the mean difference, shown as the effect size;
- :func:`tost_p`: two one-sided sign-flip tests against ``±margin`` (equivalence);
- :func:`bh_adjust`: Benjamini–Hochberg adjusted p-values (q) across a family of claims;
- :func:`seeds_for_power`: the pairs a two-sided paired test needs for 80% power.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

ALPHA = 0.05  # the level of every test, and the false discovery rate of a family
EXACT_UP_TO = 20  # pairs: every sign vector is enumerated up to here (2^20 ≈ 1e6)
MONTE_CARLO = 200_000  # sign vectors drawn beyond EXACT_UP_TO (seeded)
_CHUNK = 1 << 15
ALTERNATIVES = ("two-sided", "greater", "less")


def _tolerance(d: np.ndarray) -> float:
    """Means that differ from the observed one by rounding only count as equal to it."""
    return 1e-9 * max(1.0, float(np.abs(d).max(initial=0.0)))


def sign_flip_p(differences: Sequence[float], alternative: str = "two-sided", *, seed: int = 0) -> float:
    """p-value of the paired sign-flip test of ``mean(d) = 0`` against ``alternative``
    (``greater``: the mean is above 0). Exact up to :data:`EXACT_UP_TO` pairs.

    >>> sign_flip_p([0, 0, 0, 0, 0, -1, -1, -1, -1, -1])  # five ties, five -1: 2 of 32 sign patterns
    0.0625
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, not {alternative!r}")
    d = np.asarray(differences, dtype=float)
    n = d.size
    if n == 0:
        return 1.0
    observed, tol = float(d.mean()), _tolerance(d)
    hits, total = 0, 0
    batches = ((np.arange(s, min(s + _CHUNK, 2**n)) for s in range(0, 2**n, _CHUNK)) if n <= EXACT_UP_TO
               else (None for _ in range(math.ceil(MONTE_CARLO / _CHUNK))))
    rng = np.random.default_rng(seed)
    for codes in batches:
        if codes is not None:
            signs = 1.0 - 2.0 * ((codes[:, None] >> np.arange(n)) & 1)
        else:
            signs = rng.choice((-1.0, 1.0), size=(_CHUNK, n))
        means = signs @ d / n
        if alternative == "greater":
            hits += int(np.count_nonzero(means >= observed - tol))
        elif alternative == "less":
            hits += int(np.count_nonzero(means <= observed + tol))
        else:
            hits += int(np.count_nonzero(np.abs(means) >= abs(observed) - tol))
        total += len(means)
    if n > EXACT_UP_TO:  # the observed sign vector is one of the draws (a valid Monte Carlo p-value)
        hits, total = hits + 1, total + 1
    return min(1.0, hits / total)


def t_interval(differences: Sequence[float], level: float = 1 - ALPHA) -> tuple[float, float]:
    """Student's t interval of the mean of ``differences`` (n - 1 degrees of freedom); a point when
    every difference is the same."""
    from scipy.stats import t as student_t

    d = np.asarray(differences, dtype=float)
    mean = float(d.mean())
    if d.size < 2 or float(d.std()) == 0.0:
        return mean, mean
    half = float(student_t.ppf(0.5 + level / 2, d.size - 1)) * float(d.std(ddof=1)) / math.sqrt(d.size)
    return mean - half, mean + half


def tost_p(differences: Sequence[float], margin: float, *, seed: int = 0) -> float:
    """Equivalence within ``±margin``: the larger p of the two one-sided sign-flip tests
    ``mean > -margin`` and ``mean < margin`` (each on the differences shifted by the margin)."""
    if not margin > 0:
        raise ValueError(f"an equivalence test needs a margin > 0, got {margin!r}")
    d = np.asarray(differences, dtype=float)
    return max(sign_flip_p(d + margin, "greater", seed=seed), sign_flip_p(d - margin, "less", seed=seed))


def bh_adjust(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (q), in the order given (scipy's
    ``false_discovery_control``); a verdict at false discovery rate α needs ``q <= α``."""
    if not len(p_values):
        return []
    from scipy.stats import false_discovery_control

    return [float(q) for q in false_discovery_control(np.asarray(p_values, dtype=float), method="bh")]


def smallest_p(n: int) -> float:
    """The smallest two-sided p-value the exact sign-flip test can give with ``n`` pairs."""
    return min(1.0, 2.0 / 2**n) if n <= EXACT_UP_TO else 1.0 / (MONTE_CARLO + 1)


def seeds_for_power(effect: float, sd: float, *, power: float = 0.8, alpha: float = ALPHA,
                    most: int = 1000) -> int | None:
    """Pairs needed to detect a mean difference ``effect`` with ``power`` in a two-sided paired test at
    ``alpha``, with differences of standard deviation ``sd`` (the t-test's power from the noncentral t,
    and at least the pairs the exact sign-flip test needs to reach ``alpha`` at all); None beyond ``most``."""
    from scipy.stats import nct
    from scipy.stats import t as student_t

    floor = next(n for n in range(2, 64) if smallest_p(n) <= alpha)
    if effect == 0:
        return None
    if sd <= 0:
        return floor
    for n in range(max(2, floor), most + 1):
        crit = float(student_t.ppf(1 - alpha / 2, n - 1))
        shift = abs(effect) / sd * math.sqrt(n)
        reach = float(nct.sf(crit, n - 1, shift) + nct.cdf(-crit, n - 1, shift))
        if reach >= power:
            return n
    return None
