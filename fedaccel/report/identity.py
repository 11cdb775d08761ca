"""Identity before arithmetic: each cell folder holds its cell's run, and no run is counted twice.

A verdict pairs run folders by the cell their name says (``algorithm=bherd,run.seed=2``). Nothing in the
numbers shows a folder that holds another cell's run (a run of seed 1 in the folder of seed 2: one pair
lost, unnamed) or a run copied into a second folder (two seeds of one run: a pair counted twice, a
p-value from duplicated data). So ``judge``, ``compare`` and the tables check first:

- :func:`check_cell_configs`: a folder named after a cell has the cell's value at ``run.seed`` and at
  every key the grid's cells vary (compared as resolved, so a preset or a shorthand is its values);
- :func:`check_distinct`: no two runs hold the same rows, clock (``wall_s``) included: a genuine run
  never repeats another's timings to the tenth of a millisecond, a copy always does; and no two hold the same
  final weights (``model.pt``, its bytes hashed, never loaded: the file holds the run's config beside its
  weights, so two genuine runs never share it, while a copy whose rows were touched up still does). Two
  finished runs whose weights files differ are not copies even where their rows agree to the last digit of
  the clock (a method equal to another in all but its name, over a few rounds).

Either refusal is one line naming the folders.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fedaccel.errors import UserError, listed, spelled
from fedaccel.report.reading import MISSING, Run, flatten_config, grouping_config

SEED = "run.seed"


def varied_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The dotted keys whose value is not the same in every config (seed, name and output folder aside)."""
    flats = [flatten_config(grouping_config(dict(c))) for c in configs]
    keys: list[str] = []
    for flat in flats:
        keys += [k for k in flat if k not in keys]
    return [k for k in keys if len({_canon(f.get(k, MISSING)) for f in flats}) > 1]


def _canon(value: Any) -> str:
    return "<unset>" if value is MISSING else json.dumps(value, sort_keys=True, default=str)


