"""The generic judge of claims: measures, pairing by seed, the exact test, multiplicity and the verdict rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.errors import ConfigError
from fedaccel.report.claims import (
    BEST,
    Claim,
    final,
    judge,
    judge_family,
    mean_over_rounds,
    pick,
    rounds_to,
    speed,
)
from fedaccel.report.reading import Run


def fake_run(algorithm: object, seed: int, acc: list[float], loss: list[float] | None = None, lr: float = 0.1,
             every: int = 1) -> Run:
    """A run whose round-r evaluation (r = every, 2 every, ...) has test_acc acc[r-1] and train_loss loss[r-1]."""
    loss = loss if loss is not None else [1.0 - a for a in acc]
    rows = [{"round": 0, "test_acc": 0.0, "train_loss": 9.0}]
    rows += [{"round": every * (i + 1), "test_acc": a, "train_loss": l} for i, (a, l) in enumerate(zip(acc, loss))]
    config = {"name": "", "algorithm": algorithm, "train": {"lr": lr}, "run": {"seed": seed}}
    return Run(Path(f"/runs/{algorithm}-{lr}-{seed}"), config, rows)


def test_rounds_to_target_is_the_interpolated_crossing_restricted_to_the_budget() -> None:
    measure = rounds_to(0.5)
    assert measure.of(fake_run("a", 0, [0.1, 0.6, 0.7])) == pytest.approx(1.8)  # 0.1 at 1, 0.6 at 2: 4/5 of the way
    assert measure.of(fake_run("a", 0, [0.5, 0.6, 0.7])) == 1.0  # reached at an evaluated round
    assert measure.of(fake_run("a", 0, [0.1, 0.2, 0.3], every=5)) == 15.0  # never: the last round, counted censored
    assert rounds_to(0.25, "train_loss").of(fake_run("a", 0, [0.1, 0.6, 0.8])) == pytest.approx(2.75)  # loss 0.4 -> 0.2


def test_continuous_measures() -> None:
    run = fake_run("a", 0, [0.2, 0.4, 0.6, 0.8])
    assert mean_over_rounds("test_acc").of(run) == pytest.approx(0.5)  # round 0 is not averaged
    assert mean_over_rounds("test_acc", upto=0.5).of(run) == pytest.approx(0.3)
    assert final("test_acc", last=2).of(run) == pytest.approx(0.7)


def _grid(b_curve: list[float], a_curves: list[list[float]]) -> list[Run]:
    runs = [fake_run("b", s, b_curve) for s in range(len(a_curves))]
    return runs + [fake_run("a", s, curve) for s, curve in enumerate(a_curves)]


def test_judge_pairs_seeds_and_reports_effect_interval_p_and_baseline_rounds() -> None:
    b = [0.1, 0.2, 0.3, 0.4, 0.5, 0.7]  # reaches 0.5 at round 5
    runs = _grid(b, [[0.1, 0.2, 0.5, 0.7, 0.8, 0.9]] * 6)  # round 3 in every seed
    j = judge(Claim("a sooner", "x", {"algorithm": "a"}, {"algorithm": "b"}, rounds_to(0.5), "less", "2x"), runs)
    assert (j.verdict, j.seeds, j.effect, j.low, j.high) == ("agrees", 6, -2.0, -2.0, -2.0)
    assert j.p == pytest.approx(2 / 64)  # six pairs: the smallest two-sided p is 2 of 2^6 sign vectors
    assert (j.a_mean, j.b_mean, j.baseline_rounds, j.on_paper_side) == (3.0, 5.0, 5.0, 6)
    row = j.as_dict()
    assert row["verdict"] == "agrees" and row["interval"] == [-2.0, -2.0] and row["paper"] == "2x"
    assert row["differences"] == [-2.0] * 6 and row["paired_seeds"] == list(range(6)) and row["censored"] == [0, 0]
    assert row["baseline_mean_rounds_to_target"] == 5.0 and row["seeds"] == 6 and row["p"] == row["q"]

    slower = judge(Claim("b sooner", "x", {"algorithm": "b"}, {"algorithm": "a"}, rounds_to(0.5), "less"), runs)
    assert slower.verdict == "disagrees"


def test_five_pairs_cannot_decide_however_large_the_effect() -> None:
    """With 5 pairs the exact test's smallest two-sided p is 2/32 = 0.0625 > 0.05."""
    runs = _grid([0.1, 0.2, 0.3, 0.4, 0.5, 0.7], [[0.5] * 6] * 5)
    j = judge(Claim("a sooner", "x", {"algorithm": "a"}, {"algorithm": "b"}, rounds_to(0.5), "less"), runs)
    assert j.effect == -4.0 and j.p == pytest.approx(0.0625) and j.verdict == "inconclusive"


