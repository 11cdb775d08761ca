"""Runs end to end: config validation, CLI errors, determinism, kill -9 and resume, experiments."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.cli import main
from fedaccel.errors import ConfigError, UserError
from fedaccel.grids.experiment import load_experiment, run_experiment
from fedaccel.launch import resume, run
from fedaccel.runs.config import load_config

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "data.dataset=digits",
    "model=softmax",
    "data.split=dirichlet",
    "data.split.alpha=0.5",
    "data.clients=4",
    "train.rounds=4",
    "train.lr=0.1",
    "train.batch_size=20",
    "train.client_fraction=0.75",
    "run.progress=false",
]


def metrics_of(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_s")
    return rows


@pytest.mark.parametrize(
    "override,message",
    [
        ("train.lrr=0.1", "unknown config key 'train.lrr'"),
        ("train.lr=-0.1", "train.lr must be > 0"),
        ("algorithm=nope", "unknown algorithm 'nope'"),
        ("data.dataset=nope", "unknown dataset 'nope'"),
        ("data.split=nope", "unknown split 'nope'"),
        ("model=nope", "unknown model 'nope'"),
        ("train.rounds=ten", "train.rounds must be of type int"),
        ("algorithm.server_lr=0", "server_lr must be > 0"),
        ("algorithm.alpha=0.5", "algorithm 'fedavg' has no hyperparameter 'alpha'"),
        ("data.split.alpha=0.5", "split 'iid' has no option 'alpha'"),
        ("train.client_fraction=1.5", "client_fraction must be in (0, 1]"),
    ],
)
def test_bad_config_is_rejected_at_load_with_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_config_file_overrides_defaults_and_set_overrides_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("train: {lr: 0.5, rounds: 3}\ndata: {split: {name: dirichlet, alpha: 0.1}}\n")
    config = load_config(path, ["train.lr=0.25", "data.split.min_size=2"])
    assert config.train.lr == 0.25 and config.train.rounds == 3 and config.train.batch_size == 50
    assert config.data.split == {"name": "dirichlet", "alpha": 0.1, "min_size": 2}


SET_ITEMS = ["algorithm=bherd", "algorithm.alpha=0.3", "algorithm={name: bherd, alpha: 0.7}", "data.split=dirichlet",
             "data.split.alpha=0.2", "data.split={name: dirichlet, alpha: 0.4}", "train.lr=0.5", "train.lr=0.25",
             "train.augment.flip=true", "train.augment=null", "data.dataset=digits"]


@settings(max_examples=150, deadline=None)
@given(items=st.lists(st.sampled_from(SET_ITEMS), max_size=5))
def test_a_set_that_would_drop_an_earlier_one_is_refused_and_every_other_one_holds(items: list[str]) -> None:
    """Any --set sequence: a section given a value (not null) after an earlier --set wrote an option into it, with no
    value for the section before, is refused in one line naming both; otherwise every --set holds in the config
    (the last one of a key; a section's value replaces the options set before it)."""
    keys = [item.partition("=")[0] for item in items]
    dropping = any(k.startswith(key + ".") and not items[i].endswith("=null") and key not in keys[:i]
                   for i, key in enumerate(keys) for k in keys[:i])
    try:
        config = load_config(None, items)
    except ConfigError as error:
        assert ("replaces the whole" in str(error)) == dropping and "\n" not in str(error), (items, str(error))
        return
    assert not dropping
    leaves: dict[str, object] = {}  # what each --set leaves, in order: a section's whole value replaces its leaves
    for key, _, text in (item.partition("=") for item in items):
        value = yaml.safe_load(text)
        if key in ("algorithm", "data.split", "train.augment"):
            leaves = {k: v for k, v in leaves.items() if not k.startswith(key + ".")}
            if value is None:
                leaves[key] = None
            else:
                leaves.pop(key, None)
                leaves.update({f"{key}.{k}": v for k, v in (value if isinstance(value, dict) else {"name": value}).items()})
        else:
            leaves.pop(key.rpartition(".")[0], None)  # an option of a section turned off turns it on again
            leaves[key] = value
    held = {"algorithm": config.algorithm, "data.split": config.data.split, "train.lr": config.train.lr,
            "train.augment": config.train.augment, "data.dataset": config.data.dataset}
    for key, value in leaves.items():
        section, _, option = key.rpartition(".")
        got = held[key] if key in held else held[section][option]
        assert got == value, (items, key, got)


def test_an_experiments_set_that_would_drop_a_grid_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "e.yaml").write_text("base: {algorithm: {name: bherd}}\ngrid: {algorithm.alpha: [0.3, 0.7]}\n")
    with pytest.raises(ConfigError, match="replaces the whole algorithm section, which would drop the grid's "
                                          "algorithm.alpha"):
        load_experiment(tmp_path / "e.yaml", ["algorithm=bherd"])
    assert [c.algorithm["alpha"] for _, c in load_experiment(tmp_path / "e.yaml", ["algorithm.selection=random"]).cells] \
        == [0.3, 0.7]


GRID_VALUES = {"train.rounds": [2, 3], "train.lr": [0.1, 0.2],
               "algorithm": ["fedavg", {"name": "fedprox", "mu": 0.1}, {"name": "bherd", "alpha": 0.5}],
               "data.split": ["iid", {"name": "dirichlet", "alpha": 0.1}],
               "variant": [{"train.batch_size": 10, "train.lr": 0.01}, {}]}
GRID_OVERRIDES = ["train.rounds=4", "train.lr=0.3", "train.batch_size=20", "algorithm=fedavg", "algorithm.name=fedprox",
                  "algorithm.alpha=0.3", "algorithm.mu=0.5", "data.split=iid", "data.split.alpha=0.5", "run.seed=1"]


