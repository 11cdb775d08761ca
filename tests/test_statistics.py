"""The statistics of the verdicts: the exact sign-flip test against brute force and scipy, BH against the
textbook example, TOST, power, and the procedure's error rates on simulated paired data."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedaccel.report.claims import crossing
from fedaccel.report.statistics import (
    ALPHA,
    bh_adjust,
    seeds_for_power,
    sign_flip_p,
    smallest_p,
    t_interval,
    tost_p,
)


def brute_force_p(d: list[float], alternative: str) -> float:
    """Every one of the 2^n sign vectors, by itertools: the definition of the exact test."""
    observed = float(np.mean(d))
    means = [float(np.mean([s * x for s, x in zip(signs, d)])) for signs in itertools.product((1, -1), repeat=len(d))]
    eps = 1e-9
    if alternative == "greater":
        return sum(m >= observed - eps for m in means) / len(means)
    if alternative == "less":
        return sum(m <= observed + eps for m in means) / len(means)
    return sum(abs(m) >= abs(observed) - eps for m in means) / len(means)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_sign_flip_p_is_the_brute_force_enumeration(n: int, alternative: str) -> None:
    rng = np.random.default_rng(n)
    for d in (rng.normal(0.3, 1.0, n).round(2).tolist(), rng.integers(-2, 3, n).astype(float).tolist()):
        assert sign_flip_p(d, alternative) == pytest.approx(brute_force_p(d, alternative))


def test_sign_flip_p_matches_scipy_and_the_paper_case() -> None:
    from scipy.stats import permutation_test

    d = np.array([0.4, -0.1, 1.3, 0.8, 0.2, -0.3, 0.9])
    scipy_p = permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
    assert sign_flip_p(d) == pytest.approx(scipy_p)
    assert sign_flip_p([0.0] * 5 + [-1.0] * 5) == pytest.approx(0.0625)  # BHerd's headline row: not significant
    assert smallest_p(5) == 0.0625 and smallest_p(6) == pytest.approx(0.03125)


def test_sign_flip_beyond_the_exact_range_is_a_seeded_monte_carlo() -> None:
    d = np.random.default_rng(0).normal(0.5, 1.0, 25)
    first, again = sign_flip_p(d, seed=3), sign_flip_p(d, seed=3)
    assert first == again and 0 < first < 0.1


def test_bh_matches_the_textbook_example() -> None:
    """Benjamini & Hochberg (1995), Section 4: 15 p-values; at q = 0.05 the four smallest are rejected."""
    p = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262, 0.5719,
         0.6528, 0.7590, 1.0000]
    q = bh_adjust(p)
    assert [x <= 0.05 for x in q] == [True] * 4 + [False] * 11
    assert q[0] == pytest.approx(0.0001 * 15) and q[3] == pytest.approx(0.0095 * 15 / 4)
    assert bh_adjust(list(reversed(p))) == pytest.approx(list(reversed(q)))  # in the order given


def test_tost_and_t_interval() -> None:
    assert tost_p([0.0] * 5, margin=1.0) == pytest.approx(1 / 32)
    assert tost_p([3.0] * 6, margin=1.0) == 1.0
    with pytest.raises(ValueError, match="margin"):
        tost_p([0.0], margin=0.0)
    low, high = t_interval([1.0, 2.0, 3.0])
    assert (low, high) == pytest.approx((2 - 4.302653 / math.sqrt(3), 2 + 4.302653 / math.sqrt(3)), rel=1e-5)
    assert t_interval([2.0, 2.0]) == (2.0, 2.0)


def test_interpolated_crossing() -> None:
    x, y = np.array([0.0, 5.0, 10.0]), np.array([0.1, 0.5, 0.9])
    assert crossing(x, y, 0.7) == pytest.approx(7.5)
    assert crossing(x, y, 0.95) is None
    assert crossing(x, 1 - y, 0.3, lower_is_better=True) == pytest.approx(7.5)


def test_seeds_for_power() -> None:
    """A paired t test needs 10 pairs for 80% power at an effect of one standard deviation (textbook
    value); the exact test needs at least 6 pairs to reach 0.05 whatever the effect."""
    assert seeds_for_power(1.0, 1.0) == 10
    assert seeds_for_power(0.5, 1.0) == 34
    assert seeds_for_power(5.0, 0.0) == 6 and seeds_for_power(100.0, 1.0) == 6
    assert seeds_for_power(0.0, 1.0) is None


REPS = 600
N = 8


def _decisions(draw: "callable", effect: float = 0.0) -> tuple[float, float]:
    """(share of significant verdicts, share of t intervals covering the true effect) over REPS draws."""
    rng = np.random.default_rng(12345)
    hits = covered = 0
    for _ in range(REPS):
        a, b = draw(rng)
        d = a - b
        hits += sign_flip_p(d) <= ALPHA
        low, high = t_interval(d)
        covered += low <= effect <= high
    return hits / REPS, covered / REPS


def _rounds(rng: np.random.Generator, shift: float = 0.0) -> np.ndarray:
    """Rounds to a target: a log-normal time, interpolated to 0.1 of a round, censored at a 30-round budget."""
    return np.minimum(np.round(np.exp(rng.normal(3.0, 0.3, N)) + shift, 1), 30.0)


SCENARIOS = {  # a and b drawn alike (no effect): each a run's measure, the pairs independent
    "normal": lambda r: (r.normal(0, 1, N), r.normal(0, 1, N)),
    "skewed (log-normal runs)": lambda r: (r.lognormal(0, 1, N), r.lognormal(0, 1, N)),
    "discrete with ties": lambda r: (r.integers(28, 31, N).astype(float), r.integers(28, 31, N).astype(float)),
    "censored rounds (~27% at the budget)": lambda r: (_rounds(r), _rounds(r)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", SCENARIOS)
def test_false_positive_rate_is_at_most_nominal(name: str) -> None:
    """Where a and b do not differ, at most 5% of claims are decided (within Monte Carlo error)."""
    rate, _ = _decisions(SCENARIOS[name])
    assert rate <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / REPS), f"{name}: {rate:.3f}"


@pytest.mark.slow
def test_the_t_interval_covers_at_its_level_on_normal_data_and_a_real_effect_is_found() -> None:
    rate, coverage = _decisions(lambda r: (r.normal(1.5, 1, N), r.normal(0, 1, N)), effect=1.5)
    assert abs(coverage - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / REPS)
    assert rate > 0.5  # a test that can fail: an effect of about one standard deviation of d is found mostly
    censored_effect, _ = _decisions(lambda r: (_rounds(r, shift=-12.0), _rounds(r)))
    assert censored_effect > 0.5