def test_judge_mixed_seeds_are_inconclusive_and_censoring_is_counted() -> None:
    b = [0.1, 0.2, 0.3, 0.5]  # round 4
    a = [[0.5] * 4, [0.1] * 4, [0.1, 0.5, 0.5, 0.5], [0.1] * 4, [0.1, 0.1, 0.5, 0.5]]  # 1, never (4), 2, never, 3
    j = judge(Claim("a sooner", "x", {"algorithm": "a"}, {"algorithm": "b"}, rounds_to(0.5), "less"), _grid(b, a))
    assert j.verdict == "inconclusive" and j.censored == (2, 0)
    assert j.effect == pytest.approx(np.mean([1 - 4, 4 - 4, 2 - 4, 4 - 4, 3 - 4]))


def test_judge_without_pairs_is_inconclusive_and_a_missing_experiment_is_not_run() -> None:
    runs = [fake_run("a", 0, [0.6]), fake_run("b", 1, [0.6])]
    claim = Claim("t", "x", {"algorithm": "a"}, {"algorithm": "b"}, rounds_to(0.5), "less")
    assert judge(claim, runs).verdict == "inconclusive"
    assert judge(claim, None).verdict == "not run"


def test_a_claim_without_b_compares_with_a_constant() -> None:
    runs = [fake_run("a", s, [0.9, 0.9 + 0.001 * s]) for s in range(6)]
    claim = Claim("high", "x", {"algorithm": "a"}, None, final("test_acc", last=1), "greater", value=0.8)
    j = judge(claim, runs)
    assert j.verdict == "agrees" and j.b_mean == pytest.approx(0.8) and j.effect == pytest.approx(0.1025)
    assert j.estimand == "median" and j.p == pytest.approx(2 / 64)  # against a constant: the sign test


def test_a_directional_margin_shifts_the_test() -> None:
    """'a ends more than 0.02 above b': differences of +0.01 are surely below that margin."""
    runs = [fake_run("b", s, [0.5]) for s in range(6)] + [fake_run("a", s, [0.51 + 0.0001 * s]) for s in range(6)]
    claim = Claim("2 points", "x", {"algorithm": "a"}, {"algorithm": "b"}, final("test_acc", 1), "greater", margin=0.02)
    assert judge(claim, runs).verdict == "disagrees"
    plain = Claim("higher", "x", {"algorithm": "a"}, {"algorithm": "b"}, final("test_acc", 1), "greater")
    assert judge(plain, runs).verdict == "agrees"


def test_equivalence_needs_a_margin_and_is_judged_by_tost() -> None:
    with pytest.raises(ValueError, match="margin"):
        Claim("no difference", "x", {"algorithm": "a"}, {"algorithm": "b"}, final(), "equal")
    same = [fake_run("b", s, [0.5]) for s in range(6)] + [fake_run("a", s, [0.5 + 0.001 * (s % 2)]) for s in range(6)]
    claim = Claim("same", "x", {"algorithm": "a"}, {"algorithm": "b"}, final("test_acc", 1), "equal", margin=0.01)
    j = judge(claim, same)
    assert j.verdict == "agrees" and j.p == pytest.approx(2 / 64)  # inside: 6 of 6 below +0.01 and above -0.01
    apart = [fake_run("b", s, [0.5]) for s in range(6)] + [fake_run("a", s, [0.6 + 0.001 * s]) for s in range(6)]
    assert judge(claim, apart).verdict == "disagrees"
    unsure = [fake_run("b", s, [0.5]) for s in range(6)] + [fake_run("a", s, [0.5 + 0.02 * (-1) ** s]) for s in range(6)]
    assert judge(claim, unsure).verdict == "inconclusive"