def _spelled_at(spec: dict, dotted: str) -> object:
    node: object = spec
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.sampled_from(sorted(GRID_VALUES)), min_size=1, max_size=3, unique=True),
       picks=st.data(), overrides=st.lists(st.sampled_from(GRID_OVERRIDES), max_size=3, unique=True))
def test_an_experiments_set_never_runs_a_cell_under_a_name_that_says_otherwise(
        tmp_path_factory: pytest.TempPathFactory, keys: list[str], picks: st.DataObject, overrides: list[str]) -> None:
    """Any grid of these keys, any --set: either refused, or every cell's config holds the grid values its folder is
    named by (an override of a key the grid sets used to win in every cell, under the grid value's name), a --set
    of a key the grid gives one value replacing it. The refusal names a key that one of the grid's values sets."""
    import itertools

    grid = {key: picks.draw(st.lists(st.sampled_from(GRID_VALUES[key]), min_size=1, max_size=2, unique_by=repr))
            for key in keys}
    path = tmp_path_factory.mktemp("grid") / "e.yaml"
    path.write_text(yaml.safe_dump({"base": {"data": {"dataset": "digits", "clients": 2}, "model": "softmax",
                                             "train": {"rounds": 1, "batch_size": 50}}, "grid": grid}, sort_keys=False))
    try:
        experiment = load_experiment(path, overrides)
    except ConfigError as error:
        found = re.match(r"--set (\S+)=\.\.\. sets a key the grid of .* sets too", str(error))
        if found:
            key = found.group(1)
            assert key in [o.partition("=")[0] for o in overrides]
            inside = [(grid_key, rest) for grid_key in grid for rest in [key.removeprefix(grid_key + ".")]
                      if key == grid_key or rest != key]
            assert inside or any(key in variant for variant in grid.get("variant", [])), (key, grid)
            assert all(key == grid_key or any(isinstance(v, dict) and rest in v or isinstance(v, str) and rest == "name"
                                              for v in grid[grid_key]) for grid_key, rest in inside), (key, grid)
        return
    fixed = {key: yaml.safe_load(text) for key, _, text in (o.partition("=") for o in overrides)
             if len(grid.get(key, ())) == 1 and key != "variant"}  # a fixed setting of the grid: replaced
    grid = {key: [fixed[key]] if key in fixed else values for key, values in grid.items()}
    for values, spec in zip(itertools.product(*grid.values()), experiment.specs, strict=True):
        for key, value in zip(grid, values):
            for dotted, v in (value.items() if key == "variant" else [(key, value)]):
                held = _spelled_at(spec, dotted)
                if isinstance(v, dict):
                    assert all(_spelled_at(spec, f"{dotted}.{o}") == w for o, w in v.items()), (overrides, key, spec)
                else:
                    assert held == v or isinstance(held, dict) and held.get("name") == v, (overrides, key, spec)


def test_the_copy_beside_a_grid_names_its_cells_as_they_ran(tmp_path: Path) -> None:
    """With a --set of a fixed grid value, the grid folder keeps a rewritten copy of the file, which judge, compare
    and gaps read the cells from: a string that looks like a number (``name: ["1e4"]``) stays that string (PyYAML
    wrote it unquoted, read back as 10000.0: cells named name=10000.0 that no folder holds)."""
    from fedaccel.grids.experiment import experiment_cells

    path = tmp_path / "e.yaml"
    path.write_text("base: {data: {dataset: digits, clients: 2}, model: softmax}\n"
                    "grid: {name: ['1e4'], train.rounds: [8], train.lr: [1.5e-1, 0.2]}\n")
    experiment = load_experiment(path, ["train.rounds=2"])
    copy = tmp_path / "copy.yaml"
    copy.write_bytes(experiment.copy_bytes())
    assert experiment_cells(copy) == [(name, spec) for (name, _), spec in zip(experiment.cells, experiment.specs)]
    assert [name for name, _ in experiment.cells][0].startswith("name=1e4,train.rounds=2,")


