"""The statistics of the verdicts: the exact sign-flip test against brute force and scipy, BH against the
textbook example, TOST, power, and the procedure's error rates on simulated paired data."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fedaccel.report.claims import crossing
from fedaccel.report.tuned import tuned_swap_p
from fedaccel.report.statistics import (
    ALPHA,
    bh_adjust,
    detectable_effect,
    detectable_margin,
    median_interval,
    seeds_for_power,
    sign_flip_p,
    sign_test_p,
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


def test_the_smallest_p_beyond_the_exact_range_is_that_of_the_draws_made() -> None:
    """smallest_p said 1/200,001 where the Monte Carlo draws 229,376 sign vectors (whole chunks): 25 pairs all one
    way give p = 1/229,377, which is what smallest_p(25) must say."""
    assert sign_flip_p(np.ones(25)) == smallest_p(25) == pytest.approx(1 / 229_377)


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
    assert tost_p([0.0] * 5, margin=1.0) == pytest.approx(1 / 32)  # sign tests: 5 of 5 inside each margin
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


@settings(max_examples=80, deadline=None)
@given(st.floats(0.3, 60.0), st.floats(0.3, 60.0))
@example(3.0, 5.0)  # a new user's plan: 14 seeds at 5 sd, where 3 sd needed 6 (scipy's NaN lower tail)
@example(5.0, 14.0)
def test_a_larger_effect_never_needs_more_seeds(smaller: float, larger: float) -> None:
    """The power grows with the effect over its sd, so the pairs needed cannot: scipy's noncentral t gave NaN for
    the lower tail at large shifts, a NaN power read as "not enough", and 5 sd asked for 14 pairs where 6 do."""
    smaller, larger = sorted((smaller, larger))
    needed = seeds_for_power(smaller, 1.0), seeds_for_power(larger, 1.0)
    assert needed[1] <= needed[0], needed
    assert smaller < 3 or needed[0] == 6  # 3 sd and more: the exact test's floor of 6 pairs is enough


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


# --- the edges of the procedure (issue 28): censoring, tuning seeds, skew at a margin, units -------------

def _monte_carlo_bound(rate: float, reps: int) -> float:
    """``rate`` plus three Monte Carlo standard errors of a share estimated on ``reps`` draws."""
    return rate + 3 * math.sqrt(rate * (1 - rate) / reps)


def test_p_values_do_not_depend_on_the_units() -> None:
    """The tie tolerance is relative to the differences' scale: the same data in other units give the same p,
    tiny units included (an absolute tolerance of 1e-9 made every mean of [1..8]·1e-10 a tie, p = 1)."""
    d = np.array([1.0, -2.0, 3.0, 4.0, -1.0, 2.0, 5.0, 1.0])
    for alternative in ("two-sided", "greater", "less"):
        p = sign_flip_p(d, alternative)
        assert all(sign_flip_p(d * k, alternative) == p for k in (1000.0, 1e-10, 3.7e6))
        assert all(sign_test_p(d * k, alternative, centre=1.0 * k) == sign_test_p(d, alternative, centre=1.0)
                   for k in (1000.0, 1e-10))
    assert sign_flip_p(d * 1e-10) == sign_flip_p(d) < 0.2 and tost_p(d * 1e-3, margin=6e-3) == tost_p(d, margin=6.0)


def test_sign_test_counts_ties_with_the_centre_against_the_alternative() -> None:
    assert sign_test_p([2.0] * 6, "greater", centre=2.0) == 1.0 and sign_test_p([2.0] * 6, centre=2.0) == 1.0
    assert sign_test_p([3.0] * 5 + [2.0], "greater", centre=2.0) == pytest.approx(7 / 64)  # P(B(6) >= 5)
    low, high = median_interval(np.arange(10.0))
    assert (low, high) == (1.0, 8.0)  # P(B(10) <= 1) = 11/1024 <= 0.025 < P(B(10) <= 2)
    assert median_interval([1.0, 2.0, 3.0]) == (-math.inf, math.inf)  # three pairs cannot reach 95%


def _at_the_margin(kind: str, rng: np.random.Generator, n: int, margin: float) -> np.ndarray:
    """Differences whose median sits at ``margin`` exactly (P(d > margin) = 1/2)."""
    if kind == "normal":
        return margin + rng.normal(0, 1, n)
    if kind.startswith("lognormal"):  # median of exp(N(0, 1)) is 1: skewness 6.2
        return margin + (1 if kind.endswith("right") else -1) * (rng.lognormal(0, 1, n) - 1)
    return margin + rng.choice([-1.0, 0.0, 1.0, 2.0], p=[0.3, 0.2, 0.3, 0.2], size=n)  # discrete: P(d > m) = .5


SKEWS = ["normal", "lognormal right", "lognormal left", "discrete"]


@pytest.mark.parametrize("n", [10, 20])
@pytest.mark.parametrize("kind", SKEWS)
def test_margin_and_equivalence_rows_hold_their_level_under_skew(kind: str, n: int) -> None:
    """A true difference exactly at the margin: a margin row ("greater by more than m") and an equivalence row
    (within ±m) decide at most as often as their level, however skewed or discrete the differences. The sign
    test's exact level is that of the binomial (n = 10: 2·11/1024 two-sided; n = 20: 2·0.0207), below 5%; the
    sign-flip test of the mean that it replaces decided the equivalence 20% of the time here (lognormal, n = 10)."""
    from scipy.stats import binom

    from fedaccel.report.claims import Claim, claim_test, final

    reps, margin, rng = 2000, 0.5, np.random.default_rng(28)
    exact = 2 * float(binom.sf(next(c for c in range(n + 1) if 2 * binom.sf(c - 1, n, 0.5) <= ALPHA) - 1, n, 0.5))
    row = Claim("more than m", "x", {"a": 1}, {"a": 2}, final(), "greater", margin=margin)
    equal = Claim("within m", "x", {"a": 1}, {"a": 2}, final(), "equal", margin=margin)
    decided = agreed = 0
    for _ in range(reps):
        d = _at_the_margin(kind, rng, n, margin)
        decided += claim_test(row, d)[0] <= ALPHA
        p, inside, _ = claim_test(equal, d)
        agreed += p <= ALPHA and inside
    assert decided / reps <= _monte_carlo_bound(exact, reps) and decided / reps <= _monte_carlo_bound(ALPHA, reps)
    assert agreed / reps <= _monte_carlo_bound(exact / 2, reps)
    if kind != "discrete":  # continuous: the binomial's level is reached, not just bounded
        assert decided / reps >= exact - 3 * math.sqrt(exact * (1 - exact) / reps)


def _rounds_and_loss_runs(rng: np.random.Generator, n: int, budget: int = 30) -> list:
    """Identical rounds to 0.9 for a and b (log-normal, ~45% past the budget), a's training loss 0.2 lower."""
    from pathlib import Path

    from fedaccel.report.reading import Run

    runs = []
    for side, lower in (("a", 0.2), ("b", 0.0)):
        for seed, t in enumerate(np.exp(rng.normal(math.log(budget) - 0.05, 0.4, n))):
            rows = [{"round": r, "test_acc": min(0.95, 0.9 * r / t), "train_loss": 1.0 - 0.9 * min(1, r / t) - lower}
                    for r in range(0, budget + 1, 3)]
            runs.append(Run(Path(f"{side}{seed}"), {"algorithm": side, "run": {"seed": seed}}, rows))
    return runs


