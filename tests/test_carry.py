"""A grid's finished cells carried as one packed file (fedaccel pack) and written back (experiment --from)."""

from __future__ import annotations

import dataclasses
import functools
import json
import lzma
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedaccel.cli import main
from fedaccel.errors import UserError
from fedaccel.reproductions.carry import pack_finished, restore_finished
from fedaccel.grids.experiment import load_experiment, run_experiment

GRID = """\
name: carried
base:
  data: {dataset: digits, clients: 3, split: case2}
  model: softmax
  train: {rounds: 3, batch_size: 100}
  eval: {every: 1}
  run: {progress: false}
grid:
  algorithm: [fedavg, {name: bherd, alpha: 0.5}]
  run.seed: [0, 1]
"""


@functools.cache
def _finished_grid(root: Path) -> tuple[Path, Path]:
    """The grid file and its finished folder, run once per test session."""
    file = root / "carried.yaml"
    file.write_text(GRID)
    experiment = dataclasses.replace(load_experiment(file), out_dir=root / "ran")
    run_experiment(experiment, progress=False)
    return file, root / "ran"


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _finished_grid(tmp_path_factory.mktemp("carry"))


def _experiment(file: Path, out: Path):  # type: ignore[no-untyped-def]
    return dataclasses.replace(load_experiment(file), out_dir=out)


def _records(packed: Path) -> list[dict]:
    return [json.loads(line) for line in lzma.decompress(packed.read_bytes()).decode().splitlines()]


def _write_records(packed: Path, records: list[dict]) -> None:
    packed.write_bytes(lzma.compress("".join(json.dumps(r) + "\n" for r in records).encode()))


def test_carried_cells_are_skipped_as_finished_and_read_as_the_originals(grid, tmp_path: Path) -> None:
    file, ran = grid
    packed = tmp_path / "carried.jsonl.xz"
    assert main(["pack", str(ran), "-o", str(packed)]) == 0
    assert len(_records(packed)) == 4
    out = tmp_path / "elsewhere"
    assert main(["experiment", str(file), "--out", str(out), "--from", str(packed), "--no-progress"]) == 0
    for cell in sorted(p.name for p in ran.iterdir() if p.is_dir()):
        assert (out / cell / "metrics.jsonl").read_text() == (ran / cell / "metrics.jsonl").read_text()  # not run again
        assert json.loads((out / cell / "summary.json").read_text())["restored_from"] == packed.name
        assert (out / cell / "diagnostics.jsonl").read_text() == (ran / cell / "diagnostics.jsonl").read_text()
    assert (out / "table.md").read_text() == (ran / "table.md").read_text()
    assert not list(out.glob(".restoring-*"))


def test_a_run_cut_short_is_not_carried_and_a_folder_there_is_kept(grid, tmp_path: Path) -> None:
    file, ran = grid
    packed = tmp_path / "p.jsonl.xz"
    pack_finished(ran, packed)
    records = _records(packed)
    records[0]["metrics"] = records[0]["metrics"][:-1]  # stopped before its last round
    _write_records(packed, records)
    out = tmp_path / "out"
    shutil.copytree(ran / records[1]["cell"], out / records[1]["cell"])  # already there: newer than any file
    done = restore_finished(_experiment(file, out), packed)
    assert (done.written, done.kept, done.stale, done.unfinished) == (2, 1, 0, 1)
    assert not (out / records[0]["cell"]).exists()
    assert "restored_from" not in json.loads((out / records[1]["cell"] / "summary.json").read_text())
    assert "restored_from" in json.loads((out / records[2]["cell"] / "summary.json").read_text())


def test_an_unfinished_folder_there_is_kept_and_said_and_a_cut_restore_is_cleared(grid, tmp_path: Path) -> None:
    file, ran = grid
    packed = tmp_path / "p.jsonl.xz"
    pack_finished(ran, packed)
    cell = _records(packed)[0]["cell"]
    out = tmp_path / "out"
    shutil.copytree(ran / cell, out / cell)
    (out / cell / "summary.json").unlink()  # started here, not finished here
    (out / ".restoring-x1" / cell).mkdir(parents=True)  # a restore cut short
    done = restore_finished(_experiment(file, out), packed)
    assert (done.written, done.kept, done.stale) == (3, 1, 1)
    assert "delete those folders" in done.line(packed)
    assert not list(out.glob(".restoring-*"))


