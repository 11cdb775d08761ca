"""The statistics behind every verdict (docs/statistics.md states them for a reviewer).

All tests are on the per-seed differences ``d_s = m(a_s) - m(b_s)`` of paired runs:

- :func:`sign_flip_p`: the exact paired sign-flip (randomisation) test of the mean difference: under
  no effect each ``d_s`` is as likely to have either sign, so the p-value is the share of the
  ``2^n`` sign vectors whose mean is at least as extreme as the observed one (all of them up to
  :data:`EXACT_UP_TO` pairs, a seeded Monte Carlo sample beyond, counting the observed vector);
- :func:`swap_p`: the same randomisation test when swapping a pair's labels does more than flip its
  difference's sign (a claim whose sides each choose a best value: :mod:`fedaccel.report.tuned`);
- :func:`sign_test_p`: the exact sign test of the *median* difference against a centre (a margin, a
  constant): it needs no symmetry, so it holds its level under skew, where a test of the mean
  against a margin cannot at these sample sizes (docs/statistics.md §3);
- :func:`sign_flip_interval` / :func:`median_interval`: the intervals the two tests invert to, shown with
  the effect sizes (:func:`t_interval` remains for the tables' and figures' bands of a mean over seeds);
- :func:`tost_p` / :func:`outside_p`: equivalence within ``±margin`` and its opposite, by sign tests;
- :func:`stage_weights` / :func:`combined_p` / :func:`combined_interval`: seeds raised after a look, judged by
  the inverse-normal combination of each stage's own one-sided test (docs/raised-seeds.md);
- :func:`bh_adjust`: Benjamini–Hochberg adjusted p-values (q) across a family of claims;
- :func:`seeds_for_power`, :func:`seeds_for_equivalence`, :func:`detectable_effect`, :func:`detectable_margin`,
  :func:`detectable_staged`: 80% power, each of the test the verdict uses (:func:`sign_power`, :func:`tost_power`
  and their stages' combinations, exact under normal differences; the t test's for a mean).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

ALPHA = 0.05  # the level of every test, and the false discovery rate of a family
EXACT_UP_TO = 20  # pairs: every sign vector is enumerated up to here (2^20 ≈ 1e6)
MONTE_CARLO = 200_000  # sign vectors asked for beyond EXACT_UP_TO (seeded), drawn in whole chunks:
_CHUNK = 1 << 15
MONTE_CARLO_DRAWS = math.ceil(MONTE_CARLO / _CHUNK) * _CHUNK  # 229,376 drawn
ALTERNATIVES = ("two-sided", "greater", "less")


TIE = 1e-9  # relative: values within TIE of the differences' scale count as equal (rounding, not data)


def _tolerance(d: np.ndarray, *more: float) -> float:
    """Means (or values) that differ by rounding only count as equal: ``TIE`` times the largest ``|d|``
    (or centre given in ``more``), so the same data in other units (d × 1000) give the same p-value."""
    finite = d[np.isfinite(d)]  # a censored difference's open end (inf) is no scale
    return TIE * max([float(np.abs(finite).max(initial=0.0)), *map(abs, more)])


def _checked(differences: Sequence[float], alternative: str) -> np.ndarray:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, not {alternative!r}")
    return np.asarray(differences, dtype=float)


def sign_flip_p(differences: Sequence[float], alternative: str = "two-sided", *, seed: int = 0) -> float:
    """p-value of the paired sign-flip test of ``mean(d) = 0`` against ``alternative``
    (``greater``: the mean is above 0). Exact up to :data:`EXACT_UP_TO` pairs.

    >>> sign_flip_p([0, 0, 0, 0, 0, -1, -1, -1, -1, -1])  # five ties, five -1: 2 of 32 sign patterns
    0.0625
    """
    d = _checked(differences, alternative)
    return swap_p(d, -d, alternative, seed=seed)


def swap_p(stay: Sequence[float], swapped: Sequence[float], alternative: str = "two-sided", *,
           observed: float | None = None, seed: int = 0) -> float:
    """The paired randomisation test in general: pair ``s`` shows ``stay[s]`` as observed and
    ``swapped[s]`` had its two runs' labels been swapped (``-stay[s]`` for a plain difference: the
    sign flip). The p-value is the share of the ``2^n`` choices whose mean is at least as extreme as
    ``observed`` (default: the mean of ``stay``): all of them up to :data:`EXACT_UP_TO` pairs, a seeded
    Monte Carlo sample beyond, counting the observed choice.

    >>> swap_p([1.0, 2.0], [-1.0, 0.0])  # means 1.5, 0.5, 1.0, 0.0: one of four at least 1.5 away from 0
    0.25
    """
    keep, other = _checked(stay, alternative), np.asarray(swapped, dtype=float)
    n = keep.size
    if n == 0:
        return 1.0
    observed = float(keep.mean()) if observed is None else float(observed)
    tol = _tolerance(np.concatenate([keep, other]), observed)
    change = other - keep
    if n <= EXACT_UP_TO:
        return _exact_share(keep.sum(), change, observed, tol, alternative)
    hits, total = 0, 0
    rng = np.random.default_rng(seed)
    for _ in range(MONTE_CARLO_DRAWS // _CHUNK):
        picks = 1.0 - rng.integers(0, 2, size=(_CHUNK, n))  # the draws sign_flip_p always made
        hits += _count_extreme((keep.sum() + picks @ change) / n, observed, tol, alternative)
        total += _CHUNK
    return min(1.0, (hits + 1) / (total + 1))  # the observed choice is one of the draws (a valid Monte Carlo p)


def _count_extreme(means: np.ndarray, observed: float, tol: float, alternative: str) -> int:
    if alternative == "greater":
        return int(np.count_nonzero(means >= observed - tol))
    if alternative == "less":
        return int(np.count_nonzero(means <= observed + tol))
    return int(np.count_nonzero(np.abs(means) >= abs(observed) - tol))


def _subset_sums(values: np.ndarray) -> np.ndarray:
    sums = np.zeros(1)
    for v in values:
        sums = np.concatenate([sums, sums + v])
    return sums


def _exact_share(base: float, change: np.ndarray, observed: float, tol: float, alternative: str) -> float:
    """The share of the ``2^n`` sums ``base + Σ_(s in S) change[s]`` whose mean is at least as extreme
    as ``observed``: every subset counted, meeting in the middle (two halves' sums, one sorted)."""
    n = change.size
    low = _subset_sums(change[: n // 2]) + base
    high = np.sort(_subset_sums(change[n // 2:]))

    def at_least(total: float) -> int:  # pairs with low + high >= total
        return int(high.size * low.size - np.searchsorted(high, total - low, side="left").sum())

    def at_most(total: float) -> int:  # pairs with low + high <= total
        return int(np.searchsorted(high, total - low, side="right").sum())

    if alternative == "greater":
        hits = at_least(n * (observed - tol))
    elif alternative == "less":
        hits = at_most(n * (observed + tol))
    else:
        edge = abs(observed) - tol
        hits = 2 ** n if edge <= 0 else at_least(n * edge) + at_most(-n * edge)
    return min(1.0, hits / 2 ** n)


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


def sign_flip_interval(differences: Sequence[float], level: float = 1 - ALPHA,
                       test: Callable[[np.ndarray], float] | None = None) -> tuple[float, float]:
    """The interval :func:`sign_flip_p` inverts to: the shifts c whose test of ``mean(d - c) = 0`` it does not
    reject at ``1 - level`` (each end found by bisection, to 1e-7 of the differences' range). It holds 0
    exactly when the test's p-value exceeds ``1 - level``, so it never contradicts the test, as a t
    interval can; ``(-inf, inf)`` when no shift can be rejected (n <= 5 at 95%: the smallest p is 2/2^n).

    >>> [round(x, 6) for x in sign_flip_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]  # 2/64 < 0.05: bounded
    [1.0, 6.0]
    """
    test = test or sign_flip_p
    d = np.asarray(differences, dtype=float)
    n, alpha = d.size, 1 - level
    if n == 0 or 2.0 / 2 ** min(n, 60) > alpha:
        return -math.inf, math.inf
    mean = float(d.mean())
    span = float(d.max() - d.min())
    if not math.isfinite(span):  # an unbounded difference: no finite interval
        return -math.inf, math.inf
    if span <= TIE * float(np.abs(d).max()):  # equal up to rounding, as the tests count ties
        return mean, mean

    def accepted(c: float) -> bool:
        return test(d - c) > alpha

    # to 1e-7 of the range, but never finer than the floats there can tell apart (differences equal to the
    # 17th digit once made the bisection run for ever)
    resolution = max(1e-7 * span, 8 * float(np.spacing(float(np.abs(d).max()) + span)))
    ends = []
    for far in (float(d.min()) - span, float(d.max()) + span):  # every difference on one side: p = 2/2^n
        inside, outside = mean, far
        for _ in range(200):
            if abs(outside - inside) <= resolution:
                break
            middle = (inside + outside) / 2
            inside, outside = (middle, outside) if accepted(middle) else (inside, middle)
        ends.append(inside)
    return ends[0], ends[1]


@functools.lru_cache(maxsize=256)
def _at_least(n: int) -> tuple[float, ...]:
    """P(B >= k) for k = 0..n, B ~ Binomial(n, 1/2)."""
    from scipy.stats import binom

    return tuple(float(binom.sf(k - 1, n, 0.5)) for k in range(n + 1))


def sign_test_p(differences: Sequence[float], alternative: str = "two-sided", *, centre: float = 0.0) -> float:
    """Exact sign test of the median of ``differences`` against ``centre``: ``greater`` tests
    P(d > centre) <= 1/2 against > 1/2 (the median lies above ``centre``), ``less`` the mirror, and
    ``two-sided`` is twice the smaller. Values tied with ``centre`` (within :func:`_tolerance`) count
    against the alternative, so the test stays exact (conservative) for discrete data.

    >>> sign_test_p([1.0] * 6, "greater")  # six of six above 0: 1 of 64
    0.015625
    """
    d = _checked(differences, alternative)
    n = d.size
    if n == 0:
        return 1.0
    tol = _tolerance(d, centre)
    above, below = int(np.count_nonzero(d - centre > tol)), int(np.count_nonzero(d - centre < -tol))
    greater, less = _at_least(n)[above], _at_least(n)[below]
    if alternative == "greater":
        return greater
    if alternative == "less":
        return less
    return min(1.0, 2 * min(greater, less))


def _check_margin(margin: float) -> None:
    if not margin > 0:
        raise ValueError(f"an equivalence test needs a margin > 0, got {margin!r}")


Bounds = tuple[Sequence[float], Sequence[float]]  # what each difference is at least and at most (censoring)


def tost_p(differences: Sequence[float], margin: float, bounds: Bounds | None = None) -> float:
    """Equivalence: the median difference lies inside ``±margin``; the larger p of the two one-sided
    sign tests (median above ``-margin``, median below ``margin``). With ``bounds`` (a censored difference
    known only to lie in [low, high]), each test counts a difference only where every value it could take
    counts: the p is the largest over every placement of the censored values, so the test keeps its level."""
    _check_margin(margin)
    low, high = bounds if bounds is not None else (differences, differences)
    return max(sign_test_p(low, "greater", centre=-margin), sign_test_p(high, "less", centre=margin))


def outside_p(differences: Sequence[float], margin: float, bounds: Bounds | None = None) -> float:
    """The opposite of :func:`tost_p`: the median difference lies outside ``±margin`` (the smaller p of
    the one-sided sign tests of median above ``margin`` and median below ``-margin``); ``bounds`` as there."""
    _check_margin(margin)
    low, high = bounds if bounds is not None else (differences, differences)
    return min(sign_test_p(low, "greater", centre=margin), sign_test_p(high, "less", centre=-margin))


def median_interval(differences: Sequence[float], level: float = 1 - ALPHA) -> tuple[float, float]:
    """The distribution-free interval of the median from order statistics (coverage at least ``level``;
    it excludes a centre exactly when the two-sided sign test rejects it at ``1 - level``);
    ``(-inf, inf)`` when ``n`` is too small for any order statistic to reach ``level``."""
    from scipy.stats import binom

    d = np.sort(np.asarray(differences, dtype=float))
    n = d.size
    tail = (1 - level) / 2
    below = [j for j in range(n) if binom.cdf(j, n, 0.5) <= tail]  # P(B <= j): d_(j+1) above the median
    if not below:
        return -math.inf, math.inf
    j = below[-1]
    return float(d[j]), float(d[n - 1 - j])


PLANNED_PAIRS = 20  # the most judged pairs the reproductions' --plan rule raises seeds to (issue 20): stage weights


def stage_weights(sizes: Sequence[int], cap: int = PLANNED_PAIRS) -> list[float]:
    """The inverse-normal weights of stages of ``sizes`` seeds (as designed, before their data): w_k² = n_k / cap
    for every stage but the last, which gets what is left, 1 - Σ w_k². Each weight is known before its stage's
    data, and the squares sum to 1 whatever the last stage's size: so the combination keeps its level however
    the later stages' sizes were chosen from the earlier ones' data. A cap the earlier stages fill is an error.

    >>> [round(w * w, 3) for w in stage_weights([5, 5, 5], cap=20)]
    [0.25, 0.25, 0.5]
    """
    early = sum(sizes[:-1])
    if not sizes or any(n < 0 for n in sizes) or early >= cap:
        raise ValueError(f"stages of {list(sizes)} seeds leave no weight for the last one under a cap of {cap} pairs")
    return [math.sqrt(n / cap) for n in sizes[:-1]] + [math.sqrt(1 - early / cap)]


def combined_p(one_sided: Sequence[float | None], weights: Sequence[float]) -> float:
    """The inverse-normal combination of stages' one-sided p-values: 1 - Φ(Σ w_k Φ⁻¹(1 - p_k)) (Lehmacher &
    Wassmer 1999), the weights' squares summing to 1. Under the null each stage's p is at least uniform given
    the stages before (the stages' seeds are independent runs), so the result is too. A stage without data
    (``None``) counts as z = 0, which only lowers the level (the others' sum has variance below 1).

    >>> round(combined_p([0.5, 0.5], [0.6, 0.8]), 6)
    0.5
    """
    from scipy.special import ndtr, ndtri  # Φ and Φ⁻¹ (scipy.stats.norm's, without its overhead)

    z = sum(w * (0.0 if p is None else -float(ndtri(p))) for p, w in zip(one_sided, weights))
    return float(ndtr(-z))


def combined_interval(greater: Callable[[float], float], less: Callable[[float], float], values: Sequence[float],
                      level: float = 1 - ALPHA) -> tuple[float, float]:
    """The interval a combination test inverts to: the shifts c that neither one-sided combined test rejects at
    half of ``1 - level`` (``greater(c)``: the combined p of "the effect is above c", rising with c; ``less(c)``
    the mirror). Each end found by bisection over the data's range widened by that range (an end no shift
    reaches is infinite), and 0 where neither test rejects it: so it holds 0 exactly when the two-sided combined p
    exceeds ``1 - level``."""
    d = np.asarray(values, dtype=float)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return -math.inf, math.inf
    span = float(d.max() - d.min()) or max(1.0, float(np.abs(d).max()))
    far_low, far_high = float(d.min()) - span, float(d.max()) + span
    half = (1 - level) / 2
    resolution = max(1e-7 * span, 8 * float(np.spacing(float(np.abs(d).max()) + span)))

    def edge(rejects: Callable[[float], bool], rejected: float, kept: float) -> float:
        for _ in range(200):
            if abs(kept - rejected) <= resolution:
                break
            middle = (kept + rejected) / 2
            rejected, kept = (middle, kept) if rejects(middle) else (rejected, middle)
        return kept

    low = -math.inf if greater(far_low) > half else edge(lambda c: greater(c) <= half, far_low, far_high)
    high = math.inf if less(far_high) > half else edge(lambda c: less(c) <= half, far_high, far_low)
    if greater(0.0) > half and less(0.0) > half:  # 0 kept: the interval is the hull of the shifts kept, 0 with them
        low, high = min(low, 0.0), max(high, 0.0)  # (a stage of ties is no evidence at 0 alone: a kept point apart)
    return low, high


def bh_adjust(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (q), in the order given (scipy's
    ``false_discovery_control``); a verdict at false discovery rate α needs ``q <= α``."""
    if not len(p_values):
        return []
    from scipy.stats import false_discovery_control

    return [float(q) for q in false_discovery_control(np.asarray(p_values, dtype=float), method="bh")]


def smallest_p(n: int) -> float:
    """The smallest two-sided p-value the exact sign-flip test can give with ``n`` pairs."""
    return min(1.0, 2.0 / 2**n) if n <= EXACT_UP_TO else 1.0 / (MONTE_CARLO_DRAWS + 1)


def _exact_floor(alpha: float) -> int:
    """The fewest pairs with which the exact tests can reach ``alpha`` at all (two-sided)."""
    return next(n for n in range(2, 64) if smallest_p(n) <= alpha)


def _t_power(effect: float, sd: float, n: int, alpha: float) -> float:
    from scipy.stats import t as student_t

    crit = float(student_t.ppf(1 - alpha / 2, n - 1))
    shift = abs(effect) / sd * math.sqrt(n)
    return 1 - _nct_cdf(n - 1, shift, crit) + _nct_cdf(n - 1, shift, -crit)


def _nct_cdf(df: int, shift: float, x: float) -> float:
    """P(T < x) for the noncentral t of ``df`` and ``shift``. scipy's ``nctdtr`` (its cdf without ``nct``'s
    overhead) gives NaN in far tails (``nctdtr(5, 12.2, -2.57)``, ``nctdtr(5, 51.4, 2.57)``), and a NaN power read as
    "not enough" asked 14 seeds where 6 do: then its mirror 1 - P(T' < -x) of the negated shift, else the normal
    approximation, which is 0 or 1 to many digits there."""
    from scipy.special import nctdtr, ndtr

    value = float(nctdtr(df, shift, x))
    if not math.isfinite(value):
        value = float(1 - nctdtr(df, -shift, -x))
    if not math.isfinite(value):
        value = float(ndtr((x - shift) / math.sqrt(1 + x * x / (2 * df))))
    return value


def critical_counts(ns: Sequence[int] | np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Per n, the fewest of ``n`` values on one side of the centre with which the two-sided sign test decides at
    ``alpha``: the smallest c with ``min(1, 2 P(B >= c)) <= alpha``, B ~ Binomial(n, 1/2), the floats
    :func:`sign_test_p` compares; ``n + 1`` where no count does (n below :func:`_exact_floor`).

    >>> critical_counts([5, 6, 10, 11]).tolist()
    [6, 6, 9, 10]
    """
    from scipy.stats import binom

    n = np.atleast_1d(np.asarray(ns, dtype=int))
    guess = np.nan_to_num(binom.ppf(1 - alpha / 2, n, 0.5)).astype(int) + 1  # up to rounding
    ks = guess[:, None] + np.arange(-3, 4)  # monotone in k: the first that decides is the count
    decides = (np.minimum(1.0, 2 * binom.sf(ks - 1, n[:, None], 0.5)) <= alpha) & (ks >= 0) & (ks <= n[:, None])
    if decides[:, 0].any():  # rounding moved the guess by more than the window: count every k
        return np.array([next((k for k in range(m + 1) if min(1.0, 2 * float(binom.sf(k - 1, m, 0.5))) <= alpha),
                              m + 1) for m in n])
    return np.where(decides.any(axis=1), ks[np.arange(n.size), decides.argmax(axis=1)], n + 1)


def _sign_count(n: int, alpha: float) -> int | None:
    """The fewest of ``n`` values on one side that the two-sided sign test at ``alpha`` decides on."""
    count = int(critical_counts([n], alpha)[0])
    return count if count <= n else None


def sign_power(toward: float, ns: Sequence[int] | np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Per n, the power of the two-sided sign test at ``alpha`` to decide on the side of its centre where normal
    differences lie, their mean ``toward`` standard deviations beyond the centre: P(Binomial(n, Φ(toward)) >= c_n),
    c_n from :func:`critical_counts` (exact under the normal model; 0 where n pairs cannot decide at all)."""
    from scipy.special import bdtrc, ndtr

    n = np.atleast_1d(np.asarray(ns, dtype=int))
    return np.asarray(bdtrc(critical_counts(n, alpha) - 1, n, ndtr(toward)), dtype=float)


def tost_power(mean: float, margin: float, ns: Sequence[int] | np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Per n, the power of an "equal" claim's verdict (:func:`tost_p` at ``alpha / 2`` a side, as the claim's
    two-sided p) for normal differences of ``mean``, the margin ``±margin`` (both in standard deviations): it agrees
    when at most ``n - c_n`` differences lie at or below ``-margin`` and at most as many at or above ``+margin``
    (:func:`critical_counts`); the trinomial sum over those counts, exact under the normal model."""
    from scipy.special import bdtr, ndtr
    from scipy.stats import binom

    n = np.atleast_1d(np.asarray(ns, dtype=int))
    room = n - critical_counts(n, alpha)  # the most differences beyond either margin
    low, high = float(ndtr(-margin - mean)), float(ndtr(mean - margin))  # P(d < -margin), P(d > margin)
    rest = min(1.0, high / (1 - low)) if low < 1 else 0.0  # beyond +margin, among those not below -margin
    i = np.arange(max(int(room.max()), 0) + 1)[None, :]  # below -margin
    counted = i <= room[:, None]
    terms = binom.pmf(i, n[:, None], low) * bdtr(np.maximum(room[:, None], 0), n[:, None] - i, rest)
    return np.where(counted, terms, 0.0).sum(axis=1)


def _first_reaching(power_at: Callable[[np.ndarray], np.ndarray], power: float, start: int, most: int) -> int | None:
    """The fewest n in ``start..most`` with ``power_at(n) >= power``, computed in blocks that double (most pilots
    need few seeds, so the search stops early); None when none does. The exact tests' power is not monotone in n
    (a count that decides at n may not at n + 1), so this is the first n that reaches it, not every n after."""
    n, block = start, 16
    while n <= most:
        ns = np.arange(n, min(most, n + block - 1) + 1)
        hit = np.flatnonzero(power_at(ns) >= power)
        if hit.size:
            return int(ns[hit[0]])
        n, block = int(ns[-1]) + 1, block * 2
    return None


def _smallest(reach: Callable[[float], float], power: float, guess: float) -> float:
    """The smallest x >= 0 with ``reach(x) >= power`` (``reach`` increasing), to 1e-5 of ``guess`` (a
    bracket is searched around it: each ``reach`` of the noncentral t costs milliseconds)."""
    from scipy.optimize import brentq

    low, high = guess / 2, guess * 2
    while reach(high) < power:
        low, high = high, high * 2
    while low > 1e-12 * guess and reach(low) >= power:
        low, high = low / 2, low
    return float(brentq(lambda x: reach(x) - power, low, high, xtol=1e-5 * guess))


def detectable_effect(sd: float, n: int, *, median: bool = False, power: float = 0.8,
                      alpha: float = ALPHA) -> float | None:
    """The minimum detectable effect: the smallest true difference (beyond the tested centre) that ``n``
    pairs with differences of standard deviation ``sd`` detect with ``power`` in a two-sided test at
    ``alpha``: the t test's power (noncentral t) for the mean; for the median (``median``) the sign
    test's, with normal differences. None when ``n`` pairs cannot reach ``alpha`` at all."""
    from scipy.stats import norm

    if n < _exact_floor(alpha) or not math.isfinite(sd):
        return None
    if sd <= 0:
        return 0.0
    guess = (norm.ppf(1 - alpha / 2) + norm.ppf(power)) * sd / math.sqrt(n)  # the normal approximation
    if not median:
        return _smallest(lambda e: _t_power(e, sd, n, alpha), power, guess)
    return _smallest(lambda e: float(sign_power(e / sd, [n], alpha)[0]), power, guess)


def detectable_margin(sd: float, n: int, *, power: float = 0.8, alpha: float = ALPHA) -> float | None:
    """The smallest margin within which ``n`` pairs show equivalence (:func:`tost_p` at ``alpha / 2`` a
    side, as a claim's two-sided p) with ``power`` when the true difference is 0 (normal, sd ``sd``)."""
    if n < _exact_floor(alpha) or not math.isfinite(sd):
        return None
    if sd <= 0:
        return 0.0
    return _smallest(lambda margin: float(tost_power(0.0, margin / sd, [n], alpha)[0]), power, sd)  # guess: one sd


def seeds_for_power(effect: float, sd: float, *, power: float = 0.8, alpha: float = ALPHA,
                    most: int = 1000, median: bool = False) -> int | None:
    """Pairs needed to detect a difference ``effect`` (beyond the tested centre) with ``power`` in a two-sided
    paired test at ``alpha``, with differences of standard deviation ``sd``: for a mean the t test's power from the
    noncentral t (the sign-flip test's, near enough), at least the pairs the exact test needs to reach ``alpha``
    at all; for a median (``median``) the sign test's own (:func:`sign_power`, normal differences). None beyond
    ``most``."""
    floor = _exact_floor(alpha)
    if effect == 0:
        return None
    if sd <= 0:
        return floor
    if median:
        return _first_reaching(lambda ns: sign_power(abs(effect) / sd, ns, alpha), power, max(2, floor), most)
    return next((n for n in range(max(2, floor), most + 1) if _t_power(effect, sd, n, alpha) >= power), None)


def seeds_for_equivalence(mean: float, sd: float, margin: float, *, power: float = 0.8, alpha: float = ALPHA,
                          most: int = 1000) -> int | None:
    """Pairs with which an "equal" claim's verdict (TOST by sign tests, :func:`tost_power`) agrees with ``power``
    when the differences are normal with ``mean`` and ``sd`` inside ``±margin``; None when ``mean`` lies at or
    beyond the margin or more than ``most`` are needed."""
    _check_margin(margin)
    if not abs(mean) < margin:
        return None
    if sd <= 0:
        return _exact_floor(alpha)
    return _first_reaching(lambda ns: tost_power(mean / sd, margin / sd, ns, alpha), power, max(2, _exact_floor(alpha)),
                           most)


def smallest_staged_p(sizes: Sequence[int], weights: Sequence[float]) -> float:
    """The smallest two-sided p the inverse-normal combination (:func:`combined_p`) of stages of ``sizes`` pairs
    can give: each stage's exact one-sided test at its own smallest, 1/2^n_k, all on one side (at least that: ties
    or a swap can only raise it). Above ``ALPHA`` no effect of any size can be detected at those stages.

    >>> round(smallest_staged_p([5, 5, 1], stage_weights([5, 5, 1], 20)), 4)  # BHerd's Fig. 3 grids
    0.0625
    """
    return min(1.0, 2 * combined_p([0.5 ** n if n else None for n in sizes], weights))


STAGED_STATES = 2_000_000  # the most joint outcomes an exact staged power enumerates


def _stage_z(n: int) -> np.ndarray:
    """Per count k = 0..n on the tested side of the centre, a stage's z, Φ⁻¹(1 - P(B >= k)) (as :func:`combined_p`)."""
    from scipy.special import ndtri

    return -ndtri(np.asarray(_at_least(n)))


def staged_sign_power(toward: float, sizes: Sequence[int], weights: Sequence[float],
                      alpha: float = ALPHA) -> float | None:
    """:func:`sign_power` for the inverse-normal combination of stages of ``sizes`` pairs: the chance that the
    stages' one-sided sign tests, combined with ``weights``, give a two-sided p at most ``alpha`` on the side the
    normal differences lie ``toward`` sds beyond the centre; exact, summed over every stage's count. None when the
    stages have more than :data:`STAGED_STATES` joint outcomes."""
    from scipy.special import ndtr
    from scipy.stats import binom

    if math.prod(n + 1 for n in sizes) > STAGED_STATES:
        return None
    z, chance = np.zeros(1), np.ones(1)
    for n, w in zip(sizes, weights):
        if n:  # a stage without pairs: z = 0
            z = (z[:, None] + w * _stage_z(n)[None, :]).ravel()
            chance = (chance[:, None] * binom.pmf(np.arange(n + 1), n, ndtr(toward))[None, :]).ravel()
    return float(chance[np.minimum(1.0, 2 * ndtr(-z)) <= alpha].sum())


def staged_tost_power(mean: float, margin: float, sizes: Sequence[int], weights: Sequence[float],
                      alpha: float = ALPHA) -> float | None:
    """:func:`tost_power` for the inverse-normal combination of stages: each one-sided sign test of TOST combined
    across the stages, and equivalence shown when both combined sides give a two-sided p at most ``alpha``; exact,
    summed over every stage's counts below ``-margin`` and above ``+margin`` (trinomial). None when the stages
    have more than :data:`STAGED_STATES` joint outcomes."""
    from scipy.special import ndtr
    from scipy.stats import multinomial

    if math.prod((n + 1) * (n + 2) // 2 for n in sizes) > STAGED_STATES:
        return None
    low, high = float(ndtr(-margin - mean)), float(ndtr(mean - margin))
    z_low, z_high, chance = np.zeros(1), np.zeros(1), np.ones(1)
    for n, w in zip(sizes, weights):
        if not n:
            continue
        below, above = (a.ravel() for a in np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij"))
        keep = below + above <= n
        below, above = below[keep], above[keep]
        counts = np.stack([below, above, n - below - above], axis=1)
        p = multinomial.pmf(counts, n, [low, high, max(0.0, 1 - low - high)])
        z = w * _stage_z(n)  # the inside tests count the differences not beyond each margin
        z_low = (z_low[:, None] + z[n - below][None, :]).ravel()
        z_high = (z_high[:, None] + z[n - above][None, :]).ravel()
        chance = (chance[:, None] * p[None, :]).ravel()
    shown = (np.minimum(1.0, 2 * ndtr(-z_low)) <= alpha) & (np.minimum(1.0, 2 * ndtr(-z_high)) <= alpha)
    return float(chance[shown].sum())


def detectable_staged(sd: float, sizes: Sequence[int], weights: Sequence[float], *, equal: bool = False,
                      power: float = 0.8, alpha: float = ALPHA) -> float | None:
    """:func:`detectable_effect` (a median beyond its centre) or, with ``equal``, :func:`detectable_margin` for the
    inverse-normal combination of stages of ``sizes`` pairs (:func:`staged_sign_power`, :func:`staged_tost_power`).
    None when the stages cannot reach ``alpha`` at all (:func:`smallest_staged_p`), the sd is not finite, or the
    stages have too many joint outcomes to sum."""
    from scipy.stats import norm

    if smallest_staged_p(sizes, weights) > alpha or not math.isfinite(sd):
        return None
    if sd <= 0:
        return 0.0
    if equal:
        def reach(x: float) -> float | None:
            return staged_tost_power(0.0, x / sd, sizes, weights, alpha)
    else:
        def reach(x: float) -> float | None:
            return staged_sign_power(x / sd, sizes, weights, alpha)
    if reach(sd) is None:
        return None
    guess = (norm.ppf(1 - alpha / 2) + norm.ppf(power)) * sd / math.sqrt(max(1, sum(sizes)))
    return _smallest(lambda x: float(reach(x)), power, sd if equal else guess)