@pytest.mark.slow
def test_a_censored_rounds_row_is_not_decided_by_its_loss_row() -> None:
    """Issue 28: with the rounds row taking the loss row's verdict beyond a third censored, identical rounds read
    "agrees" 52% of the time at n = 10. Judged on its own restricted differences it decides at most 5%."""
    from fedaccel.report.claims import judge, judge_family, speed

    reps, rng, n = 200, np.random.default_rng(4), 10
    claims = speed("a faster", "x", {"algorithm": "a"}, {"algorithm": "b"}, 0.9)
    decided = censored = losses = 0
    for _ in range(reps):
        runs = _rounds_and_loss_runs(rng, n)
        rounds, loss = judge_family([judge(c, runs) for c in claims])
        decided += rounds.verdict != "inconclusive"
        censored += sum(rounds.censored)
        losses += loss.verdict == "agrees"
    assert 0.3 < censored / (2 * n * reps) < 0.6  # the censoring of the simulation
    assert losses / reps > 0.5  # the loss row, a claim of its own, finds its (real) effect
    assert decided / reps <= _monte_carlo_bound(ALPHA, reps)


def _eta_decisions(tuning: int, reps: int = 400, n: int = 10, shift: float = 0.0) -> tuple[float, float]:
    """Two methods, three learning rates whose mean losses are 0, 1 and 3 run standard deviations (method a
    ``shift`` lower at every rate): each side takes the rate with the lowest mean on ``tuning`` seeds, and the
    judged seeds compare them. The share of grids decided apart by the plain sign flip and by the test that
    counts the choice (fedaccel.report.tuned)."""
    rng, plain, counted = np.random.default_rng(5), 0, 0
    mu = np.array([0.0, 1.0, 3.0])
    for _ in range(reps):
        y = mu[None, :, None] + rng.normal(0, 1, (2, 3, tuning + n))  # [method, rate, seed]
        y[0] -= shift
        a, b = y[:, :, :tuning].mean(axis=2).argmin(axis=1)
        plain += sign_flip_p(y[0, a, tuning:] - y[1, b, tuning:]) <= ALPHA
        counted += tuned_swap_p(y[:, :, :tuning], y[:, :, tuning:], (None, None)) <= ALPHA
    return plain / reps, counted / reps


