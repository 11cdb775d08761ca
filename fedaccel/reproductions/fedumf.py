"""Claims of the FedUMF paper (paper 004: Section 5, Tables 1-2, Figs. 3-6) as rows judged on paired seeds.

Each speed claim is two rows (rounds to the target, censored; mean training loss over the rounds) at
the paper's learning rate and again at each method's best learning rate on the training loss. The
controls give FedAvg FedUMF's extra computation (1/C times the local epochs, or every client at C = 1).
"""

from __future__ import annotations

from typing import Any

from fedaccel.report.claims import BEST, Claim, Raised, rounds_to, speed
from fedaccel.reproductions.opening import Finding, Opening

TITLE = "FedUMF — Model Fusion from Unauthorized Clients in Federated Learning"
OPENING = Opening("Does FedUMF accelerate?", (
    Finding("On IID data at the same participation (C = 0.1), yes: FedUMF reaches 80% sooner than FedAvg and its "
            "training loss averaged over the rounds is lower, at the paper's η and with each at its best η; α = 1 "
            "beats α = 0.1, and FedUMF beats FedAvg with every client training and uploading (C = 1).",
            ("FedUMF reaches 80% sooner than FedAvg at the same C = 0.1", "As α increases",
             "every client training and uploading (IID"), "agrees"),
    Finding("Given the same computation it is slower: FedAvg whose selected clients run FedUMF's extra local epochs "
            "(1/C times FedAvg's) reaches 80% on IID data and 55% on non-IID data sooner.",
            ("Control, same computation: FedUMF reaches",), "disagrees"),
    Finding("On non-IID data (two classes per client, C = 0.2) we could not tell whether FedUMF reaches 55% sooner "
            "than FedAvg, nor whether its median seed's rounds lie within ±4.5 of FedAvg's.",
            ("FedUMF reaches 55% sooner than FedAvg at the same C = 0.2", "within ±4.5 rounds"), "could not tell",
            measure="rounds to"),
    Finding("There its training loss averaged over the rounds is higher than FedAvg's, and FedAvg with every client "
            "training and uploading beats it.",
            ("FedUMF reaches 55% sooner than FedAvg at the same C = 0.2", "every client training and uploading (non-IID"),
            "disagrees", measure="loss"),
))

