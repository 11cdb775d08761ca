"""Claims of the BHerd paper (paper 000, Sections 2.2-2.8), as rows judged by :mod:`fedaccel.report.claims`."""

from __future__ import annotations

from fedaccel.report.claims import (
    BEST,
    Claim,
    client_values,
    final,
    mean_client_diagnostic,
    per_run,
    speed,
)
from fedaccel.report.reading import Run

TITLE = "BHerd — Accelerating Federated Learning by Selecting Beneficial Herd of Local Gradients"
INTRO = """
**Does BHerd accelerate? Not here: at the paper's settings it is FedAvg to within half a round, and on
the CNN it is slower. What reproduces the paper's speed-up is a larger server step, not the
selection.** At the paper's η = 1e-4 BHerd-FedAvg needs 33 rounds to 93.5% on Case 2 against FedAvg's
34 (difference −0.5 rounds, 95% interval −0.8 to −0.2 over 10 seeds: detectable, and 1.5%), with the
training loss averaged over the rounds equal to four decimals (inconclusive); 30 against 30 on Case 1
in every seed and on Case 3 (whose training loss is 0.05% lower). α = 0.3 changes nothing measurable,
and α = 0.1 does not fail (94.09% at the end, as α = 0.5). The reason is what BHerd uploads:
(η/α)Σ_selected z is an estimate of the whole local update ηΣz, and at this η it misses it by 1.3% of
its norm (mean over clients and rounds; a random subset of the same size misses by 3.7%: herding does
pick a more representative herd, but both are close to the full update), so the server applies nearly
FedAvg's step. FedAvg whose server step is raised to 1/α does reproduce the paper's Fig. 3a: 17 rounds
with step 2 (α = 0.5, 2.0× FedAvg), 13 with step 3.33 (α = 0.3, 2.6×), and step 10 (α = 0.1) diverges
to 50%. At each method's best η (1e-3 for every method, from {1e-4, 3e-4, 1e-3, 3e-3}) BHerd and FedAvg
both need 8 rounds and BHerd's training loss is 0.09% higher (interval +0.05% to +0.13%). On the CNN
(Case 2, 5 seeds) BHerd is slower than FedAvg at both learning rates: at η = 0.01 four of five seeds
never reach 45% (FedAvg: 21 rounds), at η = 0.05 it needs 29 rounds against 8; there the herd's
estimate misses the local update by 58% (η = 0.01) and 87% (η = 0.05) of its norm. The SVM rows that
"agree" do so by less than one round of 34 (BHerd against FedAvg, herding against a random subset,
BHerd-FedNova against FedNova). GraB with its two flaws fixed is indistinguishable from Algorithm 4 on
the SVM, and so is BHerd from GraB. The paper's general trends hold: more local epochs, smaller
batches and fewer clients converge faster, Random Reshuffling makes no difference, and the herd's
distance to the local mean shrinks over training (to 55% of its early value).

**Cost.** `fedaccel reproduce bherd -j 2` (580 cells) took 62 minutes on this 2-core machine: 44 for the grid at 5 seeds, its first 35 beside the FedGSNR and FedUMF sweeps (six worker processes on two cores), then 18 alone for seeds 5-9 of the 275 SVM cells. The CNN's 30 cells took a third of the first part.

**What the quick scale changes.** Fashion-MNIST (embedded) replaces MNIST; the squared-SVM keeps the
paper's N = 5, B = 100, E = 1 (τ_i = 120 steps) and η = 1e-4, but runs T = 60 rounds instead of 500:
at that η FedAvg needs ~30 evaluated rounds to 93.5% on Cases 1-2 (92.5% on Case 3), so a
rounds-to-target has 60 possible values and the curves still rise at the end. The CNN gets a
1,500-sample subset and 30 rounds (a CNN step costs ~400 times an SVM step on a CPU). Each experiment
file says why its numbers were chosen and what it costs.

**Seeds.** 10 per SVM cell (a cell takes seconds; the paper also averages 10 runs), 5 per CNN cell. A seed changes the model's initialisation, the
batch order, the split's draw, the data subset (CNN) and the training-loss sample; seeds are paired
across methods (seed s of BHerd against seed s of FedAvg: same data, same split, same start).

**Fair step sizes.** The paper's η = 1e-4 is shared by every method; in svm_case2 every method also
runs η ∈ {3e-4, 1e-3, 3e-3}, and "best η" rows compare each method at the η with its lowest training
loss averaged over the rounds and seeds (never chosen on the test set). What is held fixed is the
clients' work: every method runs the same local steps at the same η. BHerd's server step is then
η/α per selected step. Two controls take that step without the herding: FedAvg with server step
1/α ("fedavg, server_lr 2") and a random subset of the same size with BHerd's rescaling ("bherd,
selection random"). GraB-FedAvg is run as Algorithm 4 writes it ("grab-fedavg") and with its two
flaws fixed ("grab-fedavg, variant fixed": the first step can be kept and each client is rescaled
by its own α_i). The per-round error of the herd's estimate of the local update,
‖(η/α)Σ_selected z − ηΣz‖ / ‖ηΣz‖, is recorded for every client (`estimate_error`).

**Eq. 7's factor E.** We apply w − (η/α) Σ p_i g_i, not the paper's η·E/α (see docs/algorithms.md):
(η/α) g_i estimates the full local update η Σ z for any E, which is what Proposition 1 bounds.
"""

