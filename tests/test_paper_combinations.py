"""The three papers' methods with each other (and BHerd with FedProx): each reduces to its parts where the other
part is switched off (BHerd alpha = 1 is FedAvg, FedUMF C = 1 is FedAvg, FedProx mu = 0 is FedAvg), and each does
both parts' work where both are on (it equals neither alone; BHerd herds the steps FedGSNR planned)."""

from __future__ import annotations

import pytest
import torch
from test_bherd_family import linear_federation, run

from fedaccel.algorithms.bherd import selected_count

# (combination, its options, the recipe it must equal, that recipe's options): one part switched off
REDUCTIONS = [
    ("bherd-fedprox", {"alpha": 0.5, "mu": 0.0}, "bherd", {"alpha": 0.5}),
    ("bherd-fedprox", {"alpha": 1.0, "mu": 0.1}, "fedprox", {"mu": 0.1}),
    ("fedgsnr-bherd", {"samples": 2, "e_const": 3, "alpha": 1.0}, "fedgsnr", {"samples": 2, "e_const": 3}),
    ("fedumf-bherd", {"fraction": 1.0, "bherd_alpha": 0.5}, "bherd", {"alpha": 0.5}),
    ("fedumf-bherd", {"fraction": 0.5, "alpha": 1.0, "bherd_alpha": 1.0}, "fedumf", {"fraction": 0.5, "alpha": 1.0}),
    ("fedgsnr-fedumf", {"samples": 2, "e_const": 3, "fraction": 1.0}, "fedgsnr", {"samples": 2, "e_const": 3}),
]


@pytest.mark.parametrize("name, options, plain, plain_options", REDUCTIONS,
                         ids=[f"{n}-is-{p}" for n, _, p, _ in REDUCTIONS])
def test_a_combination_with_one_part_off_is_the_other_part_alone(
        name: str, options: dict, plain: str, plain_options: dict) -> None:
    combined, _ = run(name, linear_federation(), 4, **options)
    alone, _ = run(plain, linear_federation(), 4, **plain_options)
    torch.testing.assert_close(combined.w, alone.w, atol=1e-6, rtol=0)
    assert not torch.equal(alone.w, linear_federation().model.theta)  # it did move


# (combination, its options, each part's recipe alone with its options): both parts on
BOTH_ON = [
    ("bherd-fedprox", {"alpha": 0.5, "mu": 0.5}, [("bherd", {"alpha": 0.5}), ("fedprox", {"mu": 0.5})]),
    ("fedgsnr-bherd", {"samples": 2, "e_const": 3, "alpha": 0.5},
     [("fedgsnr", {"samples": 2, "e_const": 3}), ("bherd", {"alpha": 0.5})]),
    ("fedumf-bherd", {"fraction": 0.5, "bherd_alpha": 0.5},
     [("fedumf", {"fraction": 0.5}), ("bherd", {"alpha": 0.5})]),
    ("fedgsnr-fedumf", {"samples": 2, "e_const": 3, "fraction": 0.5},
     [("fedgsnr", {"samples": 2, "e_const": 3}), ("fedumf", {"fraction": 0.5})]),
]


@pytest.mark.parametrize("name, options, parts", BOTH_ON, ids=[n for n, _, _ in BOTH_ON])
def test_a_combination_with_both_parts_on_is_neither_alone(name: str, options: dict, parts: list) -> None:
    combined, _ = run(name, linear_federation(), 4, **options)
    for plain, plain_options in parts:
        alone, _ = run(plain, linear_federation(), 4, **plain_options)
        assert (combined.w - alone.w).abs().max() > 1e-4, f"{name} is {plain} alone: a part was left out"


def test_fedgsnr_bherd_herds_the_steps_fedgsnr_planned() -> None:
    """Each client selects alpha of its planned steps (its round's tau), not of the steps it would take unplanned."""
    fed = linear_federation()
    _, reports = run("fedgsnr-bherd", fed, 3, samples=2, e_const=3, alpha=0.5)
    planned = [{int(c): v["tau"] for c, v in report.diag["clients"].items()} for report in reports]
    assert any(set(p.values()) != set(fed.steps.tolist()) for p in planned)  # the plan changed the steps
    for report, taus in zip(reports, planned):
        for client, values in report.diag["clients"].items():
            assert len(values["selected"]) == selected_count(0.5, taus[int(client)])
            assert all(0 <= s < taus[int(client)] for s in values["selected"])


def test_fedumf_bherd_uploads_the_herd_of_a_fraction_and_keeps_every_clients_update() -> None:
    """C = 0.5 of 3 clients: 2 upload a round (their herds: diagnostics), all 3 train and store their real update."""
    fed = linear_federation()
    state, reports = run("fedumf-bherd", fed, 3, fraction=0.5, bherd_alpha=0.5)
    for report in reports:
        assert report.uploaded == 2 and len(report.participation.train) == 3
        assert sorted(report.diag["clients"]) == sorted(str(c) for c in report.participation.upload)
    stored = [client[0].update for client in state.clients]  # FedUMF's part is first
    assert all(update is not None and update.abs().sum() > 0 for update in stored)
