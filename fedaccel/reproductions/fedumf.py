"""Claims of the FedUMF paper (paper 004: Section 5, Tables 1-2, Figs. 3-6) as rows judged on paired seeds.

Each speed claim is two rows (rounds to the target, censored; mean training loss over the rounds) at
the paper's learning rate and again at each method's best learning rate on the training loss. The
controls give FedAvg FedUMF's extra computation (1/C times the local epochs, or every client at C = 1).
"""

from __future__ import annotations

from typing import Any

from fedaccel.report.claims import BEST, Claim, speed

TITLE = "FedUMF — Model Fusion from Unauthorized Clients in Federated Learning"
INTRO = """
**Does FedUMF accelerate? At the same participation on IID data, yes (11 seeds, every claim decided).
Given the same computation, no: FedAvg whose selected clients run FedUMF's extra local epochs is much
faster. On non-IID data, no.** Verdicts come from the exact paired sign-flip test with Benjamini–Hochberg
across the report's claims (docs/statistics.md), on 11 seeds a cell (10 judged where seed 0 picks the
best learning rate), fixed before the re-run from the 5-seed pilot's power calculation. On IID data with
C = 0.1 FedUMF reaches 80% at round 22.8 against FedAvg's 34.9 (medians of the interpolated crossings;
mean difference −13.7 rounds, t interval −17.8 to −9.6, q = 0.002) and 16.0 against 24.5 with each at its
best η (both 0.1); its training loss averaged over the rounds is lower too, α = 1 beats α = 0.1, and
FedUMF beats FedAvg with every client training and uploading (C = 1; 22.8 vs 31.5 rounds). But FedUMF
trains every client every round, 10 times FedAvg's local steps, and FedAvg whose two selected clients
run those 10 epochs reaches 80% at round 4.2 (**disagrees** with "FedUMF is faster given the same
computation", q = 0.002, at both η choices). On non-IID data (two classes per client, C = 0.2) FedUMF's
rounds to 55% cannot be told from FedAvg's (22.8 vs 28.4 rounds, p = 0.99) and its training loss averaged
over the rounds is higher (1.84 vs 1.62, **disagrees**); both same-computation controls are faster.
Against the first version of this report (5 seeds, bootstrap) one verdict changed: the non-IID
same-computation control's rounds row went from inconclusive to disagrees (11 seeds, q = 0.023); the
other 27 keep their verdict (the 25 decided ones now at q ≤ 0.023; the 5-seed redraw with the exact test had left all 28
inconclusive).

**Cost.** `fedaccel reproduce fedumf -j 2` (180 cells) took 39 minutes on this 2-core machine, all of it beside the BHerd and FedGSNR sweeps (six worker processes on two cores). The re-run at 11 seeds added 216 cells (seeds 5-10) in 32 minutes with `-j 2`, beside other developers' test runs (load 3-5).

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


# Best learning rates ("train.lr": BEST) are chosen on these seeds' runs only, and those claims leave them
# out of their pairs: the committed runs were not planned with separate tuning seeds, so seed 0 is given up.
TUNING_SEEDS = (0,)

CLAIMS = [
    *_against_fedavg("table1_iid", "IID", 0.1, IID_TARGET,
                     "Table 1 (MNIST, η = 0.05): 23 → 15 rounds to 96% at C = 0.1, 15 → 15 at C = 0.5"),
    *_both_lrs(f"As α increases performance becomes better: FedUMF with α = 1 reaches {IID_TARGET:.0%} sooner "
               "than with α = 0.1 (IID, C = 0.1)", "table1_iid",
               _cell({"name": "fedumf", "alpha": 1.0}, 0.1, 1), _cell({"name": "fedumf", "alpha": 0.1}, 0.1, 1),
               IID_TARGET, "Figs. 3-4 (MNIST, IID): \"as α increases, performance becomes better\" (α = 0.1, 0.5, 1)"),
    *_against_fedavg("table2_noniid", "non-IID, two classes per client", 0.2, NONIID_TARGET,
                     "Table 2 (MNIST, η = 0.05): 22 → 11 rounds to 95% at C = 0.1, 19 → 14 at C = 0.5"),
]
