"""Claims of the FedGSNR paper (paper 003, Section 5 and Appendix D) as rows judged on paired seeds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedaccel.report.claims import BEST, Claim, Raised, final, per_run, rounds_to, speed
from fedaccel.reproductions.opening import Finding, Opening
from fedaccel.report.reading import Run

TITLE = "FedGSNR — Accelerating Federated Learning on Non-IID Data via Maximum Gradient Signal to Noise Ratio"
OPENING = Opening("Does FedGSNR accelerate?", (
    Finding("On NonBalance (unequal client sizes), yes: with the same 200 local steps a round FedGSNR reaches 75% "
            "sooner than FedAvg, and its training loss averaged over the rounds is lower, at the shared learning "
            "rate and with each at its best rate.", ("sooner than FedAvg on NonBalance",), "agrees"),
    Finding("On Dirichlet 0.1 (equal sizes) we could not tell, at the shared rate "
            "or with each at its best rate, neither by the rounds to 70% and the loss nor by whether the median "
            "seed's rounds lie within ±3.5 of FedAvg's.",
            ("sooner than FedAvg on Dirichlet 0.1", "within ±3.5 rounds"), "could not tell"),
    Finding("On Dirichlet 0.5 (equal sizes) the median seed's rounds to 77% at the shared rate lie within ±5.3 of "
            "FedAvg's, half the paper's claimed effect: no effect of that size on the median seed.",
            ("within ±5.3 rounds of each other on Dirichlet 0.5",), "no effect"),
    Finding("At the shared rate we could not tell whether it reaches 77% sooner at all.",
            ("sooner than FedAvg on Dirichlet 0.5, at the shared",), "could not tell", measure="rounds to"),
    Finding("Its training loss averaged over the rounds is lower there.",
            ("sooner than FedAvg on Dirichlet 0.5, at the shared",), "agrees", measure="train loss"),
    Finding("With each at its best rate it reaches 77% sooner, by about a tenth of FedAvg's rounds.",
            ("sooner than FedAvg on Dirichlet 0.5, each at its best",), "agrees", measure="rounds to"),
    Finding("On Label 2 (two classes a client) FedGSNR's training loss averaged over the rounds is higher than "
            "FedAvg's, at the shared rate and at each one's best rate: the opposite of the paper's Table 1.",
            ("sooner than FedAvg on Label 2",), "disagrees", measure="train loss"),
    Finding("Whether it also reaches 73.5% later we could not tell.",
            ("sooner than FedAvg on Label 2",), "could not tell", measure="rounds to"),
    Finding("Table 3's higher final accuracy on Dirichlet 0.1: could not tell.", ("Table 3",), "could not tell"),
    Finding("On NonBalance the GSNR plan beats both the same steps permuted at random and steps in proportion to "
            "data size: who gets the steps matters, not only how unequal they are.",
            ("sooner than the same steps permuted at random on NonBalance",
             "sooner than steps in proportion to data size on NonBalance"), "agrees"),
    Finding("On Dirichlet 0.1 we could not tell the plan from either control.",
            ("reaches 0.7 sooner than",), "could not tell"),
    Finding("Whether the GSNR statistics behave as the paper says (the step distribution's entropy and the clients' "
            "GSNR falling from IID to Dirichlet 1.0 to Dirichlet 0.1 and with Label 2) we could not tell: on most "
            "of these rows every seed points the paper's way, but their seeds were raised twice after a look (5, "
            "10, 11), and the test that counts the looks gives the last stage, one seed, half the weight.",
            ("entropy", "GSNR is larger", "GSNR is more alike", "With Label 2"), "could not tell"),
    Finding("An attacked client's GSNR drops against the clean run under IID and on NonBalance, with label flipping "
            "as with U(-1, 1) inputs.",
            ("drop against the clean run, IID", "drop against the clean run, NonBalance"), "agrees"),
    Finding("On Dirichlet 0.5 we could not tell whether either attack makes it drop.",
            ("drop against the clean run, Dirichlet 0.5",), "could not tell"),
    Finding("But on NonBalance the attacked client (the one holding every label) keeps a GSNR above the honest "
            "clients' median, and on Dirichlet 0.5 so does a label-flipping one: the GSNR ranks clients by data "
            "first, so it exposes an attacker only among comparable clients.",
            ("below the honest clients' median, NonBalance",
             "A label-flipping client's GSNR is below the honest clients' median, Dirichlet 0.5"), "disagrees"),
))

INTRO = """
Verdicts come from the exact paired sign-flip test (the exact sign test for rows with a margin or a constant)
with Benjamini–Hochberg across the report's claims (docs/statistics.md); the opening above cites its rows
by their number in the table "Claims of the paper, judged", and tests/test_opening.py checks that no
sentence is stronger than its rows. Four of Table 1's five splits are run at quick scale: NonBalance
(unequal client sizes) and Dirichlet 0.1 (equal sizes) in `table1`, and the equal-size Label 2 and
Dirichlet 0.5 in `table1_splits`, added later (issue 28) with their targets (FedAvg's accuracy at round
33 in a pilot run at seed 999, outside the grid), seeds (the rule's floor: 10 judged pairs, as no pilot
variance existed), tuning grid and claims, including equivalence rows whose margins are half the paper's
claimed effect, all committed before any of their runs.

