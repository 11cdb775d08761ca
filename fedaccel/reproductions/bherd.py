"""Claims of the BHerd paper (paper 000, Sections 2.2-2.8), as rows judged by :mod:`fedaccel.report.claims`."""

from __future__ import annotations

from fedaccel.report.claims import (
    BEST,
    Claim,
    Raised,
    client_values,
    final,
    mean_client_diagnostic,
    per_run,
    rounds_to,
    speed,
)
from fedaccel.report.reading import Run
from fedaccel.reproductions.opening import Finding, Opening

TITLE = "BHerd — Accelerating Federated Learning by Selecting Beneficial Herd of Local Gradients"
OPENING = Opening("Does BHerd accelerate?", (
    Finding("At the paper's η on Case 2, by no more than the margin: on the median seed BHerd-FedAvg's rounds to "
            "93.5% lie within ±7.5 rounds of FedAvg's, and so do those of a random α-subset with BHerd's rescaling "
            "(the margin is half the paper's claimed 2× speed-up, set after the runs had been seen; single seeds may "
            "lie outside it).",
            ("within ±7.5 rounds",), "no effect"),
    Finding("Whether BHerd-FedAvg is faster than FedAvg at all there and on Case 1, or herding faster than the "
            "random subset, we could not tell.",
            ("BHerd-FedAvg converges faster than FedAvg (SVM, Case 2) (paper's η)",
             "BHerd-FedAvg converges faster than FedAvg (SVM, Case 1",
             "BHerd's herding beats a random α-subset with the same rescaling (SVM, Case 2; control) (paper's η)"),
            "could not tell"),
    Finding("On Case 3 too we could not tell, neither by the rounds to 92.5% nor by the training loss averaged "
            "over the rounds.", ("BHerd-FedAvg converges faster than FedAvg (SVM, Case 3",), "could not tell"),
    Finding("What reproduces the paper's speed-up is a larger server step, not the selection: FedAvg whose server "
            "step is raised to 1/α reaches the target sooner than BHerd on Case 2 and Case 3, and on the CNN.",
            ("BHerd's herding beats FedAvg taking the same server step 1/α = 2 (SVM, Case 2; control) (paper's η)",
             "BHerd's herding beats FedAvg with server step 1/α"), "disagrees"),
    Finding("The herd estimates the local update better than a random α-subset.", ("The herd estimates",), "agrees"),
    Finding("On the CNN BHerd-FedAvg is slower than FedAvg at both learning rates.",
            ("BHerd-FedAvg converges faster than FedAvg on the CNN",), "disagrees"),
    Finding("On the Fig. 3-4 grids (α, the larger server step at α = 0.3 and 0.1, local epochs, batch size, the "
            "number of clients, the batch order, the herd's distance to the local mean, its memory) we could not "
            "tell: on most of their rows all 11 seeds point one way, but those seeds were raised twice after a look "
            "(5, 10, 11), and the test that counts the looks gives the last stage, one seed, half the weight.",
            ("Lowering α from 1.0 to 0.3", "α = 0.1 fails", "At α = 0.3, herding beats FedAvg",
             "At α = 0.1, herding ends above", "More local epochs", "Smaller batches", "N = 1 (centralized)",
             "N = 5 converges faster", "Random reshuffling", "does not grow", "A client's memory"), "could not tell"),
))

