"""Methods from installed packages: Python entry points, the ecosystem's plugin door (as pytest's ``pytest11``).

A distribution declares a method in its ``pyproject.toml``::

    [project.entry-points."fedaccel.algorithms"]
    myprox = "myprox:myprox"      # name = "module:object"

and once it is installed (``pip install -e .``) the name works wherever a built-in does: configs, ``--set``,
grids and claims, ``-j N`` workers (each process finds the entry points again: nothing is pickled), the
stacked runtime and Flower's clients. The object is a *recipe*, as the built-ins of
:mod:`fedaccel.algorithms.registry` are: a callable whose keyword-only parameters, each with a default, are the
method's hyperparameters, returning a composed :class:`~fedaccel.algorithms.base.Algorithm`. A model
(group ``fedaccel.models``) is a factory as the built-ins of :mod:`fedaccel.models` are:
``factory(input_shape, num_classes, *, option=default) -> Classifier``; a dataset (group ``fedaccel.datasets``)
a loader ``load(root: Path | None, seed: int) -> fedaccel.data.Dataset``.

Only installed distributions' entry points are read, and a plugin's module is imported only when its name
is asked for; nothing is imported because a file or a run folder names it. What can go wrong is one line
(:class:`~fedaccel.errors.ConfigError`): a name declared twice (by fedaccel and a plugin, or by two
plugins), a name that is not one, a value that is not ``module:object``, a module that fails to import, an
object that is not a recipe. A run records the distribution (name, version and a hash of the module) of every
plugin it uses in its ``config.yaml`` (:func:`fedaccel.runs.config.plugin_note`).
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import import_module
from importlib import metadata
from typing import Any

from fedaccel.errors import ConfigError, shown

# the kind of thing -> its entry-point group
GROUPS = {"algorithm": "fedaccel.algorithms", "model": "fedaccel.models", "dataset": "fedaccel.datasets"}
NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")  # it becomes part of folder names, labels and errors
VALUE = re.compile(r"(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<object>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


@dataclass(frozen=True)
class Plugin:
    """One entry point of an installed distribution: ``name = "module:object"`` in the group of ``kind``."""

    kind: str  # algorithm, model or dataset
    name: str
    value: str  # module:object
    distribution: str
    version: str

    @property
    def origin(self) -> str:
        """``fedaccel-myprox 0.1.0``: the distribution and its version."""
        return f"{self.distribution} {self.version}"

    def record(self) -> dict[str, str]:
        """What a run folder keeps of it: enough to say later whether the same plugin is installed."""
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "entry_point": self.value, "sha256": module_hash(self.value.split(":")[0])}


def declared(kind: str) -> dict[str, tuple[Plugin, ...]]:
    """Every installed declaration in ``kind``'s group, by name (two or more under one name: a clash).
    Read once per ``sys.path`` (a few ms; a package installed while a process runs is seen by the next one),
    never imported."""
    return _scan(kind, tuple(sys.path))


@lru_cache(maxsize=8)
def _scan(kind: str, path: tuple[str, ...]) -> dict[str, tuple[Plugin, ...]]:
    found: dict[str, list[Plugin]] = {}
    seen: set[str] = set()
    for dist in metadata.distributions():  # not metadata.entry_points(): one malformed file elsewhere breaks it
        try:  # a distribution whose metadata cannot be read declares nothing; it breaks no other one
            if GROUPS[kind] not in (dist.read_text("entry_points.txt") or ""):
                continue  # most distributions: their METADATA is not read (a few ms for all, not 200)
            label, version = str(dist.metadata["Name"] or "an unnamed distribution"), str(dist.version or "?")
            key = re.sub(r"[-_.]+", "-", label).lower()
            if key in seen:  # the same distribution again further down sys.path: the first one is imported
                continue
            seen.add(key)
            points = [ep for ep in dist.entry_points if ep.group == GROUPS[kind]]
        except Exception:  # noqa: BLE001 - whatever a broken METADATA or entry_points.txt raises
            continue
        for ep in points:
            plugin = Plugin(kind, ep.name, ep.value, label, version)
            if plugin not in found.setdefault(ep.name, []):
                found[ep.name].append(plugin)
    return {name: tuple(plugins) for name, plugins in found.items()}


def find(kind: str, name: str, *, builtin: bool) -> Plugin | None:
    """The plugin that provides ``name``, or None (a built-in, or nothing: the caller says which). A name
    fedaccel has too (``builtin``), or that two distributions declare, is refused in one line naming both."""
    plugins = declared(kind).get(name, ())
    if builtin + len(plugins) > 1:  # fedaccel's version only for the line (a metadata read: 5 ms, every config)
        owners = ([f"fedaccel {fedaccel_version()} (built in)"] if builtin else []) + [p.origin for p in plugins]
        raise ConfigError(f"{kind} {shown(name)} is declared by {owners[0]} and by {' and by '.join(owners[1:])} "
                          f"(entry-point group {GROUPS[kind]}): uninstall one, or rename the plugin's entry point")
    if builtin or not plugins:
        return None
    return plugins[0]


def names(kind: str) -> list[str]:
    """The names plugins declare in ``kind``'s group (clashes and malformed names included: asking for one
    says what is wrong with it)."""
    return sorted(declared(kind))


LOADED: set[str] = set()  # the top-level packages of the plugins this process loaded: their state classes are rebuilt


def load(plugin: Plugin) -> Any:
    """Import the plugin's module and return its object; whatever fails is one line naming the distribution."""
    where = f"{plugin.kind} {shown(plugin.name)} of {plugin.origin}"
    if not NAME.fullmatch(plugin.name):
        raise ConfigError(f"{where}: {shown(plugin.name)} is not a name fedaccel takes (lower-case letters, "
                          "digits, '-', '_', '.'; at most 64): rename the entry point")
    match = VALUE.fullmatch(plugin.value)
    if match is None:
        raise ConfigError(f"{where}: its entry point {shown(plugin.value)} is not 'module:object'")
    try:
        found: Any = import_module(match["module"])
        for attribute in match["object"].split("."):
            found = getattr(found, attribute)
    except Exception as exc:  # noqa: BLE001 - the plugin's own code: any error, said in one line
        raise ConfigError(f"{where}: loading {plugin.value} failed: {one_line(exc)}") from exc
    if match["module"].split(".")[0] != "fedaccel":  # fedaccel's own: only fedaccel.algorithms holds state classes
        LOADED.add(match["module"].split(".")[0])
    return found


