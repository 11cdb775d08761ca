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

from dataclasses import dataclass
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


def run(config: Config, run_dir: str | Path | None = None, *, progress: bool | None = None,
        stop_after: int | None = None) -> Path:
    """Run ``config`` into ``run_dir`` (default: a new folder under ``run.out_dir``); ``stop_after``: stop after
    that round as a signal would (in process and stacked: ``check_resume``)."""
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
        run_loop(setup, state, path, wall=0.0, progress=progress, stop_after=stop_after)
    return path


@dataclass(frozen=True)
class ResumeCheck:
    """:func:`check_resume`'s finding: the round the run stopped after, the largest difference of the final
    models, and the first metrics value that differs, as (round, column, whole run's, resumed run's) or None."""

    after: int
    rounds: int
    model_difference: float
    first_row_difference: tuple[int, str, float, float] | None

    @property
    def same(self) -> bool:
        return self.model_difference <= RESUME_TOLERANCE and self.first_row_difference is None


RESUME_TOLERANCE = 1e-6  # a resume in process gives the same bits; a float32 sum in another order, ~1e-7
COMPARED = ("test_acc", "test_loss", "train_acc", "train_loss", "local_steps")


def check_resume(config: Config, after: int | None = None, folder: Path | None = None) -> ResumeCheck:
    """``config`` run twice: whole, and stopped after round ``after`` (default: half its rounds) as a signal stops
    it, then resumed by ``fedaccel run --resume`` in a new process. A method that keeps state outside the states
    its stages return (a closure, an attribute of a part, a module's global, a state changed in place after it was
    returned) loses it at the stop, and the two differ: the check a new method's author runs before a grid (and
    before Flower, whose clients keep nothing but those states). In process and stacked; ``folder``: where the two
    runs go (default: a temporary folder, removed)."""
    import subprocess
    import sys
    import tempfile

    import torch

    from fedaccel.runs.rows import read_rows
    from fedaccel.runs.stopping import Interrupted

    if config.run.runtime not in LOCAL_RUNTIMES:
        raise UserError(f"check-resume runs in process or stacked, not run.runtime {config.run.runtime}: a "
                        "simulation resumes from the same checkpoints and client states (--set run.runtime=in-process)")
    rounds = config.train.rounds
    after = max(1, rounds // 2) if after is None else after
    if not 1 <= after < rounds:
        raise UserError(f"--after must be a round from 1 to {rounds - 1} (train.rounds = {rounds}), got {after}")
    config.run.progress = False
    with tempfile.TemporaryDirectory(prefix="fedaccel-check-resume-") as scratch:
        where = Path(folder) if folder is not None else Path(scratch)
        whole, stopped = run(config, where / "whole"), where / "stopped"
        try:
            run(config, stopped, stop_after=after)
        except Interrupted:
            pass
        resumed = subprocess.run([sys.executable, "-m", "fedaccel.cli", "run", "--resume", str(stopped)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if resumed.returncode:
            said = (resumed.stderr.strip().splitlines() or ["no words"])[-1]
            raise UserError(f"check-resume: the resume of the run stopped after round {after} failed: {said}")
        models = [torch.load(p / "model.pt", weights_only=True)["w"] for p in (whole, stopped)]
        rows = [{r["round"]: r for r in read_rows(p / METRICS)[0]} for p in (whole, stopped)]
    first = next(((k, c, a[c], b.get(c)) for k, a in rows[0].items() for c in COMPARED
                  if c in a and (b := rows[1].get(k, {})).get(c) != a[c]
                  and not (isinstance(b.get(c), float) and abs(b[c] - a[c]) <= RESUME_TOLERANCE)), None)
    return ResumeCheck(after, rounds, float((models[0] - models[1]).abs().max()), first)


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
