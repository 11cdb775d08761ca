"""Installing ``tests/plugin_package`` (a method outside fedaccel) into a temporary site, in milliseconds.

An installed distribution is, to ``importlib.metadata``, a ``NAME-VERSION.dist-info`` folder on ``sys.path``
with ``METADATA`` and ``entry_points.txt``: what ``pip install --target SITE tests/plugin_package`` leaves
(tests/test_plugins.py checks that with pip itself, once). :func:`install` writes the same by hand.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).parent / "plugin_package"
MODULE = "fedaccel_myprox"


def declared_entry_points(package: Path = PACKAGE) -> str:
    """The pyproject's entry points as ``entry_points.txt`` says them."""
    project = tomllib.loads((package / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return "".join(f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items())
                   for group, points in project["entry-points"].items())


def install(site: Path, *, distribution: str = "fedaccel-myprox", version: str = "0.1.0",
            entry_points: str | None = None, source: str | None = None, package: Path = PACKAGE,
            module: str = MODULE) -> Path:
    """The plugin ``package`` (a folder with a pyproject.toml and the one module ``module``.py; ``source``:
    another module text) as an installed distribution under ``site``, whose ``entry_points.txt`` is
    ``entry_points`` (default: the pyproject's). Returns ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    if source is None:
        shutil.copy(package / f"{module}.py", site / f"{module}.py")
    else:
        (site / f"{module}.py").write_text(source, encoding="utf-8")
    info = site / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(declared_entry_points(package) if entry_points is None else entry_points,
                                           encoding="utf-8")
    return site


def forget(module: str = MODULE) -> None:
    """Drop what a process kept of an earlier site: the imported module and the loaded recipes."""
    from fedaccel.algorithms.registry import plugin_recipe

    sys.modules.pop(module, None)
    plugin_recipe.cache_clear()