def test_an_experiments_set_of_a_grid_key_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A new user's cases: --set train.rounds=40 on a grid of train.rounds: [8] ran 40 rounds in folders named
    train.rounds=8 (now the grid's one value is replaced, folder names too); --set algorithm=scaffold ran scaffold in
    every algorithm's folder (now refused, as any --set of a key the grid varies)."""
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"base": {"data": {"dataset": "digits", "clients": 2}, "model": "softmax"},
                                    "grid": {"train.rounds": [8], "algorithm": ["fedavg", {"name": "bherd", "alpha": 0.5}],
                                             "train.lr": [0.1, 0.2]}}, sort_keys=False))
    for item in ("train.lr=0.3", "algorithm=scaffold", "algorithm.alpha=0.3", "algorithm.name=fedprox"):
        assert main(["experiment", str(path), "--set", item, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"sets a key the grid of {path} sets too" in err, err
    assert not (tmp_path / "out").exists()
    cells = load_experiment(path, ["train.rounds=3", "train.batch_size=7"]).cells
    assert [name.split(",")[0] for name, _ in cells] == ["train.rounds=3"] * 4
    assert {(c.train.rounds, c.train.batch_size) for _, c in cells} == {(3, 7)}


def test_cli_prints_one_line_for_user_errors_and_debug_shows_traceback(capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "--set", "train.lr=-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: train.lr must be > 0") and err.count("\n") == 1
    assert main(["run", "--resume", "/nonexistent/run"]) == 2
    with pytest.raises(ConfigError):
        main(["--debug", "run", "--set", "train.lr=-1"])


def test_cli_data_and_split_report(tmp_path: Path, capsys: pytest.CaptureFixture,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDACCEL_DATA_FASHION_MNIST", raising=False)  # set where the data is not installed (a GPU box)
    assert main(["data"]) == 0
    assert re.search(r"fashion-mnist\s+built-in", capsys.readouterr().out)
    out = tmp_path / "split.png"
    args = ["split-report", "--set", "data.split=case2", "--set", "data.clients=5", "-o", str(out)]
    assert main(args) == 0
    report = capsys.readouterr().out
    assert "heat map" in report and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_config_and_seed_give_identical_metrics(tmp_path: Path) -> None:
    config = load_config(None, SMALL)
    a, b = run(config, tmp_path / "a"), run(config, tmp_path / "b")
    assert metrics_of(a) == metrics_of(b)
    other = run(load_config(None, [*SMALL, "run.seed=1"]), tmp_path / "c")
    assert metrics_of(a) != metrics_of(other)
    rows = metrics_of(a)
    assert [r["round"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[-1]["test_acc"] > rows[0]["test_acc"]
    assert rows[-1]["clients"] == 3  # client_fraction 0.75 of 4 clients


def test_eval_every_k_rounds_and_always_the_last(tmp_path: Path) -> None:
    path = run(load_config(None, [*SMALL, "train.rounds=5", "eval.every=2"]), tmp_path / "r")
    assert [r["round"] for r in metrics_of(path)] == [0, 2, 4, 5]
    assert json.loads((path / "summary.json").read_text())["finished"]


@pytest.mark.slow
def test_kill_9_then_resume_gives_the_same_final_numbers(tmp_path: Path) -> None:
    overrides = [*SMALL, "train.rounds=60", "run.checkpoint_every=1", "model=2nn"]
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({}))
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "fedaccel.cli", "run", str(config_path), "--out", str(killed), "--no-progress"]
    for item in overrides:
        cmd += ["--set", item]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        metrics = killed / "metrics.jsonl"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 4:
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "summary.json").exists(), "the run ended before it could be killed"

    resume(killed, progress=False)
    reference = run(load_config(None, overrides), tmp_path / "reference")
    assert metrics_of(killed) == metrics_of(reference)


def test_every_checkpoint_comes_after_its_rounds_rows_are_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows are fsynced before each checkpoint, not each as written: at every checkpoint save, the metrics and
    diagnostics files were last fsynced holding every row up to the checkpoint's round (a resume drops the rows
    past it, so a crash loses only rounds it re-runs)."""
    import fedaccel.runs.loop as loop

    synced: dict[str, str] = {}
    real_fsync, real_save = os.fsync, loop.save_checkpoint

    def fsync(fd: int) -> None:
        real_fsync(fd)
        file = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if file.suffix == ".jsonl":
            synced[file.name] = file.read_text()

    saved: list[int] = []

    def save_checkpoint(path, state, *args, **kwargs):  # type: ignore[no-untyped-def]
        rows = [json.loads(line)["round"] for line in synced.get("metrics.jsonl", "").splitlines()]
        diag = [json.loads(line)["round"] for line in synced.get("diagnostics.jsonl", "").splitlines()]
        assert rows and rows[-1] == state.round, (rows, state.round)
        assert diag == list(range(1, state.round + 1)), (diag, state.round)
        saved.append(state.round)
        return real_save(path, state, *args, **kwargs)

    monkeypatch.setattr(loop.os, "fsync", fsync)
    monkeypatch.setattr(loop, "save_checkpoint", save_checkpoint)
    run(load_config(None, [*SMALL, "train.rounds=5", "run.checkpoint_every=2", "algorithm=bherd"]), tmp_path / "r")
    assert saved == [2, 4, 5]
    assert [r["round"] for r in metrics_of(tmp_path / "r")] == [0, 1, 2, 3, 4, 5]


def test_a_resume_drops_a_torn_tail_past_its_checkpoint_and_refuses_damage_before_it(tmp_path: Path) -> None:
    """Rows are fsynced before each checkpoint, not as written: a machine's crash may leave the rows written since
    torn or zeroed, with rows after them. A resume drops those rows anyway, so damage there is dropped with them and
    the run gives the numbers of one never interrupted; damage at or before the checkpoint's round is refused."""
    overrides = [*SMALL, "train.rounds=6", "run.checkpoint_every=4", "algorithm=bherd"]
    reference = run(load_config(None, overrides), tmp_path / "reference")
    for name, damaged_round, refused in (("past", 5, False), ("at", 4, True), ("before", 2, True)):
        folder = tmp_path / name
        shutil.copytree(reference, folder)
        (folder / "summary.json").unlink()
        shutil.copy(folder / "checkpoint.prev.pt", folder / "checkpoint.pt")  # the checkpoint of round 4
        for file in ("metrics.jsonl", "diagnostics.jsonl"):
            lines = (folder / file).read_text().splitlines(keepends=True)
            at = next(k for k, line in enumerate(lines) if json.loads(line)["round"] == damaged_round)
            lines[at] = "\0" * (len(lines[at]) - 1) + "\n"  # zeroed, with rows after it
            (folder / file).write_text("".join(lines))
        if refused:
            with pytest.raises(UserError, match="not valid JSON"):
                resume(folder, progress=False)
            continue
        resume(folder, progress=False)
        assert metrics_of(folder) == metrics_of(reference)
        assert (folder / "diagnostics.jsonl").read_text() == (reference / "diagnostics.jsonl").read_text()


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 8), checkpoint=st.integers(-1, 8), at=st.integers(0, 8),
       garbage=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(
           lambda text: " ".join(text.splitlines()).strip()),
       more=st.integers(0, 3))
