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
is asked for (by a config, or by a run folder's: a name only among the installed entry points); no file or folder
can name a module to import. What can go wrong is one line
(:class:`~fedaccel.errors.ConfigError`): a name declared twice (by fedaccel and a plugin, or by two
plugins), a name that is not one, a value that is not ``module:object``, a module that fails to import, an
object that is not a recipe. A run records the distribution (name, version and a hash of its code,
:func:`code_hash`) of every plugin it uses in its ``config.yaml`` (:func:`fedaccel.runs.config.plugin_note`).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import import_module
from importlib import metadata
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

from fedaccel.disk import NotAFile, open_regular
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
                "entry_point": self.value,
                "sha256": code_hash(self.value.split(":")[0], f"{self.kind} {shown(self.name)} of {self.origin}")}


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
                          f"(entry-point group {GROUPS[kind]}): "
                          + (f"rename the entry point of {plugins[0].origin} (a built-in name is fedaccel's)" if builtin
                             else "uninstall one, or rename one's entry point"))
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


PACKAGE_HASH = "package:"  # a record's sha256 that covers a whole package (without it: one module's file)
MAX_FILES = 2000  # .py files of one plugin package hashed at most ...
MAX_BYTES = 32 * 2**20  # ... holding this many bytes at most ...
MAX_ENTRIES = 100_000  # ... among this many files and folders: past any of them, one line, not a long wait


def code_hash(module: str, where: str = "the plugin") -> str:
    """The fingerprint a run records of the code of the plugin whose entry point is in ``module``, found and read
    without running any of it: where ``module`` is in a package (the outermost regular one on its dotted path,
    a folder with an ``__init__``), ``package:`` and the first 16 hex digits of :func:`package_hash` of that
    folder, every .py file in it; where it is a module of its own, :func:`module_hash` of its file (as runs
    recorded before packages were hashed whole). '' where it has no file. A package too big to hash is one
    line (:class:`ConfigError`) starting with ``where``."""
    try:
        specs = module_specs(module)
        if not specs or specs[-1] is None:
            return ""
        origins = [spec.origin for spec in specs if spec.submodule_search_locations is not None
                   and spec.has_location and spec.origin]
        if not origins and len(specs) > 1 and specs[-1].origin:  # in namespace packages only (folders without an
            root = Path(specs[-1].origin).parent  # __init__): the module's own folder, its neighbours its code
        elif not origins:  # a module of its own: its file
            if os.stat(str(specs[-1].origin)).st_size > MAX_BYTES:
                raise OverflowError
            return module_hash(module)
        else:
            root = Path(origins[0]).parent
        if not root.is_dir():  # a package in a zip file: no folder to read (as a module there has no file)
            return ""
    except OverflowError:
        raise ConfigError(f"{where}: its module {module} has more than {MAX_BYTES // 2**20} MiB: too much to hash as "
                          "the code that makes a run") from None
    except Exception:  # noqa: BLE001 - a finder that fails: no hash, the version still says
        return ""
    return PACKAGE_HASH + package_hash(root, where)


