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
    try:  # through the current defaults: a key added since the run was made is not a difference
        stored = from_dict(yaml.safe_load(stored_path.read_text())).to_dict()
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
                   stack_seeds: bool = False) -> ExperimentResult:
    """Run (or resume) every cell, then write the curves and the rounds-to-target table.

    ``workers`` > 1 runs that many cells at once, each in its own process with one torch
    thread (the small models of FL experiments gain more from parallel cells than from
    intra-op threads); the numbers are those of the cell's own seed either way.
    ``stack_seeds`` runs the cells that differ only in ``run.seed`` as one stacked computation
    (:class:`~fedaccel.engine.stacked.SeedStack`): every seed's own run folder and numbers, the
    client steps of all seeds batched together.
    """
    from fedaccel.results import compare_table, plot_curves

    experiment.out_dir.mkdir(parents=True, exist_ok=True)
    todo: list[tuple[int, str, Config, Path]] = []
    run_dirs = []
    for k, (name, config) in enumerate(experiment.cells, start=1):
        run_dir = experiment.out_dir / name
        _check_same_config(run_dir, config)
        run_dirs.append(run_dir)
        if (run_dir / "summary.json").is_file():
            print(f"[{k}/{len(experiment.cells)}] {name}: finished earlier, skipped", flush=True)
        else:
            todo.append((k, name, config, run_dir))
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    if stack_seeds and workers > 1:
        raise ConfigError("--stack-seeds trains a cell's seeds together in one process; use it without -j")
    if stack_seeds:
        for group in _seed_groups(todo):
            _run_seed_group(group, len(experiment.cells))
    elif workers == 1 or len(todo) <= 1:
        for k, name, config, run_dir in todo:
            print(f"[{k}/{len(experiment.cells)}] {name}{_verb(run_dir)}", flush=True)
            _run_cell(config, run_dir, progress)
    else:
        _run_cells_in_parallel(todo, len(experiment.cells), workers)
    targets = experiment.targets or [0.5]
    table = compare_table(run_dirs, targets, baseline=experiment.baseline)
    (experiment.out_dir / "table.md").write_text(table + "\n")
    plot = plot_curves(run_dirs, experiment.out_dir / "curves.png", metrics=experiment.metrics, title=experiment.name)
    return ExperimentResult(experiment.out_dir, run_dirs, table, plot)


def _verb(run_dir: Path) -> str:
    return ": resuming" if (run_dir / "config.yaml").is_file() else ""


def _run_cell(config: Config, run_dir: Path, progress: bool | None, threads: int | None = None) -> Path:
    """Run one cell, or resume it when an earlier, interrupted run left its folder."""
    from fedaccel.runner import resume, run

    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    if (run_dir / "config.yaml").is_file():
        return resume(run_dir, progress=progress)
    return run(config, run_dir, progress=progress)


def _seed_groups(todo: list[tuple[int, str, Config, Path]]) -> list[list[tuple[int, str, Config, Path]]]:
    """The cells to run, grouped by their config without ``run.seed`` (in order of first appearance)."""
    groups: dict[str, list[tuple[int, str, Config, Path]]] = {}
    for cell in todo:
        key = cell[2].to_dict()
        key["run"] = {k: v for k, v in key["run"].items() if k != "seed"}
        groups.setdefault(yaml.safe_dump(key, sort_keys=True), []).append(cell)
    return list(groups.values())


def _run_seed_group(group: list[tuple[int, str, Config, Path]], total: int) -> None:
    """The group's runs in threads of one process, their client steps trained as one stacked
    computation every round; a failing run stops the experiment with its own error."""
    import threading

    from fedaccel.engine.stacked import SeedStack, in_seed_stack

    stack = SeedStack(len(group), stack_size=group[0][2].run.stack_size)
    errors: list[BaseException] = []
    threads = []
    for k, name, config, run_dir in group:
        print(f"[{k}/{total}] {name}{_verb(run_dir)} (seeds stacked: {len(group)})", flush=True)

        def one(config: Config = config, run_dir: Path = run_dir) -> None:
            try:
                _run_cell(config, run_dir, False)
            except BaseException as exc:
                errors.append(exc)

        threads.append(threading.Thread(target=in_seed_stack(stack, one), name=name))
    from fedaccel.stopping import clear_stop, stop_signals

    with stop_signals():  # SIGINT/SIGTERM: every seed finishes its round, checkpoints and stops
        for thread in threads:
            thread.start()
        while alive := [thread for thread in threads if thread.is_alive()]:
            alive[0].join(0.1)  # short waits: the signal handlers run in this thread
    clear_stop()  # the seeds' runs leave a stop request to this, their owner
    if errors:
        raise errors[0]


def _run_cells_in_parallel(todo: list[tuple[int, str, Config, Path]], total: int, workers: int) -> None:
    """Cells in ``workers`` processes; a line per cell as it starts and as it ends, no bars."""
    import multiprocessing
    import time
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")  # no forked torch thread pools
    with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context) as pool:
        pending = {}
        for k, name, config, run_dir in todo:
            print(f"[{k}/{total}] {name}{_verb(run_dir)} (queued)", flush=True)
            pending[pool.submit(_run_cell, config, run_dir, False, 1)] = (k, name)
        done_count = 0
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                k, name = pending.pop(future)
                if future.exception() is not None:  # a failed cell stops the experiment with its own error
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise future.exception()  # type: ignore[misc]
                done_count += 1
                elapsed = time.perf_counter() - started
                eta = elapsed / done_count * (len(todo) - done_count)
                print(f"[{k}/{total}] {name}: done ({done_count}/{len(todo)} cells, "
                      f"{elapsed / 60:.1f} min, about {eta / 60:.1f} min left)", flush=True)
