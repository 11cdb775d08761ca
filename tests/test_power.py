"""The power behind `judge --plan` and the minimum detectable effect: that of the test each verdict uses.

A margin claim is judged by the sign test of the median against its margin, an "equal" claim by TOST of sign
tests, a raised row by the combination of its stages' tests (docs/statistics.md §3-5, docs/raised-seeds.md); the
seeds a plan asks for and the effect an inconclusive row could have detected are computed for those tests.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from fedaccel.report.claims import Claim, Judgement, claim_test, final, judge_family, numbers, rounds_to, staged_test
from fedaccel.report.judge import plan_rows, plan_table
from fedaccel.report.statistics import (
    critical_counts,
    detectable_effect,
    detectable_staged,
    seeds_for_equivalence,
    seeds_for_power,
    sign_power,
    smallest_staged_p,
    stage_weights,
    staged_sign_power,
    staged_tost_power,
    tost_power,
)

A, B = {"algorithm": "a"}, {"algorithm": "b"}


def _pilot(claim: Claim, d: list[float], estimand: str) -> Judgement:
    return Judgement(claim, "inconclusive", len(d), differences=d, estimand=estimand)


def _verdicts_agree(claim: Claim, mean: float, sd: float, n: int, reps: int, seed: int = 0) -> float:
    """The share of simulated grids (normal differences) whose verdict, as a family of one, agrees."""
    rng = np.random.default_rng(seed)
    agree = 0
    for _ in range(reps):
        p, paper_side, _ = claim_test(claim, rng.normal(mean, sd, n))
        agree += p <= 0.05 and paper_side
    return agree / reps


# --- defect 1a: a directional claim with a margin is planned against its margin ---------------------------------

SOONER = Claim("a reaches 90% at least 1.6 rounds sooner than b", "x", A, B, rounds_to(0.9), "less", margin=1.6)


def test_a_pilot_short_of_the_margin_leans_the_other_way() -> None:
    """A new user's plan: `judge` disagreed (0/6 seeds beyond -1.6), yet `--plan` asked for 6 seeds "to detect"
    -1.506, measured against 0. Against the margin the verdict tests, the pilot lies +0.094 on the wrong side."""
    d = [-1.5, -1.45, -1.55, -1.52, -1.49, -1.526]
    [row] = plan_rows([_pilot(SOONER, d, "median")])
    assert row["effect"] == pytest.approx(np.mean(d) + 1.6) and row["against"] and row["seeds_needed"] is None
    line = plan_table([row]).splitlines()[2]
    assert "the pilot seeds lean the other way" in line and "(beyond the margin, -1.6)" in line
    greater = Claim("a scores at least 0.02 more", "x", A, B, final("test_acc"), "greater", margin=0.02)
    [row] = plan_rows([_pilot(greater, [0.015, 0.012, 0.018, 0.016], "median")])  # above 0, short of 0.02
    assert row["effect"] == pytest.approx(0.01525 - 0.02) and row["against"] and row["seeds_needed"] is None


def test_a_pilot_beyond_the_margin_gets_the_sign_tests_seeds() -> None:
    """Beyond the margin, the seeds are the sign test's (the verdict's) for the distance from the margin, and a
    simulation of the verdict at that many seeds agrees about as often as planned."""
    rng = np.random.default_rng(3)
    d = list(rng.normal(-2.6, 1.0, 8))
    mean, sd = float(np.mean(d)), float(np.std(d, ddof=1))
    [row] = plan_rows([_pilot(SOONER, d, "median")])
    assert row["effect"] == pytest.approx(mean + 1.6) and not row["against"]
    n = row["seeds_needed"]
    assert n == seeds_for_power(mean + 1.6, sd, median=True) and n != seeds_for_power(mean, sd)
    assert _verdicts_agree(SOONER, mean, sd, n, reps=1500) >= 0.8 - 3 * 0.0103  # 1500 reps: MC sd ≈ 0.0103


# --- defect 1b: an "equal" claim is planned with TOST by sign tests ---------------------------------------------

EQUAL = Claim("a ends where b ends", "x", A, B, final("test_acc"), "equal", margin=1.0)


def test_an_equal_claims_plan_is_the_power_of_tost_by_sign_tests() -> None:
    """A helper simulated 4,000 grids at n = 10, true difference 0, margin 1 sd: the verdict agreed 23% of the time,
    where the plan (a t test's power) said 10 seeds suffice for 80%. The plan's power is now the verdict's."""
    assert tost_power(0.0, 1.0, [10])[0] == pytest.approx(0.231, abs=0.001)
    assert _verdicts_agree(EQUAL, 0.0, 1.0, 10, reps=2000) == pytest.approx(tost_power(0.0, 1.0, [10])[0], abs=0.03)
    d = list(np.linspace(-1.0, 1.0, 10) * np.sqrt(11 / 4.074074))  # mean 0, sd 1 (up to rounding)
    [row] = plan_rows([_pilot(EQUAL, d, "median")])
    n = row["seeds_needed"]
    assert n is not None and n > 10 and tost_power(0.0, 1.0 / np.std(d, ddof=1), [n])[0] >= 0.8
    assert _verdicts_agree(EQUAL, 0.0, float(np.std(d, ddof=1)), n, reps=1500) >= 0.8 - 3 * 0.0103


@pytest.mark.parametrize(("mean", "margin"), [(0.0, 1.0), (0.3, 1.2), (-0.5, 2.0)])
def test_tost_power_equals_a_simulation_of_the_verdict(mean: float, margin: float) -> None:
    claim = Claim("equal", "x", A, B, final("test_acc"), "equal", margin=margin)
    for n in (8, 13):
        exact = tost_power(mean, margin, [n])[0]
        assert _verdicts_agree(claim, mean, 1.0, n, reps=1500, seed=n) == pytest.approx(exact, abs=0.04)


def test_a_median_claim_without_margin_is_planned_with_the_sign_test() -> None:
    """A constant or two measures: the sign test of the median, not the t test (which asks for fewer seeds)."""
    claim = Claim("a scores above 0.5", "x", A, None, final("test_acc"), "greater", value=0.5)
    d = [0.2, -0.1, 0.5, 0.0, 0.4, 0.3]  # a - 0.5 per seed
    [row] = plan_rows([_pilot(claim, d, "median")])
    sd = float(np.std(d, ddof=1))
    assert row["seeds_needed"] == seeds_for_power(np.mean(d), sd, median=True) > seeds_for_power(np.mean(d), sd)


# --- the exact powers themselves ----------------------------------------------------------------------------------

def test_critical_counts_are_the_sign_tests() -> None:
    for n in range(0, 200):
        loop = next((k for k in range(n + 1) if min(1.0, 2 * float(binom.sf(k - 1, n, 0.5))) <= 0.05), n + 1)
        assert critical_counts([n])[0] == loop


@settings(max_examples=60, deadline=None)
@given(st.floats(-3, 3), st.floats(-3, 3), st.integers(2, 60))
def test_sign_power_grows_with_the_effect(x: float, y: float, n: int) -> None:
    low, high = sorted((x, y))
    assert sign_power(low, [n])[0] <= sign_power(high, [n])[0] + 1e-12


@settings(max_examples=60, deadline=None)
@given(st.floats(-2, 2), st.floats(0.05, 3), st.floats(0.05, 3), st.integers(2, 60))
def test_tost_power_grows_with_the_room_in_the_margin(mean: float, m1: float, m2: float, n: int) -> None:
    small, large = sorted((m1, m2))
    assert tost_power(mean, small, [n])[0] <= tost_power(mean, large, [n])[0] + 1e-12
    assert tost_power(abs(mean), large, [n])[0] <= tost_power(abs(mean) / 2, large, [n])[0] + 1e-12


@settings(max_examples=40, deadline=None)
@given(st.floats(0.1, 3), st.floats(-1.5, 1.5), st.floats(0.2, 3))
def test_the_planned_seeds_are_the_first_that_reach_the_power(effect: float, mean: float, margin: float) -> None:
    """Exact tests' power is not monotone in n (one more seed can need one more count), so the plan asks for the
    first n that reaches 80%: every fewer falls short."""
    n = seeds_for_power(effect, 1.0, median=True)
    if n is not None:
        assert sign_power(effect, [n])[0] >= 0.8 and (sign_power(effect, np.arange(2, n)) < 0.8).all()
    n = seeds_for_equivalence(mean, 1.0, margin) if abs(mean) < margin else None
    if n is not None:
        assert tost_power(mean, margin, [n])[0] >= 0.8 and (tost_power(mean, margin, np.arange(2, n)) < 0.8).all()


def test_a_far_effect_is_capped_quickly() -> None:
    """A plan over ~200 claims stays quick: an effect needing more than 1,000 seeds says so (None) in one search."""
    import time

    start = time.perf_counter()
    assert seeds_for_equivalence(0.0, 1.0, 0.05) is None and seeds_for_power(0.01, 1.0, median=True) is None
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("n", [6, 10, 17])
def test_one_stage_is_the_plain_test(n: int) -> None:
    assert staged_sign_power(0.7, [n], [1.0]) == pytest.approx(sign_power(0.7, [n])[0], abs=1e-12)
    assert staged_tost_power(0.2, 1.3, [n], [1.0]) == pytest.approx(tost_power(0.2, 1.3, [n])[0], abs=1e-12)


def test_the_staged_power_equals_a_simulation_of_the_staged_verdict() -> None:
    sizes, weights = [5, 6], stage_weights([5, 6])
    stage = [0] * 5 + [1] * 6
    rng = np.random.default_rng(7)
    for claim, power in ((SOONER, staged_sign_power(1.2, sizes, weights)),
                         (EQUAL, staged_tost_power(0.0, 1.8, sizes, weights))):
        mean = -1.6 - 1.2 if claim is SOONER else 0.0
        scale = 1.0 if claim is SOONER else 1.0 / 1.8 * claim.margin
        hits = 0
        for _ in range(800):
            p, side, _ = staged_test(claim, rng.normal(mean, scale, 11), stage, weights)
            hits += p <= 0.05 and side
        assert hits / 800 == pytest.approx(power, abs=0.05)


# --- defect 2: the minimum detectable effect of a raised row is that of its stages --------------------------------

def _raised(claim: Claim, d: list[float], sizes: list[int], estimand: str) -> Judgement:
    stages, start = [], 0
    for size in sizes:
        stages.append(list(range(start, start + size)))
        start += size
    j = Judgement(claim, "inconclusive", len(d), float(np.mean(d)), -1.0, 1.0, 0.0, 0.0, len(d), differences=d,
                  paired_seeds=list(range(len(d))), p=0.0625, estimand=estimand, paper_side=True, raised="5 to 10 to 11",
                  stages=stages, stage_weights=stage_weights(sizes))
    return judge_family([j])[0]


def test_stages_that_cannot_reach_the_level_detect_nothing() -> None:
    """BHerd's Fig. 3 rows: 11/11 seeds the claimed way, p = 0.0625, and "the smallest mean difference it could
    detect is 0.0001851", though stages of 5, 5, 1 can never give p < 0.0625, whatever the effect."""
    claim = Claim("a scores higher", "x", A, B, final("test_acc"), "greater")
    d = list(0.44 + 0.0002 * np.sin(np.arange(11)))
    j = _raised(claim, d, [5, 5, 1], "mean")
    assert smallest_staged_p([5, 5, 1], j.stage_weights) == pytest.approx(0.0625)
    assert j.mde is None and j.stage_floor == pytest.approx(0.0625)
    text = numbers(j)
    assert "could not tell: no difference could be detected at these stages: the smallest p they can give is 0.0625" \
        in text and "smallest mean difference" not in text
    assert j.as_dict()["smallest_p_at_stages"] == pytest.approx(0.0625)
    equal = _raised(EQUAL, [0.1] * 11, [5, 5, 1], "median")
    assert equal.mde is None and "no margin could be shown at these stages" in numbers(equal)


def test_reachable_stages_give_their_own_detectable_effect_or_say_pooled() -> None:
    """A median row's effect is the stages' own (larger than the pooled seeds'); a mean row's, which no exact sum
    gives, is the pooled seeds' and its row says so."""
    d = list(np.random.default_rng(1).normal(0.0, 1.0, 11))
    sd = float(np.std(d, ddof=1))
    margin = Claim("a less by 0.5", "x", A, B, final("test_acc"), "less", margin=0.5)
    j = _raised(margin, d, [5, 6], "median")
    assert j.mde == pytest.approx(detectable_staged(sd, [5, 6], j.stage_weights)) and not j.mde_pooled
    assert j.mde > detectable_effect(sd, 11, median=True) and "(80% power, stages combined)" in numbers(j)
    assert staged_sign_power(j.mde / sd, [5, 6], j.stage_weights) == pytest.approx(0.8, abs=1e-3)
    mean = _raised(Claim("a scores higher", "x", A, B, final("test_acc"), "greater"), d, [5, 6], "mean")
    assert mean.mde == pytest.approx(detectable_effect(sd, 11)) and mean.mde_pooled
    assert "for the seeds pooled, not the stages its p combines" in numbers(mean)
    assert mean.as_dict()["mde_pooled"] is True


def test_detect_is_the_true_difference_to_plan_for() -> None:
    """`detect:` stands for the pilot's mean a - b: a margin claim plans its distance from the margin, an "equal"
    claim the room its |detect| leaves inside the margin (the pilot's mean only without it)."""
    d = [0.1, -0.2, 0.3, 0.0, -0.1, 0.2]
    sooner = Claim(SOONER.text, "x", A, B, rounds_to(0.9), "less", margin=1.6, detect=-2.0)
    equal = Claim(EQUAL.text, "x", A, B, final("test_acc"), "equal", margin=1.0, detect=0.4)
    rows = plan_rows([_pilot(sooner, d, "median"), _pilot(equal, d, "median")])
    assert rows[0]["effect"] == pytest.approx(-0.4) and rows[1]["effect"] == pytest.approx(0.6)
    sd = float(np.std(d, ddof=1))
    assert rows[0]["seeds_needed"] == seeds_for_power(-0.4, sd, median=True)
    assert rows[1]["seeds_needed"] == seeds_for_equivalence(0.4, sd, 1.0)