def test_best_learning_rate_is_chosen_on_the_tuning_seeds_training_loss_and_they_are_not_judged() -> None:
    runs = []
    for s in range(7):
        runs.append(fake_run("a", s, [0.9, 0.9], loss=[0.5, 0.5], lr=0.1))  # best test accuracy, worse loss
        runs.append(fake_run("a", s, [0.5, 0.5], loss=[0.2, 0.2], lr=0.3))  # lowest training loss
        runs.append(fake_run("b", s, [0.7, 0.7], loss=[0.3, 0.3], lr=0.1))
    claim = Claim("t", "x", {"algorithm": "a", "train.lr": BEST}, {"algorithm": "b", "train.lr": 0.1},
                  final("test_acc", last=1), "greater")
    runs += [fake_run(name, s, [0.5], loss=[0.3], lr=lr) for s in (7, 8) for name, lr in (("a", 0.1), ("a", 0.3),
                                                                                          ("b", 0.1))]
    j = judge(claim, runs, tuning_seeds=[0, 7, 8])
    assert j.chosen == {"train.lr": 0.3} and j.a_mean == 0.5 and j.verdict == "disagrees"
    assert j.tuning_seeds == [0, 7, 8] and j.paired_seeds == [1, 2, 3, 4, 5, 6] and j.seeds == 6
    # the choice is recorded with every value's figures on the tuning seeds (round 0 is not averaged)
    record = j.as_dict()["tuning"]["train.lr"]
    assert record["chosen"] == 0.3 and record["seeds"] == [0, 7, 8] and record["measure"] == "mean train loss over rounds"
    assert [(v["value"], v["by_seed"], v["mean"]) for v in record["values"]] == [
        (0.1, [0.5, 0.3, 0.3], pytest.approx(1.1 / 3)), (0.3, [0.2, 0.3, 0.3], pytest.approx(0.8 / 3))]
    for too_few in ([], [0], [0, 7]):
        with pytest.raises(ConfigError, match="needs at least 3 tuning seeds"):
            judge(claim, runs, tuning_seeds=too_few)
    with pytest.raises(ConfigError, match="runs of every value on at least 3 tuning seeds; the values share 2"):
        judge(claim, runs[:-3], tuning_seeds=[0, 7, 8])  # seed 8 has no runs
    runs[18:21] = [fake_run("a", 6, [0.9, 0.9], loss=[0.1, 0.1], lr=0.1), runs[19], runs[20]]  # a judged seed only
    assert judge(claim, runs, tuning_seeds=[0, 7, 8]).chosen == {"train.lr": 0.3}  # what it says is not heard


def _tuned_grid(b_loss_at_01: float) -> list[Run]:
    """Two methods identical at each η on the judged seeds 3-8 (final accuracy 0.6 at η 0.1, 0.8 at η 0.3);
    on the tuning seeds 0-2 a's training loss is 0.5 at η 0.1 and 0.1 at η 0.3, b's ``b_loss_at_01`` and 0.4."""
    runs = []
    for s in range(9):
        for name, losses in (("a", (0.5, 0.1)), ("b", (b_loss_at_01, 0.4))):
            for lr, acc, loss in zip((0.1, 0.3), (0.6, 0.8), losses):
                runs.append(fake_run(name, s, [acc], loss=[loss if s < 3 else 0.3], lr=lr))
    return runs


def test_a_best_value_claim_counts_the_choice_by_swapping_labels_on_the_tuning_seeds_too() -> None:
    """Hand-computable: b's tuning seeds pick η 0.1, a's η 0.3, so every judged seed shows a − b = 0.8 − 0.6 and
    the plain sign flip says 'agrees' (p = 2/64) for two methods identical at each η. Swapping the labels of j of
    the 3 tuning seeds, a chooses η 0.3 while j < 2 (its mean loss ((3-j)·0.1 + j·0.4)/3 below ((3-j)·0.5 +
    j·0.2)/3) and b mirrors it: every swap shows |a − b| = 0.2 on every judged seed, so p = 1. When both sides
    choose η 0.3 whatever the swaps (b's loss at 0.1 is 0.9), the test is the plain sign flip of d = 0."""
    claim = Claim("t", "x", {"algorithm": "a", "train.lr": BEST}, {"algorithm": "b", "train.lr": BEST},
                  final("test_acc", last=1), "greater")
    j = judge(claim, _tuned_grid(0.2), tuning_seeds=[0, 1, 2])
    assert j.chosen == {"train.lr": 0.3, "b:train.lr": 0.1} and j.effect == pytest.approx(0.2)
    assert j.p == 1.0 and j.verdict == "inconclusive" and j.tuned_test
    assert "each side choosing its best value again" in j.as_dict()["method"]
    j = judge(claim, _tuned_grid(0.9), tuning_seeds=[0, 1, 2])
    assert j.chosen == {"train.lr": 0.3, "b:train.lr": 0.3} and j.p == 1.0 and j.tuned_test
    runs = [r for r in _tuned_grid(0.2) if not (r.seed == 5 and r.config["algorithm"] == "b" and r.config["train"]["lr"] == 0.3)]
    j = judge(claim, runs, tuning_seeds=[0, 1, 2])  # b never ran η 0.3 on seed 5: the plain test, said so
    assert not j.tuned_test and j.p == pytest.approx(2 / 64) and "p does not count the choice" in j.note