INTRO = """
Verdicts come from the exact paired sign-flip test (the exact sign test for rows with a margin) with
Benjamini–Hochberg across the report's claims (docs/statistics.md); the opening above cites its rows by
their number in the table "Claims of the paper, judged", and tests/test_opening.py checks that no
sentence is stronger than its rows.

**Seeds, and where they were raised after verdicts had been seen.** 11 seeds a cell (0-10). The first
version ran 5; the re-run raised them to 11 after the 5-seed verdicts had been seen (from that version's
power calculation, `--plan`), against the rule of docs/statistics.md §5 that seeds are fixed before
running. Best learning rates were first chosen on seed 0 alone; because a best value now needs at least
3 tuning seeds (issue 28), seeds 100 and 101 of every cell the best-η rows choose among
(`table1_iid_tuning`, `table2_noniid_tuning`) were added after the verdicts had been seen. They only
choose η ("Best values, as chosen" lists every candidate); the judged seeds are unchanged (1-10 for
best-η rows, 0-10 at η = 0.05). The row "FedUMF and FedAvg reach 55% within ±4.5 rounds …" was also
added then: its margin is half the smaller of the paper's two Table 2 effects (19 → 14 rounds at C = 0.5,
26% fewer) on the ~35 rounds FedAvg needs to 55% (table2_noniid.yaml's sizing, written before the runs).
Against the version before (best η on seed 0 alone) every judged pair, every chosen η and every verdict is the same.
Since issue 46 (item 3) every row is judged by the test that counts the look: each one-sided test on seeds 0-4
and on seeds 5-10 alone, combined by the inverse normal with weights² 0.25 and 0.75 (docs/raised-seeds.md), in
place of the pooled 11 seeds' p, which the look made too small. No verdict moved: a row whose 11 seeds all point
one way now has p = 0.0052 (0.0090 for a best-η row, whose first stage is seeds 1-4), not 0.00098, and the
narrowest decided row, the non-IID rounds control at the same computation, has q = 0.049.

**Cost.** `fedaccel reproduce fedumf -j 2` (180 cells) took 39 minutes on this 2-core machine, all of it beside the BHerd and FedGSNR sweeps (six worker processes on two cores). The re-run at 11 seeds added 216 cells (seeds 5-10) in 32 minutes with `-j 2`, beside other developers' test runs (load 3-5). The tuning runs added after the verdicts (`table1_iid_tuning`, `table2_noniid_tuning`: 72 cells, seeds 100-101 of the 36 cells the best-η rows choose among) were estimated beforehand from the files' sizing at ~12 core-minutes on an idle core, 20-45 minutes with `-j 2` at a load of 3-10, and took about 28 minutes with `-j 2` at a load of 3-6.

FedUMF lets the clients that are not authorised to upload train anyway, and a client authorised after
a round without authorisation starts from the global model plus α times its stored update. The paper
compares it with FedAvg by the rounds to target accuracies (Tables 1-4, Figs. 3-6) and, combined with
FedDC, with FedProx, SCAFFOLD, FedDyn and FedDC (Tables A1-A2). FedUMF uploads what FedAvg uploads, but
every client trains every round: 1/C times FedAvg's local steps. So each comparison with FedAvg has two
controls that give FedAvg the same computation: its C·N selected clients run 1/C times the local epochs,
or every client trains and uploads (C = 1, 1/C times the upload).

What the quick scale changes (each experiment file's comment has the sizing):

- **Data and model.** Fashion-MNIST (embedded) instead of MNIST, the 2NN with 100 hidden units of the
  paper's appendix, N = 20 clients of 600 samples (a 12,000-sample subset; the paper gives no N), so each
  client still runs τ = 12 local steps a round (B = 50, K = 1); momentum 0.5, weight decay 5e-4 as the
  paper; T = 60 rounds instead of 150; test accuracy on 2,000 test samples, the training loss on 1,000
  training samples. Fashion-MNIST is harder, so the targets are lower (IID 80% instead of 92-97%,
  non-IID 55% instead of 91-96%). All this keeps the whole paper within 20 minutes on two cores.
- **Participation.** C = 0.1 (2 of 20 clients upload) on IID data; C = 0.2 (4 of 20) on non-IID data
  (two classes per client), where at C = 0.1 FedAvg's test accuracy swings by 20 points from round to
  round and no rounds-to-target resolves in 60 rounds. C = 0.5 is not run.
- **Learning rates.** η ∈ {0.01, 0.02, 0.05, 0.1} for every method: each claim is judged at the paper's
  η = 0.05 and again with each side at its own best η (lowest training loss averaged over rounds and
  seeds, never the test set).
- **Seeds.** 11 per cell (the first version ran 5; the number was fixed before the re-run, see the
  experiment files); a seed changes the data subset, the split, the initial model, the batch order,
  which clients are authorised (the same for FedAvg and FedUMF with the same seed and C) and the training
  sample the loss is measured on.
- **Not judged at quick scale.** Tables A1-A2 (seven methods × three splits × two participation rates:
  at 11 seeds and 4 learning rates far beyond the budget, FedUMF's variants costing 1/C times a
  baseline each); "a larger C leaves a smaller gap" (C = 0.5 is not run); Tables 3-4 and the CIFAR-10
  part of Table A1 (ResNet-18 and FedDC's CNN: paper scale only). The upload is the same as FedAvg's by
  construction (the same C·N clients send one model each), so it is not a claim here.

Each row is judged by the exact paired sign-flip test of the per-seed difference between its two setups,
with Benjamini–Hochberg across the report (the table's header says how).
"""

IID_TARGET = 0.80
NONIID_TARGET = 0.55
PAPER_LR = 0.05
# Rounds: the margin of "FedUMF and FedAvg reach 55% within ± … rounds of each other" (non-IID), set after the
# verdicts had been seen (issue 28): half the smaller of the paper's two Table 2 effects (19 -> 14 rounds at
# C = 0.5, 26% fewer; at C = 0.1 it claims 50%) on the ~35 rounds FedAvg needs to 55% (table2_noniid.yaml's
# sizing, written before the runs): 13% of 35 = 4.5 rounds.
NONIID_MARGIN = 4.5


def _cell(algorithm: Any, fraction: float, epochs: int) -> dict[str, Any]:
    return {"algorithm": algorithm, "train.client_fraction": fraction, "train.local_epochs": epochs}


def _lr(where: dict[str, Any], lr: Any) -> dict[str, Any]:
    return {**where, "train.lr": lr}


