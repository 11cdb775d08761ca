"""The generic judge of claims: measures, pairing by seed, the bootstrap interval and the verdict rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedaccel.report.claims import (
    BEST,
    Claim,
    bootstrap_interval,
    final,
    judge,
    mean_over_rounds,
    pick,
    rounds_to,
    speed,
    verdict,
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


def test_rounds_to_target_is_censored_at_the_last_round_plus_one_interval() -> None:
    measure = rounds_to(0.5)
    assert measure.of(fake_run("a", 0, [0.1, 0.6, 0.7])) == 2.0
    assert measure.of(fake_run("a", 0, [0.1, 0.2, 0.3], every=5)) == 20.0  # never: 15 + 5
    assert rounds_to(0.25, "train_loss").of(fake_run("a", 0, [0.1, 0.6, 0.8])) == 3.0  # a loss is reached from above


def test_continuous_measures() -> None:
    run = fake_run("a", 0, [0.2, 0.4, 0.6, 0.8])
    assert mean_over_rounds("test_acc").of(run) == pytest.approx(0.5)  # round 0 is not averaged
    assert mean_over_rounds("test_acc", upto=0.5).of(run) == pytest.approx(0.3)
    assert final("test_acc", last=2).of(run) == pytest.approx(0.7)


def test_bootstrap_interval_of_equal_differences_is_that_difference() -> None:
    assert bootstrap_interval([-2.0] * 5) == (-2.0, -2.0)
    low, high = bootstrap_interval([1.0, -1.0, 1.0, -1.0, 0.0])
    assert low < 0.0 < high


@pytest.mark.parametrize(
    ("expect", "low", "high", "margin", "word"),
    [
        ("less", -3.0, -1.0, 0.0, "agrees"),
        ("less", 1.0, 3.0, 0.0, "disagrees"),
        ("less", -1.0, 1.0, 0.0, "inconclusive"),
        ("less", 0.0, 0.0, 0.0, "inconclusive"),  # no difference at all: covers "no effect"
        ("greater", 0.03, 0.05, 0.02, "agrees"),
        ("greater", 0.0, 0.01, 0.02, "disagrees"),  # surely below the stated margin
        ("equal", -0.004, 0.006, 0.01, "agrees"),
        ("equal", 0.02, 0.05, 0.01, "disagrees"),
        ("equal", 0.0, 0.05, 0.01, "inconclusive"),
    ],
)
def test_verdict_rule(expect: str, low: float, high: float, margin: float, word: str) -> None:
    assert verdict(expect, low, high, margin) == word


def _grid(b_curve: list[float], a_curves: list[list[float]]) -> list[Run]:
    runs = [fake_run("b", s, b_curve) for s in range(len(a_curves))]
    return runs + [fake_run("a", s, curve) for s, curve in enumerate(a_curves)]


def test_judge_pairs_seeds_and_reports_effect_interval_and_baseline_rounds() -> None:
    b = [0.1, 0.2, 0.3, 0.4, 0.6, 0.7]  # reaches 0.5 at round 5
    runs = _grid(b, [[0.1, 0.2, 0.6, 0.7, 0.8, 0.9]] * 5)  # round 3 in every seed
    j = judge(Claim("a sooner", "x", {"algorithm": "a"}, {"algorithm": "b"}, rounds_to(0.5), "less", "2x"), runs)
    assert (j.verdict, j.seeds, j.effect, j.low, j.high) == ("agrees", 5, -2.0, -2.0, -2.0)
    assert (j.a_median, j.b_median, j.baseline_rounds, j.on_paper_side) == (3.0, 5.0, 5.0, 5)
    row = j.as_dict()
    assert row["verdict"] == "agrees" and row["interval"] == [-2.0, -2.0] and row["paper"] == "2x"
    assert row["baseline_median_rounds_to_target"] == 5.0 and row["seeds"] == 5

    slower = judge(Claim("b sooner", "x", {"algorithm": "b"}, {"algorithm": "a"}, rounds_to(0.5), "less"), runs)
    assert slower.verdict == "disagrees"


def test_judge_mixed_seeds_are_inconclusive_and_censoring_is_counted() -> None:
    b = [0.1, 0.2, 0.3, 0.6]  # round 4
    a = [[0.6] * 4, [0.1] * 4, [0.1, 0.6, 0.6, 0.6], [0.1] * 4, [0.1, 0.1, 0.6, 0.6]]  # 1, never (5), 2, 5, 3
    j = judge(Claim("a sooner", "x", {"algorithm": "a"}, {"algorithm": "b"}, rounds_to(0.5), "less"), _grid(b, a))
    assert j.verdict == "inconclusive" and j.censored == (2, 0)
    assert j.effect == pytest.approx(np.mean([1 - 4, 5 - 4, 2 - 4, 5 - 4, 3 - 4]))


def test_judge_without_pairs_is_inconclusive_and_a_missing_experiment_is_not_run() -> None:
    runs = [fake_run("a", 0, [0.6]), fake_run("b", 1, [0.6])]
    claim = Claim("t", "x", {"algorithm": "a"}, {"algorithm": "b"}, rounds_to(0.5), "less")
    assert judge(claim, runs).verdict == "inconclusive"
    assert judge(claim, None).verdict == "not run"


def test_a_claim_without_b_compares_with_a_constant() -> None:
    runs = [fake_run("a", s, [0.9, 0.9 + 0.001 * s]) for s in range(5)]
    claim = Claim("high", "x", {"algorithm": "a"}, None, final("test_acc", last=1), "greater", value=0.8)
    j = judge(claim, runs)
    assert j.verdict == "agrees" and j.b_median == 0.8 and j.effect == pytest.approx(0.102)


def test_best_learning_rate_is_chosen_on_the_training_loss_not_the_test_accuracy() -> None:
    runs = []
    for s in range(5):
        runs.append(fake_run("a", s, [0.9, 0.9], loss=[0.5, 0.5], lr=0.1))  # best test accuracy, worse loss
        runs.append(fake_run("a", s, [0.5, 0.5], loss=[0.2, 0.2], lr=0.3))  # lowest training loss
        runs.append(fake_run("b", s, [0.7, 0.7], loss=[0.3, 0.3], lr=0.1))
    claim = Claim("t", "x", {"algorithm": "a", "train.lr": BEST}, {"algorithm": "b", "train.lr": 0.1},
                  final("test_acc", last=1), "greater")
    j = judge(claim, runs)
    assert j.chosen == {"train.lr": 0.3} and j.a_median == 0.5 and j.verdict == "disagrees"


def test_pick_by_name_alone_does_not_match_a_variant() -> None:
    plain, stepped = fake_run("fedavg", 0, [0.5]), fake_run({"name": "fedavg", "server_lr": 2.0}, 0, [0.5])
    plain.config["algorithm"] = {"name": "fedavg"}
    assert pick([plain, stepped], {"algorithm": "fedavg"}) == [plain]
    assert pick([plain, stepped], {"algorithm": {"name": "fedavg", "server_lr": 2.0}}) == [stepped]
    assert pick([plain, stepped], {"algorithm.name": "fedavg"}) == [plain, stepped]


def test_speed_claim_is_two_rows_rounds_and_the_continuous_measure() -> None:
    rows = speed("a faster", "x", {"algorithm": "a"}, {"algorithm": "b"}, 0.5, paper="2x")
    assert [r.measure.name for r in rows] == ["rounds to 0.5 test accuracy", "mean train loss over rounds"]
    assert [r.expect for r in rows] == ["less", "less"]


def test_unknown_expectation_is_refused() -> None:
    with pytest.raises(ValueError, match="expect"):
        Claim("t", "x", {}, None, final(), "sooner")


def test_numbers_name_only_what_differs_and_the_speed_up() -> None:
    from fedaccel.report.claims import numbers

    b = [0.1, 0.2, 0.3, 0.6]  # round 4
    runs = [fake_run({"name": "gsnr", "samples": 64, "plan": "random"}, s, b) for s in range(5)]
    runs += [fake_run({"name": "gsnr", "samples": 64}, s, [0.1, 0.6, 0.6, 0.6]) for s in range(5)]  # round 2
    claim = Claim("t", "x", {"algorithm": {"name": "gsnr", "samples": 64}},
                  {"algorithm": {"name": "gsnr", "samples": 64, "plan": "random"}}, rounds_to(0.5), "less")
    text = numbers(judge(claim, runs))
    assert text.startswith("median gsnr 2 vs gsnr plan random 4; a − b = -2 [-2, -2], 5/5 seeds")
    assert text.endswith("speed-up of the medians 2.00×")


def test_describe_names_list_entries_by_kind() -> None:
    from fedaccel.report.claims import describe

    flip = {"attacks": [{"kind": "label-flip", "clients": [0]}]}
    assert describe(flip, {"attacks": []}, {}) == "attacks label-flip"
    assert describe({"attacks": []}, flip, {}) == "attacks none"
