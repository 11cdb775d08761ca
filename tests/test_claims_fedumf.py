"""FedUMF's claim rows: they name cells of their experiment grids (≥5 seeds a side), and they judge
fake runs with known curves as expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedaccel.grids.experiment import load_experiment
from fedaccel.report.claims import BEST, judge, pick
from fedaccel.report.reading import Run
from fedaccel.reproductions import fedumf

QUICK = Path(__file__).resolve().parents[1] / "experiments" / "fedumf" / "quick"
EXPERIMENTS = {name: load_experiment(QUICK / f"{name}.yaml") for name in {c.experiment for c in fedumf.CLAIMS}}


def _without_best(where: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in where.items() if v != BEST}


@pytest.mark.parametrize("claim", fedumf.CLAIMS, ids=lambda c: f"{c.experiment}:{c.measure.name}:{c.text[:50]}")
def test_every_claim_side_is_a_cell_of_its_grid_with_five_seeds(claim: Any) -> None:
    runs = [Run(Path(name), config.to_dict(), []) for name, config in EXPERIMENTS[claim.experiment].cells]
    for side in (claim.a, claim.b):
        picked = pick(runs, _without_best(side))
        seeds = {r.seed for r in picked}
        assert len(seeds) >= 5, (claim.text, side)
        if BEST not in side.values():  # a fixed setup is one cell per seed
            assert len(picked) == len(seeds), (claim.text, side)


def _curve(rounds: int, speed: float, seed: int) -> list[dict[str, float]]:
    """Accuracy 0.9 (1 - exp(-speed t)) and loss 2 exp(-speed t), with a small per-seed wobble."""
    wobble = 1.0 + 0.02 * np.sin(seed + 1.0)
    return [{"round": t, "test_acc": 0.9 * (1 - np.exp(-speed * wobble * t)),
             "train_loss": 2.0 * np.exp(-speed * wobble * t)} for t in range(rounds + 1)]


TUNING = (0, 1, 2)  # best values need at least 3 tuning seeds (the committed reproduction still has 1)


def _fake_runs(speeds: dict[str, float], extra_seeds: int = 4) -> list[Run]:
    """table1_iid's cells, each run's curve as fast as ``speeds`` says for its cell (by algorithm, C,
    E and η; unnamed cells are slow); ``extra_seeds`` more seeds per cell than the grid's 5, so that the
    exact test can decide after the 3 tuning seeds (5 pairs never can)."""
    runs = []
    cells = EXPERIMENTS["table1_iid"].cells
    more = [(f"{name}+{k}", config) for k in range(1, extra_seeds + 1) for name, config in cells
            if config.run.seed == 0]
    for index, (name, config) in enumerate([*cells, *more]):
        c = config.to_dict()
        if index >= len(cells):
            c["run"]["seed"] = 100 + int(name.rsplit("+", 1)[1])
        alg = c["algorithm"]
        key = (f"{alg['name']}{alg.get('alpha', '')}/C{c['train']['client_fraction']:g}"
               f"/E{c['train']['local_epochs']:g}/lr{c['train']['lr']:g}")
        runs.append(Run(Path(name), c, _curve(60, speeds.get(key, 0.01), c["run"]["seed"])))
    return runs


def _verdicts(runs: list[Run], text: str) -> list[tuple[str, str]]:
    return [(j.claim.measure.name, j.verdict) for j in (judge(c, runs, TUNING) for c in fedumf.CLAIMS
                                                         if c.text.startswith(text))]


def test_fedumf_faster_than_fedavg_agrees_and_equal_speed_is_inconclusive() -> None:
    text = "FedUMF reaches 80% sooner than FedAvg at the same C = 0.1 (IID) (η = 0.05)"
    fast = _fake_runs({"fedumf1.0/C0.1/E1/lr0.05": 0.08, "fedavg/C0.1/E1/lr0.05": 0.03})
    assert _verdicts(fast, text) == [("rounds to 0.8 test accuracy (interpolated, restricted)", "agrees"),
                                     ("mean train loss over rounds", "agrees")]
    same = _fake_runs({"fedumf1.0/C0.1/E1/lr0.05": 0.05, "fedavg/C0.1/E1/lr0.05": 0.05})
    assert {v for _, v in _verdicts(same, text)} == {"inconclusive"}


def test_same_computation_control_disagrees_when_fedavg_with_ten_epochs_is_faster() -> None:
    text = ("Control, same computation: FedUMF reaches 80% sooner than FedAvg whose C·N selected clients "
            "run 1/C = 10 local epochs (IID, C = 0.1) (η = 0.05)")
    runs = _fake_runs({"fedumf1.0/C0.1/E1/lr0.05": 0.05, "fedavg/C0.1/E10/lr0.05": 0.1})
    assert _verdicts(runs, text) == [("rounds to 0.8 test accuracy (interpolated, restricted)", "disagrees"),
                                     ("mean train loss over rounds", "disagrees")]


def test_best_learning_rate_is_chosen_per_side_on_the_training_loss() -> None:
    text = "FedUMF reaches 80% sooner than FedAvg at the same C = 0.1 (IID) (each at its best η)"
    # FedAvg is fastest at η = 0.1, FedUMF at η = 0.02; FedUMF's best beats FedAvg's best
    runs = _fake_runs({"fedavg/C0.1/E1/lr0.1": 0.04, "fedumf1.0/C0.1/E1/lr0.02": 0.09,
                       "fedumf1.0/C0.1/E1/lr0.05": 0.02})
    judgements = [judge(c, runs, TUNING) for c in fedumf.CLAIMS if c.text.startswith(text)]
    assert [j.verdict for j in judgements] == ["agrees", "agrees"]
    assert judgements[0].chosen == {"train.lr": 0.02, "b:train.lr": 0.1}
