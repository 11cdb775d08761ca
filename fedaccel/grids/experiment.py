"""Experiments: a grid of runs (algorithms x splits x seeds x hyperparameters) and their report.

An experiment file::

    name: demo
    out_dir: runs/demo            # optional; default runs/<name>
    base: {data: {split: case2}, train: {rounds: 30}}   # or a path to a config file
    grid:                         # dotted config keys -> list of values; the product is run
      algorithm: [centralized, fedavg]
      run.seed: [0, 1]
      variant:                    # several keys changed together, one list entry per cell
        - {}                      #   (the base as it is)
        - {train.batch_size: 10, train.lr: 0.001}
    targets: [0.80, 0.85]         # accuracies for the rounds-to-target table
    baseline: fedavg              # speed-ups are measured against this label

``run_experiment`` runs every cell into its own folder, skips cells that already finished,
resumes cells that were interrupted, then writes ``curves.png`` and ``table.md``.
"""

from __future__ import annotations

import copy
import itertools
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fedaccel.errors import ConfigError, listed, nearest_names, shown
from fedaccel.grids.cell import run_cell, verb
from fedaccel.grids.pool import run_cells_in_parallel
from fedaccel.runs.config import Config, check_name, from_dict, parse_value, read_yaml, set_path
from fedaccel.runs.files import write_atomic

if TYPE_CHECKING:
    from fedaccel.grids.progress import GridProgress
    from fedaccel.grids.ray_tasks import RayOptions


EXPERIMENT_KEYS = {"name", "out_dir", "base", "grid", "targets", "baseline", "metrics", "description",
                   "figures_by", "diagnostics", "claims", "tuning_seeds"}
COPY = "experiment.yaml"  # the experiment file, copied beside its runs (what `fedaccel judge GRID_DIR` reads)


@dataclass
class Experiment:
    name: str
    out_dir: Path
    cells: list[tuple[str, Config]]
    targets: list[float] = field(default_factory=list)
    baseline: str | None = None
    metrics: tuple[str, ...] = ("test_acc", "test_loss", "train_loss")
    figures_by: str | None = None  # reports: one curves figure per value of this config key
    diagnostics: dict[str, Any] | None = None  # reports: diagnostics of the cells with these values (default: first seed)
    claims: list[Any] = field(default_factory=list)  # fedaccel judge: Claim rows (fedaccel.report.judge)
    tuning_seeds: tuple[Any, ...] = ()  # seeds that only pick a claim's best value, never judged
    source: Path | None = None  # the experiment file

    def cell(self, name: str) -> Config:
        """The config of the cell (folder) ``name``; an unknown name is one line with the nearest cell names."""
        names = [cell for cell, _ in self.cells]
        if name not in names:
            raise ConfigError(f"experiment {self.name!r} has no cell {name!r}; nearest: "
                              f"{', '.join(nearest_names(name, names))} (of {len(names)} cells)")
        return self.cells[names.index(name)][1]


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
    unknown = sorted(set(raw) - EXPERIMENT_KEYS, key=str)
    if unknown:
        raise ConfigError(f"{path}: unknown experiment key {shown(unknown[0])}; known: {listed(sorted(EXPERIMENT_KEYS), near=unknown[0])}")
    base = raw.get("base") or {}
    if isinstance(base, str):
        base = read_yaml((path.parent / base) if not Path(base).is_absolute() else base)
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict) or not all(isinstance(k, str) and isinstance(v, list) and v for k, v in grid.items()):
        raise ConfigError(f"{path}: grid must map config keys to non-empty lists of values")
    name = str(raw.get("name") or path.stem)
    check_name(name, f"{path}: name")  # the folder under runs/ when out_dir is not given
    check_cell_count(path, grid)
    cells = []
    overridden = [(key.strip(), parse_value(key, value)) for key, _, value in (o.partition("=") for o in overrides or [])]
    for values in itertools.product(*grid.values()):
        raw_cell = copy.deepcopy(base)  # plain YAML data (a round trip through YAML took 3/4 of a big grid's load)
        for key, value in zip(grid, values):
            for dotted, v in _variant(path, value).items() if key == VARIANT else [(key, value)]:
                set_path(raw_cell, dotted, copy.deepcopy(v))
        for key, value in overridden:
            set_path(raw_cell, key, copy.deepcopy(value))
        config = from_dict(raw_cell)
        cells.append((cell_name(dict(zip(grid, values))), config))
    targets = [float(t) for t in raw.get("targets", [])]
    metrics = tuple(raw.get("metrics", Experiment.metrics))
    out_dir = Path(raw.get("out_dir") or Path("runs") / name)
    diagnostics = raw.get("diagnostics")
    if diagnostics is not None and not isinstance(diagnostics, dict):
        raise ConfigError(f"{path}: diagnostics must map config keys to values (the cells whose diagnostics are drawn)")
    figures_by = raw.get("figures_by")
    from fedaccel.report.judge import claims_from_file

    claims, tuning, _ = claims_from_file(path)
    return Experiment(name, out_dir, cells, targets, raw.get("baseline"), metrics,
                      str(figures_by) if figures_by else None, diagnostics, claims, tuning, path)


