"""Runs: a config in, a run folder out, on the runtime the config names.

``run`` and ``resume`` are the dispatcher above every runtime: in process and stacked
(:func:`fedaccel.runs.loop.run_loop`) or Flower's simulation engine
(:mod:`fedaccel.flower.simulation`); a deployment starts with ``fedaccel deploy``
(:mod:`fedaccel.flower.deploy`). They hold the folder's lock (:mod:`fedaccel.runs.lock`) while
they write: a second writer of the same folder stops with one line naming the first one's PID.
``resume(run_dir)`` continues a killed run from its checkpoint (:mod:`fedaccel.runs.checkpoint`)
and reaches the same numbers as an uninterrupted run.
"""

from __future__ import annotations

from pathlib import Path

from fedaccel.disk import refuse_planted_links
from fedaccel.engine.device import check_device_name
from fedaccel.engine.round import init_state
from fedaccel.errors import UserError
from fedaccel.runs.checkpoint import restore_state
from fedaccel.runs.config import (
    LOCAL_RUNTIMES,
    Config,
    dump_config,
    read_run_config,
    warn_if_fedavg_in_disguise,
)
from fedaccel.runs.folder import METRICS, RUN_FILES, check_out_folder, new_run_dir, removed_on_failed_start
from fedaccel.runs.finished import said_finished
from fedaccel.runs.lock import lock_run_dir
from fedaccel.runs.loop import run_loop
from fedaccel.runs.setup import build_setup


def run(config: Config, run_dir: str | Path | None = None, *, progress: bool | None = None) -> Path:
    """Run ``config`` into ``run_dir`` (default: a new folder under ``run.out_dir``)."""
    path = Path(run_dir) if run_dir is not None else new_run_dir(config)
    check_out_folder(path)
    warn_if_fedavg_in_disguise(config)
    before = set(path.iterdir()) if path.is_dir() else None
    with lock_run_dir(path):  # before anything is read or written: one writer per folder
        if (path / METRICS).exists():
            raise UserError(f"{path} already holds a run; use `fedaccel run --resume {path}` or another folder")
        with removed_on_failed_start(path, before):
            dump_config(config, path / "config.yaml")
            if config.run.runtime not in LOCAL_RUNTIMES:
                return _run_on_flower(config, path, progress)
            setup = build_setup(config)  # data or split errors surface here: nothing is left behind
        state = init_state(setup.algorithm, setup.federation.model.theta.clone(), setup.federation.n_clients)
        run_loop(setup, state, path, wall=0.0, progress=progress)
    return path


def _run_on_flower(config: Config, path: Path, progress: bool | None) -> Path:
    if config.run.runtime == "flower-simulation":
        from fedaccel.flower.simulation import simulate

        return simulate(config, path, progress=progress)
    raise UserError("run.runtime flower-deployment runs with `fedaccel deploy` (SuperLink + SuperNodes)")


def resume(run_dir: str | Path, *, progress: bool | None = None, device: str | None = None) -> Path:
    """Continue a run from its last checkpoint (or from scratch if it never wrote one); ``device``
    replaces its ``run.device`` (e.g. a run started on a GPU continues on a CPU)."""
    path = Path(run_dir)
    refuse_planted_links(path, RUN_FILES)  # a folder from someone else: before anything is read or written
    if not (path / "config.yaml").is_file():
        what = " but an experiment's folder: `fedaccel experiment` with its file resumes every cell" if (
            path / "experiment.yaml").is_file() else ""
        raise UserError(f"{path} is not a run folder (no config.yaml){what}")
    config = read_run_config(path / "config.yaml")
    if device is not None:
        check_device_name(device)
        config.run.device = device
    if said_finished(path, config):
        return path
    with lock_run_dir(path):  # before restore_state cuts the metrics back
        if config.run.runtime not in LOCAL_RUNTIMES:
            return _run_on_flower(config, path, progress)
        setup = build_setup(config)
        state, wall, parts = restore_state(setup, path)
        run_loop(setup, state, path, wall=wall, progress=progress, parts=parts)
    return path