INTRO = """
Verdicts come from the exact paired sign-flip test (the exact sign test for rows with a margin or a constant)
with Benjamini–Hochberg across the report's claims (docs/statistics.md); the opening above cites its rows
by their number in the table "Claims of the paper, judged", and tests/test_opening.py checks that no
sentence is stronger than its rows.

**Seeds, and where they were raised after verdicts had been seen.** svm_case2 runs 15 seeds a cell,
svm_cases 13, every other experiment 11 (the CNN included). These counts were not all fixed before any
verdict: the first version ran 5 seeds; the SVM cells were raised to 10 after the 5-seed verdicts had
been seen, and to 15 (svm_case2) and 13 (svm_cases) after the 10-seed verdicts had been seen (from that
version's power calculation, `--plan`), against the rule of docs/statistics.md §5 that seeds are fixed
before running. Best learning rates were first chosen on seed 0 alone; because a best value now needs at
least 3 tuning seeds (issue 28), seeds 100 and 101 of the 24 cells the best-η rows choose among
(`svm_case2_tuning`) were added after the verdicts had been seen. They only choose η ("Best values, as
chosen" lists every candidate); the judged seeds are unchanged (1-14 for best-η rows, 0-14 elsewhere).
The two "within ±7.5 rounds" rows were also added then: their margin is half the paper's claimed effect
(Fig. 3a: α = 0.5 about twice as fast as α = 1, i.e. FedAvg) on the ~30 rounds FedAvg needs to 93.5% at
the paper's η (svm_case2.yaml's sizing, written before the runs): 15 rounds saved, half of it 7.5.
Against the version before (best η on seed 0 alone) every judged pair and every chosen η is the same; one
verdict changed then: BHerd-FedAvg against FedAvg on Case 3 (rounds row) went from inconclusive to agrees
(q = 0.054 → 0.049), only because the two added rows, with small p-values, joined the Benjamini–Hochberg
family. Since issue 46 rows added after the runs had been seen form their own family (each says so), and that
row was inconclusive again (q = 0.0504): a verdict at the threshold, a fraction of a round.

**Verdicts that counted the looks (issue 46, item 3).** Every row is now judged by the test that counts the
looks at which its seeds were raised (docs/raised-seeds.md): each one-sided test on seeds 0-4, on 5-9 (the SVM
cells' second look) and on the rest alone, combined by the inverse normal with weights² 0.25, 0.25 and 0.5
(0.25 and 0.75 for the CNN's one look; a best-η row's first stage is seeds 1-4), in place of the pooled seeds'
p, which the looks made too small. 17 verdicts moved, all to inconclusive: the 15 rows of fig3_alpha, fig3_hyper
and fig4_selection that were decided (α = 0.1 failing, herding against the larger server step at α = 0.3 and
0.1, local epochs, batch size, the number of clients, the batch order, the herd's distance, its memory): their
11 seeds all point one way, but after the second look only one seed was added, and that last stage carries half
the weight, so their p is 0.0625 at best (q = 0.10); BHerd-FedAvg's lower training loss than FedAvg on Case 3
(q 0.0017 → 0.061: seeds 0-12 over three stages); and BHerd-FedAvg's loss against GraB-FedAvg at each one's best
η (disagreed, q 0.031 → 0.072, through the family's larger q-values). The opening says so.

**Cost.** `fedaccel reproduce bherd -j 2` (580 cells) took 62 minutes on this 2-core machine: 44 for the grid at 5 seeds, its first 35 beside the FedGSNR and FedUMF sweeps (six worker processes on two cores), then 18 alone for seeds 5-9 of the 275 SVM cells. The CNN's 30 cells took a third of the first part. The re-run with the seeds fixed from that pilot added 207 cells (36 of them CNN) in 17.7 minutes with `-j 2` (load 1.5-2.5). The tuning runs added after the verdicts (`svm_case2_tuning`: 48 cells, seeds 100-101 of the 24 (method, η) cells the best-η rows choose among; estimated beforehand at ~5 core-minutes from svm_case2.yaml's sizing) took 38.8 minutes with `-j 1` at a load of 6-12 (beside the FedGSNR tuning runs and other developers' test runs); every best η stays where seed 0 alone had put it (1e-3).

**What the quick scale changes.** Fashion-MNIST (embedded) replaces MNIST; the squared-SVM keeps the
paper's N = 5, B = 100, E = 1 (τ_i = 120 steps) and η = 1e-4, but runs T = 60 rounds instead of 500:
at that η FedAvg needs ~30 evaluated rounds to 93.5% on Cases 1-2 (92.5% on Case 3), so a
rounds-to-target has 60 possible values and the curves still rise at the end. The CNN gets a
1,500-sample subset and 30 rounds (a CNN step costs ~400 times an SVM step on a CPU). Each experiment
file says why its numbers were chosen and what it costs.

**What a seed changes.** The model's initialisation, the
batch order, the split's draw, the data subset (CNN) and the training-loss sample; seeds are paired
across methods (seed s of BHerd against seed s of FedAvg: same data, same split, same start).

**Fair step sizes.** The paper's η = 1e-4 is shared by every method; in svm_case2 every method also
runs η ∈ {3e-4, 1e-3, 3e-3}, and "best η" rows compare each method at the η with its lowest training
loss averaged over the rounds and the tuning seeds 0, 100 and 101 (never chosen on the test set). What is held fixed is the
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
EQUIVALENCE_MARGIN = 7.5  # rounds: half the paper's claimed effect at the paper's η (see the rows)

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

# Best learning rates ("train.lr": BEST) are chosen on the mean over these seeds' runs, and those claims leave
# them out of their pairs. Seed 0 was the only tuning seed of the first verdicts; seeds 100 and 101 were added
# AFTER those verdicts had been seen, because a best value now needs at least 3 tuning seeds (issue 28). Their
# runs are the experiments svm_case2_tuning (given only to the claims that pick a best value), so
# every judged pair is the one judged before.
TUNING_SEEDS = (0, 100, 101)
ADDED = "issue 28, after the verdicts had been seen: what 'cannot be told from FedAvg' would need"
# Seeds raised after verdicts had been seen (the Seeds paragraph of INTRO; each experiment file's history): seeds
# 0-4 ran before the first look, 5-9 before the second (the SVM cells), the rest after. Every judged experiment's rows
# are judged by the inverse-normal combination of these stages (docs/raised-seeds.md).
FIRST, SECOND = tuple(range(5)), tuple(range(5, 10))
RAISED = {"svm_case2": Raised("from 5 to 10 to 15", (FIRST, SECOND)),
          "svm_cases": Raised("from 5 to 10 to 13", (FIRST, SECOND)),
          "cnn_case2": Raised("from 5 to 11", (FIRST,)),
          **{stem: Raised("from 5 to 10 to 11", (FIRST, SECOND))
             for stem in ("fig3_alpha", "fig3_hyper", "fig4_selection", "svm_combinations")}}

CLAIMS = [
    # Fig. 2a: BHerd against FedAvg, and what its speed-up comes from
    *_both_lrs("BHerd-FedAvg converges faster than FedAvg (SVM, Case 2)", "svm_case2", BHERD, FEDAVG, TARGET,
               "Fig. 2a: faster"),
    *_both_lrs("BHerd's herding beats FedAvg taking the same server step 1/α = 2 (SVM, Case 2; control)",
               "svm_case2", BHERD, STEP2, TARGET, "implied: the selection accelerates"),
    *_both_lrs("BHerd's herding beats a random α-subset with the same rescaling (SVM, Case 2; control)",
               "svm_case2", BHERD, RANDOM, TARGET, "implied: the selection accelerates"),
    # Added after the verdicts had been seen (issue 28): what "cannot be told from FedAvg" would need. The margin is half
    # the paper's claimed effect: Fig. 3a's α = 0.5 about 2x as fast as α = 1 (FedAvg) on the ~30 rounds FedAvg needs
    # at the paper's η (svm_case2.yaml's sizing, written before the runs): 15 rounds saved, half of it 7.5.
    Claim(f"BHerd-FedAvg and FedAvg reach {TARGET:g} within ±{EQUIVALENCE_MARGIN:g} rounds of each other (SVM, Case 2, "
          "paper's η; equivalence, margin: half the paper's claimed effect)", "svm_case2", _at(BHERD), _at(FEDAVG),
          rounds_to(TARGET), "equal", "Fig. 2a, 3a: about 2x faster", margin=EQUIVALENCE_MARGIN, added=ADDED),
    Claim(f"Herding and a random α-subset reach {TARGET:g} within ±{EQUIVALENCE_MARGIN:g} rounds of each other (SVM, "
          "Case 2, paper's η; equivalence, margin: half the paper's claimed effect)", "svm_case2", _at(BHERD),
          _at(RANDOM), rounds_to(TARGET), "equal", "implied: the selection accelerates", margin=EQUIVALENCE_MARGIN,
          added=ADDED),
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
    # "BHerd improves FedNova" is not a row: with Case 2's equal client sizes every τ_i is equal, so FedNova is
    # FedAvg and BHerd-FedNova is BHerd-FedAvg, to the last digit: the row would repeat the svm_case2 one.
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
    # α = 0.5 against α = 1.0 is not a row: BHerd with α = 1 is FedAvg to the last digit, so it would repeat the
    # svm_case2 row "BHerd-FedAvg converges faster than FedAvg (paper's η)" (Fig. 3a's about 2x is judged there).
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
          "Section 2: τ_i × d floats", value=1.0, margin=0.5),  # a count: within 0.5 of 1 is exactly 1
]
