"""The package's structure stays as docs/architecture.md draws it: no import circle between the
modules of fedaccel/, and no package importing one above it (imports read with ``ast``, those
inside functions and ``TYPE_CHECKING`` blocks included: a circle hidden in a function is still one)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fedaccel"

#: Bottom to top, as in docs/architecture.md: each may import only those before it (and itself).
LAYERS = ("errors", "nesting", "disk", "plugins", "algorithms", "models", "data", "engine", "runs", "flower", "launch",
          "report", "grids", "reproductions", "api", "cli", "__init__")


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports, wherever in the file the import is."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            found.update(t for t in targets if t in files and t != name)
        graph[name] = found
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_import_circle_inside_the_package() -> None:
    assert circles(imports()) == []


def test_no_package_imports_one_above_it() -> None:
    graph = imports()
    unknown = sorted({layer(m) for m in graph} - set(LAYERS))
    assert not unknown, f"packages missing from LAYERS (and from docs/architecture.md): {unknown}"
    upward = [f"{m} -> {t}" for m in sorted(graph) for t in sorted(graph[m])
              if LAYERS.index(layer(t)) > LAYERS.index(layer(m))]
    assert upward == []


def test_the_checks_find_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    """The two checks above fail when they should: a planted circle (also one hidden in a
    function) and an import from a lower package to a higher one."""
    pkg = tmp_path / "fedaccel"
    (pkg / "runs").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "runs" / "__init__.py").write_text("")
    (pkg / "runs" / "loop.py").write_text("from fedaccel.runs.setup import Setup\n")
    (pkg / "runs" / "setup.py").write_text("def f():\n    from fedaccel.runs import loop\n")
    (pkg / "errors.py").write_text("from .runs.loop import x\n")
    graph = imports(pkg)
    assert circles(graph) == [["fedaccel.runs.loop", "fedaccel.runs.setup"]]
    assert "fedaccel.runs.loop" in graph["fedaccel.errors"]  # relative import, resolved
    assert LAYERS.index(layer("fedaccel.runs.loop")) > LAYERS.index(layer("fedaccel.errors"))