def test_family_verdicts_come_from_benjamini_hochberg_q_values() -> None:
    """Six claims of p = 1/32 (all six pairs one way) and one of p = 0.0625·...: BH lifts the borderline one."""
    claims, runs = [], []
    for k in range(4):
        runs += [fake_run(f"b{k}", s, [0.5]) for s in range(6)]
        spread = [0.6] * 6 if k < 3 else [0.6, 0.6, 0.6, 0.6, 0.6, 0.45]  # k = 3: five of six pairs one way
        runs += [fake_run(f"a{k}", s, [v + 0.001 * s]) for s, v in enumerate(spread)]
        claims.append(Claim(f"c{k}", "x", {"algorithm": f"a{k}"}, {"algorithm": f"b{k}"}, final("test_acc", 1),
                            "greater"))
    alone = [judge(c, runs) for c in claims]
    family = judge_family([judge(c, runs) for c in claims])
    assert [j.verdict for j in alone[:3]] == ["agrees"] * 3
    assert alone[3].p > 0.05 and alone[3].verdict == "inconclusive"
    assert [j.q for j in family[:3]] == pytest.approx([4 / 3 * 2 / 64] * 3)
    assert family[3].q == pytest.approx(alone[3].p) and family[3].verdict == "inconclusive"


def test_a_censored_rounds_claim_is_judged_on_its_own_restricted_differences() -> None:
    """Neither side reaches 0.5: restricted to the budget both count 3 rounds on every seed, so the rounds row
    has nothing to go on; the loss row is a separate claim, decided on its own, never copied into it."""
    runs = [fake_run("b", s, [0.1, 0.2, 0.3], loss=[0.9, 0.8, 0.7]) for s in range(7)]  # never reaches 0.5
    runs += [fake_run("a", s, [0.1, 0.2, 0.3 + 0.01 * s], loss=[0.5, 0.4, 0.3]) for s in range(7)]
    rows = speed("a faster", "x", {"algorithm": "a"}, {"algorithm": "b"}, 0.5)
    rounds, loss = judge_family([judge(c, runs) for c in rows])
    assert rounds.censored == (7, 7) and rounds.differences == [0.0] * 7 and rounds.p == 1.0
    assert loss.verdict == "agrees" and rounds.verdict == "inconclusive"
    assert rounds.in_family and loss.in_family and rounds.q == 1.0
    from fedaccel.report.claims import numbers

    assert "restricted to the budget: never reached by 7 and 7 runs" in numbers(rounds)
    # every run of both sides counted at the budget: no seed count would detect a difference (it said "0 rounds")
    assert rounds.mde is None and "smallest" not in numbers(rounds) and loss.mde is None


def test_an_equal_rounds_claim_pinned_at_the_budget_is_not_decided() -> None:
    runs = [fake_run(name, s, [0.1, 0.2, 0.3]) for s in range(6) for name in ("a", "b")]
    claim = Claim("as fast", "x", {"algorithm": "a"}, {"algorithm": "b"}, rounds_to(0.5), "equal", margin=1.0)
    j = judge_family([judge(claim, runs)])[0]
    assert j.verdict == "inconclusive" and not j.in_family and j.q is None and "no evidence" in j.undecided


def test_pick_by_name_alone_does_not_match_a_variant() -> None:
    plain, stepped = fake_run("fedavg", 0, [0.5]), fake_run({"name": "fedavg", "server_lr": 2.0}, 0, [0.5])
    plain.config["algorithm"] = {"name": "fedavg"}
    assert pick([plain, stepped], {"algorithm": "fedavg"}) == [plain]
    assert pick([plain, stepped], {"algorithm": {"name": "fedavg", "server_lr": 2.0}}) == [stepped]
    assert pick([plain, stepped], {"algorithm.name": "fedavg"}) == [plain, stepped]


def test_speed_claim_is_two_rows_rounds_and_the_continuous_measure() -> None:
    rows = speed("a faster", "x", {"algorithm": "a"}, {"algorithm": "b"}, 0.5, paper="2x")
    assert [r.measure.name for r in rows] == ["rounds to 0.5 test accuracy (interpolated, restricted)",
                                              "mean train loss over rounds"]
    assert [r.expect for r in rows] == ["less", "less"]
    assert rows[1].text == "a faster: lower train loss averaged over the rounds"  # worded as a loss claim