MAX_CELLS = 100_000  # cells a grid may have; FEDACCEL_MAX_CELLS sets another limit (the user's, never the file's)


def check_cell_count(path: Path, grid: dict[str, list[Any]]) -> None:
    """Refuse a grid of more cells than the limit before a single one is built: the count is the
    product of the lists' lengths (a 528-byte file of 5 keys x 100 values is 10^10 cells). The
    limit is ``FEDACCEL_MAX_CELLS`` if set, else :data:`MAX_CELLS`; an experiment file cannot raise it."""
    import math
    import os

    setting = os.environ.get("FEDACCEL_MAX_CELLS", "").strip()
    if setting and not setting.isdigit():
        raise ConfigError(f"FEDACCEL_MAX_CELLS must be a whole number of cells, not {shown(setting, 40)}")
    limit = int(setting) if setting else MAX_CELLS
    cells = math.prod(len(values) for values in grid.values())
    if cells > limit:
        sizes = " x ".join(f"{len(v):,}" for v in grid.values())
        raise ConfigError(f"{path}: the grid has {cells:,} cells ({sizes}), more than {limit:,}: split it into "
                          "smaller experiments, or set FEDACCEL_MAX_CELLS if you mean to run that many")


VARIANT = "variant"  # a grid key whose values are mappings of config keys, changed together


def _variant(path: Path, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: each entry of grid.{VARIANT} must map config keys to values, not {shown(value)}")
    return value


def cell_name(values: dict[str, Any]) -> str:
    """A folder name from the grid values, e.g. ``algorithm=fedavg,run.seed=0``."""
    if not values:
        return "run"
    text = ",".join(f"{k}={_variant_name(v) if k == VARIANT else short_value(v)}" for k, v in values.items())
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "_", text)


def _variant_name(value: dict[str, Any]) -> str:
    return "+".join(f"{k}={short_value(v)}" for k, v in value.items()) or "base"


def short_value(value: Any) -> str:
    if isinstance(value, dict):
        return "-".join(str(v) for v in value.values())
    return str(value)


def check_same_config(run_dir: Path, config: Config) -> None:
    """A cell folder from an earlier, different grid must not pass for this one."""
    stored_path = run_dir / "config.yaml"
    if not stored_path.is_file():
        return
    try:  # through the current defaults: a key added since the run was made is not a difference
        stored = from_dict(read_yaml(stored_path)).to_dict()
    except ConfigError:
        stored = {}
    wanted = config.to_dict()
    for c in (stored, wanted):
        c.get("run", {}).pop("progress", None)
    if stored != wanted:
        raise ConfigError(
            f"{run_dir} holds a run of a different config; delete it or give the experiment another out_dir"
        )


