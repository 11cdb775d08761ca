"""A cell whose run raises does not cost the grid its other cells: it is said in one line, its traceback is kept in
its folder's ``error.txt``, the table and curves are written of the rest, the grid ends with exit status 1 naming
it, and running the grid again resumes it (``--fail-fast``: the first failure stops the grid).

The failing method is a plugin (tests/plugin_site.py) that raises in round 2 of the cell with mu = 1 and seed 1
while ``BREAK`` is set, so that "fixing the cause" leaves its code, and so the run's recorded hash, as it was."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest
import yaml
from plugin_site import forget, install

from fedaccel.cli import main
from fedaccel.grids.cell import CellFailed
from fedaccel.grids.experiment import _run_seed_group, load_experiment
from fedaccel.grids.progress import GridProgress

BREAKING = '''
import os
from fedaccel import Part, build_algorithm, compose


def myprox(*, mu: float = 0.01):
    def local_term(ctx, w, ss, cs):
        if mu > 0.5 and ctx.info.round == 1 and ctx.info.seed == 1 and os.environ.get("BREAK"):
            raise ZeroDivisionError("mu above 0.5 breaks in round 2")

        def add(theta, grad):
            grad.add_(theta - w, alpha=mu)

        return add

    return compose("myprox", Part(name="proximal", local_term=local_term), *build_algorithm("fedavg").parts)
'''
FAILING = "algorithm.mu=1.0,run.seed=1"


@pytest.fixture
def breaking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The breaking plugin installed and ``BREAK`` set; the grid file of 4 cells (mu 0.1 and 1, seeds 0 and 1)."""
    forget()
    monkeypatch.syspath_prepend(str(install(tmp_path / "site", source=BREAKING)))
    monkeypatch.setenv("BREAK", "1")
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({
        "name": "breaks", "out_dir": str(tmp_path / "out"),
        "base": {"model": "softmax", "data": {"dataset": "digits", "subset": 300, "clients": 4},
                 "train": {"rounds": 3}, "algorithm": {"name": "myprox"}, "run": {"checkpoint_every": 1}},
        "grid": {"algorithm.mu": [0.1, 1.0], "run.seed": [0, 1]}}))
    yield grid
    forget()