def _resolved(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """A cell's config as its run writes it (None where the spec no longer makes one)."""
    from fedaccel.errors import ConfigError
    from fedaccel.runs.config import from_dict

    try:
        return from_dict(dict(spec)).to_dict()
    except (ConfigError, TypeError, ValueError):
        return None


def _seed(config: Mapping[str, Any] | None) -> Any:
    run = (config or {}).get("run")
    return run.get("seed", MISSING) if isinstance(run, Mapping) else MISSING


def check_cell_configs(cells: Sequence[tuple[str, Mapping[str, Any]]], runs: Sequence[Run]) -> None:
    """Every run whose folder is named after one of ``cells`` (name, config as the experiment file spells
    it) holds that cell's run: the same ``run.seed`` and the same value at every key the cells vary.
    A mismatch is a :class:`UserError` naming the folder, the key, and both values."""
    specs = dict(cells)
    mine = [run for run in runs if run.path.name in specs]
    if not mine:
        return
    resolved = {name: _resolved(spec) for name, spec in cells}
    keys = varied_keys([c for c in resolved.values() if c is not None])
    for run in mine:
        name = run.path.name
        want = resolved[name]
        flat_run = flatten_config(grouping_config(run.config))
        flat_want = flatten_config(grouping_config(want)) if want is not None else {}
        # only what the cell spells: a grid copied beside its runs may not find its base (a path relative to the
        # experiment file), and a cell of its variant {} then took the defaults for the keys its base sets
        spelled = [k for k in keys if _spelled(k, specs[name])]
        wrong = [(SEED, _seed(run.config), _seed(want if want is not None else specs[name]))]
        wrong += [(k, flat_run.get(k, MISSING), flat_want.get(k, MISSING)) for k in spelled if want is not None]
        wrong = [(k, got, cell) for k, got, cell in wrong if cell is not MISSING and _canon(got) != _canon(cell)]
        if wrong:
            key, got, cell = wrong[0]
            others = f" (and {listed([k for k, _, _ in wrong[1:]])})" if len(wrong) > 1 else ""
            raise UserError(f"{run.path}: its config.yaml has {key} {_said(got)}{others} where its cell has "
                            f"{_said(cell)}: the folder does not hold its cell's run; put the run back in its own "
                            "folder, or delete the folder and run the experiment again (it reruns the cell)")


def _spelled(key: str, spec: Mapping[str, Any]) -> bool:
    """Whether the cell's ``spec`` (as the experiment file spells it) sets the dotted ``key``, or the section holding
    it (``algorithm: bherd`` sets ``algorithm.alpha``: the recipe's default)."""
    node: Any = spec
    for part in key.split("."):
        if not isinstance(node, Mapping):
            return True  # a section given by name: its options are its defaults
        if part not in node:
            return False
        node = node[part]
    return True


def _said(value: Any) -> str:
    return "unset" if value is MISSING else spelled(value)


def _fingerprint(run: Run) -> str | None:
    """The run's rows as canonical text, or None for rows without a running clock (hand-made rows, where
    equal numbers prove nothing)."""
    if not any(isinstance(row.get("wall_s"), (int, float)) and row["wall_s"] > 0 for row in run.metrics):
        return None
    return json.dumps(run.metrics, sort_keys=True, default=str)


MODEL_FILE = "model.pt"  # a finished run's final weights and config (fedaccel.runs.loop)


def _weights_fingerprint(run: Run) -> str | None:
    """The SHA-256 of the run's final weights file, its bytes as they are (never unpickled), or None without one."""
    file = run.path / MODEL_FILE
    if not file.is_file():
        return None
    digest = hashlib.sha256()
    with open(file, "rb") as opened:
        for block in iter(lambda: opened.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_distinct(runs: Sequence[Run]) -> None:
    """No two of ``runs`` hold the same rows, clock included, or the same final weights file: one would be a
    copy of the other, and a copy is no independent seed or setup. Equal rows are no copy where both runs have
    final weights files and these differ (each run saved its own). A :class:`UserError` names both folders."""
    weights = {id(run): _weights_fingerprint(run) for run in runs}

    def told_apart(a: Run, b: Run) -> bool:  # both finished, each with final weights of its own
        first, second = weights[id(a)], weights[id(b)]
        return first is not None and second is not None and first != second

    _refuse_equal(runs, _fingerprint, "hold the same rows, clock (wall_s) included: one is a copy of the other, "
                  "not a run of its own; delete the copy and run its cell again", alike=_clock, apart=told_apart)
    _refuse_equal(runs, lambda run: weights[id(run)], f"hold the same final weights ({MODEL_FILE}, byte for byte, "
                  "with the config it was saved with): one is a copy of the other, whatever their rows say; delete "
                  "the copy and run its cell again")


def _clock(run: Run) -> str:
    """The run's ``wall_s`` column: runs with equal rows have equal clocks, so only runs sharing one are compared
    whole (a report checks hundreds of runs of hundreds of rows)."""
    return json.dumps([row.get("wall_s") for row in run.metrics], sort_keys=True, default=str)


def _refuse_equal(runs: Sequence[Run], fingerprint: Callable[[Run], str | None], why: str,
                  alike: Callable[[Run], str] | None = None, apart: Callable[[Run, Run], bool] | None = None) -> None:
    """A :class:`UserError` naming the first two of ``runs`` whose ``fingerprint`` (not None) is equal and that
    ``apart`` (other evidence) does not tell apart.
    ``alike``: a cheaper key that runs of equal fingerprints share (a run alone with its key is not compared)."""
    cheap = [alike(run) for run in runs] if alike is not None else [""] * len(runs)
    shared = Counter(cheap)
    earlier: dict[str, list[Run]] = {}
    for run, cheap_key in zip(runs, cheap, strict=True):
        if shared[cheap_key] == 1:
            continue
        key = fingerprint(run)
        if key is None:
            continue
        for other in earlier.setdefault(key, []):
            if apart is None or not apart(other, run):
                raise UserError(f"{other.path} and {run.path} {why}")
        earlier[key].append(run)


def check_identity(cells: Sequence[tuple[str, Mapping[str, Any]]] | None, runs: Sequence[Run]) -> None:
    """:func:`check_cell_configs` (when the grid's cells are known) and :func:`check_distinct`."""
    if cells:
        check_cell_configs(cells, runs)
    check_distinct(runs)
