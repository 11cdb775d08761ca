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
resumes cells that were interrupted, then writes ``curves.png`` and ``table.md``. A cell's folder is
named by its grid values (``algorithm=fedavg,run.seed=0``); cells whose names would collide are named
with their values' key paths (``algorithm=fedumf-fraction0.5``), and two cells that still share a name
are refused when the file is loaded, as are claims that select no cell (:func:`load_experiment`).
"""

from __future__ import annotations

import copy
import dataclasses
import io
import itertools
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fedaccel.disk import refuse_planted_links, temp_name
from fedaccel.errors import ConfigError, UserError, listed, nearest_names, shown, spelled
from fedaccel.grids.cell import CellFailed, Failures, cell_failure, run_cell, verb
from fedaccel.grids.pool import run_cells_in_parallel
from fedaccel.grids.same_grid import check_same_grid
from fedaccel.runs.names import values_named
from fedaccel.runs.config import (Config, check_name, check_recorded_once, dump_yaml, from_dict, parse_overrides,
                                  read_yaml, recorded_plugins, set_path)
from fedaccel.runs.files import write_atomic
from fedaccel.runs.folder import METRICS
from fedaccel.runs.lock import LOCK_FILE

if TYPE_CHECKING:
    from fedaccel.grids.progress import GridProgress
    from fedaccel.report.figures import Palette
    from fedaccel.grids.ray_tasks import RayOptions


EXPERIMENT_KEYS = {"name", "out_dir", "base", "grid", "targets", "baseline", "metrics", "description",
                   "figures_by", "diagnostics", "claims", "tuning_seeds", "looks"}
COPY = "experiment.yaml"  # the experiment file, copied beside its runs (what `fedaccel judge GRID_DIR` reads)
GRID_FILES = (COPY, "table.md", "curves.png", "claims.json")  # what fedaccel writes beside a grid's runs
TABLE_TARGETS = (0.5,)  # the table's targets where the file gives none (compare of the grid folder as well)


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
    specs: list[dict[str, Any]] = field(default_factory=list)  # per cell: base and grid values as the file spells them
    copy: bytes | None = None  # the grid folder's experiment.yaml where not the file itself (a --set grid value)

    def copy_bytes(self) -> bytes | None:
        """The grid folder's ``experiment.yaml``: the file, or the file with the grid values a --set replaced."""
        if self.copy is not None:
            return self.copy
        return self.source.read_bytes() if self.source is not None and self.source.is_file() else None

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