SHARED_LR = 0.0001
TARGET = 0.935  # Cases 1-2: FedAvg needs ~30 rounds at the paper's η
CASE3_TARGET = 0.925
CNN_TARGET = 0.45

FEDAVG = {"algorithm": "fedavg"}
BHERD = {"algorithm": {"name": "bherd", "alpha": 0.5}}
STEP2 = {"algorithm": {"name": "fedavg", "server_lr": 2.0}}
RANDOM = {"algorithm": {"name": "bherd", "alpha": 0.5, "selection": "random"}}
GRAB = {"algorithm": "grab-fedavg"}
GRAB_FIXED = {"algorithm": {"name": "grab-fedavg", "variant": "fixed"}}


def _at(setup: dict[str, object], lr: object = SHARED_LR, **more: object) -> dict[str, object]:
    return {**setup, "train.lr": lr, **more}


def _both_lrs(text: str, experiment: str, a: dict, b: dict, target: float, paper: str) -> list[Claim]:
    """The speed claim at the paper's η and at each method's own best η."""
    return (speed(f"{text} (paper's η)", experiment, _at(a), _at(b), target, paper)
            + speed(f"{text} (each at its best η)", experiment, _at(a, BEST), _at(b, BEST), target, paper))


def _distance_growth(run: Run) -> float:
    """Fig. 4d: per client, the mean distance over the last 10% of rounds over that of the first 10%; the mean."""
    ratios = []
    for values in client_values(run, "distance").values():
        k = max(1, len(values) // 10)
        first, last = sum(values[:k]) / k, sum(values[-k:]) / k
        if len(values) > 1 and first > 0:
            ratios.append(last / first)
    return sum(ratios) / len(ratios) if ratios else float("nan")


def _memory_floats_per_step(run: Run) -> float:
    """Section 2: memory_bytes / (4 tau_i), per client and round, has one value (d, the model's size) in a run."""
    memory, tau = client_values(run, "memory_bytes"), client_values(run, "tau")
    values = {m / (4 * t) for c in memory for m, t in zip(memory[c], tau.get(c, []))}
    return float(len(values)) if values else float("nan")


ESTIMATE_ERROR = per_run("estimate error ‖(η/α)Σ_sel z − ηΣz‖/‖ηΣz‖, mean over clients and rounds",
                         mean_client_diagnostic("estimate_error"))

CLAIMS = [
    # Fig. 2a: BHerd against FedAvg, and what its speed-up comes from
    *_both_lrs("BHerd-FedAvg converges faster than FedAvg (SVM, Case 2)", "svm_case2", BHERD, FEDAVG, TARGET,
               "Fig. 2a: faster"),
    *_both_lrs("BHerd's herding beats FedAvg taking the same server step 1/α = 2 (SVM, Case 2; control)",
               "svm_case2", BHERD, STEP2, TARGET, "implied: the selection accelerates"),
    *_both_lrs("BHerd's herding beats a random α-subset with the same rescaling (SVM, Case 2; control)",
               "svm_case2", BHERD, RANDOM, TARGET, "implied: the selection accelerates"),
    Claim("The herd estimates the local update better than a random α-subset (SVM, Case 2, paper's η)", "svm_case2",
          _at(BHERD), _at(RANDOM), ESTIMATE_ERROR, "less", "Prop. 1: the herd's mean is close to the local mean"),
    *_both_lrs("BHerd-FedAvg converges faster than GraB-FedAvg (SVM, Case 2)", "svm_case2", BHERD, GRAB, TARGET,
               "Fig. 2a: GraB falls short"),
    *_both_lrs("GraB with its two flaws fixed converges faster than Algorithm 4 as written (SVM, Case 2; ours)",
               "svm_case2", GRAB_FIXED, GRAB, TARGET, "not in the paper"),
    *speed("BHerd-FedAvg converges faster than FedAvg (SVM, Case 1, paper's η)", "svm_cases",
           {**BHERD, "data.split.name": "case1"}, {**FEDAVG, "data.split.name": "case1"}, TARGET, "Fig. 2a: faster"),
    *speed("BHerd-FedAvg converges faster than FedAvg (SVM, Case 3, paper's η)", "svm_cases",
           {**BHERD, "data.split.name": "case3"}, {**FEDAVG, "data.split.name": "case3"}, CASE3_TARGET,
           "Fig. 2a: faster"),
    *speed("BHerd's herding beats FedAvg with server step 1/α (SVM, Case 3, paper's η; control)", "svm_cases",
           {**BHERD, "data.split.name": "case3"}, {**STEP2, "data.split.name": "case3"}, CASE3_TARGET,
           "implied: the selection accelerates"),
    *speed("Centralized SGD converges faster than FedAvg (SVM, Case 3, paper's η; the reference curve)", "svm_cases",
           {"algorithm": "centralized", "data.split.name": "case3"}, {**FEDAVG, "data.split.name": "case3"},
           CASE3_TARGET, "Fig. 2a: the optimum"),
    *speed("BHerd improves FedNova (SVM, Case 2, paper's η)", "svm_combinations",
           {"algorithm": {"name": "bherd-fednova", "alpha": 0.5}}, {"algorithm": "fednova"}, TARGET, "Fig. 2a"),
    *speed("BHerd improves SCAFFOLD (SVM, Case 2, paper's η)", "svm_combinations",
           {"algorithm": {"name": "bherd-scaffold", "alpha": 0.5}}, {"algorithm": "scaffold"}, TARGET, "Fig. 2a"),
    # Fig. 2b: the CNN
    *speed("BHerd-FedAvg converges faster than FedAvg on the CNN (Case 2, η = 0.01)", "cnn_case2",
           _at(BHERD, 0.01), _at(FEDAVG, 0.01), CNN_TARGET, "Fig. 2b: faster"),
    *speed("BHerd-FedAvg converges faster than FedAvg on the CNN (Case 2, η = 0.05)", "cnn_case2",
           _at(BHERD, 0.05), _at(FEDAVG, 0.05), CNN_TARGET, "Fig. 2b: faster"),
    *speed("BHerd's herding beats FedAvg with server step 1/α on the CNN (Case 2, η = 0.01; control)", "cnn_case2",
           _at(BHERD, 0.01), _at(STEP2, 0.01), CNN_TARGET, "implied: the selection accelerates"),
    # Fig. 3a: α
    *speed("Lowering α from 1.0 to 0.5 accelerates convergence", "fig3_alpha",
           {"algorithm": {"name": "bherd", "alpha": 0.5}}, {"algorithm": {"name": "bherd", "alpha": 1.0}}, TARGET,
           "Fig. 3a: about 2x"),
    *speed("Lowering α from 1.0 to 0.3 accelerates convergence", "fig3_alpha",
           {"algorithm": {"name": "bherd", "alpha": 0.3}}, {"algorithm": {"name": "bherd", "alpha": 1.0}}, TARGET,
           "Fig. 3a: about 3x"),
    Claim("α = 0.1 fails: it ends more than 2 points below α = 0.5", "fig3_alpha",
          {"algorithm": {"name": "bherd", "alpha": 0.5}}, {"algorithm": {"name": "bherd", "alpha": 0.1}},
          final("test_acc"), "greater", "Fig. 3a: α = 0.1 diverges", margin=0.02),
    *speed("At α = 0.3, herding beats FedAvg taking the same server step 1/α (control)", "fig3_alpha",
           {"algorithm": {"name": "bherd", "alpha": 0.3}},
           {"algorithm": {"name": "fedavg", "server_lr": 3.3333333333}}, TARGET, "implied: the selection accelerates"),
    Claim("At α = 0.1, herding ends above FedAvg taking the same server step 10 (control)", "fig3_alpha",
          {"algorithm": {"name": "bherd", "alpha": 0.1}}, {"algorithm": {"name": "fedavg", "server_lr": 10.0}},
          final("test_acc"), "greater", "implied: the selection accelerates"),
    # Fig. 3b-d: E, B, N
    *speed("More local epochs converge faster: E = 2 before E = 0.5", "fig3_hyper", {"train.local_epochs": 2.0},
           {"train.local_epochs": 0.5}, TARGET, "Fig. 3b"),
    *speed("Smaller batches converge faster: B = 10 before B = 1000", "fig3_hyper", {"train.batch_size": 10},
           {"train.batch_size": 1000}, TARGET, "Fig. 3c: optimum B = 10 on Case 2"),
    *speed("N = 1 (centralized) converges fastest: before N = 5", "fig3_hyper", {"data.clients": 1},
           {"data.clients": 5, "train.batch_size": 100, "train.local_epochs": 1.0}, TARGET, "Fig. 3d"),
    *speed("N = 5 converges faster than N = 20", "fig3_hyper",
           {"data.clients": 5, "train.batch_size": 100, "train.local_epochs": 1.0}, {"data.clients": 20}, TARGET,
           "Fig. 3d"),
    # Fig. 4 and Section 2
    Claim("Random reshuffling makes little difference to herding (final accuracy within 1 point)", "fig4_selection",
          {"train.order": "fixed"}, {"train.order": "reshuffle"}, final("test_acc"), "equal", "Fig. 4e: little",
          margin=0.01),
    Claim("The distance between the herd's mean and the local mean does not grow over training", "fig4_selection",
          {"train.order": "fixed"}, None,
          per_run("distance in the last 10% of rounds / first 10%, mean over clients", _distance_growth),
          "less", "Fig. 4d: decreases", value=1.0),
    Claim("A client's memory is its τ_i local gradients of d floats (one value of memory / (4 τ_i) per run)",
          "fig4_selection", {"train.order": "fixed"}, None,
          per_run("distinct values of memory_bytes / (4 τ_i) in a run", _memory_floats_per_step), "equal",
          "Section 2: τ_i × d floats", value=1.0),
]
