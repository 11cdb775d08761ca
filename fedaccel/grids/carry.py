"""A grid's finished cells carried to another machine as one packed file, and back into a grid folder.

A long grid may outlive the machine it runs on (a session that ends, a job with a time limit, a machine that
starts bare each time). Its finished cells are what must not be lost: :func:`pack_finished` writes them to one
``.jsonl.xz`` (the packed format of :mod:`fedaccel.reproductions.snapshot`, a few kB a run, fit to commit), and
:func:`restore_finished` writes them back into the grid's folder as finished cells, which the grid then skips
(``fedaccel pack`` and ``fedaccel experiment --from``). Runs cut short are not carried: they run again.

The file may come from anyone, so it is read within the packed format's bounds before anything is written, and
each record must be a cell of this grid with this grid's config; each cell's folder appears whole or not at all
(written aside, then renamed into place), and a cell whose folder is already there is kept as it is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fedaccel.errors import UserError, shown
from fedaccel.reproductions.snapshot import SUFFIX, pack, read_packed, write_folder

if TYPE_CHECKING:
    from fedaccel.grids.experiment import Experiment
    from fedaccel.report.reading import Run

SUMMARY = "summary.json"


def finished_cells(folder: Path) -> list[Path]:
    """The cell folders of a grid folder whose run finished (they hold ``summary.json``), by name."""
    if not folder.is_dir():
        raise UserError(f"{folder}: no such grid folder")
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and (p / SUMMARY).is_file())


def pack_finished(folder: Path, out: Path) -> int:
    """Pack the finished cells of the grid folder ``folder`` into ``out`` (``.jsonl.xz``); returns how many."""
    if not out.name.endswith(SUFFIX):
        raise UserError(f"{out}: a packed grid's name ends in {SUFFIX}")
    cells = finished_cells(folder)
    if not cells:
        raise UserError(f"{folder}: no finished cell (none holds {SUMMARY}); nothing packed")
    pack(cells, out)
    return len(cells)


@dataclass(frozen=True)
class Restored:
    """What :func:`restore_finished` did: cells written, cells kept (their folder was there), runs not finished."""

    written: int
    kept: int
    unfinished: int

    def line(self, packed: Path) -> str:
        return (f"from {packed}: {self.written} finished cell(s) written, {self.kept} kept as they were (their "
                f"folders were there), {self.unfinished} not finished (they run again)")


def restore_finished(experiment: Experiment, packed: Path) -> Restored:
    """Write the finished runs stored in ``packed`` into ``experiment``'s folder as finished cells."""
    from fedaccel.grids.experiment import check_grid_folder, same_config

    cells = dict(experiment.cells)
    out = experiment.out_dir
    runs = read_packed(packed, out)  # bounds, types and rows checked before anything is written
    for run in runs:
        name = run.path.name
        if name not in cells:
            raise UserError(f"{packed}: cell {shown(name)} is not a cell of {experiment.name}; nothing written")
        if not same_config(run.config, cells[name]):
            raise UserError(f"{packed}: cell {shown(name)} ran with another config than {experiment.name}'s; "
                            "nothing written")
    check_grid_folder(experiment)
    out.mkdir(parents=True, exist_ok=True)
    written = kept = unfinished = 0
    for run in runs:
        rounds = cells[run.path.name].train.rounds
        done = isinstance(run.summary, dict) or bool(run.metrics and run.metrics[-1].get("round") == rounds)
        if not done:
            unfinished += 1
        elif os.path.lexists(run.path):
            kept += 1
        else:
            _write_cell(run, packed, rounds)
            written += 1
    return Restored(written, kept, unfinished)


def _write_cell(run: Run, packed: Path, rounds: int) -> None:
    """The cell's folder, written aside in the grid folder and renamed into place: whole or absent."""
    with tempfile.TemporaryDirectory(prefix=".restoring-", dir=run.path.parent) as scratch:
        aside = write_folder(dataclasses.replace(run, path=Path(scratch) / run.path.name))  # a diverged run's summary too
        if not (aside / SUMMARY).is_file():
            last = {k: v for k, v in run.metrics[-1].items() if k != "diag"}
            summary = {"finished": True, "rounds": rounds, "final": last, "restored_from": packed.name}
            (aside / SUMMARY).write_text(json.dumps(summary, indent=1), encoding="utf-8")
        for file in aside.iterdir():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
        os.rename(aside, run.path)  # fails where a folder appeared meanwhile (not empty): nothing replaced
