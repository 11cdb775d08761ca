"""An experiment's folder holds one grid: a second file with the same ``name:`` and another grid is refused
before any cell runs, not run beside the first grid's cells under a replaced ``experiment.yaml``.

The folder's ``experiment.yaml`` is what ``judge``, ``compare`` and ``plot`` read its cells from, so a new
file may replace it only if it still names every cell the folder's copy names: the same base, the same
grid keys, and each key's values a superset of the copy's (more seeds, another learning rate: an extension
of the grid). What does not change cells may change freely: ``targets``, ``claims``, ``description``,
``baseline``, ``metrics``, the figures' settings. A cell's own folder is still checked against its config
(:func:`fedaccel.grids.experiment.check_same_config`, a ``--set`` of a key the grid does not set).

Example:
    >>> grid_difference({"grid": {"run.seed": [0, 1]}}, {"grid": {"run.seed": [0, 1, 2]}}) is None  # more seeds
    True
    >>> grid_difference({"grid": {"run.seed": [0, 1]}}, {"grid": {"run.seed": [5]}})
    "grid 'run.seed': the folder's value 0 is not in this grid"
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedaccel.errors import ConfigError, UserError, shown
from fedaccel.runs.names import value_name


def grid_difference(old: Mapping[str, Any], new: Mapping[str, Any], old_base: Any = None,
                    new_base: Any = None) -> str | None:
    """Why the experiment file ``new`` (its raw mapping) does not name every cell of ``old``: the first
    differing key in words, or None when every cell of ``old`` is one of ``new``. ``old_base`` and
    ``new_base``: their ``base:`` as mappings where it names a file (else their raw ``base:``)."""
    old_grid, new_grid = old.get("grid") or {}, new.get("grid") or {}
    for key in [*old_grid, *(k for k in new_grid if k not in old_grid)]:
        if key not in new_grid:
            return f"grid key {shown(key, 60)} is in the folder's grid, not in this one"
        if key not in old_grid:
            return f"grid key {shown(key, 60)} is in this grid, not in the folder's"
        mine = {_canonical(v) for v in new_grid[key]}
        dropped = next((v for v in old_grid[key] if _canonical(v) not in mine), _NONE)
        if dropped is not _NONE:
            return f"grid {shown(key, 60)}: the folder's value {value_name(str(key), dropped)} is not in this grid"
    old_base = old.get("base") if old_base is None else old_base
    new_base = new.get("base") if new_base is None else new_base
    if _canonical(old_base or {}) != _canonical(new_base or {}):
        return f"base {first_difference(old_base or {}, new_base or {})}"
    return None


def check_same_grid(out: Path, copy: Path, written: bytes | None, source: Path | None) -> None:
    """Refuse, in one line naming the folder and the first differing key, an experiment whose file
    (``written``, read from ``source``) would replace the folder's ``experiment.yaml`` (``copy``) by
    another grid. A copy that cannot be read as an experiment is left to the other checks."""
    if written is None or not copy.is_file() or copy.is_symlink():
        return
    if source is not None and source.is_file() and copy.samefile(source):
        return
    import yaml

    try:
        old, new = yaml.safe_load(copy.read_bytes()), yaml.safe_load(written)
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return
    if not isinstance(old, dict) or not isinstance(new, dict):
        return
    old_base, new_base = _base(old.get("base"), copy.parent), _base(new.get("base"), source.parent if source else None)
    if isinstance(old.get("base"), str) and old.get("base") == new.get("base"):
        old_base = new_base  # one base file named the same way: its cells' configs are checked one by one
    why = grid_difference(old, new, old_base, new_base)
    if why is not None:
        raise UserError(f"{out} holds the cells of another grid ({why}); no cell ran and nothing was written: "
                        "give this experiment another name (its name: key) or --out DIR, or delete the folder to start over")


def first_difference(old: Any, new: Any, prefix: str = "") -> str:
    """The first dotted key whose value differs between two mappings, with both values."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in [*old, *(k for k in new if k not in old)]:
            if key not in new or key not in old or _canonical(old[key]) != _canonical(new[key]):
                return first_difference(old.get(key, _NONE), new.get(key, _NONE), f"{prefix}{key}.")
    where = prefix.rstrip(".") or "base"
    return f"{shown(where, 60)}: {_spelled(old)} in the folder's grid, {_spelled(new)} in this one"


def _base(base: Any, folder: Path | None) -> Any:
    """A ``base:`` naming a config file, read from beside its experiment file (as is, where it cannot be)."""
    if not isinstance(base, str) or folder is None:
        return base
    from fedaccel.runs.config import read_yaml

    path = Path(base) if Path(base).is_absolute() else folder / base
    try:
        return read_yaml(path)
    except (ConfigError, OSError):
        return base


_NONE = object()  # a key one side does not have


def _spelled(value: Any) -> str:
    from fedaccel.errors import spelled

    return "unset" if value is _NONE else spelled(value)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