def package_hash(root: Path, where: str = "the plugin") -> str:
    """sha256 (its first 16 hex digits) of every .py file under the folder ``root``, in the order of their
    paths relative to it, each path hashed with the file's bytes: an edit to any file, a file added, removed or
    renamed changes it. ``__pycache__`` is skipped; a symbolic link is hashed as where it points, and a link to a
    .py file with that file's bytes too (a strict editable install links every file), opened without blocking;
    a link to a folder is not walked; what is no plain file (a pipe) is not read. More than :data:`MAX_ENTRIES` files and folders, :data:`MAX_FILES` .py files or
    :data:`MAX_BYTES` of them is one line (:class:`ConfigError`), before their bytes are read."""
    def too_big(what: str) -> ConfigError:
        return ConfigError(f"{where}: its package {shown(str(root), 120)} {what}: too much to hash as the code that "
                           f"makes a run (fedaccel hashes every .py file of a plugin's package): give the plugin a "
                           "package of its own")

    def refuse(error: OSError) -> None:
        raise error

    found: list[tuple[str, str]] = []  # (path relative to root, 'f' a file or 'l' a link)
    entries = files = 0
    try:
        for folder, dirnames, filenames in os.walk(root, onerror=refuse, followlinks=False):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]  # links to folders are listed, not walked
            entries += len(dirnames) + len(filenames)
            if entries > MAX_ENTRIES:
                raise too_big(f"holds more than {MAX_ENTRIES} files and folders")
            relative = Path(folder).relative_to(root)
            for name in dirnames:  # a folder: only a link to one is hashed (as where it points)
                if os.path.islink(os.path.join(folder, name)):
                    found.append(((relative / name).as_posix(), "l"))
            for name in filenames:
                if name.endswith(".py"):
                    link = os.path.islink(os.path.join(folder, name))
                    found.append(((relative / name).as_posix(), "l" if link else "f"))
                    files += not link
            if files > MAX_FILES:
                raise too_big(f"holds more than {MAX_FILES} .py files")
        found.sort()
        digest, total = hashlib.sha256(), 0
        for name, kind in found:
            path = root / name
            data = os.readlink(path).encode("utf-8", "surrogateescape") if kind == "l" else b""
            if name.endswith(".py"):  # a file, or a link to one (a strict editable install is a tree of links):
                try:  # its bytes, opened without blocking and read only where it is a plain file
                    with open_regular(path, follow=kind == "l") as file:
                        if total + os.fstat(file.fileno()).st_size > MAX_BYTES:  # said before it is read
                            raise too_big(f"has more than {MAX_BYTES // 2**20} MiB of .py files")
                        data += file.read(MAX_BYTES - total + 1)
                except NotAFile:  # a pipe, a device, a link to no plain file: not code, and never read
                    pass
                total += len(data)
                if total > MAX_BYTES:  # it grew since
                    raise too_big(f"has more than {MAX_BYTES // 2**20} MiB of .py files")
            head = f"{kind}{name}\0{len(data)}\0".encode("utf-8", "surrogateescape")  # no \0 in a path: unambiguous
            digest.update(head + data)
    except OSError as exc:
        raise ConfigError(f"{where}: its package {shown(str(root), 120)} cannot be read to hash it: "
                          f"{one_line(exc)}") from exc
    return digest.hexdigest()[:16]


def old_record(was: Mapping[str, str], now: Mapping[str, str]) -> str | None:
    """Why a run's plugin record ``was`` is not the installed plugin's ``now`` (:meth:`Plugin.record`) where the
    only difference is that ``was`` was written before fedaccel hashed a plugin's whole package: it hashes the
    entry point module's file alone, which is still the same, but the rest of the package was never recorded,
    so whether it made the run cannot be known (one line's end; None: not so, a plain difference)."""
    module = was.get("entry_point", "").split(":")[0]
    if not (now.get("sha256", "").startswith(PACKAGE_HASH) and not was.get("sha256", "").startswith(PACKAGE_HASH)
            and all(was.get(k) == v for k, v in now.items() if k != "sha256") and was.get("sha256")
            and was["sha256"] == module_hash(module)):
        return None
    return (f"whose record predates whole-package hashing: it covers the file of {module} alone, not the rest of "
            f"its package, so the code that made the run cannot be checked: start a new run")


def module_hash(module: str) -> str:
    """sha256 of a module's file (its first 16 hex digits), found without running it or its parent packages;
    '' where it has none. A plugin's record hashes this for a module of its own (:func:`code_hash`)."""
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
    specs = module_specs(module)
    return specs[-1] if specs else None


def module_specs(module: str) -> list[Any]:
    """The specs of ``module``'s packages and of itself, outermost first (:func:`module_spec`), nothing run;
    the last is None where a finder knows none (and the list ends there)."""
    specs: list[Any] = []
    path = None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        spec = next((found for finder in sys.meta_path if hasattr(finder, "find_spec")
                     and (found := _found(finder, name, path)) is not None), None)
        if spec is None and path is not None:  # a folder without __init__ in a package that is not imported: the
            folders = [os.path.join(p, parts[depth - 1]) for p in path]  # path finder asks for its parent, so say it
            if folders := [f for f in folders if os.path.isdir(f)]:
                spec = ModuleSpec(name, None, is_package=True)
                spec.submodule_search_locations = folders
        specs.append(spec)
        if spec is None:
            break
        path = spec.submodule_search_locations
        path = None if path is None else list(getattr(path, "_path", path))  # a namespace's, as found: not asked again
    return specs


def _found(finder: Any, name: str, path: list[str] | None) -> Any:
    """``finder``'s spec of ``name`` in ``path``; None where it fails (the path finder raises KeyError for a
    namespace package whose parent is not in ``sys.modules``)."""
    try:
        return finder.find_spec(name, path)
    except KeyError:
        return None


def fedaccel_version() -> str:
    """The installed fedaccel's version (not read from the package: this module is below it)."""
    try:
        return metadata.version("fedaccel")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "(source tree)"