def run_experiment(experiment: Experiment, *, progress: bool | None = None, workers: int = 1,
                   stack_seeds: bool = False, ray: RayOptions | None = None,
                   report: GridProgress | None = None) -> ExperimentResult:
    """Run (or resume) every cell, then write the curves and the rounds-to-target table.

    ``workers`` > 1 runs that many cells at once, each in its own process with one torch
    thread (the small models of FL experiments gain more from parallel cells than from
    intra-op threads); ``ray`` runs each cell as a task on a Ray cluster instead
    (:mod:`fedaccel.grids.ray_tasks`). The numbers are those of the cell's own seed either way.
    ``stack_seeds`` runs the cells that differ only in ``run.seed`` as one stacked computation
    (:class:`~fedaccel.engine.stacked.SeedStack`): every seed's own run folder and numbers, the
    client steps of all seeds batched together.
    ``report`` shows where the grid is (default: a :class:`GridProgress` over this grid).
    """
    from fedaccel.grids.progress import GridProgress
    from fedaccel.report.figures import plot_curves
    from fedaccel.report.tables import compare_table

    experiment.out_dir.mkdir(parents=True, exist_ok=True)
    copy = experiment.out_dir / COPY
    if experiment.source is not None and experiment.source.is_file() and not (copy.exists() and copy.samefile(experiment.source)):
        write_atomic(copy, experiment.source.read_bytes())
    todo: list[tuple[int, str, Config, Path]] = []
    run_dirs, skipped = [], []
    for k, (name, config) in enumerate(experiment.cells, start=1):
        run_dir = experiment.out_dir / name
        check_same_config(run_dir, config)
        run_dirs.append(run_dir)
        if (run_dir / "summary.json").is_file():
            skipped.append((k, name))
        else:
            todo.append((k, name, config, run_dir))
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    if stack_seeds and (workers > 1 or ray is not None):
        raise ConfigError("--stack-seeds trains a cell's seeds together in one process; use it without -j or --ray")
    own_report = report is None
    report = report or GridProgress(len(todo), bars=False if progress is False else None)
    report.experiment(experiment.name, len(experiment.cells))
    for k, name in skipped:
        report.skip(k, name)
    try:
        if ray is not None:
            from fedaccel.grids.ray_tasks import run_cells_on_ray

            run_cells_on_ray(todo, ray, report)
        elif stack_seeds:
            for group in _seed_groups(todo):
                _run_seed_group(group, report)
        elif workers == 1 or len(todo) <= 1:
            for k, name, config, run_dir in todo:
                report.start(k, name, run_dir, config.train.rounds, verb=verb(run_dir), follow=False)
                run_cell(config, run_dir, report.cell_bar(name, progress))
                report.end(k, name)
        else:
            run_cells_in_parallel(todo, workers, report)
    finally:
        if own_report:
            report.close()
    targets = experiment.targets or [0.5]
    table = compare_table(run_dirs, targets, baseline=experiment.baseline)
    write_atomic(experiment.out_dir / "table.md", table + "\n")
    plot = plot_curves(run_dirs, experiment.out_dir / "curves.png", metrics=experiment.metrics, title=experiment.name,
                       targets=experiment.targets)
    return ExperimentResult(experiment.out_dir, run_dirs, table, plot)


def _seed_groups(todo: list[tuple[int, str, Config, Path]]) -> list[list[tuple[int, str, Config, Path]]]:
    """The cells to run, grouped by their config without ``run.seed`` (in order of first appearance)."""
    groups: dict[str, list[tuple[int, str, Config, Path]]] = {}
    for cell in todo:
        key = cell[2].to_dict()
        key["run"] = {k: v for k, v in key["run"].items() if k != "seed"}
        groups.setdefault(yaml.safe_dump(key, sort_keys=True), []).append(cell)
    return list(groups.values())


def _run_seed_group(group: list[tuple[int, str, Config, Path]], report: GridProgress) -> None:
    """The group's runs in threads of one process, their client steps trained as one stacked
    computation every round; a failing run stops the experiment with its own error."""
    from fedaccel.engine.stacked import SeedStack, in_seed_stack

    stack = SeedStack(len(group), stack_size=group[0][2].run.stack_size)
    errors: list[BaseException] = []
    threads = []
    for k, name, config, run_dir in group:
        report.start(k, name, run_dir, config.train.rounds, verb=f"{verb(run_dir)} (seeds stacked: {len(group)})",
                     follow=False)

        def one(config: Config = config, run_dir: Path = run_dir) -> None:
            try:
                run_cell(config, run_dir, False)
            except BaseException as exc:
                errors.append(exc)

        threads.append(threading.Thread(target=in_seed_stack(stack, one), name=name))
    from fedaccel.runs.stopping import clear_stop, stop_signals

    with stop_signals():  # SIGINT/SIGTERM: every seed finishes its round, checkpoints and stops
        for thread in threads:
            thread.start()
        while alive := [thread for thread in threads if thread.is_alive()]:
            alive[0].join(0.1)  # short waits: the signal handlers run in this thread
    clear_stop()  # the seeds' runs leave a stop request to this, their owner
    if errors:
        raise errors[0]
    for k, name, _, _ in group:
        report.end(k, name)
