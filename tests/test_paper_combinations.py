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
    # FedGSNR switched off: equal clients, a uniform plan of each client's own steps (tau = 3)
    ("fedgsnr-fedumf", {"plan": "uniform", "e_const": 3, "fraction": 0.5}, "fedumf", {"fraction": 0.5}),
    ("fedgsnr-bherd", {"plan": "uniform", "e_const": 3, "alpha": 0.5}, "bherd", {"alpha": 0.5}),
]
EQUAL = (9, 9, 9)  # client sizes where FedGSNR's uniform plan is each client's own tau


@pytest.mark.parametrize("name, options, plain, plain_options", REDUCTIONS,
                         ids=[f"{n}-is-{p}" for n, _, p, _ in REDUCTIONS])
def test_a_combination_with_one_part_off_is_the_other_part_alone(
        name: str, options: dict, plain: str, plain_options: dict) -> None:
    sizes = EQUAL if options.get("plan") == "uniform" else (6, 9, 12)
    combined, _ = run(name, linear_federation(sizes), 4, **options)
    alone, _ = run(plain, linear_federation(sizes), 4, **plain_options)
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
    """Each client selects alpha of the steps FedGSNR planned for it (the round's plan), not of its own tau."""
    fed = linear_federation()
    _, reports = run("fedgsnr-bherd", fed, 3, samples=2, e_const=3, alpha=0.5)
    plans = [{int(c): steps for c, steps in report.diag["steps"].items()} for report in reports]
    assert any(sorted(plan.values()) != sorted(fed.steps.tolist()) for plan in plans)  # the plan changed the steps
    for report, plan in zip(reports, plans):
        herded = {int(c): v for c, v in report.diag["clients"].items()}
        assert set(herded) == {c for c, steps in plan.items() if steps > 0}
        for client, values in herded.items():
            assert values["tau"] == plan[client]
            assert len(values["selected"]) == selected_count(0.5, plan[client])
            assert all(0 <= s < plan[client] for s in values["selected"])


def test_fedumf_bherd_uploads_the_herd_of_a_fraction_and_keeps_every_clients_update() -> None:
    """C = 0.5 of 3 clients: 2 upload a round (their herds: diagnostics), all 3 train and store their real update."""
    fed = linear_federation()
    state, reports = run("fedumf-bherd", fed, 3, fraction=0.5, bherd_alpha=0.5)
    for report in reports:
        assert report.uploaded == 2 and len(report.participation.train) == 3
        assert sorted(report.diag["clients"]) == sorted(str(c) for c in report.participation.upload)
    stored = [client[0].update for client in state.clients]  # FedUMF's part is first
    assert all(update is not None and update.abs().sum() > 0 for update in stored)
    # after one round (every client starts from w0, no fusion) the stored updates are FedUMF's own: the real local
    # updates, not BHerd's estimates of them (which only go up)
    herding, _ = run("fedumf-bherd", linear_federation(), 1, fraction=0.5, bherd_alpha=0.5)
    plain, _ = run("fedumf", linear_federation(), 1, fraction=0.5)
    for ours, theirs in zip(herding.clients, plain.clients):
        torch.testing.assert_close(ours[0].update, theirs[0].update, atol=0, rtol=0)


def test_fedgsnr_fedumf_never_fuses_an_update_that_went_up() -> None:
    """FedGSNR plans 0 steps for some client-rounds (the Dirichlet plan, 8 clients): such a client does not train,
    and the update it keeps may be one it uploaded. At C = 1 every stored update went up, so nothing may be fused:
    the run is FedGSNR's (a review found it fused the uploaded update again, 0.094 apart after 12 rounds)."""
    sizes = (6, 9, 12, 6, 9, 12, 6, 9)
    options = {"samples": 2, "e_const": 3, "plan": "dirichlet"}
    combined, reports = run("fedgsnr-fedumf", linear_federation(sizes), 12, fraction=1.0, **options)
    assert any(steps == 0 for report in reports for steps in report.diag["steps"].values())  # the case arises
    alone, _ = run("fedgsnr", linear_federation(sizes), 12, **options)
    torch.testing.assert_close(combined.w, alone.w, atol=1e-6, rtol=0)


def test_fedumf_bherds_two_alphas_are_each_named_in_their_errors() -> None:
    """``alpha`` is FedUMF's fusion coefficient there, ``bherd_alpha`` BHerd's fraction: each error names its own."""
    from fedaccel.algorithms.registry import build_algorithm
    from fedaccel.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^fedumf-bherd bherd_alpha \(BHerd's fraction of steps\) must be in"):
        build_algorithm("fedumf-bherd", bherd_alpha=2.0)
    with pytest.raises(ConfigError, match="^fedumf alpha must be in"):
        build_algorithm("fedumf-bherd", alpha=2.0)