def test_unknown_expectation_is_refused() -> None:
    with pytest.raises(ValueError, match="expect"):
        Claim("t", "x", {}, None, final(), "sooner")


def test_numbers_name_only_what_differs_and_the_speed_up() -> None:
    from fedaccel.report.claims import numbers

    b = [0.1, 0.2, 0.3, 0.5]  # round 4
    runs = [fake_run({"name": "gsnr", "samples": 64, "plan": "random"}, s, b) for s in range(5)]
    runs += [fake_run({"name": "gsnr", "samples": 64}, s, [0.1, 0.5, 0.6, 0.6]) for s in range(5)]  # round 2
    claim = Claim("t", "x", {"algorithm": {"name": "gsnr", "samples": 64}},
                  {"algorithm": {"name": "gsnr", "samples": 64, "plan": "random"}}, rounds_to(0.5), "less")
    text = numbers(judge(claim, runs))
    # five seeds: the sign-flip test's smallest p is 2/32 > 0.05, so its interval is unbounded (a t interval
    # printed [-2, -2] here, beside a p that rejects nothing)
    assert text.startswith("mean gsnr samples=64 2 vs gsnr plan=random samples=64 4; mean a − b = -2 [too few seeds for a 95% interval], "
                           "p = 0.0625, "
                           "q = 0.0625, 5/5 seeds the claimed way; speed-up 2.00×")


def test_describe_names_list_entries_by_kind() -> None:
    from fedaccel.report.claims import describe

    flip = {"attacks": [{"kind": "label-flip", "clients": [0]}]}
    assert describe(flip, {"attacks": []}, {}) == "attacks label-flip"
    assert describe({"attacks": []}, flip, {}) == "attacks none"


def test_a_diverged_run_counts_as_its_whole_budget_in_rounds_to_target() -> None:
    """Stopped by divergence at round 3 of 10 without reaching 0.9: rounds to 0.9 is 10 (the budget it
    failed in), not 3, which would read as a quicker run than one that reached 0.9 at round 5."""
    rows = [{"round": r, "test_acc": a} for r, a in enumerate([0.1, 0.5, 0.6, 0.4])]
    config = {"train": {"rounds": 10}, "run": {"seed": 0}}
    diverged = Run(Path("d"), config, rows, {"finished": False, "diverged": 3})
    stopped = Run(Path("s"), config, rows, None)  # cut short, not diverged: its recorded rounds
    assert rounds_to(0.9).of(diverged) == 10.0
    assert rounds_to(0.9).of(stopped) == 3.0


def test_a_side_selects_a_run_by_its_grid_spelling_or_its_resolved_config() -> None:
    """A preset as the experiment file spells it matches the cell whose resolved config expanded it."""
    run = fake_run({"name": "scaffold", "lr_decay": 0.998, "clip": 5.0}, 0, [0.5])
    assert pick([run], {"algorithm": {"name": "scaffold", "preset": "feddc-code"}}) == []
    run.spec = {"algorithm": {"name": "scaffold", "preset": "feddc-code"}}
    assert pick([run], {"algorithm": {"name": "scaffold", "preset": "feddc-code"}}) == [run]
    assert pick([run], {"algorithm": "scaffold"}) == []  # the name alone is SCAFFOLD without the preset
    assert pick([run], {"algorithm.clip": 5.0, "train.lr": 0.1}) == [run]  # resolved values still match