def _listed(path: Path, raw: dict[str, Any], key: str, kind: type | tuple[type, ...], example: str,
            default: Any = ()) -> list[Any]:
    """``raw[key]`` as a list whose items are ``kind`` (never bool, never a string's characters); one line
    otherwise."""
    value = raw.get(key, default)
    items = value if isinstance(value, (list, tuple)) else None
    if items is None or any(isinstance(v, bool) or not isinstance(v, kind) or v != v or v in (math.inf, -math.inf)
                            for v in items):
        raise ConfigError(f"{path}: {key} must be a list of {example}, not {spelled(value)}")
    return list(items)


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """Read an experiment file; ``overrides`` (key=value) apply to every cell's config."""
    path = Path(path)
    raw = read_yaml(path)
    check_experiment_keys(path, raw)
    base, grid = _base(path, raw), _grid(path, raw)
    name = str(raw.get("name") or path.stem)
    check_name(name, f"{path}: name")  # the folder under runs/ when out_dir is not given
    check_cell_count(path, grid)
    overridden = parse_overrides(overrides or [], written=_grid_keys(path, grid))
    # a --set of a key the grid gives one value replaces that value, folder names included (a grid's fixed setting)
    fixed = {key: value for key, value in overridden if key != VARIANT and len(grid.get(key, ())) == 1}
    grid = {key: [fixed[key]] if key in fixed else values for key, values in grid.items()}
    overridden = [(key, value) for key, value in overridden if key not in fixed]
    varied = _grid_value_keys(path, grid)
    clash = next((key for key, _ in overridden if key in varied), None)
    if clash is not None:  # the override would win in every cell, under folder names and claims that say otherwise
        name = shown(clash, 60)[1:-1]
        raise ConfigError(f"--set {name}=... sets a key the grid of {path} sets too: each cell would run the "
                          f"--set value in a folder named by its grid value; change {name} in the grid (in a copy of "
                          "the file, for a variant)")
    if any(key == "run.out_dir" or key == "run" and isinstance(value, dict) and "out_dir" in value
           for key, value in overridden):  # each cell's folder is the experiment's
        raise ConfigError("--set run.out_dir does not move an experiment: its cells' run folders are inside the "
                          "experiment's folder; give `fedaccel experiment FILE --out DIR` (or out_dir: in the file)")
    specs = grid_cells(path, grid, base, overridden)
    try:
        cells = [(cell, from_dict(copy.deepcopy(spec))) for cell, spec in specs]
    except ConfigError as exc:  # a typo in a grid key (run.sed): the file it is in
        raise ConfigError(f"{path}: {exc}") from None
    targets = [float(t) for t in _listed(path, raw, "targets", (int, float), "accuracies such as [0.8, 0.85]")]
    if any(not 0.0 <= t <= 1.0 for t in targets):
        raise ConfigError(f"{path}: targets must be accuracies between 0 and 1, such as [0.8, 0.85], not "
                          f"{spelled(raw['targets'])}")
    metrics = tuple(_listed(path, raw, "metrics", str, "metric names such as [test_acc, train_loss]",
                            Experiment.metrics))
    out_dir = Path(raw.get("out_dir") or Path("runs") / name)
    diagnostics = raw.get("diagnostics")
    if diagnostics is not None and not isinstance(diagnostics, dict):
        raise ConfigError(f"{path}: diagnostics must map config keys to values (the cells whose diagnostics are drawn)")
    figures_by = raw.get("figures_by")
    from fedaccel.report.judge import check_claims, claims_from_file, looks_from_file

    claims, tuning, _ = claims_from_file(path)
    raised = looks_from_file(path)  # a bad looks: section is one line when the file is loaded, not when it is judged
    if raised is not None:
        check_looks_seeds(path, raised.looks, {config.run.seed for _, config in cells})
    check_claims(claims, [(cell, spec, config.to_dict()) for (cell, spec), (_, config) in zip(specs, cells)], str(path))
    if raw.get("baseline") is not None:  # a typo in it would cost the grid's table after every cell ran
        check_grid_baseline(path, raw["baseline"], [(cell, spec, config) for (cell, spec), (_, config) in zip(specs, cells)])
    as_ran = None
    if fixed:  # the copy beside the runs names the cells as they ran (the file's comments are not kept)
        said = ", ".join(f"{key}={shown(value, 60)}" for key, value in fixed.items())
        as_ran = (f"# {path.name} with --set {said}\n" + dump_yaml({**raw, "grid": grid}, sort_keys=False)).encode()
    return Experiment(name, out_dir, cells, targets, raw.get("baseline"), metrics,
                      str(figures_by) if figures_by else None, diagnostics, claims, tuning, path,
                      [spec for _, spec in specs], as_ran)


def check_looks_seeds(path: Path, looks: tuple[tuple[Any, ...], ...], seeds: set[Any]) -> None:
    """Every seed of ``looks:`` is one of the grid's: a typo (17 for 7) moved the stages' weights and the p of every
    row, unsaid."""
    stray = [seed for stage in looks for seed in stage if seed not in seeds]
    if stray:
        raise ConfigError(f"{path}: looks names seed {shown(stray[0])}, which no cell of the grid runs (its seeds: "
                          f"{listed(sorted(seeds, key=repr))})")


def cell_seed(spec: Mapping[str, Any]) -> Any:
    """A cell's ``run.seed`` as its spec spells it (the default, 0, where it says none)."""
    run = spec.get("run")
    return run.get("seed", 0) if isinstance(run, Mapping) else 0


def check_grid_baseline(path: Path, baseline: Any, cells: list[tuple[str, dict[str, Any], Config]]) -> None:
    """``baseline:`` names a group of the grid's runs as its table will label them (their configs, before any
    runs); else one line naming the groups."""
    from fedaccel.report.reading import Run
    from fedaccel.report.tables import check_baseline

    if not isinstance(baseline, str):
        raise ConfigError(f"{path}: baseline must be a method's label such as fedavg, not {shown(baseline, 60)}")
    try:
        check_baseline([Run(Path(cell), config.to_dict(), [], spec=spec) for cell, spec, config in cells], baseline)
    except UserError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def check_experiment_keys(path: Path, raw: dict[str, Any]) -> None:
    """The top-level keys of the experiment file ``path`` (read as ``raw``) are an experiment's; one line
    otherwise (a run config given in its place is named as one)."""
    unknown = sorted(set(raw) - EXPERIMENT_KEYS, key=str)
    if unknown and set(raw) <= {f.name for f in dataclasses.fields(Config)}:
        raise ConfigError(f"{path} is a run config, not an experiment file: `fedaccel run {path}` runs it (an experiment "
                          "file names it as its base: and varies keys in grid:, e.g. experiments/demo.yaml)")
    if unknown:
        raise ConfigError(f"{path}: unknown experiment key {shown(unknown[0])}; known: {listed(sorted(EXPERIMENT_KEYS), near=unknown[0])}")


