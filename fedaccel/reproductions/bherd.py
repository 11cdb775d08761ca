"""Claims of the BHerd paper (paper 000, Sections 2.2-2.8) checked on our runs."""

from __future__ import annotations

from fedaccel.reproduce import Claim
from fedaccel.reproductions import higher_final, pick, reaches_sooner
from fedaccel.results import Run, series

TITLE = "BHerd — Accelerating Federated Learning by Selecting Beneficial Herd of Local Gradients"
INTRO = """
The quick scale replaces MNIST by the embedded Fashion-MNIST (same 28×28 layout, harder) and
shortens training (40 rounds for the SVM instead of T = 500, a 3,000-sample subset and 20 rounds
for the CNN); the learning rate is 0.001 for the SVM (Fashion-MNIST pixels in [0, 1]) and 0.05 for the
CNN. One seed per cell. Targets: 94% for the SVM of Fig. 2a, 93% for Fig. 3 (some of its curves
stop between 93% and 94% within 30 rounds), 50% for the CNN (after 20 rounds on 3,000 samples
FedAvg is near 58% on Case 2, far from converged). A claim "agrees" when the measured numbers go
the way the paper says; the numbers are in the row, the curves and tables below.
"""

SVM_TARGET = 0.94
CNN_TARGET = 0.50  # the quick CNN (3,000 samples, 20 rounds) tops out near 0.58 for FedAvg on Case 2
FIG3_TARGET = 0.93  # every Fig. 3 curve reaches 0.93 or stays clearly below it within 30 rounds


def _algo(name: str, split: str, **extra: object) -> dict[str, object]:
    where: dict[str, object] = {"algorithm.name": name, "data.split.name": split}
    where.update({f"algorithm.{k}": v for k, v in extra.items()})
    return where


def _svm(a: str, b: str, split: str, text: str) -> Claim:
    return reaches_sooner(text, "fig2a_svm", _algo(a, split), _algo(b, split), SVM_TARGET)


def _rr_close(runs: list[Run]) -> tuple[bool | None, str]:
    gaps = []
    for split in ("case1", "case2", "case3"):
        fixed = pick(runs, {"data.split.name": split, "train.reshuffle": False})
        rr = pick(runs, {"data.split.name": split, "train.reshuffle": True})
        if not fixed or not rr:
            return None, "runs missing"
        gaps.append(abs(float(series(fixed, "test_acc")[1][-1]) - float(series(rr, "test_acc")[1][-1])))
    return max(gaps) < 0.01, "final accuracy gap fixed vs RR per case: " + ", ".join(f"{g:.4f}" for g in gaps)


def _distance_does_not_grow(runs: list[Run]) -> tuple[bool | None, str]:
    """Fig. 4d: per run and client, the distance late in training against early in training."""
    ratios = []
    for run in runs:
        series_by_client: dict[str, list[float]] = {}
        for row in run.metrics:
            for client, values in (row.get("diag") or {}).get("clients", {}).items():
                if "distance" in values:
                    series_by_client.setdefault(client, []).append(values["distance"])
        for values in series_by_client.values():
            k = max(1, len(values) // 10)
            first, last = sum(values[:k]) / k, sum(values[-k:]) / k
            if len(values) > 1 and first > 0:
                ratios.append(last / first)
    if not ratios:
        return None, "no distances recorded"
    mean = sum(ratios) / len(ratios)
    return mean <= 1.0, (f"distance in the last 10% of rounds / first 10%, per run and client: mean {mean:.3f} "
                         f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} series)")


def _memory_is_tau_d_floats(runs: list[Run]) -> tuple[bool | None, str]:
    """Section 2: a client stores its tau_i local gradients of d floats (BHerd's memory cost)."""
    per_float, largest = set(), 0
    for run in runs:
        for row in run.metrics:
            for values in (row.get("diag") or {}).get("clients", {}).values():
                if "memory_bytes" in values and "tau" in values:
                    per_float.add(values["memory_bytes"] / (4 * values["tau"]))
                    largest = max(largest, values["memory_bytes"])
    if not per_float:
        return None, "no memory recorded"
    d = sorted(per_float)
    return len(d) == 1, (f"memory_bytes / (4 tau_i) = {', '.join(f'{v:g}' for v in d)} (d of the model); "
                         f"largest per client and round {largest / 2**20:.2f} MiB")


CLAIMS = [
    *[_svm("bherd", "fedavg", c, f"BHerd-FedAvg reaches {SVM_TARGET:.0%} test accuracy in fewer rounds than FedAvg (SVM, {c})")
      for c in ("case1", "case2", "case3")],
    _svm("bherd", "grab-fedavg", "case2", f"BHerd-FedAvg reaches {SVM_TARGET:.0%} sooner than GraB-FedAvg (SVM, case2)"),
    _svm("bherd-fednova", "fednova", "case2", f"BHerd improves FedNova: reaches {SVM_TARGET:.0%} sooner (SVM, case2)"),
    _svm("bherd-scaffold", "scaffold", "case2", f"BHerd improves SCAFFOLD: reaches {SVM_TARGET:.0%} sooner (SVM, case2)"),
    _svm("centralized", "fedavg", "case2", "Centralized SGD converges fastest (reference curve; vs FedAvg, SVM, case2)"),
    reaches_sooner(f"BHerd improves SCAFFOLD on the CNN: reaches {CNN_TARGET:.0%} sooner (case2)", "fig2b_cnn",
                   _algo("bherd-scaffold", "case2"), _algo("scaffold", "case2"), CNN_TARGET),
    reaches_sooner(f"BHerd-FedAvg reaches {CNN_TARGET:.0%} sooner than FedAvg on the CNN (case2)", "fig2b_cnn",
                   _algo("bherd", "case2"), _algo("fedavg", "case2"), CNN_TARGET),
    reaches_sooner("Lowering α from 1.0 to 0.3 accelerates convergence (Fig. 3a)", "fig3_alpha",
                   {"algorithm.alpha": 0.3}, {"algorithm.alpha": 1.0}, SVM_TARGET),
    higher_final("α = 0.1 fails to converge: it ends clearly (2 points) below α = 0.5 (Fig. 3a)", "fig3_alpha",
                 {"algorithm.alpha": 0.5}, {"algorithm.alpha": 0.1}, margin=0.02),
    reaches_sooner("More local epochs converge faster: E = 2 reaches the target before E = 0.1 (Fig. 3b)", "fig3_epochs",
                   {"train.local_epochs": 2.0}, {"train.local_epochs": 0.1}, FIG3_TARGET),
    reaches_sooner("Smaller batches converge faster: B = 10 before B = 1000 (Fig. 3c)", "fig3_batch",
                   {"train.batch_size": 10}, {"train.batch_size": 1000}, FIG3_TARGET),
    reaches_sooner("N = 1 (centralized) converges fastest: before N = 5 (Fig. 3d)", "fig3_clients",
                   {"data.clients": 1}, {"data.clients": 5}, SVM_TARGET),
    reaches_sooner("N = 5 converges faster than N = 20 (Fig. 3d)", "fig3_clients",
                   {"data.clients": 5}, {"data.clients": 20}, SVM_TARGET),
    Claim("Random reshuffling makes little difference to herding (final accuracy within 1 point, Section 2.8)",
          "fig4_selection", _rr_close),
    Claim("The distance between the herd's mean and the local mean does not grow over training (Fig. 4d)",
          "fig4_selection", _distance_does_not_grow),
    Claim("A client's memory is its tau_i local gradients of d floats (tau_i x d x 4 bytes, Section 2)",
          "fig4_selection", _memory_is_tau_d_floats),
]