ROW_TYPES = {  # every row type's claim: (expect, margin, with b); the estimand follows from them
    "mean": ("less", 0.0, True),
    "median beyond a margin": ("greater", 0.5, True),
    "median against a value": ("less", 0.0, False),
    "equal within a margin": ("equal", 1.0, True),
}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-40, 40).map(lambda k: k / 8), min_size=6, max_size=12), st.sampled_from(sorted(ROW_TYPES)))
def test_every_row_types_sentence_says_its_tests_estimand_and_interval(d: list[float], kind: str) -> None:
    """Each row type's sentence, generated from random differences, names what its test is about (the mean, or
    the median seed for margin, value and equivalence rows) and prints the interval that test inverts to: it
    holds the tested centre exactly when the two-sided test does not reject it (a t interval could lie wholly
    on one side of 0 beside an inconclusive sign-flip p)."""
    from fedaccel.report.claims import claim_test, numbers, per_run
    from fedaccel.report.statistics import ALPHA, sign_flip_p, sign_test_p

    expect, margin, with_b = ROW_TYPES[kind]
    measure = per_run("x", lambda run: run.config["x"])
    runs = [Run(Path(f"/r/a{s}"), {"side": "a", "x": x, "run": {"seed": s}}, []) for s, x in enumerate(d)]
    runs += [Run(Path(f"/r/b{s}"), {"side": "b", "x": 0.0, "run": {"seed": s}}, []) for s in range(len(d))]
    claim = Claim("t", "x", {"side": "a"}, {"side": "b"} if with_b else None, measure, expect, margin=margin,
                  value=0.0)
    j = judge(claim, runs)
    text = numbers(j)
    assert j.differences == d and j.p == claim_test(claim, d)[0]
    if j.estimand == "mean":
        assert "mean a − b = " in text and "median seed" not in text and j.effect == pytest.approx(np.mean(d))
        centre, p = 0.0, sign_flip_p(d)
    else:
        assert "the median seed's a − b = " in text and j.effect == pytest.approx(np.median(d))
        assert ("on the median seed's difference, not on every seed's" in text) == bool(margin)
        centre = {"less": -margin, "greater": margin, "equal": 0.0}[expect]
        p = sign_test_p(d, centre=centre)
    bounded = np.isfinite(j.low) and np.isfinite(j.high)
    assert ("too few seeds for a 95% interval" in text) == (not bounded)
    if bounded:
        assert (f"{'sign-flip 95%' if j.estimand == 'mean' else '≥ 95%'}: {j.low:+.4g}, {j.high:+.4g}") in text
        tested = abs(p - ALPHA) > 1e-12 and abs(centre - j.low) > 1e-6 and abs(centre - j.high) > 1e-6
        if tested:  # away from the ends, where bisection has the last word
            assert (j.low <= centre <= j.high) == (p > ALPHA), (j.low, j.high, p)


def test_an_equal_rounds_row_counts_its_censored_seeds_as_intervals_and_stores_them() -> None:
    """Seed 0 of a never reaches 0.5 in its 4 rounds (pinned at 4, b's 4 too: d = 0, inside any margin); as an
    interval, [0, inf), it counts for neither 'below the margin' nor the equivalence. claims.json names the
    censored seeds, so the p recomputes from the file alone."""
    from fedaccel.report.claims import censored_bounds, claim_test

    runs = [fake_run("b", s, [0.1, 0.2, 0.3, 0.5]) for s in range(8)]
    runs += [fake_run("a", s, [0.1, 0.2, 0.3, 0.4] if s == 0 else [0.1, 0.2, 0.45, 0.5 + 0.01 * s]) for s in range(8)]
    claim = Claim("a as fast as b", "x", {"algorithm": "a"}, {"algorithm": "b"}, rounds_to(0.5), "equal", margin=1.0)
    j = judge(claim, runs)
    stored = j.as_dict()
    assert stored["censored_seeds"] == {"a": [0], "b": []} and j.censored == (1, 0)
    flags = [[s in stored["censored_seeds"][side] for s in stored["paired_seeds"]] for side in "ab"]
    assert claim_test(claim, stored["differences"], censored_bounds(stored["differences"], *flags))[0] == j.p
    assert j.p > claim_test(claim, stored["differences"])[0]  # pinned at the budget, seed 0 counted as inside


def test_a_row_says_when_a_sides_robust_rule_could_not_meet_its_condition_in_some_rounds() -> None:
    """Krum f = 1 needs 5 updates; with Bernoulli participation some rounds had 3: the row says in how many."""
    def krum_run(seed: int, uploaded: list[int]) -> Run:
        run = fake_run({"name": "fedavg", "aggregate": {"name": "krum", "f": 1}}, seed, [0.2, 0.4, 0.6, 0.8])
        for row, n in zip(run.metrics[1:], uploaded):
            row["uploaded"] = n
        return run

    runs = [krum_run(s, [6, 3, 6, 4]) for s in range(6)] + [fake_run("fedavg", s, [0.1, 0.2, 0.4, 0.6]) for s in range(6)]
    claim = Claim("krum faster", "x", {"algorithm.aggregate.name": "krum"}, {"algorithm": "fedavg"}, rounds_to(0.5),
                  "less")
    note = judge(claim, runs).note
    assert "a's krum needs n > 2f + 2 (at least 5 updates): 12 of its 24 rounds had fewer" in note
    assert "b's" not in note