def experiment_cells(path: Path, with_base: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """The cells of the experiment file ``path`` as :func:`grid_cells` gives them, without building their
    configs; ``with_base=False``: the grid's values alone (a copy beside the runs whose ``base:`` path
    does not resolve from there). Its keys and its grid's keys are checked (a copy beside the runs may
    have been edited: ``judge`` and ``compare`` read it)."""
    from fedaccel.runs.config import config_key_fault

    raw = read_yaml(path)
    check_experiment_keys(path, raw)
    grid = _grid(path, raw)
    for key in _grid_keys(path, grid):
        if (fault := config_key_fault(str(key))) is not None:
            raise ConfigError(f"{path}: grid: {fault}")
    return grid_cells(path, grid, _base(path, raw) if with_base else None)


def _base(path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    base = raw.get("base") or {}
    if isinstance(base, str):
        base = read_yaml((path.parent / base) if not Path(base).is_absolute() else base)
    return base


def _grid_keys(path: Path, grid: dict[str, list[Any]]) -> tuple[str, ...]:
    """The config keys the grid sets: its own, and those its variants set."""
    keys = {dotted for value in grid.get(VARIANT, []) for dotted in _variant(path, value)}
    return (*(k for k in grid if k != VARIANT), *sorted(keys))


def _keys_set_by(path: Path, key: str, values: list[Any]) -> set[str]:
    """Every config key the values of the grid's ``key`` set: the key (a variant's keys), the options of a mapping
    value (``algorithm.alpha`` of ``{name: bherd, alpha: 0.5}``) and the name a string value gives
    (``algorithm.name`` of ``bherd``)."""
    keys: set[str] = set()

    def add(dotted: str, value: Any) -> None:
        keys.add(dotted)
        if isinstance(value, dict):
            for option, inner in value.items():
                add(f"{dotted}.{option}", inner)
        elif isinstance(value, str):
            keys.add(f"{dotted}.name")

    for value in values:
        for dotted, v in _variant(path, value).items() if key == VARIANT else [(key, value)]:
            add(str(dotted), v)
    return keys


def _grid_value_keys(path: Path, grid: dict[str, list[Any]]) -> set[str]:
    """Every config key a value of the grid sets (:func:`_keys_set_by`); refuses a grid two of whose keys set one
    config key, or one a section of the other's: a cell would run one value under a name that shows both."""
    by_key = {key: _keys_set_by(path, key, values) for key, values in grid.items()}
    for (key_a, set_a), (key_b, set_b) in itertools.combinations(by_key.items(), 2):
        both = sorted(a for a in set_a for b in set_b if a == b or a.startswith(b + ".") or b.startswith(a + "."))
        if both:
            raise ConfigError(f"{path}: the grid's {shown(key_a, 60)} and {shown(key_b, 60)} both set "
                              f"{shown(both[0], 60)}: a cell would run one of the two values in a folder named by "
                              "both; set it in one place")
    return set().union(*by_key.values())


def _grid(path: Path, raw: dict[str, Any]) -> dict[str, list[Any]]:
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict) or not all(isinstance(k, str) and isinstance(v, list) and v for k, v in grid.items()):
        raise ConfigError(f"{path}: grid must map config keys to non-empty lists of values")
    return grid


MAX_CELLS = 100_000  # cells a grid may have; FEDACCEL_MAX_CELLS sets another limit (the user's, never the file's)


def cell_limit() -> int:
    """The most cells a grid (or a packed grid, :func:`fedaccel.reproductions.snapshot.unpack`) may have:
    ``FEDACCEL_MAX_CELLS`` if set, else :data:`MAX_CELLS`. An environment variable, never a key of the file
    being read, so a file cannot raise its own limit."""
    import os

    setting = os.environ.get("FEDACCEL_MAX_CELLS", "").strip()
    if setting and not setting.isdigit():
        raise ConfigError(f"FEDACCEL_MAX_CELLS must be a whole number of cells, not {shown(setting, 40)}")
    return int(setting) if setting else MAX_CELLS


def check_cell_count(path: Path, grid: dict[str, list[Any]]) -> None:
    """Refuse a grid of more cells than the limit before a single one is built: the count is the
    product of the lists' lengths (a 528-byte file of 5 keys x 100 values is 10^10 cells). The
    limit is ``FEDACCEL_MAX_CELLS`` if set, else :data:`MAX_CELLS`; an experiment file cannot raise it."""
    limit = cell_limit()
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


def grid_cells(path: Path, grid: dict[str, list[Any]], base: dict[str, Any] | None = None,
               overridden: list[tuple[str, Any]] = ()) -> list[tuple[str, dict[str, Any]]]:
    """Every cell of ``grid`` as (folder name, its config as the file spells it: ``base`` with the cell's
    grid values and ``overridden`` set, before defaults and presets are applied). Names are
    :func:`cell_name`'s; cells that would share one are told apart by their values' key paths
    (:func:`full_cell_name`), and cells that still share one are refused (one folder, one run)."""
    cells = []
    for values in itertools.product(*grid.values()):
        raw_cell = copy.deepcopy(base or {})  # plain YAML data (a round trip through YAML took 3/4 of a big grid's load)
        for key, value in zip(grid, values):
            for dotted, v in _variant(path, value).items() if key == VARIANT else [(key, value)]:
                set_path(raw_cell, dotted, copy.deepcopy(v))
        for key, value in overridden:
            set_path(raw_cell, key, copy.deepcopy(value))
        cells.append((dict(zip(grid, values)), raw_cell))
    names = [cell_name(values) for values, _ in cells]
    counts = Counter(names)
    names = [full_cell_name(values) if counts[name] > 1 else name for name, (values, _) in zip(names, cells)]
    first: dict[str, dict[str, Any]] = {}
    for name, (values, _) in zip(names, cells):
        if name in first:
            raise ConfigError(f"{path}: grid cells {values_named(first[name])} and {values_named(values)} would "
                              f"share the folder {name!r}: give each cell values of its own")
        first[name] = values
    return [(name, raw_cell) for name, (_, raw_cell) in zip(names, cells)]


def cell_name(values: dict[str, Any], value_name: Callable[[Any], str] | None = None) -> str:
    """A folder name from the grid values, e.g. ``algorithm=fedavg,run.seed=0``."""
    if not values:
        return "run"
    value_name = value_name or short_value
    text = ",".join(f"{k}={_variant_name(v, value_name) if k == VARIANT else value_name(v)}" for k, v in values.items())
    return re.sub(r"[^A-Za-z0-9_.,=+-]", "_", text)


def full_cell_name(values: dict[str, Any]) -> str:
    """:func:`cell_name` with the key path of every value of a mapping: ``algorithm=fedumf-fraction0.5``
    where the short name says ``algorithm=fedumf-0.5`` (only for cells whose short names collide, so
    the folders of existing grids keep their names)."""
    return cell_name(values, full_value)


def _variant_name(value: dict[str, Any], value_name: Callable[[Any], str]) -> str:
    return "+".join(f"{k}={value_name(v)}" for k, v in value.items()) or "base"


def short_value(value: Any) -> str:
    """``{name: fedavg, server_opt: {name: adam, lr: 0.1}}`` -> ``fedavg-adam-0.1`` (a nested mapping by its values too)."""
    if isinstance(value, dict):
        return "-".join(short_value(v) if isinstance(v, dict) else str(v) for v in value.values())
    return str(value)


def full_value(value: Any) -> str:
    if isinstance(value, dict):
        return "-".join(full_value(v) if k == "name" else f"{k}{full_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + "-".join(full_value(v) for v in value) + "]"
    return str(value)


def same_config(stored: Any, config: Config) -> bool:
    """Whether ``stored`` (a run folder's config, as read) is ``config``: both through the current defaults (a key
    added since the run was made is no difference), ``run.progress`` aside."""
    if not isinstance(stored, dict):
        return False
    try:
        resolved = from_dict(copy.deepcopy(stored)).to_dict()
    except ConfigError:
        return False
    wanted = config.to_dict()
    for c in (resolved, wanted):
        c.get("run", {}).pop("progress", None)
    return resolved == wanted


def check_same_config(run_dir: Path, config: Config, checked: set[str] | None = None) -> None:
    """A cell folder from an earlier, different grid must not pass for this one, nor one whose plugins (its
    method's, model's, dataset's code) differ from those installed now: its rows beside new cells' would mix two
    versions of the method in one table, which ``compare`` and ``judge`` then refuse."""
    stored_path = run_dir / "config.yaml"
    if not stored_path.is_file():
        return
    try:
        stored = read_yaml(stored_path)
    except ConfigError:  # damaged: not this grid's run either
        stored = None
    if not same_config(stored, config):
        raise ConfigError(
            f"{run_dir} holds a run of a different config; delete it or give the experiment another out_dir"
        )
    try:
        text = stored_path.read_text(encoding="utf-8", errors="replace")
        check_recorded_once(recorded_plugins(text, str(run_dir)), str(run_dir), set() if checked is None else checked)
    except ConfigError as exc:
        raise OtherCode(str(exc)) from None


class OtherCode(ConfigError):
    """A cell folder whose plugins (its method's, model's, dataset's code) differ from those installed now."""


def other_code_line(cells: Sequence[tuple[Path, OtherCode]]) -> str:
    """Why no cell ran, and what to do, where ``cells`` (folder, why) ran another version of the grid's code: where
    none of them finished (a plugin's bug failed them, then was fixed), deleting them runs them again with the
    installed code; else the finished cells' version, reinstalled, continues the grid, or another folder starts it."""
    import shlex

    unfinished = [folder for folder, _ in cells if not (folder / "summary.json").is_file()]
    head = f"{cells[0][1]}. No cell ran: this grid's cells would mix two versions of its code in one table"
    if len(unfinished) == len(cells):
        shown_folders = " ".join(shlex.quote(str(folder)) for folder in unfinished[:10])
        more = f" (and {len(unfinished) - 10} more unfinished cell folders)" if len(unfinished) > 10 else ""
        return (f"{head}; the {len(unfinished)} cell(s) that ran the other version did not finish (failed or "
                f"stopped), so nothing finished with it: `rm -r {shown_folders}`{more} and the same command runs "
                "them with the installed code")
    return (f"{head} (the version its finished cells ran with, reinstalled, continues the grid; for the new code, "
            "give the grid another out_dir: --out)")


def check_grid_folder(experiment: Experiment) -> None:
    """An experiment goes into a new or empty folder, or into a grid folder of fedaccel's (one
    holding a run folder, or only this experiment's copy of its file): never into a folder of the
    user's files, whose ``table.md`` or ``experiment.yaml`` it would replace (as ``run --out``:
    :func:`fedaccel.runs.folder.check_out_folder`), nor into the folder of another grid
    (:func:`fedaccel.grids.same_grid.check_same_grid`)."""
    out = experiment.out_dir
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a folder; give the experiment's out_dir a new or empty folder")
    refuse_planted_links(out, GRID_FILES)
    if out.is_dir():  # a folder of another grid: its experiment.yaml would be replaced under its cells
        check_same_grid(out, out / COPY, experiment.copy_bytes(), experiment.source)
    entries = sorted(p for p in out.iterdir() if p.name != LOCK_FILE) if out.is_dir() else []
    if not entries or any(is_run_folder(p) for p in entries):
        return
    copy = out / COPY
    written = experiment.copy_bytes()
    if {p.name for p in entries} <= {COPY, temp_name(copy).name} and written is not None \
            and copy.is_file() and not copy.is_symlink() and copy.read_bytes() == written:
        return  # a grid stopped before its first cell wrote its folder
    held = entries[0].name + (f" and {len(entries) - 1} more" if len(entries) > 1 else "")
    raise UserError(f"{out} holds {held} and no fedaccel grid; nothing in it was touched and no cell ran: "
                    "give the experiment's out_dir a new or empty folder")


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a fedaccel run folder: its config and its metrics or its writer's lock."""
    return (path.is_dir() and not path.is_symlink() and (path / "config.yaml").is_file()
            and ((path / METRICS).is_file() or (path / LOCK_FILE).is_file()))


def check_run_options(workers: int, stack_seeds: bool, stack_arms: bool, ray: RayOptions | None) -> None:
    """How a grid is asked to run, refused in one line where the options do not go together."""
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    if (stack_seeds or stack_arms) and ray is not None:
        flag = "--stack-arms" if stack_arms else "--stack-seeds"
        raise ConfigError(f"{flag} trains a cell's seeds together in one process; use it without --ray (-j N runs "
                          "N stacked groups at once)")


def run_experiment(experiment: Experiment, *, progress: bool | None = None, workers: int = 1,
                   stack_seeds: bool = False, stack_arms: bool = False, ray: RayOptions | None = None,
                   report: GridProgress | None = None, fail_fast: bool = False) -> ExperimentResult:
    """Run (or resume) every cell, then write the curves and the rounds-to-target table.

    A cell whose run raises is said in one line (its traceback in its folder's ``error.txt``) and the others go
    on; the table and curves are written of the rest, then `CellsFailed` is raised (``fail_fast``: the
    first failed cell stops the grid, with its line). Running the grid again resumes the failed cells.

    ``workers`` > 1 runs that many cells at once, each in its own process with one torch
    thread (the small models of FL experiments gain more from parallel cells than from
    intra-op threads); ``ray`` runs each cell as a task on a Ray cluster instead
    (`fedaccel.grids.ray_tasks`). The numbers are those of the cell's own seed either way.
    ``stack_seeds`` runs the cells that differ only in ``run.seed`` as one stacked computation
    (`fedaccel.engine.stacked.SeedStack`): every seed's own run folder and numbers, the
    client steps of all seeds batched together; ``stack_arms`` (implies ``stack_seeds``) stacks the cells that
    differ only in ``run.seed`` and ``algorithm``: a grid's methods and seeds in one computation (on a GPU, more
    rows a step; every run's data in memory at once).
    ``report`` shows where the grid is (default: a `fedaccel.grids.progress.GridProgress` over this grid).
    """
    from fedaccel.runs.lock import lock_run_dir

    check_grid_folder(experiment)  # before anything is written, and before any cell runs
    with lock_run_dir(experiment.out_dir):  # one experiment at a time in a grid folder (a second one is one line)
        return _run_cells(experiment, progress, workers, stack_seeds, stack_arms, ray, report, fail_fast)


def _run_cells(experiment: Experiment, progress: bool | None, workers: int, stack_seeds: bool, stack_arms: bool,
               ray: RayOptions | None, report: GridProgress | None, fail_fast: bool) -> ExperimentResult:
    """:func:`run_experiment`'s work, its grid folder locked."""
    from fedaccel.grids.progress import GridProgress, rounds_left
    from fedaccel.grids.suspend import suspending
    from fedaccel.report.completeness import gaps_line, grid_gaps
    from fedaccel.report.figures import plot_curves
    from fedaccel.report.identity import check_distinct
    from fedaccel.report.reading import load_runs
    from fedaccel.report.tables import compare_table
    from fedaccel.runs.stopping import stop_requests

    copy = experiment.out_dir / COPY
    written = experiment.copy_bytes()
    if written is not None and not (experiment.copy is None and copy.exists() and copy.samefile(experiment.source)):
        write_atomic(copy, written)
    todo: list[tuple[int, str, Config, Path]] = []
    run_dirs, skipped, plugins_checked, other_code = [], [], set(), []
    for k, (name, config) in enumerate(experiment.cells, start=1):
        run_dir = experiment.out_dir / name
        try:
            check_same_config(run_dir, config, plugins_checked)
        except OtherCode as exc:
            other_code.append((run_dir, exc))
        run_dirs.append(run_dir)
        if (run_dir / "summary.json").is_file():
            skipped.append((k, name))
        else:
            todo.append((k, name, config, run_dir))
    if other_code:
        raise ConfigError(other_code_line(other_code))
    check_run_options(workers, stack_seeds, stack_arms, ray)
    stack_seeds = stack_seeds or stack_arms
    stacked_keys = ("run.seed", "algorithm") if stack_arms else ("run.seed",)
    own_report = report is None
    requests = stop_requests()
    report = report or GridProgress(len(todo), bars=False if progress is False else None,
                                    rounds=rounds_left([(run_dir, config.train.rounds) for _, _, config, run_dir in todo]))
    report.experiment(experiment.name, len(experiment.cells))
    report.name_cells(experiment.cells)
    for k, name in skipped:
        report.skip(k, name)
    failed = Failures(report, fail_fast)
    try:  # Ctrl-Z stops the grid (-j: its workers too) and its pace leaves the stop out; Ray tasks go on
        with nullcontext() if ray is not None else suspending():
            if ray is not None:
                from fedaccel.grids.ray_tasks import run_cells_on_ray

                run_cells_on_ray(todo, ray, report, failed)
            elif stack_seeds and workers > 1 and len(groups := _seed_groups(todo, stacked_keys)) > 1:
                run_cells_in_parallel(todo, workers, report, failed, tasks=groups, job=run_seed_group_in_worker)
            elif stack_seeds:
                for group in _seed_groups(todo, stacked_keys):
                    _no_stop_since(requests, experiment.out_dir)
                    failed.group([(k, name) for k, name, _, _ in group], _run_seed_group(group, report, progress))
            elif workers == 1 or len(todo) <= 1:
                for k, name, config, run_dir in todo:
                    _no_stop_since(requests, experiment.out_dir)
                    report.start(k, name, run_dir, config.train.rounds, verb=verb(run_dir), follow=False)
                    failure = cell_failure(config, run_dir, report.cell_bar(name, progress))
                    failed.group([(k, name)], [failure] if failure else [])
            else:
                run_cells_in_parallel(todo, workers, report, failed)
    finally:
        if own_report:
            report.close()
    runs = load_runs([d for d in run_dirs if (d / "metrics.jsonl").is_file()])
    if failed.cells and not runs:  # nothing to tabulate
        raise CellsFailed(None, failed.cells, len(experiment.cells))
    check_distinct(runs)  # a folder skipped as finished may hold another cell's copy (its config checked above)
    try:
        table = compare_table(runs, experiment.targets or TABLE_TARGETS, baseline=experiment.baseline)
    except UserError:
        if not failed.cells:
            raise
        raise CellsFailed(None, failed.cells, len(experiment.cells)) from None  # e.g. every baseline cell failed
    if line := gaps_line(*grid_gaps(experiment.out_dir, experiment.cells, runs)):
        table += f"\n\nWarning: {line}."
    write_atomic(experiment.out_dir / "table.md", table + "\n")
    plot = plot_curves(runs, experiment.out_dir / "curves.png", metrics=experiment.metrics, title=experiment.name,
                       targets=experiment.targets, targets_from="grid's targets", palette=cell_palette(experiment, runs))
    result = ExperimentResult(experiment.out_dir, run_dirs, table, plot)
    if failed.cells:
        raise CellsFailed(result, failed.cells, len(experiment.cells))
    return result


class CellsFailed(UserError):
    """Cells of a grid whose runs raised, after the others ran and the table and curves were written of them
    (``result``; None where no cell has rows): one line naming them and the way on."""

    def __init__(self, result: ExperimentResult | None, cells: list[str], total: int) -> None:
        shown_cells = ", ".join(cells[:5]) + (f" and {len(cells) - 5} more" if len(cells) > 5 else "")
        super().__init__(f"{len(cells)} of {total} cells failed ({shown_cells}): each one's line is above, its "
                         f"traceback in its folder's error.txt; fix the cause and run the same command again: it "
                         f"keeps the finished cells and resumes these (with its method's code changed, the grid starts "
                         f"again in another out_dir: --out)")
        self.result = result
        self.cells = cells


def seeds_note(experiment: Experiment) -> str:
    """One line before a grid with claims runs, where its seeds are too few for any verdict: a claim pairs at most
    the grid's seeds (less its ``tuning_seeds``), and its exact two-sided test's p is at least 2 / 2^n, above 0.05
    for n < 6; so every verdict would be inconclusive, whatever the runs give. Empty otherwise."""
    from fedaccel.report.statistics import ALPHA, smallest_p

    if not experiment.claims:
        return ""
    seeds = sorted({config.run.seed for _, config in experiment.cells} - set(experiment.tuning_seeds))
    n = len(seeds)
    if smallest_p(n) <= ALPHA:
        return ""
    from fedaccel.report.judge import looks_from_file

    enough = next(k for k in range(n + 1, 64) if smallest_p(k) <= ALPHA)
    source = experiment.source
    looked = source is not None and source.is_file() and looks_from_file(source) is not None
    advice = ("add run.seed values as a new stage under looks: (docs/statistics/plans.md)" if looked else
              "add run.seed values now, before any verdict is seen")
    return (f"note: the claims of {experiment.name} pair at most {n} seed(s): with {n} pairs the exact two-sided "
            f"tests' smallest p is {smallest_p(n):.3g}, above {ALPHA:g}, so every verdict can only be inconclusive; "
            f"{enough} judged seeds can decide one ({advice})")


def cell_palette(experiment: Experiment, runs: list[Any], ignore: tuple[str, ...] = ()) -> Palette:
    """The colours of the experiment's methods, from every cell in grid order (a run's own config where
    it ran), as ``plot`` of its folder draws them (:func:`fedaccel.grids.view.grid_view`)."""
    from fedaccel.report.figures import grid_palette

    ran = {run.path.name: run.config for run in runs}
    return grid_palette([ran.get(name) or config.to_dict() for name, config in experiment.cells], ignore)


def _seed_groups(todo: list[tuple[int, str, Config, Path]], free: Sequence[str] = ("run.seed",)
                 ) -> list[list[tuple[int, str, Config, Path]]]:
    """The cells to run, grouped by their config without the ``free`` keys (dotted; in order of first appearance)."""
    groups: dict[str, list[tuple[int, str, Config, Path]]] = {}
    for cell in todo:
        key = cell[2].to_dict()
        for dotted in free:
            *parents, last = dotted.split(".")
            inner = key
            for part in parents:
                inner = inner.get(part, {})
            inner.pop(last, None)
        groups.setdefault(yaml.safe_dump(key, sort_keys=True), []).append(cell)
    return list(groups.values())


def _no_stop_since(requests: int, out_dir: Path) -> None:
    """A stop asked for in the last round of a cell (or seed group), which that run ended by itself: no next one."""
    from fedaccel.runs.stopping import Interrupted, stop_requests

    if stop_requests() > requests:
        raise Interrupted(out_dir, None)


def run_seed_group_in_worker(group: list[tuple[int, str, Config, Path]]) -> list[CellFailed]:
    """A stacked group as an ``experiment -j N`` worker's task: one torch thread, no lines (the experiment's
    process shows each cell from its folder); returns its failed cells."""
    from fedaccel.grids.progress import GridProgress

    return _run_seed_group(group, GridProgress(len(group), bars=False, stream=io.StringIO()), False, torch_threads=1)


def _run_seed_group(group: list[tuple[int, str, Config, Path]], report: GridProgress, progress: bool | None = None,
                    torch_threads: int | None = None) -> list[CellFailed]:
    """The group's runs in threads of one process, their client steps trained as one stacked
    computation every round; returns the runs that raised, each tried again alone first (an error in the stacked
    step reaches every member); any other error stops the experiment with its own words. ``torch_threads``: as
    :func:`~fedaccel.grids.cell.run_cell`'s ``threads``, in a pool worker."""
    from fedaccel.engine.stacked import SeedStack, in_seed_stack

    stack = SeedStack(len(group), stack_size=group[0][2].run.stack_size)
    what = "seeds" if len({yaml.safe_dump(c.algorithm) for _, _, c, _ in group}) == 1 else "runs"
    errors: list[BaseException] = []
    threads = []
    for k, name, config, run_dir in group:
        report.start(k, name, run_dir, config.train.rounds, verb=f"{verb(run_dir)} ({what} stacked: {len(group)})",
                     follow=False)
        # the seeds step together: the first one's rounds are the group's progress (a log's line every half minute)
        shown = report.cell_bar(name, progress) if k == group[0][0] else False

        def one(config: Config = config, run_dir: Path = run_dir, shown: Any = shown) -> None:
            try:
                run_cell(config, run_dir, shown, torch_threads)
            except BaseException as exc:
                errors.append(exc)

        threads.append(threading.Thread(target=in_seed_stack(stack, one), name=name))
    from fedaccel.runs.stopping import clear_stop, stop_signals

    with stop_signals():  # SIGINT/SIGTERM: every seed finishes its round, checkpoints and stops
        for thread in threads:
            thread.start()
        try:
            while alive := [thread for thread in threads if thread.is_alive()]:
                alive[0].join(0.1)  # short waits: the signal handlers run in this thread
        except KeyboardInterrupt:  # the second request: the seeds stop at their next step, not at their round's end
            stack.stop_now()
            for thread in threads:
                thread.join()
            raise
    clear_stop()  # the seeds' runs leave a stop request to this, their owner
    if other := [error for error in errors if not isinstance(error, CellFailed)]:
        raise other[0]
    failed = {error.cell for error in errors if isinstance(error, CellFailed)}
    if len(group) == 1 or not failed:
        return [error for error in errors if isinstance(error, CellFailed)]
    # an error in the stacked step reaches every member: each failed run goes on alone, from its checkpoint, so
    # only the one whose own work raises fails (another method's, or another seed's, does not fail it)
    alone = [cell_failure(config, run_dir, False, torch_threads) for _, name, config, run_dir in group
             if name in failed]
    return [failure for failure in alone if failure is not None]