def loaded_module(module: str) -> bool:
    """Whether ``module`` is imported already and belongs to the package of a plugin this process loaded: a
    checkpoint or a message may name its state classes (:func:`fedaccel.algorithms.states.state_class`)."""
    return module in sys.modules and module.split(".")[0] in LOADED


def one_line(exc: BaseException) -> str:
    """``TypeError: ...`` in one line of at most 200 characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 200 else text[:197] + "..."


def module_hash(module: str) -> str:
    """sha256 of a module's file (its first 16 hex digits), found without running it or its parent packages;
    '' where it has none."""
    try:
        spec = module_spec(module)
        with open(str(spec.origin), "rb") as file:  # type: ignore[union-attr]
            return hashlib.sha256(file.read()).hexdigest()[:16]
    except Exception:  # noqa: BLE001 - no spec, no file, a finder that fails: no hash, the version still says
        return ""


def module_spec(module: str) -> Any:
    """Where ``module`` would be imported from, asked of the import system's finders (``sys.meta_path``: the
    file system, an editable install's) package by package, so that no parent package runs
    (``importlib.util.find_spec`` imports them); None where no finder knows it."""
    spec, path = None, None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        spec = next((found for finder in sys.meta_path if hasattr(finder, "find_spec")
                     and (found := finder.find_spec(name, path)) is not None), None)
        if spec is None:
            return None
        path = spec.submodule_search_locations
    return spec


def fedaccel_version() -> str:
    """The installed fedaccel's version (not read from the package: this module is below it)."""
    try:
        return metadata.version("fedaccel")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "(source tree)"