@pytest.mark.slow
def test_a_best_value_chosen_on_tuning_seeds_decides_identical_methods_apart_at_the_nominal_rate() -> None:
    """Issue 28: a best value chosen on one tuning seed decides two identical methods apart 20% of the time
    (runner-up one run-sd worse, n = 10), on three seeds still ~13%: the plain sign flip does not count that
    the choice itself is random. The test that swaps labels on the tuning seeds too, choosing again on every
    swap, holds 5% (within Monte Carlo error) on one seed and on three, at n = 10 and 20; and it still finds
    a real difference of 1.5 run-sd at every rate most of the time (the plain test's ~78% becomes ~65%)."""
    for tuning, n in ((1, 10), (3, 10), (3, 20)):
        plain, counted = _eta_decisions(tuning, n=n)
        assert plain > _monte_carlo_bound(ALPHA, 400) and counted <= _monte_carlo_bound(ALPHA, 400), (tuning, n)
    assert _eta_decisions(3, reps=200, shift=1.5)[1] > 0.5


def censored_equivalence_rates(n: int, share: float, reps: int, seed: int = 46) -> dict[str, float]:
    """Rounds to a target whose true a - b sits at the margin (+2 rounds, normal noise around it), b's rounds
    log-normal, the budget cutting ``share`` of all runs: the shares of reps an "equal" claim decides inside
    (agrees) and outside (disagrees), judged as judge does (censored differences as intervals), and inside as
    before (censored runs pinned at the budget)."""
    from fedaccel.report.claims import Claim, censored_bounds, claim_test, final

    rng, margin = np.random.default_rng(seed), 2.0
    equal = Claim("within m", "x", {"a": 1}, {"a": 2}, final(), "equal", margin=margin)
    counts = {"agrees": 0, "disagrees": 0, "agrees, pinned": 0}
    for _ in range(reps):
        b_true = np.exp(rng.normal(math.log(20), 0.3, n))
        a_true = b_true + margin + rng.normal(0, 2, n)
        budget = np.quantile(np.concatenate([a_true, b_true]), 1 - share) if share else np.inf
        a, b = np.minimum(a_true, budget), np.minimum(b_true, budget)
        d = list(a - b)
        p, inside, _ = claim_test(equal, d, censored_bounds(d, list(a_true > budget), list(b_true > budget)))
        counts["agrees"] += p <= ALPHA and inside
        counts["disagrees"] += p <= ALPHA and not inside
        p, inside, _ = claim_test(equal, d)
        counts["agrees, pinned"] += p <= ALPHA and inside
    return {k: v / reps for k, v in counts.items()}


@pytest.mark.parametrize("n", [10, 20])
@pytest.mark.parametrize("share", [0.0, 0.3, 0.6])
def test_equivalence_under_censoring_holds_its_level(n: int, share: float) -> None:
    """At the margin, with 0-60% of runs censored, an "equal" rounds row decides either way at most 2.5% of the
    time (each side's level; 400 reps here, three Monte Carlo errors: <= 4.8%; scripts/censored_equivalence.py
    runs 20,000). Pinned at the budget, censored pairs differ by 0 and read as equal: in this simulation 31% at
    n = 20 with 30% censored (the issue's: 5.9%), which the test sees too."""
    rates = censored_equivalence_rates(n, share, reps=400)
    assert rates["agrees"] <= _monte_carlo_bound(ALPHA / 2, 400) and rates["disagrees"] <= _monte_carlo_bound(ALPHA / 2, 400)
    if share >= 0.3:
        assert rates["agrees, pinned"] > _monte_carlo_bound(ALPHA / 2, 400)  # what the intervals prevent


def test_the_sign_flip_interval_of_differences_equal_but_for_their_last_bits_ends() -> None:
    """Nine differences equal to their 16th digit (a judged GSNR row) made the bisection run for ever: its
    step was below what the floats there can tell apart. Equal up to rounding is one value."""
    import signal

    from fedaccel.report.statistics import sign_flip_interval

    base = 0.086859
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("the bisection did not end")))
    signal.alarm(10)
    try:
        for d in ([base + k * np.spacing(base) for k in range(9)], [base * (1 + k * 1e-12) for k in range(9)],
                  [base * (1 + k * 1e-8) for k in range(9)]):
            lo, hi = sign_flip_interval(d)
            assert lo <= float(np.mean(d)) <= hi and hi - lo <= 1e-6
    finally:
        signal.alarm(0)
