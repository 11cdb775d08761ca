"""No verdict from incomplete evidence, claims that fit their grid, cell folders that cannot collide.

One tiny real grid (digits, squared SVM, 2 clients, 4 rounds, two learning rates x 6 seeds) is run once;
each test copies it and breaks it the way real use does: a cell cut short, one never started, one
still being written (its lock held).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.cli import main
from fedaccel.errors import ConfigError
from fedaccel.grids.experiment import cell_name, load_experiment, run_experiment
from fedaccel.report.claims import last_round
from fedaccel.report.completeness import finished
from fedaccel.report.reading import load_run, load_runs
from fedaccel.report.tables import seed_rounds
from fedaccel.reproductions.snapshot import pack, unpack
from fedaccel.runs.lock import lock_run_dir

ROUNDS, SEEDS, LRS = 4, list(range(6)), [0.02, 0.2]
BASE = {"data": {"dataset": "digits", "clients": 2}, "model": "svm",
        "train": {"rounds": ROUNDS, "lr": 0.1, "batch_size": 50}, "eval": {"every": 1}, "run": {"progress": False}}
CLAIMS = [
    {"text": "the larger rate has the lower training loss", "a": {"train.lr": 0.2}, "b": {"train.lr": 0.02},
     "measure": "mean_train_loss", "expect": "less"},
    {"text": "the larger rate ends above 0.5", "a": {"train.lr": 0.2}, "measure": "final_test_acc",
     "expect": "greater", "value": 0.5},
]


def cell(lr: float, seed: int) -> str:
    return cell_name({"train.lr": lr, "run.seed": seed})


@pytest.fixture(scope="module")
def finished_grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The grid run to its end, its ``base:`` in a file beside the experiment file (so the copy beside
    the runs cannot resolve it, as with a real experiments/ file)."""
    root = tmp_path_factory.mktemp("grid")
    (root / "base.yaml").write_text(yaml.safe_dump(BASE))
    experiment = {"name": "lr", "out_dir": str(root / "runs"), "base": "base.yaml",
                  "grid": {"train.lr": LRS, "run.seed": SEEDS}, "targets": [0.6], "claims": CLAIMS}
    (root / "lr.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False))
    run_experiment(load_experiment(root / "lr.yaml"), progress=False)
    return root / "runs"


def cut_short(run_dir: Path, rounds: int) -> None:
    """An interrupted cell: its rows after ``rounds`` and its summary gone (as a kill leaves it)."""
    rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text("\n".join(r for r in rows if json.loads(r)["round"] <= rounds) + "\n")
    (run_dir / "summary.json").unlink()


@pytest.fixture
def interrupted(finished_grid: Path, tmp_path: Path):
    """A copy of the grid with lr 0.2 seed 1 cut short at round 2, lr 0.02 seed 2 missing and lr 0.02
    seed 3 being written (this process holds its lock)."""
    grid = tmp_path / "runs"
    shutil.copytree(finished_grid, grid)
    cut_short(grid / cell(0.2, 1), 2)
    shutil.rmtree(grid / cell(0.02, 2))
    with lock_run_dir(grid / cell(0.02, 3)):
        yield grid


def test_judge_refuses_an_interrupted_grid_in_one_line_naming_its_cells(interrupted: Path, capsys) -> None:
    assert main(["judge", str(interrupted)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not (interrupted / "claims.json").exists()
    assert f"missing {cell(0.02, 2)}" in err
    assert f"unfinished {cell(0.2, 1)} (round 2 of {ROUNDS})" in err
    assert f"running {cell(0.02, 3)} (process {os.getpid()})" in err
    assert "2 of 2 claims depend on them" in err and "--partial" in err


def test_partial_judges_the_complete_pairs_only_and_says_so(interrupted: Path, capsys) -> None:
    assert main(["judge", str(interrupted), "--partial"]) == 0
    out, err = capsys.readouterr()
    judged = json.loads((interrupted / "claims.json").read_text())
    paired = judged[0]["paired_seeds"]
    assert paired == [0, 4, 5] and judged[0]["partial"] is True  # seeds 1, 2, 3 lose a side each
    assert sorted(judged[0]["left_out"]) == sorted([cell(0.2, 1), cell(0.02, 2), cell(0.02, 3)])
    assert judged[1]["paired_seeds"] == [0, 2, 3, 4, 5] and judged[1]["left_out"] == [cell(0.2, 1)]
    rows = [line for line in out.splitlines() if line.startswith("| the larger")]
    assert len(rows) == 2 and all("partial: complete pairs only" in row for row in rows)
    assert err.startswith("warning: 3 of 12 cells incomplete") and "--partial" in err


def test_claims_that_do_not_touch_the_incomplete_cells_are_judged_with_a_warning(finished_grid: Path,
                                                                                 tmp_path: Path, capsys) -> None:
    grid = tmp_path / "runs"
    shutil.copytree(finished_grid, grid)
    shutil.rmtree(grid / cell(0.02, 0))
    claims = tmp_path / "mine.yaml"
    claims.write_text(yaml.safe_dump({"claims": CLAIMS[1:]}))
    assert main(["judge", str(grid), "--claims", str(claims)]) == 0
    assert "no claim depends on them" in capsys.readouterr().err
    judged = json.loads((tmp_path / "mine.claims.json").read_text())  # beside the claims' own file
    assert judged[0]["paired_seeds"] == SEEDS and "partial" not in judged[0]
    assert not (grid / "claims.json").exists()  # the grid's own claims.json is never overwritten


def test_compare_and_plot_name_the_incomplete_cells_and_never_count_a_cut_run_as_never_reached(
        interrupted: Path, tmp_path: Path, capsys) -> None:
    assert main(["compare", str(interrupted), "--targets", "0.6"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: 3 of 12 cells incomplete") and cell(0.02, 2) in err and err.count("\n") == 1
    assert main(["plot", str(interrupted), "-o", str(tmp_path / "c.png")]) == 0
    assert cell(0.2, 1) in capsys.readouterr().err
    fast = [run for run in load_runs(interrupted) if run.config["train"]["lr"] == 0.2]
    never = seed_rounds(fast, 2.0)  # a target no run reaches: the finished seeds are censored, the cut one unknown
    assert sorted(never.by_seed) == [0, 2, 3, 4, 5] and never.censored == 5
    reached_early = seed_rounds(fast, 0.0)  # reached at round 0 by every run, the cut one included
    assert sorted(reached_early.by_seed) == SEEDS


def test_a_diverged_run_counts_as_its_budget_in_packed_data_too(finished_grid: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / cell(0.2, 0)
    shutil.copytree(finished_grid / cell(0.2, 0), run_dir)
    cut_short(run_dir, 2)
    (run_dir / "summary.json").write_text(json.dumps({"finished": False, "rounds": ROUNDS, "final": {},
                                                      "diverged": True, "diverged_round": 2}))
    pack([run_dir], tmp_path / "packed.jsonl.xz")
    unpacked = load_run(unpack(tmp_path / "packed.jsonl.xz", tmp_path / "unpacked")[0])
    assert unpacked.diverged_round == 2 and finished(unpacked) and last_round(unpacked) == ROUNDS


def experiment_file(tmp_path: Path, grid: dict, claims: list[dict]) -> Path:
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "base": BASE, "grid": grid, "claims": claims}, sort_keys=False))
    return path


SCAFFOLD_CODE = {"name": "scaffold", "preset": "feddc-code"}


@pytest.mark.parametrize(("side", "message"), [
    ({"algorithm": "scafold"}, r"claims\[0\]\.a selects no cell of the grid: algorithm: scafold is none of its "
                               r"values; nearest: scaffold preset=feddc-code, fedavg$"),  # a method by its display name
    ({"algoritm": "scaffold"}, r"claims\[0\]\.a: 'algoritm' is not a config key of this grid; nearest: algorithm"),
    ({"algorithm": {"name": "scaffold", "preset": "feddc-cod"}}, r"selects no cell.*algorithm: scaffold "
                                                                 r"preset=feddc-cod is.*nearest: scaffold preset=feddc-code"),
    ({"algorithm": "fedavg", "train.lr": 0.3}, r"train.lr: 0.3 is none of its values; nearest: 0.1"),
])
def test_a_claim_that_selects_no_cell_is_one_line_at_load(tmp_path: Path, side: dict, message: str) -> None:
    claim = {"text": "t", "a": side, "b": {"algorithm": "fedavg"}, "measure": "final_test_acc", "expect": "greater"}
    with pytest.raises(ConfigError, match=message) as caught:
        load_experiment(experiment_file(tmp_path, {"algorithm": [SCAFFOLD_CODE, "fedavg"]}, [claim]))
    assert "\n" not in str(caught.value)


def test_a_side_spelt_as_the_grid_spells_it_selects_its_cells(tmp_path: Path) -> None:
    """The grid's preset spelling selects the cell, though the resolved config expands the preset."""
    claim = {"text": "t", "a": {"algorithm": SCAFFOLD_CODE}, "b": {"algorithm": "fedavg"},
             "measure": "final_test_acc", "expect": "greater"}
    experiment = load_experiment(experiment_file(tmp_path, {"algorithm": [SCAFFOLD_CODE, "fedavg"]}, [claim]))
    assert experiment.specs[0]["algorithm"] == SCAFFOLD_CODE
    assert experiment.cells[0][1].to_dict()["algorithm"] != SCAFFOLD_CODE  # resolved: the preset expanded


def test_a_measure_must_name_a_column_the_runs_will_have(tmp_path: Path) -> None:
    claim = {"text": "t", "a": {"algorithm": "fedavg"}, "measure": "final_test_accuracy", "expect": "greater",
             "value": 0.5}
    with pytest.raises(ConfigError, match="'test_accuracy', a column the runs will not have; nearest: test_acc"):
        load_experiment(experiment_file(tmp_path, {"algorithm": ["fedavg"]}, [claim]))
    claim["measure"] = "final_client_mean/test_acc"  # a column only with eval.models: [client_mean]
    with pytest.raises(ConfigError, match="client_mean/test_acc"):
        load_experiment(experiment_file(tmp_path, {"algorithm": ["fedavg"]}, [claim]))
    experiment_file(tmp_path, {"algorithm": ["fedavg"], "eval.models": [["broadcast", "client_mean"]]}, [claim])
    load_experiment(tmp_path / "e.yaml")


def test_cells_whose_short_names_collide_get_their_key_paths_and_true_duplicates_are_refused(tmp_path: Path) -> None:
    grid = {"algorithm": [{"name": "fedumf", "fraction": 0.5}, {"name": "fedumf", "alpha": 0.5}, "fedavg"]}
    names = [name for name, _ in load_experiment(experiment_file(tmp_path, grid, [])).cells]
    assert names == ["algorithm=fedumf-fraction0.5", "algorithm=fedumf-alpha0.5", "algorithm=fedavg"]
    with pytest.raises(ConfigError, match="would share the folder 'algorithm=fedavg'"):
        load_experiment(experiment_file(tmp_path, {"algorithm": ["fedavg", {"name": "fedavg"}]}, []))


@functools.cache
def demo_cells() -> list:
    """The cells of a small grid (built once): (name, spec, resolved config)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        experiment = load_experiment(experiment_file(Path(tmp), {"algorithm": [SCAFFOLD_CODE, "fedavg"],
                                                                 "run.seed": [0, 1]}, []))
    return [(name, spec, config.to_dict()) for (name, config), spec in zip(experiment.cells, experiment.specs)]


VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                     max_size=3), max_leaves=6)
KEYS = st.sampled_from(["algorithm", "algorithm.name", "train.lr", "run.seed", "data.split", "x.y", ""]) | st.text(
    max_size=12)


@settings(max_examples=150, deadline=None)
@given(side=st.dictionaries(KEYS, VALUES, min_size=1, max_size=3))
def test_any_claim_side_fits_the_grid_or_is_one_line(side: dict) -> None:
    from fedaccel.report.judge import check_claims, parse_claims

    claims = parse_claims([{"text": "t", "a": side, "b": {"algorithm": "fedavg"}, "measure": "final_test_acc",
                            "expect": "less"}], "e", "e.yaml")
    try:
        check_claims(claims, demo_cells(), "e.yaml")
    except ConfigError as error:
        assert "\n" not in str(error) and str(error).startswith("e.yaml: claims[0].a")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(st.characters(codec="ascii", exclude_characters="\n"), min_size=1, max_size=90),
                          st.sampled_from(["missing", "failed", "unfinished", "running"]), st.integers(0, 10**6)),
                min_size=1, max_size=4))
def test_the_incomplete_cells_line_cuts_a_long_cell_name_never_its_detail(cells: list) -> None:
    """A new user's line read "(round 2 of 3,..." : the detail of a cell (its round, its error.txt) was cut with its
    long name."""
    from fedaccel.report.completeness import Gap, gaps_line

    gaps = [Gap(name, why, f"round {k} of {k + 1}, its error.txt") for name, why, k in cells]
    line = gaps_line(gaps, len(gaps) + 3)
    for gap in gaps:
        assert f"({gap.detail})" in line
        shown = gap.cell if len(gap.cell) <= 60 else gap.cell[:57] + "..."
        assert f"{shown} ({gap.detail})" in line


def test_incomplete_cells_are_named_in_the_grids_order(tmp_path: Path) -> None:
    """`judge --partial` listed the cells it left out in the order their folders were read (bherd seed=1, bherd
    seed=2, bherd seed=0, fedavg seed=2); the grid's order now, missing and unfinished cells alike."""
    from test_results import make_config, write_run

    from fedaccel.report.completeness import grid_gaps
    from fedaccel.report.reading import load_runs

    names = ["seed=0", "seed=1", "seed=2", "seed=3"]
    for name in ("seed=3", "seed=1"):  # unfinished, read in this order
        write_run(tmp_path / name, make_config(seed=int(name[-1])), [0.1, 0.2], finished=False)
    runs = load_runs([tmp_path / "seed=3", tmp_path / "seed=1"])
    gaps, total = grid_gaps(tmp_path, [(name, None) for name in names], runs)
    assert [gap.cell for gap in gaps] == names and total == 4