def test_damage_in_rows_is_dropped_only_past_a_checkpoints_round(tmp_path_factory, rows: int, checkpoint: int,
                                                                  at: int, garbage: str, more: int) -> None:
    """Any damage (a generated line) after the row of round ``at``, with rows after it: read with ``damage_past`` =
    a checkpoint's round, the rows before the damage come back when that row's round is the checkpoint's or later
    (a resume drops what follows), else it is refused in one line, as without ``damage_past``."""
    from fedaccel.runs.rows import read_rows

    at = min(at, rows - 1)
    lines = [json.dumps({"round": r, "test_acc": 0.5}) for r in range(rows)]
    lines.insert(at + 1, " ".join(garbage.splitlines()))  # one line, as str.splitlines reads lines
    lines += [json.dumps({"round": rows + 10 + r}) for r in range(more)]
    file = tmp_path_factory.mktemp("rows") / "metrics.jsonl"
    file.write_text("\n".join(lines) + "\n")
    try:
        parsed = json.loads(lines[at + 1])
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("round"), int) and not isinstance(parsed["round"], bool):
        return  # the generated line happens to be a row (its round checked like any other)
    last_line = at + 1 == len(lines) - 1
    if checkpoint < 0 or at >= checkpoint or (last_line and parsed is None):
        got, torn = read_rows(file, damage_past=checkpoint)
        assert torn and [row["round"] for row in got] == list(range(at + 1))
    else:
        with pytest.raises(UserError, match=f"{file.name}:{at + 2}: "):
            read_rows(file, damage_past=checkpoint)
    if not (last_line and parsed is None):
        with pytest.raises(UserError):
            read_rows(file)