**Seeds, and where they were raised after verdicts had been seen.** Each cell of table1, controls and
fig7_gsnr runs 11 seeds (0-10), each fig6_attacks cell 14 (0-13). These counts were not all fixed
before any verdict: the first version ran 5 seeds; the Fig. 3/6/7 cells were then raised to 10 seeds
after the 5-seed verdicts had been seen, and the re-run raised the speed cells to 11 and fig6_attacks to
14 after the 10-seed verdicts had been seen (from that version's power calculation, `--plan`), against
the rule of docs/statistics.md §5 that seeds are fixed before running. Best learning rates were first
chosen on seed 0 alone; because a best value now needs at least 3 tuning seeds (issue 28), seeds 100 and
101 of the 16 cells the best-rate rows choose among (`table1_tuning`) were added after the verdicts had
been seen. They only choose the rate ("Best values, as chosen" lists every candidate); the judged seeds
are unchanged (1-10 for best-rate rows, 0-10 elsewhere). The row "FedGSNR and FedAvg reach 0.7 within
±3.5 rounds …" was also added then: its margin is half the paper's claimed effect on Dirichlet 0.1
(285 against 355 rounds, 20% fewer) on the ~35 rounds FedAvg needs (table1.yaml's sizing, written before
the runs), i.e. 10% of 35 rounds. No such row is given for the training loss: the paper states no loss
effect to take half of, so the loss rows say only what their own tests decide. Against the version
before (best rates on seed 0 alone) every judged pair and every chosen rate is the same; one verdict
changed: FedGSNR against FedAvg on Dirichlet 0.1 at the best rate (rounds row) went from agrees to
inconclusive (q = 0.049 → 0.051), because the added equivalence row joined the Benjamini–Hochberg family.
Since issue 46 rows added after the runs had been seen form their own family (the row says so); that rounds
row stayed inconclusive (q = 0.0505).

**Verdicts that counted the looks (issue 46, item 3).** The rows of table1, controls, fig6_attacks and fig7_gsnr
are now judged by the test that counts the looks at which their seeds were raised (docs/raised-seeds.md): each
one-sided test on seeds 0-4, on 5-9 (Fig. 6/7's second look) and on the rest alone, combined by the inverse
normal with weights² 0.25 and 0.75 (one look) or 0.25, 0.25 and 0.5 (two), in place of the pooled seeds' p,
which the looks made too small. 10 verdicts moved, all to inconclusive: the 8 rows of fig7_gsnr (the entropy
and GSNR statistics; 11 seeds all one way on seven of them, but after the second look one seed was added, and
that last stage carries half the weight: p = 0.0625 at best); the U(-1, 1) attack's drop on Dirichlet 0.5
(fig6_attacks, q 0.016 → 0.060); and FedGSNR reaching 73.5% later than FedAvg on Label 2 at the shared rate
(q 0.044 → 0.059), whose own p is unchanged (table1_splits' seeds were fixed before its runs) but whose family's
other q-values grew. The opening says so.

**Cost.** `table1_splits` and its tuning grid (208 cells; estimated beforehand at ~23 core-minutes by a miscount of the main grid's cells, ~40 by the right count) took
62 minutes with `-j 2` beside the reference-code grids (load about 5). Adding their 10 claims to the
Benjamini–Hochberg family changed no earlier verdict. `fedaccel reproduce fedgsnr -j 2` (240 cells) took 36 minutes on this 2-core machine: 33 for the grid at 5 seeds, all of it beside the BHerd and FedUMF sweeps (six worker processes on two cores), then 3 alone for seeds 5-9 of the 65 Fig. 3/6/7 cells. The re-run with the seeds fixed from that pilot added 172 cells (seeds 5-10 of table1 and controls, seed 10 of fig7_gsnr, seeds 10-13 of fig6_attacks) in 11.3 minutes with `-j 2` (load 2-3). The tuning runs added after the verdicts (`table1_tuning`: 32 cells, seeds 100-101 of the 16 cells the best-rate rows choose among; estimated beforehand at ~6 core-minutes from table1.yaml's sizing) took 44 minutes with `-j 2` at a load of 6-12 (other developers' test runs, and the BHerd tuning runs beside them); they leave every best rate where seed 0 alone had put it (0.2).

The paper runs LeNet-5 on CIFAR-10 (30 clients for Table 1, 100 for Table 2, batch 64, E_const = 20
local steps, up to 1,000 rounds, target 0.5 test accuracy); the paper scale does the same (learning
rate 0.05: the paper gives none). The quick scale keeps batch 64, E_const = 20, B_s = 64 and the
splits, and changes the task so that it fits 2 CPU cores at 5 seeds and still resolves:
Fashion-MNIST, the 2NN with 100 hidden units, **10 clients** (200 local steps a round, so that
FedAvg at the shared learning rate needs about 30 evaluated rounds to the target instead of the 2–8
rounds to 0.5 of the earlier 30-client version), 50 rounds, test accuracy on 2,000 test images and
the training loss on a fixed sample of 1,000 training images, both every round. The targets are
0.75 on NonBalance and 0.7 on Dirichlet 0.1 (the strongly non-IID splits where the paper's speed-up
is largest). Same work, as in the paper: every FedAvg client runs E_const = 20 steps, FedGSNR
redistributes the same |S|·20.

Every speed claim is judged twice: at the shared learning rate 0.05 and with each method at its own
best learning rate from {0.02, 0.05, 0.1, 0.2}, the one with the lowest training loss averaged over
rounds and the tuning seeds 0, 100 and 101 (never the test set). Controls (not in the paper) tell the GSNR weighting from mere
redistribution: the same round's E_k permuted at random across the participants (`plan: random`),
and E_k in proportion to the clients' data sizes (`plan: data`).
Fig. 3 and Fig. 7 are one experiment of 10 clients at four non-IID levels, compared through per-run
numbers: the entropy of the step distribution as a fraction of its maximum log |S| (mean over
rounds), and the per-client median GSNR over rounds (mean over clients, and its spread std/mean).
Fig. 6/10: client 0 attacked from round 5 (labels l → (l + 3) mod 10, or U(−1, 1) inputs), its
median GSNR over the attacked rounds compared with the same client in the clean run of the same
seed, and with the honest clients' median.

A seed changes the split, the model initialisation, the batch order, the planning samples, client
sampling and the training-loss sample.

Not judged at quick scale: FedProx and SCAFFOLD with and without FedGSNR, and Table 1's Pareto split
(each costs another 88 cells for its learning-rate grid); Table 2 (100 clients at three participation fractions and
four methods: the planning of 100 clients makes it the most expensive grid); FedGSNR's robustness
against FedAvg under attack (a smaller accuracy drop compares two differences of runs per seed,
not one number per run, and doubles Fig. 6's cells); Fig. 4 (E_const sweep); Fig. 5 (CIFAR-100 with
VGG-16: paper scale only, `experiments/fedgsnr/paper/fig5_pareto_cifar100.yaml`).
"""

SHARED_LR = 0.05
DIR01_MARGIN = 3.5  # rounds: half the paper's claimed effect on Dirichlet 0.1 (see the claim)
GSNR = {"name": "fedgsnr", "samples": 64, "e_const": 20}
NONBALANCE = "nonbalance"
DIR01 = {"name": "dirichlet", "alpha": 0.1}
DIR05 = {"name": "dirichlet", "alpha": 0.5}
DIR1 = {"name": "dirichlet", "alpha": 1.0}
LABEL2 = {"name": "label-k", "k": 2}
ATTACK_FROM = 5  # client 0 is malicious from this round on (fig6_attacks)
FLIP = [{"kind": "label-flip", "clients": [0], "from_round": ATTACK_FROM, "shift": 3}]
NOISE = [{"kind": "noise", "clients": [0], "from_round": ATTACK_FROM}]


# --- the paper's own per-run numbers --------------------------------------------------------------


def _diags(run: Run, after: int = 0) -> list[Mapping[str, Any]]:
    return [row["diag"] for row in run.metrics if row.get("round", 0) > after and isinstance(row.get("diag"), Mapping)]


def _client_gsnr(run: Run, after: int = 0) -> dict[str, float]:
    """client -> median GSNR over the planned rounds after ``after`` (the paper's Appendix: "mean or median")."""
    values: dict[str, list[float]] = {}
    for diag in _diags(run, after):
        for client, r in (diag.get("gsnr") or {}).items():
            values.setdefault(str(client), []).append(float(r))
    if not values:
        raise ValueError(f"{run.path}: no GSNR recorded")
    return {c: float(np.median(v)) for c, v in values.items()}


def entropy_fraction(run: Run) -> float:
    """Mean over rounds of the step distribution's entropy H as a fraction of its maximum log |S| (Fig. 3)."""
    h = [d["entropy"] / d["entropy_max"] for d in _diags(run) if d.get("entropy_max")]
    if not h:
        raise ValueError(f"{run.path}: no entropy recorded")
    return float(np.mean(h))


def mean_gsnr(run: Run) -> float:
    """Mean over clients of each client's median GSNR (Fig. 7's level)."""
    return float(np.mean(list(_client_gsnr(run).values())))


def gsnr_spread(run: Run) -> float:
    """std / mean across clients of their median GSNR (Fig. 7's heterogeneity)."""
    g = np.array(list(_client_gsnr(run).values()))
    return float(g.std() / g.mean())


def attacked_gsnr(run: Run) -> float:
    """Client 0's median GSNR over the rounds from ATTACK_FROM on (in a clean run: the same client, same rounds)."""
    return _client_gsnr(run, ATTACK_FROM)["0"]


def attacked_to_honest(run: Run) -> float:
    """Client 0's median GSNR over the attacked rounds over the median of the other clients' (< 1: below them)."""
    g = _client_gsnr(run, ATTACK_FROM)
    return g["0"] / float(np.median([v for c, v in g.items() if c != "0"]))


ENTROPY = per_run("mean entropy of the step distribution / log |S|", entropy_fraction, ".4f")
MEAN_GSNR = per_run("mean over clients of the median GSNR", mean_gsnr, ".3g")
SPREAD = per_run("spread of the median GSNR across clients (std/mean)", gsnr_spread, ".3f")
ATTACKED = per_run("client 0's median GSNR over the attacked rounds", attacked_gsnr, ".3g")
TO_HONEST = per_run("client 0's median GSNR over the attacked rounds / the honest clients' median",
                    attacked_to_honest, ".3f")


# --- the claims -----------------------------------------------------------------------------------


def _speed_vs_fedavg(split: Any, name: str, target: float, paper: str, experiment: str = "table1") -> list[Claim]:
    rows = []
    for lr, how in ((SHARED_LR, f"at the shared learning rate {SHARED_LR:g}"), (BEST, "each at its best learning rate")):
        rows += speed(f"FedGSNR reaches {target:g} test accuracy sooner than FedAvg on {name}, {how} (Table 1)",
                      experiment, {"data.split": split, "algorithm": GSNR, "train.lr": lr},
                      {"data.split": split, "algorithm": "fedavg", "train.lr": lr}, target, paper)
    return rows


def _within(split: Any, name: str, target: float, margin: float, paper: str, experiment: str,
            added: str = "") -> Claim:
    """FedGSNR and FedAvg reach ``target`` within ``±margin`` rounds at the shared rate (equivalence)."""
    return Claim(f"FedGSNR and FedAvg reach {target:g} within ±{margin:g} rounds of each other on {name}, at the "
                 f"shared learning rate {SHARED_LR:g} (equivalence; margin: half the paper's claimed effect)",
                 experiment, {"data.split": split, "algorithm": GSNR, "train.lr": SHARED_LR},
                 {"data.split": split, "algorithm": "fedavg", "train.lr": SHARED_LR}, rounds_to(target), "equal",
                 paper, margin=margin, added=added)


def _beats_control(split: Any, name: str, target: float, plan: str, what: str) -> list[Claim]:
    return speed(f"The GSNR plan of local steps reaches {target:g} sooner than {what} on {name} (control, not in the "
                 "paper)", "controls", {"data.split": split, "algorithm": GSNR},
                 {"data.split": split, "algorithm": {**GSNR, "plan": plan}}, target, "")


def _attack_rows(split: Any, name: str) -> list[Claim]:
    clean = {"data.split": split, "attacks": []}
    flip, noise = {**clean, "attacks": FLIP}, {**clean, "attacks": NOISE}
    return [
        Claim(f"Label flipping makes the attacked client's GSNR drop against the clean run, {name} (Fig. 6, 10a-b)",
              "fig6_attacks", flip, clean, ATTACKED, "less", "GSNR drops under attack"),
        Claim(f"U(-1, 1) inputs make the attacked client's GSNR drop against the clean run, {name} (Fig. 10c-d)",
              "fig6_attacks", noise, clean, ATTACKED, "less", "GSNR drops under attack"),
        Claim(f"A label-flipping client's GSNR is below the honest clients' median, {name} (Fig. 6)",
              "fig6_attacks", flip, None, TO_HONEST, "less", "lowest GSNR", value=1.0),
        Claim(f"A client with U(-1, 1) inputs has a GSNR below the honest clients' median, {name} (Fig. 10)",
              "fig6_attacks", noise, None, TO_HONEST, "less", "lowest GSNR", value=1.0),
        Claim(f"Random inputs lower the attacked client's GSNR more than label flipping, {name} (Appendix D.2)",
              "fig6_attacks", noise, flip, ATTACKED, "less", "noise drops it more"),
    ]


# Best learning rates ("train.lr": BEST) are chosen on the mean over these seeds' runs, and those claims leave
# them out of their pairs. Seed 0 was the only tuning seed of the first verdicts; seeds 100 and 101 were added
# AFTER those verdicts had been seen, because a best value now needs at least 3 tuning seeds (issue 28). Their
# runs are the experiments table1_tuning (given only to the claims that pick a best value), so
# every judged pair is the one judged before.
TUNING_SEEDS = (0, 100, 101)
# Seeds raised after verdicts had been seen (the Seeds paragraph of INTRO; each experiment file's history): seeds
# 0-4 ran before the first look, 5-9 before the second (the Fig. 6/7 cells), the rest after; their rows are judged
# by the inverse-normal combination of these stages (docs/raised-seeds.md). table1_splits' seeds were fixed with
# its claims before any of its runs.
FIRST, SECOND = tuple(range(5)), tuple(range(5, 10))
RAISED = {"table1": Raised("from 5 to 11", (FIRST,)), "controls": Raised("from 5 to 11", (FIRST,)),
          "fig7_gsnr": Raised("from 5 to 10 to 11", (FIRST, SECOND)),
          "fig6_attacks": Raised("from 5 to 10 to 14", (FIRST, SECOND))}

CLAIMS = [
    # Table 1 at quick scale: FedGSNR with FedAvg against FedAvg, same work.
    *_speed_vs_fedavg(NONBALANCE, "NonBalance", 0.75, "155 vs 210 rounds to 0.5 (CIFAR-10)"),
    *_speed_vs_fedavg(DIR01, "Dirichlet 0.1", 0.7, "285 vs 355 rounds to 0.5 (CIFAR-10)"),
    # Added after the verdicts had been seen (issue 28): what "cannot be told from FedAvg" would need. The margin is
    # half the paper's claimed effect on Dirichlet 0.1 (285 vs 355 rounds: 20% fewer) on the ~35 rounds FedAvg
    # needs to 0.7 there (table1.yaml's sizing, written before the runs): 10% of 35 = 3.5 rounds.
    _within(DIR01, "Dirichlet 0.1", 0.7, DIR01_MARGIN, "285 vs 355 rounds to 0.5 (CIFAR-10): 20% fewer", "table1",
            added="issue 28, after the verdicts had been seen: what 'cannot be told from FedAvg' would need"),
    # Table 1's equal-size splits Label 2 and Dirichlet 0.5 (issue 28), written with table1_splits.yaml before any of
    # its runs. Margins: half the paper's claimed effect on the ~33 rounds FedAvg needs to the target (the pilot of
    # table1_splits.yaml): Dirichlet 0.5 170 vs 115 rounds, 32% fewer, half 16% of 33 = 5.3 rounds; Label 2 470 vs
    # 340, 28% fewer, half 14% of 33 = 4.6 rounds.
    *_speed_vs_fedavg(DIR05, "Dirichlet 0.5", 0.77, "170 vs 115 rounds to 0.5 (CIFAR-10)", "table1_splits"),
    *_speed_vs_fedavg(LABEL2, "Label 2", 0.735, "470 vs 340 rounds to 0.5 (CIFAR-10)", "table1_splits"),
    _within(DIR05, "Dirichlet 0.5", 0.77, 5.3, "170 vs 115 rounds to 0.5 (CIFAR-10): 32% fewer", "table1_splits"),
    _within(LABEL2, "Label 2", 0.735, 4.6, "470 vs 340 rounds to 0.5 (CIFAR-10): 28% fewer", "table1_splits"),
    # Table 3: best accuracy on Dirichlet 0.1.
    Claim("FedGSNR ends with a higher test accuracy than FedAvg on Dirichlet 0.1, at the shared learning rate "
          "(Table 3)", "table1", {"data.split": DIR01, "algorithm": GSNR, "train.lr": SHARED_LR},
          {"data.split": DIR01, "algorithm": "fedavg", "train.lr": SHARED_LR}, final("test_acc"), "greater",
          "61.41% vs 57.44% best accuracy"),
    # Controls: the GSNR allocation itself, not redistribution as such.
    *_beats_control(NONBALANCE, "NonBalance", 0.75, "random", "the same steps permuted at random"),
    *_beats_control(NONBALANCE, "NonBalance", 0.75, "data", "steps in proportion to data size"),
    *_beats_control(DIR01, "Dirichlet 0.1", 0.7, "random", "the same steps permuted at random"),
    *_beats_control(DIR01, "Dirichlet 0.1", 0.7, "data", "steps in proportion to data size"),
    # Fig. 3: the entropy of the step distribution falls with the non-IID level.
    Claim("The step distribution's entropy is higher under IID than under Dirichlet 1.0 (Fig. 3)", "fig7_gsnr",
          {"data.split": "iid"}, {"data.split": DIR1}, ENTROPY, "greater", "entropy falls as data get non-IID"),
    Claim("The step distribution's entropy is higher under Dirichlet 1.0 than under Dirichlet 0.1 (Fig. 3)",
          "fig7_gsnr", {"data.split": DIR1}, {"data.split": DIR01}, ENTROPY, "greater",
          "entropy falls as data get non-IID"),
    Claim("Under IID the entropy is close to its maximum log |S|: above 98% of it (Fig. 3)", "fig7_gsnr",
          {"data.split": "iid"}, None, ENTROPY, "greater", "near log |S| under IID", value=0.98),
    # Fig. 7: GSNR smaller and more heterogeneous as the data get non-IID; Label 2 small but similar.
    Claim("GSNR is larger under IID than under Dirichlet 1.0 (Fig. 7)", "fig7_gsnr", {"data.split": "iid"},
          {"data.split": DIR1}, MEAN_GSNR, "greater", "GSNR falls as data get non-IID"),
    Claim("GSNR is larger under Dirichlet 1.0 than under Dirichlet 0.1 (Fig. 7)", "fig7_gsnr", {"data.split": DIR1},
          {"data.split": DIR01}, MEAN_GSNR, "greater", "GSNR falls as data get non-IID"),
    Claim("GSNR is more alike across clients under IID than under Dirichlet 0.1 (Fig. 7)", "fig7_gsnr",
          {"data.split": "iid"}, {"data.split": DIR01}, SPREAD, "less", "heterogeneous when non-IID"),
    Claim("With Label 2 the GSNR is smaller than under IID (Fig. 7)", "fig7_gsnr", {"data.split": LABEL2},
          {"data.split": "iid"}, MEAN_GSNR, "less", "small under Label 2"),
    Claim("With Label 2 the GSNR is more alike across clients than under Dirichlet 0.1 (Fig. 7)", "fig7_gsnr",
          {"data.split": LABEL2}, {"data.split": DIR01}, SPREAD, "less", "similar across clients under Label 2"),
    # Fig. 6 / Fig. 10: a malicious client's GSNR.
    *_attack_rows("iid", "IID"),
    *_attack_rows(DIR05, "Dirichlet 0.5"),
    *_attack_rows(NONBALANCE, "NonBalance (client 0 holds all labels)"),
]
