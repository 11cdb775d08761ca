"""Controls for BHerd's speed-up (paper 000): the estimate-error diagnostic, the random-subset BHerd, the
fixed GraB variant, and FedAvg with a larger server step. Hand cases with exact answers; the batched and
stacked forms against the per-client and in-process ones."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from test_batched_estimators import TAUS, assert_same, both_forms, random_directions
from test_bherd_family import linear_federation, run
from test_stacked import federation, run_both
from tiny_models import scalar_federation

from fedaccel.algorithms.base import ClientContext, ClientUpdate, RoundInfo
from fedaccel.algorithms.bherd import (
    HerdingEstimator,
    bherd_selection,
    random_subset,
    selected_count,
)
from fedaccel.algorithms.grab import ERROR_TERMS, BalancingEstimator, grab_selection
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.engine.round import init_state, run_round
from fedaccel.errors import ConfigError
from fedaccel.grids.experiment import load_experiment
from fedaccel.runs.config import build_algorithm_from

# The 2-D hand example of test_bherd_family: herding with k = 2 picks steps 1 and 2.
HERD_Z = torch.tensor([[8.0, 5.0], [5.0, 6.0], [4.0, 4.0], [3.0, 5.0]])
# GraB's hand example: the paper's test keeps steps [1, 2], the fixed one [0, 3].
GRAB_Z = torch.tensor([[2.0, 0.0], [2.0, 2.0], [0.0, -2.0], [-2.0, 2.0]])


def herd(z: torch.Tensor, alpha: float, lr: float, picks: list[int] | None = None) -> dict:  # type: ignore[type-arg]
    est = HerdingEstimator(len(z), z.shape[1], alpha, lr, picks)
    for step in range(len(z)):
        est.observe(step, z[step].clone())
    return est.finish(lr * z.sum(dim=0))[2]


# ---------------------------------------------------------------------------------------------
# estimate_error
# ---------------------------------------------------------------------------------------------


def test_bherd_estimate_error_by_hand() -> None:
    # k = 2: steps 1, 2, g = (9, 10); (eta/alpha) g = eta (18, 20) against eta sum z = eta (20, 20)
    assert herd(HERD_Z, 0.5, 0.5)["estimate_error"] == pytest.approx(2 / math.sqrt(800), rel=1e-6)
    # given picks 0, 1: g = (13, 11) -> (26, 22); gap (6, 2)
    assert herd(HERD_Z, 0.5, 1.0, [0, 1])["estimate_error"] == pytest.approx(math.sqrt(40 / 800), rel=1e-6)
    assert herd(HERD_Z, 1.0, 0.5)["estimate_error"] == 0.0  # alpha = 1: the full update itself


def test_estimate_error_of_a_zero_update() -> None:
    assert herd(torch.zeros(4, 2), 0.5, 1.0)["estimate_error"] == 0.0  # 0 estimates 0 exactly
    # sum z = 0 but one step of (1, 0), (-1, 0) is not: inf, recorded as None
    assert herd(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]), 0.5, 1.0)["estimate_error"] is None


def grab_updates(variant: str) -> list:  # type: ignore[type-arg]
    """Two clients of equal weight, lr 0.1: GRAB_Z (tau 4) and one step (1, 1), through the server."""
    keep_ties = variant == "fixed"
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.array([0.5, 0.5]), seed=0)
    updates = []
    for client, z in enumerate((GRAB_Z, torch.tensor([[1.0, 1.0]]))):
        est = BalancingEstimator(len(z), 2, lr=0.1, keep_ties=keep_ties)
        for step in range(len(z)):
            est.observe(step, z[step].clone())
        estimate, extras, diag = est.finish(0.1 * z.sum(dim=0))
        updates.append(ClientUpdate(client, 0.5, len(z), estimate, extras, diag))
    part = grab_selection(variant=variant)
    assert part.server_adjust is not None
    return part.server_adjust(info, updates, None)


def test_grab_paper_variant_drops_the_first_step_and_scales_by_one_alpha() -> None:
    a, b = grab_updates("paper")
    assert a.diag["selected"] == [1, 2] and b.diag["selected"] == []  # s = 0: a tie, never kept
    # alpha_t = (0.5 + 0) / 2 = 0.25: a's eta (2, 0) becomes (0.8, 0); b uploads 0
    torch.testing.assert_close(a.delta, torch.tensor([0.8, 0.0]))
    torch.testing.assert_close(b.delta, torch.tensor([0.0, 0.0]))
    # errors against the full updates (0.2, 0.2) and (0.1, 0.1): |(0.6, -0.2)| / |(0.2, 0.2)| = sqrt(5); 1
    assert a.diag["estimate_error"] == pytest.approx(math.sqrt(5), rel=1e-5)
    assert b.diag["estimate_error"] == pytest.approx(1.0, rel=1e-6)
    assert not any(k in u.diag for u in (a, b) for k in ERROR_TERMS)  # the server's terms are gone


def test_grab_fixed_variant_keeps_the_first_step_and_scales_each_client() -> None:
    a, b = grab_updates("fixed")
    # step 0: s = 0 ties -> kept, s = (1.5, 0); step 1: <s, (1, 1.5)> > 0; step 2: <(.5, -1.5), (-1, -2)> > 0;
    # step 3: <(1.5, .5), (-2.5, 1.5)> = -3 < 0 -> kept. g = (2, 0) + (-2, 2) = (0, 2)
    assert a.diag["selected"] == [0, 3] and a.diag["alpha"] == 0.5
    assert b.diag["selected"] == [0] and b.diag["alpha"] == 1.0
    torch.testing.assert_close(a.delta, torch.tensor([0.0, 0.4]))  # 0.1 (0, 2) / 0.5
    torch.testing.assert_close(b.delta, torch.tensor([0.1, 0.1]))  # 0.1 (1, 1) / 1
    assert a.diag["estimate_error"] == pytest.approx(1.0, rel=1e-5)  # |(-0.2, 0.2)| / |(0.2, 0.2)|
    assert b.diag["estimate_error"] == 0.0


def test_round_reports_the_mean_estimate_error() -> None:
    for name, params in (("bherd", {"alpha": 0.5}), ("grab-fedavg", {})):
        _, reports = run(name, linear_federation(), 1, **params)
        clients = reports[0].diag["clients"].values()
        errors = [c["estimate_error"] for c in clients]
        assert all(e > 0 for e in errors), name
        assert reports[0].diag["estimate_error"] == pytest.approx(sum(errors) / len(errors)), name


# ---------------------------------------------------------------------------------------------
# BHerd's random-subset control
# ---------------------------------------------------------------------------------------------


def test_random_subsets_are_seeded_per_round_and_client() -> None:
    def pick(seed: int, round_: int, client: int) -> list[int]:
        info = RoundInfo(round=round_, lr=0.1, prev_lr=0.1, weights=np.full(3, 1 / 3), seed=seed)
        return random_subset(ClientContext(info, client, 12, True), 6)

    assert pick(0, 3, 1) == pick(0, 3, 1)  # reproducible
    assert len(pick(0, 3, 1)) == 6 and len(set(pick(0, 3, 1))) == 6 and pick(0, 3, 1) == sorted(pick(0, 3, 1))
    assert len({tuple(pick(0, r, 1)) for r in range(5)}) > 1  # rounds differ
    assert len({tuple(pick(0, 3, c)) for c in range(3)}) > 1  # clients differ
    assert len({tuple(pick(s, 3, 1)) for s in range(5)}) > 1  # seeds differ


def test_random_selection_alpha_one_is_herding_and_fedavg() -> None:
    rand, _ = run("bherd", linear_federation(), 3, alpha=1.0, selection="random")
    herding, _ = run("bherd", linear_federation(), 3, alpha=1.0)
    fedavg, _ = run("fedavg", linear_federation(), 3)
    assert torch.equal(rand.w, herding.w)
    torch.testing.assert_close(rand.w, fedavg.w, atol=1e-6, rtol=0)


def test_random_selection_keeps_herdings_count_and_changes_with_rounds() -> None:
    sizes = (24, 30, 36)  # tau = 8, 10, 12
    rand, reports = run("bherd", linear_federation(sizes), 3, alpha=0.5, selection="random")
    again, reports_again = run("bherd", linear_federation(sizes), 3, alpha=0.5, selection="random")
    _, herding = run("bherd", linear_federation(sizes), 3, alpha=0.5)
    assert torch.equal(rand.w, again.w)  # the same seed: the same run
    for r, h, a in zip(reports, herding, reports_again, strict=True):
        for client, entry in r.diag["clients"].items():
            assert len(entry["selected"]) == len(h.diag["clients"][client]["selected"])
            assert len(entry["selected"]) == selected_count(0.5, entry["tau"])
            assert entry["selected"] == a.diag["clients"][client]["selected"]
    per_round = [tuple(r.diag["clients"]["2"]["selected"]) for r in reports]
    assert len(set(per_round)) > 1
    assert per_round != [tuple(h.diag["clients"]["2"]["selected"]) for h in herding]


@pytest.mark.parametrize("name", ["bherd-fednova", "bherd-scaffold"])
def test_random_selection_in_the_combinations(name: str) -> None:
    _, reports = run(name, linear_federation((24, 30, 36)), 2, alpha=0.5, selection="random")
    for entry in reports[-1].diag["clients"].values():
        assert len(entry["selected"]) == selected_count(0.5, entry["tau"])


def test_invalid_control_options_fail_with_one_line() -> None:
    with pytest.raises(ConfigError, match="selection must be one of herding, random"):
        build_algorithm("bherd-scaffold", selection="greedy")
    with pytest.raises(ConfigError, match="variant must be one of paper, fixed"):
        build_algorithm("grab-fedavg", variant="corrected")


# ---------------------------------------------------------------------------------------------
# Batched and stacked forms
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("part", [bherd_selection(alpha=0.5, selection="random"), grab_selection(variant="fixed")])
def test_batched_controls_match_per_client(part) -> None:  # noqa: ANN001
    z = random_directions(TAUS, 37, torch.float32, seed=2)
    batched, single = both_forms(part, TAUS, z)
    for b, s in zip(batched, single, strict=True):
        assert_same(b, s)
    if part.name == "grab":
        assert all(0 in s[2]["selected"] for s in single)  # fixed: the first step is always kept


@pytest.mark.parametrize(
    "name,params",
    [("bherd", {"alpha": 0.75, "selection": "random"}), ("bherd-scaffold", {"alpha": 0.5, "selection": "random"}),
     ("grab-fedavg", {"variant": "fixed"})],
)
def test_controls_stacked_equal_in_process(name: str, params: dict) -> None:  # type: ignore[type-arg]
    run_both(build_algorithm(name, **params), lambda: federation("2nn"))


# ---------------------------------------------------------------------------------------------
# FedAvg with the server step 1/alpha, from an experiment grid
# ---------------------------------------------------------------------------------------------


def test_fedavg_server_lr_from_a_grid_moves_twice_as_far(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text("base: {model: svm}\ngrid:\n  algorithm: [fedavg, {name: fedavg, server_lr: 2.0}]\n")
    moves = []
    for _, config in load_experiment(grid).cells:
        fed = scalar_federation()
        algorithm, w0 = build_algorithm_from(config), fed.model.theta.clone()
        state, _ = run_round(algorithm, init_state(algorithm, w0.clone(), 2), fed)
        moves.append(state.w - w0)
    assert float(moves[0].abs().max()) > 0
    torch.testing.assert_close(moves[1], 2 * moves[0], atol=1e-7, rtol=0)
