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

import signal
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
    that round as a signal would (in process and stacked: ``check_resume``), raising
    ``fedaccel.runs.stopping.Interrupted`` (its ``run_dir``: the folder, which ``resume`` continues)."""
    if not isinstance(config, Config):  # a path or a mapping: AttributeError 'str' object has no attribute 'run'
        raise UserError(f"run takes a Config, got {type(config).__name__}: fedaccel.load_config(PATH) makes one")
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
    """``config`` run twice: stopped after round ``after`` (default: half its rounds) as a signal stops it, then
    resumed by ``fedaccel run --resume`` in a new process; and whole, in another. A method that keeps state outside
    the states its stages return (a closure, an attribute of a part, a module's global, a state changed in place
    after it was returned) loses it at the stop, and the two differ: the check a new method's author runs before a
    grid (and before Flower, whose clients keep nothing but those states). In process and stacked, on the config's
    device (a GPU's nondeterministic kernels may differ by more than the tolerance: ``run.device=cpu``);
    ``folder``: where the two runs go (default: a temporary folder, removed)."""
    import copy
    import os
    import subprocess
    import sys
    import tempfile
    import threading

    from fedaccel.runs.stopping import Interrupted

    if config.run.runtime not in LOCAL_RUNTIMES:
        raise UserError(f"check-resume runs in process or stacked, not run.runtime {config.run.runtime}: a "
                        "simulation resumes from the same checkpoints and client states (--set run.runtime=in-process)")
    rounds = config.train.rounds
    if rounds < 2:
        raise UserError(f"check-resume stops a run after a round and resumes it: it needs train.rounds >= 2, "
                        f"got {rounds}")
    after = max(1, rounds // 2) if after is None else after
    if not 1 <= after < rounds:
        raise UserError(f"--after must be a round from 1 to {rounds - 1} (train.rounds = {rounds}), got {after}")
    config = copy.deepcopy(config)
    config.run.progress = False
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # a plugin this process finds

    def fedaccel(*args: str, what: str) -> None:
        child = subprocess.Popen([sys.executable, "-m", "fedaccel.cli", *args], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True, env=env)
        try:
            _, err = child.communicate()
        except BaseException:  # a stop of this process: the child ends before the folders are removed
            child.terminate()
            child.wait()
            raise
        if child.returncode in (130, -signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGTERM):
            raise CheckStopped("a signal")
        if child.returncode:
            raise UserError(f"check-resume: {what} failed: {_cause(err)}")

    previous = signal.signal(signal.SIGTERM, _stopped) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        with tempfile.TemporaryDirectory(prefix="fedaccel-check-resume-") as scratch:
            where = Path(folder) if folder is not None else Path(scratch)
            stopped, whole = where / "stopped", where / "whole"
            try:
                run(config, stopped, stop_after=after)  # first: this process has run nothing of the method yet
            except Interrupted as stop:
                if stop.round != after or stop.reason != "a stop request":  # a signal of the user's
                    raise CheckStopped(stop.reason) from None
            except CheckStopped:
                raise
            except Exception as exc:  # noqa: BLE001 - the method's own error, a full disk: not "the numbers differ"
                raise UserError(f"check-resume: the run to stop after round {after} failed: {_cause(str(exc), exc)}"
                                ) from exc
            fedaccel("run", "--resume", str(stopped), what=f"the resume of the run stopped after round {after}")
            fedaccel("run", str(stopped / "config.yaml"), "--out", str(whole), what="the whole run")
            return _compared(after, rounds, whole, stopped)
    except KeyboardInterrupt:
        raise CheckStopped("SIGINT") from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class CheckStopped(UserError):
    """check-resume stopped by a signal: its runs' folders are removed, and it starts again when run again."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"check-resume stopped by {reason}; its runs' folders are removed: run it again")


def _stopped(signum: int, _frame: object) -> None:
    raise CheckStopped(signal.Signals(signum).name)


def _cause(text: str, exc: BaseException | None = None) -> str:
    """An error's own words without advice on a folder check-resume removes (``fedaccel run --resume ...``)."""
    line = (text.strip().splitlines() or [type(exc).__name__ if exc is not None else "no words"])[-1]
    line = line.removeprefix("error: ")
    if exc is not None and not isinstance(exc, UserError):
        line = f"{type(exc).__name__}: {line}"
    return line.split("; `fedaccel ")[0].split(" `fedaccel ")[0]


def _compared(after: int, rounds: int, whole: Path, resumed: Path) -> ResumeCheck:
    """The :class:`ResumeCheck` of two finished run folders: their final models, and every metrics row of
    either (a row only one has differs too); NaN equals NaN (a run that diverged the same way)."""
    import math

    import torch

    from fedaccel.runs.rows import read_rows

    models = [torch.load(p / "model.pt", weights_only=True)["w"] for p in (whole, resumed)]
    both_nan = models[0].isnan() & models[1].isnan()
    difference = float(torch.where(both_nan, 0.0, (models[0] - models[1]).abs()).max())
    rows = [{r["round"]: r for r in read_rows(p / METRICS)[0]} for p in (whole, resumed)]

    def same(a: object, b: object) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= RESUME_TOLERANCE
        return a == b

    first = next(((k, c, rows[0].get(k, {}).get(c), rows[1].get(k, {}).get(c))
                  for k in sorted(set(rows[0]) | set(rows[1])) for c in COMPARED
                  if not same(rows[0].get(k, {}).get(c), rows[1].get(k, {}).get(c))), None)
    return ResumeCheck(after, rounds, difference, first)


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