def _both_lrs(text: str, experiment: str, a: dict[str, Any], b: dict[str, Any], target: float,
              paper: str) -> list[Claim]:
    """The speed claim at the paper's η and with each side at its best η (two rows each)."""
    return [*speed(f"{text} (η = {PAPER_LR:g})", experiment, _lr(a, PAPER_LR), _lr(b, PAPER_LR), target, paper),
            *speed(f"{text} (each at its best η)", experiment, _lr(a, BEST), _lr(b, BEST), target, paper)]


def _against_fedavg(experiment: str, kind: str, c: float, target: float, table: str) -> list[Claim]:
    umf = _cell({"name": "fedumf", "alpha": 1.0}, c, 1)
    epochs = round(1 / c)
    return [
        *_both_lrs(f"FedUMF reaches {target:.0%} sooner than FedAvg at the same C = {c:g} ({kind})",
                   experiment, umf, _cell("fedavg", c, 1), target, table),
        *_both_lrs(f"Control, same computation: FedUMF reaches {target:.0%} sooner than FedAvg whose C·N "
                   f"selected clients run 1/C = {epochs} local epochs ({kind}, C = {c:g})",
                   experiment, umf, _cell("fedavg", c, epochs), target,
                   "not in the paper: FedAvg given FedUMF's local steps a round"),
        *_both_lrs(f"Control, same computation and 1/C times the upload: FedUMF reaches {target:.0%} sooner "
                   f"than FedAvg with every client training and uploading ({kind}, FedUMF's C = {c:g})",
                   experiment, umf, _cell("fedavg", 1.0, 1), target,
                   "not in the paper: FedAvg at C = 1 trains as FedUMF does and uploads every model"),
    ]


# Best learning rates ("train.lr": BEST) are chosen on the mean over these seeds' runs, and those claims leave
# them out of their pairs. Seed 0 was the only tuning seed of the first verdicts; seeds 100 and 101 were added
# AFTER those verdicts had been seen, because a best value now needs at least 3 tuning seeds (issue 28). Their
# runs are the experiments table1_iid_tuning and table2_noniid_tuning (given only to the claims that pick a best value), so
# every judged pair is the one judged before.
TUNING_SEEDS = (0, 100, 101)
# Seeds raised after verdicts had been seen (the Seeds paragraph of INTRO): seeds 0-4 ran before the look, 5-10
# after it; the rows are judged by the inverse-normal combination of the two stages (docs/raised-seeds.md).
RAISED = {stem: Raised("from 5 to 11", (tuple(range(5)),)) for stem in ("table1_iid", "table2_noniid")}

CLAIMS = [
    *_against_fedavg("table1_iid", "IID", 0.1, IID_TARGET,
                     "Table 1 (MNIST, η = 0.05): 23 → 15 rounds to 96% at C = 0.1, 15 → 15 at C = 0.5"),
    *_both_lrs(f"As α increases performance becomes better: FedUMF with α = 1 reaches {IID_TARGET:.0%} sooner "
               "than with α = 0.1 (IID, C = 0.1)", "table1_iid",
               _cell({"name": "fedumf", "alpha": 1.0}, 0.1, 1), _cell({"name": "fedumf", "alpha": 0.1}, 0.1, 1),
               IID_TARGET, "Figs. 3-4 (MNIST, IID): \"as α increases, performance becomes better\" (α = 0.1, 0.5, 1)"),
    *_against_fedavg("table2_noniid", "non-IID, two classes per client", 0.2, NONIID_TARGET,
                     "Table 2 (MNIST, η = 0.05): 22 → 11 rounds to 95% at C = 0.1, 19 → 14 at C = 0.5"),
    Claim(f"FedUMF and FedAvg reach {NONIID_TARGET:.0%} within ±{NONIID_MARGIN:g} rounds of each other (non-IID, "
          f"C = 0.2, η = {PAPER_LR:g}; equivalence, margin: half the paper's smaller claimed effect)", "table2_noniid",
          _lr(_cell({"name": "fedumf", "alpha": 1.0}, 0.2, 1), PAPER_LR), _lr(_cell("fedavg", 0.2, 1), PAPER_LR),
          rounds_to(NONIID_TARGET), "equal", "Table 2: 19 → 14 rounds at C = 0.5 (26% fewer)", margin=NONIID_MARGIN,
          added="issue 28, after the verdicts had been seen: what 'cannot be told from FedAvg' would need"),
]