def rows(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def two_experiments(breaking: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two experiment files stand in for BHerd's under ``tmp_path``, the first with the failing cell (mu 1, seed 1);
    ``fedaccel reproduce bherd`` then runs them into ``tmp_path / "runs"`` and writes to the returned docs folder."""
    from functools import partial

    import fedaccel.reproductions.reproduce as reproduce_module

    folder = tmp_path / "experiments" / "bherd" / "quick"
    folder.mkdir(parents=True)
    grid = yaml.safe_load(breaking.read_text())
    for stem, mus in (("first", [1.0]), ("second", [0.1])):
        (folder / f"{stem}.yaml").write_text(f"# {stem}\n" + yaml.safe_dump(
            {"base": grid["base"], "grid": {"algorithm.mu": mus, "run.seed": [0, 1]}}))
    monkeypatch.setattr(reproduce_module, "ROOT", tmp_path)
    docs = tmp_path / "docs"
    monkeypatch.setattr(reproduce_module, "reproduce", partial(reproduce_module.reproduce, docs=docs,
                                                               out_root=tmp_path / "runs"))
    return docs


@pytest.mark.parametrize("runner", [[], ["--stack-seeds"], ["--stack-arms"], ["-j", "2"]],
                         ids=["sequential", "stacked-seeds", "stacked-arms", "workers"])
def test_a_failing_cell_is_one_line_the_others_finish_and_the_grid_resumes_it_once_fixed(
        breaking: Path, tmp_path: Path, runner: list[str], capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    assert main(["experiment", str(breaking), "--no-progress", *runner]) == 1
    err = capsys.readouterr().err
    failed = {d.name for d in out.iterdir() if (d / "error.txt").is_file()}
    # stacked runs share their step, so its error reaches each of them: each then goes on alone, and only the
    # run whose own work raises fails (not the other seed of its method, nor the other method's runs)
    assert failed == {FAILING}
    finished = {d.name for d in out.iterdir() if (d / "summary.json").is_file()}
    assert finished == {"algorithm.mu=0.1,run.seed=0", "algorithm.mu=0.1,run.seed=1",
                        "algorithm.mu=1.0,run.seed=0"} - failed
    kept = (out / FAILING / "error.txt").read_text()
    assert kept.startswith(f"an error stopped the run after 1 round(s); `fedaccel run --resume {out / FAILING}`")
    assert "Traceback" in kept and "ZeroDivisionError: mu above 0.5 breaks in round 2" in kept
    said = [line for line in err.splitlines() if f"cell {FAILING} failed" in line]
    assert len(said) == 1 and re.fullmatch(
        rf"\[breaks \d/4\] cell {re.escape(FAILING)} failed: ZeroDivisionError: mu above 0\.5 breaks in round 2 "
        rf"\(its traceback: {re.escape(str(out / FAILING / 'error.txt'))}\) \(\d/4 cells done, 1 failed, .*\)",
        said[0]), said
    assert "Traceback" not in err  # in the folder, not on the grid's lines
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: {len(failed)} of 4 cells failed (") and FAILING in last
    table = (out / "table.md").read_text()  # the table says which cells are missing and why
    assert f"{len(failed)} of 4 cells incomplete: failed " in table and f"{FAILING} (round 1 of 3, its error.txt)" in table
    marked = [line.split(" | ")[0] for line in table.splitlines() if "runs incomplete)" in line]
    assert marked == ["| myprox mu=1.0 (1 of 2 runs incomplete)"], table  # its row's numbers: 1 round
    assert (out / "curves.png").is_file()

    monkeypatch.delenv("BREAK")  # the cause fixed: the same command resumes the failed cells
    assert main(["experiment", str(breaking), "--no-progress", *runner]) == 0
    assert all((out / name / "summary.json").is_file() and not (out / name / "error.txt").exists() for name in failed)
    clean = tmp_path / "clean"
    assert main(["run", "--set", "model=softmax", "--set", "data={dataset: digits, subset: 300, clients: 4}",
                 "--set", "train.rounds=3", "--set", "algorithm={name: myprox, mu: 1.0}", "--set", "run.seed=1",
                 "--set", "run.progress=false", "--out", str(clean)]) == 0
    assert rows(out / FAILING) == rows(clean)  # resumed from its round-1 checkpoint: the numbers of a whole run


def test_fail_fast_stops_the_grid_at_the_first_failed_cell_with_its_line(
        breaking: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["experiment", str(breaking), "--no-progress", "--fail-fast"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: cell {FAILING} failed: ZeroDivisionError") and len(
        [line for line in err if "ZeroDivisionError" in line]) == 1
    assert sorted(d.name for d in (tmp_path / "out").iterdir() if d.is_dir()) == [
        "algorithm.mu=0.1,run.seed=0", "algorithm.mu=0.1,run.seed=1", "algorithm.mu=1.0,run.seed=0", FAILING]
    assert not (tmp_path / "out" / "table.md").exists()


def test_a_stacked_group_in_a_worker_returns_its_failed_cells(breaking: Path) -> None:
    """``experiment -j N --stack-seeds``: the worker's group hands its failures back (pickled), not an exception
    that would stop the grid."""
    experiment = load_experiment(breaking)
    group = [(k, name, config, experiment.out_dir / name) for k, (name, config) in enumerate(experiment.cells, 1)
             if "mu=1.0" in name]
    failures = _run_seed_group(group, GridProgress(2, bars=False), False)
    assert [f.cell for f in failures] == [FAILING]
    assert (experiment.out_dir / "algorithm.mu=1.0,run.seed=0" / "summary.json").is_file()  # its seed 0 ran on
    again = pickle.loads(pickle.dumps(failures[0]))
    assert isinstance(again, CellFailed) and (again.cell, str(again)) == (failures[0].cell, str(failures[0]))


def test_a_plain_run_that_raises_keeps_its_traceback_and_loses_it_when_resumed(
        breaking: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "alone"
    argv = ["run", "--set", "model=softmax", "--set", "data={dataset: digits, subset: 300, clients: 4}",
            "--set", "train.rounds=3", "--set", "algorithm={name: myprox, mu: 1.0}", "--set", "run.seed=1",
            "--set", "run.progress=false", "--out", str(out)]
    with pytest.raises(ZeroDivisionError):  # a bug's traceback on the terminal, as before
        main(argv)
    assert "ZeroDivisionError: mu above 0.5" in (out / "error.txt").read_text()
    monkeypatch.delenv("BREAK")
    assert main(["run", "--resume", str(out)]) == 0
    assert not (out / "error.txt").exists() and (out / "summary.json").is_file()


def test_a_reproduction_runs_every_experiment_past_a_failed_cell_and_draws_its_report_once_fixed(
        breaking: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Two experiment files stand in for a paper's, the first with the failing cell: the second still runs, nothing
    is packed and no report drawn (the committed set stays whole), the exit status is 1 with the rerun command;
    rerun once fixed, the first resumes, both are packed and the report is drawn."""
    from fedaccel.reproductions.snapshot import SUFFIX

    docs = two_experiments(breaking, tmp_path, monkeypatch)
    data = docs / "bherd" / "data"
    assert main(["reproduce", "bherd", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: 1 of 2 experiments had failed cells (first: 1 cell(s) ({FAILING})") and (
        "nothing was packed" in err[-1] and "run `fedaccel reproduce bherd` again" in err[-1]), err[-1]
    assert (tmp_path / "runs" / "bherd-quick" / "second" / "algorithm.mu=0.1,run.seed=1" / "summary.json").is_file()
    assert not data.exists()
    assert not list(docs.glob("*.md"))
    monkeypatch.delenv("BREAK")
    assert main(["reproduce", "bherd", "--no-progress"]) == 0
    assert (data / f"first{SUFFIX}").is_file() and (data / f"second{SUFFIX}").is_file() and list(docs.glob("*.md"))


def test_a_grid_whose_baseline_cells_all_failed_ends_as_failed_cells_not_an_unknown_baseline(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The baseline's only cell fails before its first row (a split it cannot make): its group is not among the
    rows, and the table's "unknown baseline" was the grid's error (exit 2, and `reproduce` stopped on it); now the
    grid ends as any grid with failed cells, exit 1 naming the cell."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({
        "name": "nobase", "out_dir": str(tmp_path / "out"),
        "base": {"model": "softmax", "data": {"dataset": "digits", "subset": 200, "clients": 2}, "train": {"rounds": 1}},
        "grid": {"variant": [{"algorithm": "fedavg", "data.clients": 5000}, {"algorithm": "fedprox"}]},
        "baseline": "fedavg"}))
    assert main(["experiment", str(grid), "--no-progress"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: 1 of 2 cells failed (variant=algorithm=fedavg+data.clients=5000)"), last


def test_a_reproduction_stopped_after_a_failed_experiment_still_names_it(
        breaking: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Ctrl-C during the second experiment, after the first had a failed cell: the stop's own line (exit 130) comes
    after one naming the failed experiment, which the stop would otherwise hide until the next run."""
    import fedaccel.grids.experiment as experiment_module
    from fedaccel.runs.stopping import Interrupted

    two_experiments(breaking, tmp_path, monkeypatch)
    run_experiment = experiment_module.run_experiment

    def stopped_in_second(experiment, **kwargs):
        if experiment.out_dir.name == "second":
            raise Interrupted(experiment.out_dir, None)
        return run_experiment(experiment, **kwargs)

    monkeypatch.setattr(experiment_module, "run_experiment", stopped_in_second)
    assert main(["reproduce", "bherd", "--no-progress"]) == 130
    lines = capsys.readouterr().err.strip().splitlines()
    said = [k for k, line in enumerate(lines) if line.startswith(
        f"before this stop, 1 of 2 experiments had failed cells (first: 1 cell(s) ({FAILING})")]
    assert said and "run `fedaccel reproduce bherd` again" in lines[said[0]], lines
    assert said[0] < len(lines) - 1 and "continues" in lines[-1], lines  # the stop's own line comes last
