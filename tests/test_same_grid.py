"""A folder holds one grid: a second experiment file with the same name and another grid is one line, before
any cell runs; the same grid again (a resumed run), more seeds or other targets go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from fedaccel.errors import UserError
from fedaccel.grids.experiment import load_experiment, run_experiment
from fedaccel.grids.same_grid import grid_difference

BASE = {"data": {"dataset": "digits", "clients": 2}, "model": "svm", "train": {"rounds": 1, "batch_size": 20},
        "run": {"progress": False}}


def _file(tmp_path: Path, stem: str, grid: dict, base: dict | None = None, **more: object) -> Path:
    path = tmp_path / f"{stem}.yaml"
    path.write_text(yaml.safe_dump({"name": "same", "out_dir": str(tmp_path / "out"), "base": base or BASE,
                                    "grid": grid, **more}, sort_keys=False))
    return path


def test_a_second_grid_under_the_same_name_is_refused_before_any_cell_runs(tmp_path: Path) -> None:
    run_experiment(load_experiment(_file(tmp_path, "first", {"algorithm": ["fedavg"], "run.seed": [0]})),
                   progress=False)
    out = tmp_path / "out"
    copy, cells = (out / "experiment.yaml").read_bytes(), sorted(p.name for p in out.iterdir())
    other = _file(tmp_path, "second", {"algorithm": ["fedprox"], "run.seed": [0]})
    with pytest.raises(UserError) as caught:
        run_experiment(load_experiment(other), progress=False)
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"{out} holds the cells of another grid (grid 'algorithm': the "
                                                "folder's value fedavg is not in this grid)")
    assert "another name (its name: key) or --out DIR" in line
    assert (out / "experiment.yaml").read_bytes() == copy and sorted(p.name for p in out.iterdir()) == cells

    new_base = _file(tmp_path, "third", {"algorithm": ["fedavg"], "run.seed": [0]},
                     base={**BASE, "data": {"dataset": "digits", "clients": 3}})
    with pytest.raises(UserError, match=r"another grid \(base 'data.clients': 2 in the folder's grid, 3 in this one\)"):
        run_experiment(load_experiment(new_base), progress=False)
    new_key = _file(tmp_path, "fourth", {"algorithm": ["fedavg"], "run.seed": [0], "train.lr": [0.1]})
    with pytest.raises(UserError, match=r"another grid \(grid key 'train.lr' is in this grid, not in the folder's\)"):
        run_experiment(load_experiment(new_key), progress=False)


def test_the_same_grid_more_seeds_and_other_targets_go_on(tmp_path: Path) -> None:
    first = _file(tmp_path, "first", {"algorithm": ["fedavg"], "run.seed": [0]})
    run_experiment(load_experiment(first), progress=False)
    run_experiment(load_experiment(first), progress=False)  # again: every cell finished, skipped
    more = _file(tmp_path, "more", {"algorithm": ["fedavg"], "run.seed": [0, 1]}, targets=[0.3],
                 description="more seeds, a target")
    result = run_experiment(load_experiment(more), progress=False)
    assert [d.name for d in result.run_dirs] == ["algorithm=fedavg,run.seed=0", "algorithm=fedavg,run.seed=1"]
    assert yaml.safe_load((tmp_path / "out" / "experiment.yaml").read_text())["grid"]["run.seed"] == [0, 1]


grids = st.dictionaries(st.sampled_from(["algorithm", "run.seed", "train.lr", "data.split"]),
                        st.lists(st.one_of(st.integers(0, 5), st.sampled_from(["fedavg", "bherd"]),
                                           st.fixed_dictionaries({"name": st.just("bherd"),
                                                                  "alpha": st.sampled_from([0.1, 0.5])})),
                                 min_size=1, max_size=4, unique_by=lambda v: json.dumps(v, sort_keys=True)),
                        min_size=1, max_size=3)


@given(grids, st.data())
def test_a_grid_may_grow_but_never_lose_a_cell(grid: dict, data: st.DataObject) -> None:
    """Hypothesis: values added to any key (in any order) keep every cell: no difference; a value taken away, a
    key added or dropped, or another base: a difference."""
    old = {"grid": grid, "base": {"train": {"rounds": 3}}}
    grown = {key: list(reversed(values)) + data.draw(st.lists(st.integers(10, 20), max_size=2, unique=True))
             for key, values in grid.items()}
    assert grid_difference(old, {"grid": grown, "base": {"train": {"rounds": 3}}, "targets": [0.5]}) is None
    key = data.draw(st.sampled_from(sorted(grid)))
    fewer = {**grid, key: grid[key][1:]}
    assert grid_difference(old, {**old, "grid": fewer}) is not None
    assert grid_difference(old, {**old, "grid": {**grid, "model": ["svm"]}}) is not None
    assert grid_difference(old, {**old, "grid": {k: v for k, v in grid.items() if k != key}}) is not None
    assert grid_difference(old, {**old, "base": {"train": {"rounds": 4}}}) == \
        "base 'train.rounds': 3 in the folder's grid, 4 in this one"


def test_a_second_experiment_on_a_grid_folder_being_run_is_one_line_and_runs_nothing(tmp_path: Path) -> None:
    """Two `fedaccel experiment` commands on one grid folder at once: the second said "cell failed" for each cell
    the first was writing (no error.txt), though nothing had failed. It is refused in one line now."""
    import os

    from fedaccel.runs.lock import lock_run_dir

    grid = load_experiment(_file(tmp_path, "first", {"algorithm": ["fedavg"], "run.seed": [0, 1]}))
    with lock_run_dir(tmp_path / "out"):  # as the first experiment holds it
        with pytest.raises(UserError) as caught:
            run_experiment(grid, progress=False)
    assert str(caught.value) == (f"{tmp_path / 'out'} is being written by process {os.getpid()}; wait for it to end "
                                 "(or stop it), then run again")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".lock"]
    run_experiment(grid, progress=False)  # once it is free


def test_a_typo_in_a_grid_key_names_the_file(tmp_path: Path) -> None:
    """``run.sed:`` in a grid said "unknown config key 'run.sed'" without the file, unlike the file's other errors."""
    from fedaccel.errors import ConfigError

    path = _file(tmp_path, "typo", {"run.sed": [0, 1]})
    with pytest.raises(ConfigError) as caught:
        load_experiment(path)
    assert str(caught.value).startswith(f"{path}: unknown config key 'run.sed'")