def test_a_summary_in_the_file_finishes_a_run_only_as_pack_writes_a_divergence(grid, tmp_path: Path) -> None:
    """A crafted summary ({} or diverged at a round past the budget) does not pass a run cut short for finished;
    a divergence as pack records it does, and every summary written names the file."""
    file, ran = grid
    packed = tmp_path / "p.jsonl.xz"
    pack_finished(ran, packed)
    records = _records(packed)
    for record, summary in zip(records, [{}, {"diverged": True, "diverged_round": 99},
                                         {"diverged": "yes", "diverged_round": 1},
                                         {"finished": False, "rounds": 3, "diverged": True, "diverged_round": 2}]):
        record["metrics"] = record["metrics"][:3]  # rounds 0-2 of 3
        record["summary"] = summary
    _write_records(packed, records)
    out = tmp_path / "out"
    done = restore_finished(_experiment(file, out), packed)
    assert (done.written, done.unfinished) == (1, 3)
    summary = json.loads((out / records[3]["cell"] / "summary.json").read_text())
    assert summary == {"finished": False, "rounds": 3, "diverged": True, "diverged_round": 2,
                       "restored_from": packed.name}


def test_a_config_that_differs_is_named_by_its_first_key(grid, tmp_path: Path) -> None:
    file, ran = grid
    packed = tmp_path / "p.jsonl.xz"
    pack_finished(ran, packed)
    records = _records(packed)
    records[2]["config"]["train"]["lr"] = 0.5
    _write_records(packed, records)
    with pytest.raises(UserError, match=r"another config than carried's \(train\.lr: 0\.5 in the file, 0\.01 here\)"):
        restore_finished(_experiment(file, tmp_path / "out"), packed)


def test_pack_refuses_a_folder_with_nothing_finished_and_a_name_not_packed(tmp_path: Path) -> None:
    (tmp_path / "grid" / "cell").mkdir(parents=True)
    with pytest.raises(UserError, match="no finished cell"):
        pack_finished(tmp_path / "grid", tmp_path / "p.jsonl.xz")
    with pytest.raises(UserError, match="ends in .jsonl.xz"):
        pack_finished(tmp_path / "grid", tmp_path / "p.tar")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.sampled_from(["keep", "cut", "rename", "lr", "seed"]), min_size=4, max_size=4))
def test_a_packed_file_of_another_grid_writes_nothing(grid, tmp_path_factory, changes: list[str]) -> None:
    """Any mix of records kept, cut short, renamed out of the grid, or run with another config: a record that is
    not this grid's refuses the whole file before a folder is written; otherwise exactly the finished ones land."""
    file, ran = grid
    work = tmp_path_factory.mktemp("hostile")
    packed = work / "p.jsonl.xz"
    pack_finished(ran, packed)
    records = _records(packed)
    for record, change in zip(records, changes):
        if change == "cut":
            record["metrics"] = record["metrics"][:1]
        elif change == "rename":
            record["cell"] = record["cell"] + ",extra=1"
        elif change == "lr":
            record["config"]["train"]["lr"] = 0.5
        elif change == "seed":  # another cell's name with this one's config
            record["config"]["run"]["seed"] = 7
    _write_records(packed, records)
    out = work / "out"
    foreign = {"rename", "lr", "seed"} & set(changes)
    if foreign:
        with pytest.raises(UserError, match="not a cell of|another config"):
            restore_finished(_experiment(file, out), packed)
        assert not out.exists()
    else:
        done = restore_finished(_experiment(file, out), packed)
        assert (done.written, done.unfinished) == (changes.count("keep"), changes.count("cut"))
        assert sorted(p.name for p in out.iterdir()) == sorted(r["cell"] for r, c in zip(records, changes) if c == "keep")
    shutil.rmtree(work)


def test_from_packed_writes_nothing_into_a_grid_folder_an_experiment_is_running_in(
        grid, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A second `experiment FILE --from P` while the first ran renamed cells into the running grid's folder before
    the grid lock refused it; it is refused before anything is written."""
    from fedaccel.runs.lock import lock_run_dir

    file, ran = grid
    packed = tmp_path / "carried.jsonl.xz"
    assert main(["pack", str(ran), "-o", str(packed)]) == 0
    out = tmp_path / "running"
    with lock_run_dir(out):  # as the experiment running there holds it
        code = main(["experiment", str(file), "--out", str(out), "--from", str(packed), "--no-progress"])
    assert code == 2 and "is being written by process" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
