"""Before a grid with claims runs, one line where its seeds are too few for any verdict: a claim's exact two-sided
test gives p >= 2 / 2^n with n pairs, above 0.05 for n < 6, so with 3 seeds every verdict is inconclusive, whatever
the runs give (a new user learnt it from `judge`, after running the grid)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from fedaccel.cli import main
from fedaccel.grids.experiment import load_experiment, seeds_note

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("judged", range(1, 9))
def test_the_note_says_exactly_when_no_verdict_can_be_reached(judged: int) -> None:
    demo = load_experiment(ROOT / "experiments/judge_demo.yaml")  # 6 seeds, 3 claims
    cells = [(name, config) for name, config in demo.cells if config.run.seed < min(judged, 6)]
    more = [(f"{name}-more{k}", dataclasses.replace(config, run=dataclasses.replace(config.run, seed=6 + k)))
            for k in range(judged - 6) for name, config in demo.cells if config.run.seed == 0]
    note = seeds_note(dataclasses.replace(demo, cells=cells + more))
    if 2 / 2 ** judged > 0.05:
        assert note.startswith(f"note: the claims of judge_demo pair at most {judged} seed(s): with {judged} pairs "
                               f"the exact two-sided tests' smallest p is {2 / 2 ** judged:.3g}") and "6 judged" in note
    else:
        assert note == ""
    assert seeds_note(dataclasses.replace(demo, cells=cells, claims=[])) == ""  # no claims, nothing to judge


def test_tuning_seeds_are_not_judged_seeds() -> None:
    demo = load_experiment(ROOT / "experiments/judge_demo.yaml")
    assert seeds_note(dataclasses.replace(demo, tuning_seeds=(0,))).startswith(
        "note: the claims of judge_demo pair at most 5 seed(s)")


def test_experiment_says_it_before_the_first_cell(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    grid = tmp_path / "few.yaml"
    grid.write_text(yaml.safe_dump({
        "name": "few", "out_dir": str(tmp_path / "few"),
        # no data there: the first cell fails at once (--fail-fast), after the note
        "base": {"model": "softmax", "data": {"dataset": "mnist", "root": str(tmp_path / "nowhere")}},
        "grid": {"algorithm": ["fedavg", "fedprox"], "run.seed": [0, 1, 2]},
        "claims": [{"text": "FedProx ends where FedAvg ends", "a": {"algorithm": "fedprox"},
                    "b": {"algorithm": "fedavg"}, "measure": "final_test_acc", "expect": "equal", "margin": 0.01,
                    "why": "a point of accuracy is within the seeds' spread"}]}))
    assert main(["experiment", str(grid), "--no-progress", "--fail-fast"]) == 1
    err = capsys.readouterr().err.splitlines()
    first_cell = next(i for i, line in enumerate(err) if line.startswith("[few 1/6]"))
    assert any(line.startswith("note: the claims of few pair at most 3 seed(s)") for line in err[:first_cell])


def test_a_grid_that_declares_its_looks_is_told_to_add_a_stage(tmp_path: Path) -> None:
    """A file whose seeds were raised after a look (``looks:``) was still told to add seeds "before any verdict is
    seen"; it is told to add them as a new stage under ``looks:``."""
    spec = yaml.safe_load((ROOT / "experiments/judge_demo.yaml").read_text())
    spec["grid"]["run.seed"] = [0, 1, 2]
    if isinstance(spec.get("base"), str):  # a path relative to the file: from where the copy is
        spec["base"] = str((ROOT / "experiments" / spec["base"]).resolve())
    for looks in (None, [[0, 1, 2]]):
        path = tmp_path / "few.yaml"
        path.write_text(yaml.safe_dump({**spec, **({"looks": looks} if looks else {}), "out_dir": str(tmp_path)}))
        note = seeds_note(load_experiment(path))
        assert note.endswith("(add run.seed values as a new stage under looks: (docs/statistics/plans.md))" if looks
                             else "(add run.seed values now, before any verdict is seen)"), note