def test_a_resume_refuses_rows_lost_before_its_checkpoint_before_training_a_round(tmp_path: Path) -> None:
    """A new user cut rows out of the middle of metrics.jsonl: --resume trained every round left, then the folder's
    readers refused it for good. Now the gap is refused in one line first, and nothing in the folder changes; the
    same folder without the gap continues (train.rounds raised: a run continued for more rounds)."""
    run(load_config(None, [*SMALL, "train.rounds=6", "run.checkpoint_every=2"]), tmp_path / "whole")
    shutil.copytree(tmp_path / "whole", tmp_path / "gap")
    lines = (tmp_path / "gap" / "metrics.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "gap" / "metrics.jsonl").write_text("".join(lines[:2] + lines[4:]))  # rounds 2 and 3 lost
    for name in ("whole", "gap"):
        (tmp_path / name / "summary.json").unlink()
        config = yaml.safe_load((tmp_path / name / "config.yaml").read_text())
        config["train"]["rounds"] = 8
        (tmp_path / name / "config.yaml").write_text(yaml.safe_dump(config))
    before = {p.name: p.read_bytes() for p in (tmp_path / "gap").iterdir() if p.is_file()}
    with pytest.raises(UserError, match=r"metrics.jsonl: round 2 is missing \(eval.every = 1\) and more; its rows were "
                                        "lost"):
        resume(tmp_path / "gap", progress=False)
    assert {p.name: p.read_bytes() for p in (tmp_path / "gap").iterdir() if p.is_file()} == before
    resume(tmp_path / "whole", progress=False)
    assert [r["round"] for r in metrics_of(tmp_path / "whole")] == list(range(9))


def test_experiment_runs_every_cell_then_skips_finished_ones(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "softmax",
            "train": {"rounds": 2, "lr": 0.1, "batch_size": 20}, "run": {"progress": False}}
    path.write_text(yaml.safe_dump({
        "name": "tiny", "out_dir": str(tmp_path / "out"), "base": base,
        "grid": {"algorithm": ["centralized", "fedavg"], "run.seed": [0, 1]},
        "targets": [0.5], "baseline": "fedavg",
    }))
    experiment = load_experiment(path)
    assert len(experiment.cells) == 4
    result = run_experiment(experiment)
    assert "| fedavg (baseline) | 2 |" in result.table
    assert result.plot.read_bytes()[:4] == b"\x89PNG"
    before = (result.run_dirs[0] / "metrics.jsonl").stat().st_mtime_ns
    run_experiment(load_experiment(path))
    assert (result.run_dirs[0] / "metrics.jsonl").stat().st_mtime_ns == before


def test_experiment_out_puts_the_grid_elsewhere_and_set_run_out_dir_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The same grid with another override goes to --out, not into the first folder's cells; --set run.out_dir
    (which moves no experiment) is one line naming --out."""
    path = tmp_path / "exp.yaml"
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "softmax",
            "train": {"rounds": 1, "lr": 0.1, "batch_size": 20}, "run": {"progress": False}}
    path.write_text(yaml.safe_dump({"name": "tiny", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"algorithm": ["fedavg"]}}))
    assert main(["experiment", str(path), "--no-progress"]) == 0
    assert main(["experiment", str(path), "--no-progress", "--set", "train.rounds=2",
                 "--out", str(tmp_path / "two")]) == 0
    assert [len(lines_of(tmp_path / d / "algorithm=fedavg" / "metrics.jsonl")) for d in ("out", "two")] == [2, 3]
    capsys.readouterr()
    assert main(["experiment", str(path), "--set", f"run.out_dir={tmp_path / 'x'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out DIR" in err and not (tmp_path / "x").exists()


def lines_of(file: Path) -> list[str]:
    return file.read_text().splitlines()


@pytest.mark.slow
def test_parallel_cells_give_the_numbers_of_serial_cells(tmp_path: Path) -> None:
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "softmax",
            "train": {"rounds": 2, "lr": 0.1, "batch_size": 20}, "run": {"progress": False}}
    results = {}
    for workers in (1, 2):
        path = tmp_path / f"exp{workers}.yaml"
        path.write_text(yaml.safe_dump({
            "name": "tiny", "out_dir": str(tmp_path / f"out{workers}"), "base": base,
            "grid": {"algorithm": ["fedavg", {"name": "bherd", "alpha": 0.5}, "scaffold"]},
        }))
        result = run_experiment(load_experiment(path), workers=workers)
        results[workers] = {d.name: [(r["round"], r["test_acc"], r["test_loss"]) for r in metrics_of(d)]
                            for d in result.run_dirs}
    assert len(results[2]) == 3 and all(len(rows) == 3 for rows in results[2].values())
    assert results[2] == results[1]


@pytest.mark.slow
def test_failing_parallel_cells_are_each_said_and_the_grid_ends_naming_them(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from fedaccel.grids.experiment import CellsFailed

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "name": "broken", "out_dir": str(tmp_path / "out"),
        "base": {"data": {"dataset": "mnist", "root": str(tmp_path / "nowhere")}, "run": {"progress": False}},
        "grid": {"run.seed": [0, 1]},
    }))
    with pytest.raises(CellsFailed, match=r"^2 of 2 cells failed \(run.seed=[01], run.seed=[01]\)"):
        run_experiment(load_experiment(path), workers=2, progress=False)
    said = [line for line in capsys.readouterr().err.splitlines() if " failed: " in line]
    assert len(said) == 2 and all("nowhere" in line for line in said)


def test_python_api_page_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (ROOT / "docs/python-api.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S)
    assert block is not None
    monkeypatch.chdir(tmp_path)
    folders = []
    for _ in range(2):  # run again as it is (a new user's second run was refused: the example named its folder)
        namespace: dict = {}
        exec(compile(block.group(1), "docs/python-api.md", "exec"), namespace)
        history = namespace["history"]
        assert len(history.metrics) == 6
        assert history.metrics[-1]["test_acc"] > 0.8
        folders.append(Path(history.run_dir).resolve())
    assert folders[0] != folders[1] and all(f.parent == tmp_path / "runs" / "api" for f in folders), folders
    assert all((folder / "metrics.jsonl").exists() for folder in folders)


def test_centralized_sgd_is_one_client_holding_all_data(tmp_path: Path) -> None:
    overrides = [*SMALL, "algorithm=centralized", "train.rounds=2", "train.client_fraction=1.0"]
    rows = metrics_of(run(load_config(None, overrides), tmp_path / "c"))
    n_train = 1438  # digits: 80% of 1797 samples
    assert [r["clients"] for r in rows[1:]] == [1, 1]
    assert rows[1]["local_steps"] == n_train // 20  # one epoch per round, batch 20
    assert rows[2]["local_steps"] == 2 * (n_train // 20)


def test_fedumf_takes_its_fraction_from_train_client_fraction(tmp_path: Path) -> None:
    overrides = [*SMALL, "algorithm=fedumf", "train.client_fraction=0.5", "train.rounds=2"]
    rows = metrics_of(run(load_config(None, overrides), tmp_path / "u"))
    assert [(r["clients"], r["uploaded"]) for r in rows[1:]] == [(4, 2), (4, 2)]
    # per round: every client downloads and trains, only the two authorised upload a model
    d = 64 * 10 + 10  # softmax regression on 8x8 digits
    for row in rows[1:]:
        assert row["round_bytes_down"] == 4 * d * 4 and row["round_bytes_up"] == 2 * d * 4
        assert row["round_local_steps"] > 0
    assert rows[2]["bytes_up"] == 2 * rows[2]["round_bytes_up"]  # the running total
    explicit = metrics_of(run(load_config(None, [*overrides, "algorithm.fraction=0.25"]), tmp_path / "v"))
    assert [r["uploaded"] for r in explicit[1:]] == [1, 1]


def test_uploaded_counts_the_updates_aggregated_not_the_clients_asked(tmp_path: Path) -> None:
    """A client runtime that loses client 0 (as a dead Flower node is lost): the metrics say it
    under diag.lost, and `uploaded` counts the updates that were aggregated."""
    from fedaccel.engine.round import InProcessClients, init_state
    from fedaccel.runs.loop import run_loop
    from fedaccel.runs.setup import build_setup

    class LosesClient0(InProcessClients):
        def train(self, contexts, w, server):  # type: ignore[no-untyped-def]
            updates, _ = super().train(contexts, w, server)
            return [u for u in updates if u.client != 0], {"lost": [0]}

    setup = build_setup(load_config(None, [*SMALL, "algorithm=fedavg", "train.rounds=2", "train.client_fraction=1.0"]))
    n = setup.federation.n_clients
    state = init_state(setup.algorithm, setup.federation.model.theta.clone(), n)
    (tmp_path / "r").mkdir()
    run_loop(setup, state, tmp_path / "r", wall=0.0, progress=False,
             runtime=LosesClient0(setup.algorithm, setup.federation, state.clients))
    rows = metrics_of(tmp_path / "r")
    assert [(r["clients"], r["uploaded"], r["diag"]["lost"]) for r in rows[1:]] == [(n, n - 1, [0])] * 2


@pytest.mark.slow
def test_label_flip_attack_gets_the_lowest_gsnr_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    overrides = [
        *SMALL, "algorithm=fedgsnr", "algorithm.e_const=10", "data.split=iid", "train.client_fraction=1.0",
        "train.rounds=3", "attacks=[{kind: label-flip, clients: [2], from_round: 1, shift: 3}]",
    ]
    out = tmp_path / "att"
    assert main(["run", "--no-progress", "--out", str(out), *sum((["--set", o] for o in overrides), [])]) == 0
    printed = capsys.readouterr().out
    ranking = [line.split()[2] for line in printed.splitlines() if "GSNR" in line and "client" in line]
    assert ranking[-1] == "2"
    rows = [json.loads(line) for line in (out / "diagnostics.jsonl").read_text().splitlines()]
    gsnr_round3 = rows[2]["gsnr"]
    assert min(gsnr_round3, key=gsnr_round3.get) == "2"  # attacked from round index 1 on
    clean = metrics_of(run(load_config(None, [*overrides[:-1]]), tmp_path / "clean"))
    assert clean[-1]["train_loss"] != metrics_of(out)[-1]["train_loss"]

    plots = tmp_path / "plots"
    plots.mkdir()  # -o names a file in a folder that exists (a mistyped folder is one line, never created)
    assert main(["plot", str(out), "-o", str(plots / "p.png")]) == 0
    assert [p.name for p in plots.iterdir()] == ["p.png"]  # only what -o says
    assert main(["plot", str(out), "-o", str(plots / "p.png"), "--diagnostics"]) == 0
    for name in ("plots/p.png", "plots/p-gsnr.png", "plots/p-steps.png", "plots/p-entropy.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_attack_config_is_validated() -> None:
    for bad in ("[{kind: flip, clients: [0]}]", "[{kind: noise, clients: [9]}]", "[{kind: noise}]",
                "[{kind: noise, clients: [0], when: 3}]"):
        with pytest.raises(ConfigError):
            load_config(None, [*SMALL, f"attacks={bad}"])


@settings(max_examples=80, deadline=None)
@given(kind=st.sampled_from(["label-flip", "noise"]), clients=st.lists(st.integers(0, 3), min_size=1, max_size=4),
       from_round=st.integers(0, 6), shift=st.none() | st.integers(1, 3), rounds=st.integers(1, 5))
def test_an_attack_that_attacks_nothing_or_names_something_twice_is_refused(
        kind: str, clients: list[int], from_round: int, shift: int | None, rounds: int) -> None:
    """``from_round: 50`` with 2 rounds, a noise attack's ``shift`` and a client named twice were all taken silently;
    ``from_round`` counts the rounds trained clean before the attack, so it must be below ``train.rounds``."""
    attack = {"kind": kind, "clients": clients, "from_round": from_round, **({"shift": shift} if shift else {})}
    sets = ["data.dataset=digits", "model=softmax", "data.clients=4", f"train.rounds={rounds}",
            f"attacks=[{json.dumps(attack)}]"]
    if len(set(clients)) == len(clients) and not (kind == "noise" and shift) and from_round < rounds:
        load_config(None, sets)
    else:
        with pytest.raises(ConfigError):
            load_config(None, sets)


def test_experiment_refuses_a_cell_folder_of_a_different_config(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    spec = {"name": "t", "out_dir": str(tmp_path / "out"), "grid": {"run.seed": [0]},
            "base": {"data": {"dataset": "digits", "clients": 2}, "model": "softmax",
                     "train": {"rounds": 1, "batch_size": 50}, "run": {"progress": False}}}
    path.write_text(yaml.safe_dump(spec))
    run_experiment(load_experiment(path))
    with pytest.raises(ConfigError, match="different config"):
        run_experiment(load_experiment(path, ["train.lr=0.5"]))


def test_grid_variant_changes_several_keys_together_per_cell(tmp_path):
    from fedaccel.errors import ConfigError
    from fedaccel.grids.experiment import load_experiment

    path = tmp_path / "e.yaml"
    path.write_text(
        "name: e\nbase: {train: {rounds: 2, lr: 0.1}}\n"
        "grid:\n  variant: [{}, {train.lr: 0.5, train.batch_size: 10}]\n  run.seed: [0, 1]\n"
    )
    cells = load_experiment(path).cells
    assert [name for name, _ in cells] == [
        "variant=base,run.seed=0", "variant=base,run.seed=1",
        "variant=train.lr=0.5+train.batch_size=10,run.seed=0", "variant=train.lr=0.5+train.batch_size=10,run.seed=1",
    ]
    assert [(c.train.lr, c.train.batch_size, c.run.seed) for _, c in cells] == [
        (0.1, 50, 0), (0.1, 50, 1), (0.5, 10, 0), (0.5, 10, 1)]
    path.write_text("name: e\ngrid:\n  variant: [0.5]\n")
    with pytest.raises(ConfigError, match="variant"):
        load_experiment(path)


# --------------------------------------------------------------------------------------------
# Divergence (issue 21, item 5): a NaN/inf model or loss stops the run, or is recorded
# --------------------------------------------------------------------------------------------

DIVERGING = ["data.dataset=digits", "model=svm", "data.clients=4", "train.batch_size=20", "train.lr=10000",
             "run.progress=false"]


@pytest.mark.slow
def test_a_diverging_run_stops_with_one_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = sum((["--set", c] for c in [*DIVERGING, "train.rounds=6"]), [])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "fedaccel.cli", "run", *args, "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in done.stderr, done.stderr
    assert err[0].startswith("error: the run diverged at round 1:") and "learning rate too high?" in err[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["diverged"] is True and summary["diverged_round"] == 1 and summary["finished"] is False
    assert not (out / "model.pt").exists() and not (out / "checkpoint.pt").exists()  # no NaN state kept


def test_a_diverged_run_keeps_its_last_finite_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import fedaccel.runs.loop as loop
    from fedaccel.runs.checkpoint import load_checkpoint
    from fedaccel.runs.loop import Diverged

    real = loop.run_round

    def nan_in_round_3(*args, **kwargs):  # type: ignore[no-untyped-def]
        state, report = real(*args, **kwargs)
        if state.round == 3:
            state.w[0] = float("nan")
        return state, report

    monkeypatch.setattr(loop, "run_round", nan_in_round_3)
    config = load_config(None, [*SMALL, "train.rounds=6", "run.checkpoint_every=1", "eval.every=2"])
    with pytest.raises(Diverged, match="diverged at round 3: the model's parameters became NaN") as info:
        run(config, tmp_path / "run")
    assert "keeps its last finite checkpoint, of round 2" in str(info.value) and "\n" not in str(info.value)
    saved = load_checkpoint(tmp_path / "run")
    assert saved is not None and saved["state"].round == 2 and bool(torch.isfinite(saved["state"].w).all())
    rows = metrics_of(tmp_path / "run")
    assert [r["round"] for r in rows] == [0, 2, 3]  # the diverging round's row, off the eval rhythm
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["diverged_round"] == 3 and summary["final"]["round"] == 3


def strict(constant: str) -> None:
    raise ValueError(f"{constant} is not standard JSON")


def test_on_divergence_continue_runs_to_the_end_and_marks_the_run(tmp_path: Path, capsys) -> None:
    path = run(load_config(None, [*DIVERGING, "train.rounds=4", "run.on_divergence=continue"]), tmp_path / "run")
    assert "warning: the run diverged at round 1" in capsys.readouterr().err
    rows = metrics_of(path)
    assert [r["round"] for r in rows] == [0, 1, 2, 3, 4] and all(r["test_loss"] != r["test_loss"] for r in rows[1:])
    summary = json.loads((path / "summary.json").read_text(), parse_constant=strict)  # standard JSON: no bare NaN
    assert summary["finished"] is True and summary["diverged"] is True and summary["diverged_round"] == 1
    assert summary["final"]["test_loss"] is None and summary["final"]["round"] == 4  # NaN written as null
    with pytest.raises(ConfigError, match="run.on_divergence must be one of stop, continue"):
        load_config(None, ["run.on_divergence=ignore"])


def test_tables_and_curves_show_a_diverged_run_as_such(tmp_path: Path) -> None:
    from fedaccel.report.figures import _make_figure
    from fedaccel.report.reading import load_runs
    from fedaccel.report.tables import compare_table

    steady = run(load_config(None, [*SMALL, "train.rounds=3", "name=steady"]), tmp_path / "steady")
    with pytest.raises(UserError):
        run(load_config(None, [*DIVERGING, "train.rounds=3", "name=wild"]), tmp_path / "wild")
    table = compare_table([steady, tmp_path / "wild"], [0.99])
    wild = next(line for line in table.splitlines() if line.startswith("| wild"))
    calm = next(line for line in table.splitlines() if line.startswith("| steady"))
    assert "diverged at round 1" in wild and "diverged" not in calm
    figure = _make_figure(load_runs([steady, tmp_path / "wild"]), ["test_acc"])
    texts = [t.get_text() for legend in figure.legends for t in legend.get_texts()]
    assert any(t.startswith("wild") and t.endswith("(diverged)") for t in texts)
    assert not any(t.startswith("steady") and "diverged" in t for t in texts)


@settings(max_examples=100, deadline=None)
@given(uploaded=st.integers(0, 3), lost=st.lists(st.integers(0, 5), max_size=2),
       rejected=st.dictionaries(st.sampled_from("012345"), st.text(max_size=20), max_size=3))
def test_a_round_stops_the_run_only_where_clients_answered_and_every_answer_was_refused(
        uploaded: int, lost: list[int], rejected: dict[str, str]) -> None:
    """Nothing to aggregate because the server refused every answer (a method whose client code raises or sends
    NaN, on Flower) stops the run; a round with an aggregated update, or with a client lost (the network, not
    the method), or with nothing refused, goes on."""
    from fedaccel.algorithms.base import Participation
    from fedaccel.engine.round import RoundReport
    from fedaccel.runs.loop import every_answer_refused

    diag = {**({"lost": lost} if lost else {}), **({"rejected": rejected} if rejected else {})}
    report = RoundReport(1, Participation((0, 1, 2), (0, 1, 2)), 0, 0, 0, diag, uploaded)
    why = every_answer_refused(report)
    assert (why is not None) == (uploaded == 0 and not lost and bool(rejected))
    if why is not None:
        client = next(iter(rejected))
        assert why.startswith(f"the server refused the answer of every client ({len(rejected)}; client {client}: ")


REASONS = st.sampled_from(["client error: its code raised RuntimeError: a bug",
                            "client error: <class 'ray.exceptions.ActorDiedError'>: the actor died",
                            "non-finite values in update", "update norm 8.4e+39 above run.norm_ceiling = 1e+06",
                            "update norm 9.1, more than run.norm_ratio = 3 times the median"])


@settings(max_examples=100, deadline=None)
@given(runtime=st.sampled_from(["flower-simulation", "flower-deployment"]),
       rejected=st.dictionaries(st.sampled_from("0123"), REASONS, min_size=1, max_size=4))
def test_a_simulation_stops_at_a_client_whose_code_raised_and_at_once_where_nothing_bounded_was_refused(
        runtime: str, rejected: dict[str, str]) -> None:
    """A simulation's clients are this machine's code: one whose code raised stops the run (not a worker Ray found
    dead: that is no bug of the method), and a round with every answer refused stops at once, unless a norm bound the
    user set refused one (in process that update is taken; the next round may pass it). A deployment stops at
    neither: its clients are other hosts, and it waits out REFUSED_ROUNDS such rounds."""
    from fedaccel.algorithms.base import Participation
    from fedaccel.engine.round import RoundReport
    from fedaccel.runs.loop import REFUSED_ROUNDS, refused_rounds_that_stop, simulated_client_error

    config = load_config(None, [f"run.runtime={runtime}"])
    report = RoundReport(1, Participation((0, 1, 2, 3), (0, 1, 2, 3)), 0, 0, 0, {"rejected": rejected}, 0)
    raised = [c for c, why in rejected.items() if "its code raised" in why]  # in the order the server recorded
    simulated = runtime == "flower-simulation"
    error = simulated_client_error(config, report)
    assert (error is not None) == (simulated and bool(raised)), (error, rejected)
    if error is not None:
        more = f" ({len(raised) - 1} more client(s) raised too)" if len(raised) > 1 else ""
        assert error == f"client {raised[0]}'s code raised RuntimeError: a bug{more}", error
    bounded = any("run.norm_" in why for why in rejected.values())
    assert refused_rounds_that_stop(config, report) == (1 if simulated and not bounded else REFUSED_ROUNDS)


@pytest.mark.parametrize("shift, refused", [(2, True), (4, True), (3, False), (1, False)])
def test_a_label_flip_that_changes_no_target_of_the_svm_is_refused(tmp_path: Path, shift: int, refused: bool) -> None:
    """The squared SVM trains on parity: shift 2 left every attacked client honest, and its run equalled the clean
    one, unsaid. An odd shift changes every target and runs."""
    from fedaccel.runs.setup import build_setup

    config = load_config(None, [*SMALL, "model=svm", f"attacks=[{{kind: label-flip, clients: [0], shift: {shift}}}]"])
    if not refused:
        assert build_setup(config).config.attacks
        return
    with pytest.raises(ConfigError, match=rf"^attack label-flip with shift {shift} changes no target of model svm, "
                                          r"which trains on its classes' parity \(even \+1, odd -1\)"):
        build_setup(config)


@pytest.mark.parametrize("lost, loses", [
    ({"lost": [0]}, True), ({"rejected": {"0": "client error: ActorUnavailableError"}}, True),
    ({"rejected": {"0": "update norm 8.4e+39 above run.norm_ceiling = 1e+06"}}, False), ({}, False)])
def test_a_round_that_loses_clients_to_a_stop_is_not_kept(
        tmp_path: Path, lost: dict, loses: bool, capsys: pytest.CaptureFixture) -> None:
    """SIGTERM to a Flower simulation's process group ends its Ray workers mid-round: the round aggregated the one
    answer left and was checkpointed as a round, and the resume left the uninterrupted numbers. A round in which
    the stop came and an answer was lost or an error is not kept: the run continues from its last checkpoint, and
    says so. A round that lost nothing is kept, and
    so is one whose server gate refused a hostile client's values, as it does whether or not a stop comes."""
    import torch

    from fedaccel.engine.round import InProcessClients, init_state
    from fedaccel.runs.loop import run_loop
    from fedaccel.runs.setup import build_setup
    from fedaccel.runs.stopping import STOP, Interrupted, clear_stop

    class StoppedInRound3(InProcessClients):
        rounds = 0

        def train(self, contexts, w, server):  # type: ignore[no-untyped-def]
            updates, diag = super().train(contexts, w, server)
            self.rounds += 1
            if self.rounds == 3:
                STOP.set()  # the signal, mid-round
                if lost:
                    return [u for u in updates if u.client != 0], lost
            return updates, diag

    setup = build_setup(load_config(None, [*SMALL, "algorithm=fedavg", "train.rounds=6", "run.checkpoint_every=2"]))
    state = init_state(setup.algorithm, setup.federation.model.theta.clone(), setup.federation.n_clients)
    (tmp_path / "r").mkdir()
    try:
        with pytest.raises(Interrupted) as stopped:
            run_loop(setup, state, tmp_path / "r", wall=0.0, progress=False,
                     runtime=StoppedInRound3(setup.algorithm, setup.federation, state.clients))
    finally:
        clear_stop()
    kept = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)["state"]["round"]
    assert (stopped.value.round, kept) == ((2, 2) if loses else (3, 3))
    said = "round 3: 1 client(s)' answers were lost or errors while stopping, so it is not kept; the run continues"
    assert (said in capsys.readouterr().err) == loses


