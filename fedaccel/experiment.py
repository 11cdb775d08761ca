"""Experiments: a grid of runs (algorithms x splits x seeds x hyperparameters) and their report.

An experiment file::

    name: demo
    out_dir: runs/demo            # optional; default runs/<name>
    base: {data: {split: case2}, train: {rounds: 30}}   # or a path to a config file
    grid:                         # dotted config keys -> list of values; the product is run
      algorithm: [centralized, fedavg]
      run.seed: [0, 1]
    targets: [0.80, 0.85]         # accuracies for the rounds-to-target table
    baseline: fedavg              # speed-ups are measured against this label

``run_experiment`` runs every cell into its own folder, skips cells that already finished,
resumes cells that were interrupted, then writes ``curves.png`` and ``table.md``.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedaccel.config import Config, from_dict, read_yaml, set_path
from fedaccel.errors import ConfigError

EXPERIMENT_KEYS = {"name", "out_dir", "base", "grid", "targets", "baseline", "metrics", "description"}


@dataclass
class Experiment:
    name: str
    out_dir: Path
    cells: list[tuple[str, Config]]
    targets: list[float] = field(default_factory=list)
    baseline: str | None = None
    metrics: tuple[str, ...] = ("test_acc", "test_loss", "train_loss")


@dataclass
class ExperimentResult:
    out_dir: Path
    run_dirs: list[Path]
    table: str
    plot: Path


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """Read an experiment file; ``overrides`` (key=value) apply to every cell's config."""
    path = Path(path)
    raw = read_yaml(path)
    unknown = sorted(set(raw) - EXPERIMENT_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown experiment key {unknown[0]!r}; known: {', '.join(sorted(EXPERIMENT_KEYS))}")
    base = raw.get("base") or {}
    if isinstance(base, str):
        base = read_yaml((path.parent / base) if not Path(base).is_absolute() else base)
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ConfigError(f"{path}: grid must map config keys to non-empty lists of values")
    name = str(raw.get("name") or path.stem)
    cells = []
    for values in itertools.product(*grid.values()):
        raw_cell = yaml.safe_load(yaml.safe_dump(base))  # deep copy
        for key, value in zip(grid, values):
            set_path(raw_cell, key, value)
        for item in overrides or []:
            key, _, value = item.partition("=")
            set_path(raw_cell, key.strip(), yaml.safe_load(value))
        config = from_dict(raw_cell)
        cells.append((cell_name(dict(zip(grid, values))), config))
    targets = [float(t) for t in raw.get("targets", [])]
    metrics = tuple(raw.get("metrics", Experiment.metrics))
    out_dir = Path(raw.get("out_dir") or Path("runs") / name)
    return Experiment(name, out_dir, cells, targets, raw.get("baseline"), metrics)


def cell_name(values: dict[str, Any]) -> str:
    """A folder name from the grid values, e.g. ``algorithm=fedavg,run.seed=0``."""
    if not values:
        return "run"
    text = ",".join(f"{k}={_short(v)}" for k, v in values.items())
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "_", text)


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return "-".join(str(v) for v in value.values())
    return str(value)


def _check_same_config(run_dir: Path, config: Config) -> None:
    """A cell folder from an earlier, different grid must not pass for this one."""
    stored_path = run_dir / "config.yaml"
    if not stored_path.is_file():
        return
    stored = yaml.safe_load(stored_path.read_text())
    wanted = config.to_dict()
    for c in (stored, wanted):
        c.get("run", {}).pop("progress", None)
    if stored != wanted:
        raise ConfigError(
            f"{run_dir} holds a run of a different config; delete it or give the experiment another out_dir"
        )


def run_experiment(experiment: Experiment, *, progress: bool | None = None) -> ExperimentResult:
    """Run (or resume) every cell, then write the curves and the rounds-to-target table."""
    from fedaccel.results import compare_table, plot_curves
    from fedaccel.runner import resume, run

    experiment.out_dir.mkdir(parents=True, exist_ok=True)
    run_dirs = []
    for k, (name, config) in enumerate(experiment.cells, start=1):
        run_dir = experiment.out_dir / name
        _check_same_config(run_dir, config)
        if (run_dir / "summary.json").is_file():
            print(f"[{k}/{len(experiment.cells)}] {name}: finished earlier, skipped", flush=True)
        elif (run_dir / "config.yaml").is_file():
            print(f"[{k}/{len(experiment.cells)}] {name}: resuming", flush=True)
            resume(run_dir, progress=progress)
        else:
            print(f"[{k}/{len(experiment.cells)}] {name}", flush=True)
            run(config, run_dir, progress=progress)
        run_dirs.append(run_dir)
    targets = experiment.targets or [0.5]
    table = compare_table(run_dirs, targets, baseline=experiment.baseline)
    (experiment.out_dir / "table.md").write_text(table + "\n")
    plot = plot_curves(run_dirs, experiment.out_dir / "curves.png", metrics=experiment.metrics, title=experiment.name)
    return ExperimentResult(experiment.out_dir, run_dirs, table, plot)
