"""Which cells of a grid folder are not complete evidence, from the experiment file copied beside its runs
(:mod:`fedaccel.report.completeness` says what counts as complete)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fedaccel.errors import ConfigError
from fedaccel.grids.experiment import COPY, experiment_cells
from fedaccel.report.completeness import Gap, grid_gaps, run_gap
from fedaccel.report.reading import Run


def copied_cells(folder: Path) -> list[tuple[str, dict[str, Any]]] | None:
    """The cells of the grid whose runs ``folder`` holds, from its ``experiment.yaml`` (None without one):
    (folder name, config as the file spells it; the grid's values alone where its ``base:`` path does not
    resolve from the copy)."""
    copy = folder / COPY
    if not copy.is_file():
        return None
    try:
        return experiment_cells(copy)
    except ConfigError:
        return experiment_cells(copy, with_base=False)


def folder_gaps(paths: Iterable[str | Path], runs: Sequence[Run]) -> tuple[list[Gap], int]:
    """:func:`~fedaccel.report.completeness.grid_gaps` for what ``compare`` and ``plot`` are given: grid
    folders (whose cells may be missing) and run folders; with the number of cells or runs looked at."""
    gaps: list[Gap] = []
    total, covered = 0, set()
    for path in map(Path, paths):
        cells = copied_cells(path) if path.is_dir() else None
        if cells is not None:
            inside = [run for run in runs if run.path.parent.resolve() == path.resolve()]
            found, n = grid_gaps(path, cells, inside)
            gaps, total = gaps + found, total + n
            covered.update(id(run) for run in inside)
    rest = [run for run in runs if id(run) not in covered]
    return gaps + [gap for gap in map(run_gap, rest) if gap is not None], total + len(rest)