def test_a_checkpoint_whose_model_is_of_another_dtype_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A checkpoint's float32 model edited to float64 was taken, and the resumed numbers moved (by 9e-9)."""
    import torch

    out = tmp_path / "r"
    assert main(["run", "--no-progress", "--out", str(out), *sum((["--set", o] for o in [
        *SMALL, "train.rounds=3", "run.checkpoint_every=1"]), [])]) == 0
    (out / "summary.json").unlink()
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        saved = torch.load(out / name, weights_only=True)
        saved["state"]["w"] = saved["state"]["w"].double()
        torch.save(saved, out / name)
    capsys.readouterr()
    assert main(["run", "--resume", str(out)]) == 2
    assert "its checkpoint holds a model of float64, the config's is float32" in capsys.readouterr().err
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):  # no checkpoint at all: the rows are trained again, said
        (out / name).unlink()
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0
    assert f"{out} holds no checkpoint: the run starts again from round 0, replacing its 4 rows" in \
        capsys.readouterr().err


def test_check_resume_compares_every_row_of_either_run_and_leaves_the_callers_config(tmp_path: Path) -> None:
    """A built-in method resumes exactly (SCAFFOLD's states included); a row only one run has differs (the whole
    run's rows alone were compared); the caller's config is not changed (it set run.progress)."""
    from fedaccel.launch import _compared, check_resume

    config = load_config(None, [*SMALL, "algorithm=scaffold", "train.rounds=4", "run.progress=true"])
    found = check_resume(config, folder=tmp_path)
    assert found.same and found.after == 2 and found.model_difference == 0.0, found
    assert config.run.progress is True
    metrics = tmp_path / "stopped" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join([*lines, lines[-1].replace('"round": 4', '"round": 5')]) + "\n")
    extra = _compared(2, 4, tmp_path / "whole", tmp_path / "stopped")
    assert not extra.same and extra.first_row_difference[:2] == (5, "test_acc"), extra
    assert extra.first_row_difference[2] is None


