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

import copy
import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedaccel.disk import fsync_folder
from fedaccel.errors import ConfigError, UserError, shown
from fedaccel.reproductions.snapshot import DIVERGED, SUFFIX, pack, read_packed, write_folder
from fedaccel.runs.config import check_recorded_once
from fedaccel.runs.rows import summary_text

if TYPE_CHECKING:
    from fedaccel.grids.experiment import Experiment
    from fedaccel.report.reading import Run
    from fedaccel.runs.config import Config

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
    """What :func:`restore_finished` did: cells written; cells kept because their folder was there (``stale``: of
    those, the ones not finished there); runs in the file that had not finished (they run again)."""

    written: int
    kept: int
    stale: int
    unfinished: int

    def line(self, packed: Path) -> str:
        text = (f"from {packed}: {self.written} finished cell(s) written, {self.kept} kept as they were (their "
                f"folders were there), {self.unfinished} not finished in the file (they run again)")
        if self.stale:
            text += (f"; {self.stale} of the folders kept have not finished and the file holds them finished: delete "
                     "those folders and run again to take the file's")
        return text


RESTORING = ".restoring-"  # a cell folder being written, renamed into place once whole


def restore_finished(experiment: Experiment, packed: Path) -> Restored:
    """Write the finished runs stored in ``packed`` into ``experiment``'s folder as finished cells."""
    from fedaccel.grids.experiment import check_grid_folder

    cells = dict(experiment.cells)
    out = experiment.out_dir
    runs = read_packed(packed, out)  # bounds, types and rows checked before anything is written
    plugins_checked: set[str] = set()
    for run in runs:
        name = run.path.name
        if name not in cells:
            raise UserError(f"{packed}: cell {shown(name)} is not a cell of {experiment.name}; nothing written")
        if (difference := config_difference(run.config, cells[name])) is not None:
            raise UserError(f"{packed}: cell {shown(name)} ran with another config than {experiment.name}'s "
                            f"({difference}); nothing written")
        try:  # the plugins that made it are installed here, the same code: else new cells would mix two versions
            check_recorded_once(run.plugins, f"{packed}: cell {shown(name)}", plugins_checked)
        except ConfigError as exc:
            raise UserError(f"{exc}; nothing written") from None
    if out.is_dir() and not out.is_symlink():  # what a restore cut short left (a cell is renamed into place whole)
        for left in out.glob(RESTORING + "*"):
            if left.is_dir() and not left.is_symlink():
                shutil.rmtree(left)
    check_grid_folder(experiment)
    out.mkdir(parents=True, exist_ok=True)
    written = kept = stale = unfinished = 0
    for run in runs:
        rounds = cells[run.path.name].train.rounds
        summary = finished_summary(run, rounds, packed.name)
        if summary is None:
            unfinished += 1
        elif os.path.lexists(run.path):
            kept += 1
            stale += not (run.path / SUMMARY).is_file()
        else:
            _write_cell(run, summary)
            written += 1
    if written:
        fsync_folder(out)
    return Restored(written, kept, stale, unfinished)


def config_difference(stored: Any, config: Config) -> str | None:
    """None where ``stored`` (a run's config as read) is ``config`` (:func:`~fedaccel.grids.experiment.same_config`),
    else the first key that differs, with both values."""
    from fedaccel.grids.experiment import same_config
    from fedaccel.runs.config import from_dict

    if same_config(stored, config):
        return None
    try:
        have = from_dict(copy.deepcopy(stored)).to_dict()
    except (ConfigError, TypeError, AttributeError):
        return "its config is not one this version reads"
    key = _first_difference(have, config.to_dict())
    return f"{key}: {shown(_at(have, key), 40)} in the file, {shown(_at(config.to_dict(), key), 40)} here"


def _first_difference(a: Any, b: Any, prefix: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key == "progress" and prefix == "run.":
                continue
            if a.get(key, _MISSING) != b.get(key, _MISSING):
                return _first_difference(a.get(key, _MISSING), b.get(key, _MISSING), f"{prefix}{key}.")
    return prefix.rstrip(".") or "the config"


_MISSING = "(missing)"


def _at(config: dict, key: str) -> Any:
    for part in key.split("."):
        config = config.get(part, _MISSING) if isinstance(config, dict) else _MISSING
    return config


def finished_summary(run: Run, rounds: int, source: str) -> dict[str, Any] | None:
    """The ``summary.json`` of a run the file holds finished: its last row at ``rounds``, or diverged as
    :func:`~fedaccel.reproductions.snapshot.pack` records it; None for a run cut short."""
    said = run.summary if isinstance(run.summary, dict) else {}
    at = said.get("diverged_round")
    if said.get("diverged") is True and isinstance(at, int) and not isinstance(at, bool) and 0 <= at <= rounds \
            and run.metrics:
        return {**{k: said[k] for k in DIVERGED if k in said}, "restored_from": source}
    if run.metrics and run.metrics[-1].get("round") == rounds:
        final = {k: v for k, v in run.metrics[-1].items() if k != "diag"}
        return {"finished": True, "rounds": rounds, "final": final, "restored_from": source}
    return None


def _write_cell(run: Run, summary: dict[str, Any]) -> None:
    """The cell's folder, written aside in the grid folder and renamed into place: whole or absent."""
    with tempfile.TemporaryDirectory(prefix=RESTORING, dir=run.path.parent) as scratch:
        aside = write_folder(dataclasses.replace(run, path=Path(scratch) / run.path.name, summary=None))
        (aside / SUMMARY).write_text(summary_text(summary), encoding="utf-8")
        for file in aside.iterdir():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
        fsync_folder(aside)
        os.rename(aside, run.path)  # a folder made there meanwhile, if empty, is replaced; if not, this fails
