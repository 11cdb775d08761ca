"""What ``compare`` and ``plot`` take from a grid folder (its ``experiment.yaml``): the cells' order, the
targets, the baseline, the metrics, the title and the colours, so that they show what ``experiment`` showed.

Example:
    >>> view = grid_view(["runs/demo"], load_runs(["runs/demo"]))    # doctest: +SKIP
    >>> compare_table(view.runs, view.table_targets, baseline=view.baseline)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedaccel.errors import ConfigError
from fedaccel.grids.experiment import COPY, TABLE_TARGETS
from fedaccel.grids.gaps import copied_cells
from fedaccel.report.figures import Palette, grid_palette
from fedaccel.report.identity import check_cell_configs, check_distinct
from fedaccel.report.reading import Run
from fedaccel.runs.config import from_dict, read_yaml


@dataclass
class GridView:
    """The runs given, each grid folder's in its cells' order, and the first grid folder's settings
    (empty where no grid folder was given)."""

    runs: list[Run]
    palette: Palette
    targets: list[float] = field(default_factory=list)
    baseline: str | None = None
    metrics: tuple[str, ...] = ()
    name: str = ""  # the grid's name; empty: no grid folder among the paths

    @property
    def table_targets(self) -> list[float]:
        """The targets of the grid's ``table.md`` (its ``targets:``, else :data:`TABLE_TARGETS`; none without a grid)."""
        return self.targets or (list(TABLE_TARGETS) if self.name else [])


def grid_view(paths: Iterable[str | Path], runs: Sequence[Run]) -> GridView:
    """``runs`` (as :func:`~fedaccel.report.reading.load_runs` read ``paths``) seen through the grid
    folders among ``paths``: their runs in grid order (not by folder name), a colour per method from
    every cell of each grid (cells not run yet included, so the colours are those of the finished grid),
    and the targets, baseline, metrics and name of the first grid's ``experiment.yaml``."""
    ordered: list[Run] = []
    configs: list[dict[str, Any]] = []
    settings: dict[str, Any] | None = None
    taken: set[int] = set()
    for path in map(Path, paths):
        cells = copied_cells(path) if path.is_dir() else None
        inside = {run.path.name: run for run in runs
                  if id(run) not in taken and run.path.parent.resolve() == path.resolve()}
        if cells is None or not inside:
            continue
        check_cell_configs(cells, list(inside.values()))
        for name, spec in cells:
            if name in inside:
                ordered.append(inside.pop(name))
                configs.append(ordered[-1].config)
            elif (config := _cell_config(spec)) is not None:
                configs.append(config)
        ordered += inside.values()  # folders of no cell of the grid (an older grid's), after its cells
        taken.update(id(run) for run in ordered)
        settings = settings if settings is not None else _settings(path / COPY, path.resolve().name)
    rest = [run for run in runs if id(run) not in taken]
    ordered += rest
    check_distinct(ordered)
    configs += [run.config for run in rest]
    settings = settings or {}
    return GridView(ordered, grid_palette(configs), **settings)


def _cell_config(spec: dict[str, Any]) -> dict[str, Any] | None:
    """A cell's config as its run would write it (None where the copied file no longer makes one)."""
    try:
        return from_dict(spec).to_dict()
    except ConfigError:
        return None


def _settings(copy: Path, folder: str) -> dict[str, Any]:
    """``targets``, ``baseline``, ``metrics`` and ``name`` (default: the grid's ``folder`` name, as ``out_dir``'s
    default is ``runs/NAME``) of an experiment file."""
    raw = read_yaml(copy)
    targets = raw.get("targets") or []
    if not isinstance(targets, list) or not all(isinstance(t, (int, float)) and not isinstance(t, bool)
                                                for t in targets):
        raise ConfigError(f"{copy}: targets must be a list of numbers")
    metrics = raw.get("metrics") or []
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        raise ConfigError(f"{copy}: metrics must be a list of metric names")
    baseline = raw.get("baseline")
    return {"targets": [float(t) for t in targets], "baseline": None if baseline is None else str(baseline),
            "metrics": tuple(metrics), "name": str(raw.get("name") or folder)}