@pytest.mark.slow
def test_check_resume_stopped_by_sigterm_in_its_resume_leaves_no_folder_and_no_process(tmp_path: Path) -> None:
    """SIGTERM while the resume ran in its own process killed check-resume at once: the child finished its
    round and a temporary folder of runs stayed, unsaid (a breaker's). It now ends the child, removes its
    folders and says to run it again (exit 130)."""
    import signal
    import time

    from fedaccel.flower.deploy import descendants

    args = [sys.executable, "-m", "fedaccel.cli", "check-resume", "--set", "data.dataset=digits", "--set",
            "model=softmax", "--set", "data.clients=2", "--set", "train.rounds=400", "--after", "1"]
    parent = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)}, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the resume's rows coming: its own process runs
            rows = list(tmp_path.glob("fedaccel-check-resume-*/stopped/metrics.jsonl"))
            if rows and rows[0].read_text().count("\n") > 5:
                break
            time.sleep(0.1)
        children = descendants({parent.pid})
        assert children, "no resume process"
        parent.send_signal(signal.SIGTERM)
        _, err = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == 130 and "check-resume stopped by SIGTERM; its runs' folders are removed" in err, err
    assert not list(tmp_path.glob("fedaccel-check-resume-*")), list(tmp_path.iterdir())
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]
