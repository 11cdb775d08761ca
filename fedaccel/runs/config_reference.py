"""The configuration reference page, written from the config schema so that it cannot drift.

Every key of :class:`~fedaccel.runs.config.Config` comes with its default and the comment written beside
(or above) its field in ``fedaccel/runs/config.py``; the named sections list the names the registries know
(algorithms, splits, models) with their options' defaults. A test regenerates the page and compares::

    python -m fedaccel.runs.config_reference            # rewrites docs/reference/configuration.md
    python -m fedaccel.runs.config_reference --check    # exit 1 if the committed page is stale
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import sys
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from fedaccel.runs import config as schema
from fedaccel.runs.files import write_atomic

PAGE = Path("docs/reference/configuration.md")
COMMAND = "python -m fedaccel.runs.config_reference"


def field_comments(source: str) -> dict[tuple[str, str], str]:
    """``(class name, field name) -> its comment``: the full-line comments right above the field, then the
    one trailing it, joined by "; "."""
    comments: dict[int, str] = {}
    whole_line: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            line = token.start[0]
            comments[line] = token.string.lstrip("#").strip()
            if not token.line[: token.start[1]].strip():
                whole_line.add(line)
    found: dict[tuple[str, str], str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                above: list[str] = []
                line = item.lineno - 1
                while line in whole_line:
                    above.insert(0, comments[line])
                    line -= 1
                trailing = [] if item.end_lineno in whole_line else [comments.get(item.end_lineno or 0, "")]
                found[(node.name, item.target.id)] = "; ".join(p for p in [" ".join(c for c in above if c), *trailing] if p)
    return found


def shown_value(value: Any) -> str:
    """A default as one would write it in YAML: ``null``, ``0.01``, ``{name: iid}``, ``[broadcast]``."""
    if isinstance(value, tuple):
        value = list(value)
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...").strip()


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _sections(cls: type, prefix: str, comments: dict[tuple[str, str], str]) -> Iterator[tuple[str, list[list[str]]]]:
    """(title, rows of key/default/what) for ``cls``, then one per nested config class."""
    hints = {f.name: f.type for f in dataclasses.fields(cls)}
    rows, nested = [], []
    for f in dataclasses.fields(cls):
        value = _default(f)
        if dataclasses.is_dataclass(value):
            nested.append((f.name, type(value)))
            continue
        what = comments.get((cls.__name__, f.name), "")
        if not what:
            raise ValueError(f"{cls.__name__}.{f.name} has no comment in fedaccel/runs/config.py: "
                             "write one beside the field saying what it does")
        kind = "name or mapping" if f.metadata.get(schema.NAMED) else str(hints[f.name])
        rows.append([f"`{prefix}{f.name}`", f"`{shown_value(value)}`", _cell(kind), _cell(what)])
    yield (prefix.rstrip(".") or "top level"), rows
    for name, child in nested:
        yield from _sections(child, f"{prefix}{name}.", comments)


def _options(function: Callable[..., Any], leave_out: tuple[str, ...] = (), taken: dict[str, str] | None = None) -> str:
    """``function``'s keyword options with their defaults; ``taken``: options whose default a config key gives."""
    params = [p for p in inspect.signature(function).parameters.values()
              if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in leave_out]
    return ", ".join(f"`{p.name}: {(taken or {}).get(p.name) or shown_value(p.default)}`" for p in params) or "—"


def _summary(thing: Any) -> str:
    return _cell((inspect.getdoc(thing) or "").split("\n\n")[0].replace("\n", " "))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def render() -> str:
    """The reference page's text."""
    from fedaccel.algorithms.presets import PRESETS, presets_for
    from fedaccel.algorithms.registry import RECIPES
    from fedaccel.algorithms.robust import RULES
    from fedaccel.algorithms.server_opt import SERVER_OPTIMISERS
    from fedaccel.data.splits import SPLITS
    from fedaccel.models import MODELS

    comments = field_comments(Path(schema.__file__).read_text(encoding="utf-8"))
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated by `{COMMAND}` from fedaccel/runs/config.py: do not edit by hand. -->",
        "",
        "A config file names only what differs from these defaults; `--set key=value` overrides any key "
        "(the value read as YAML). Unknown keys and invalid values are refused at load with one line; a split's or "
        "model's option values (their names and kinds at load) when the run builds them from the data, in one line "
        "before its folder is written (in a grid: that cell fails, the others run). "
        "`algorithm`, `model` and `data.split` are *named* sections: a name, or a mapping of the name and "
        "that thing's options, e.g. `data: {split: {name: dirichlet, alpha: 0.1}}` or "
        "`--set data.split=dirichlet --set data.split.alpha=0.1`. Overrides apply in order, and a name given "
        "for a section replaces the whole section, so the name comes first: `--set data.split.alpha=0.1 "
        "--set data.split=dirichlet` is refused, as it would drop the alpha.",
        "",
        "This page is generated from the schema in `fedaccel/runs/config.py` (each key's comment there) and "
        "from the registries of algorithms, splits and models.",
    ]
    for title, rows in _sections(schema.Config, "", comments):
        lines += ["", "## Top level" if title == "top level" else f"## `{title}`", "",
                  *_table(["key", "default", "type", "what it does"], rows)]

    lines += ["", "## Algorithms (`algorithm`)", "",
              "`algorithm: NAME` or `algorithm: {name: NAME, OPTION: value, preset: PRESET}`; the options and their "
              "defaults below. A recipe with a `fraction` option takes `train.client_fraction` when the config "
              "leaves it unset. The methods are explained in [Algorithms](../algorithms.md).", ""]
    lines += _table(["name", "what it is", "options (default)", "presets"], [
        [f"`{name}`", _cell(recipe.summary), _options(recipe.build, taken={"fraction": "train.client_fraction"}),
         ", ".join(f"`{p}`" for p in presets_for(name)) or "—"]
        for name, recipe in RECIPES.items()
    ])
    lines += ["", "Presets (`algorithm.preset`) set a reference code's choices at once; keys the config sets "
              "itself win: " + ", ".join(f"`{p}`" for p in PRESETS) + "."]
    lines += ["", "Two more keys go with every recipe ([Algorithms](../algorithms.md)):", "",
              "- `server_opt`: a server optimiser after the method's own step, a name or `{name: NAME, OPTION: "
              "value}`: " + "; ".join(f"`{name}` ({_options(factory)})" for name, factory in SERVER_OPTIMISERS.items())
              + ";",
              "- `aggregate`: a robust rule in place of the weighted mean, a name or `{name: NAME, OPTION: value}`: "
              + "; ".join(f"`{name}` ({_options(factory, ('server_lr',))})" for name, factory in RULES.items())
              + " (the recipe's own `server_lr` scales the rule's step, except where it is a server optimiser's).", "",
              "For example `algorithm: {name: bherd, server_opt: {name: adam, lr: 0.01}, aggregate: median}`."]

    lines += ["", "## Splits (`data.split`)", ""]
    lines += _table(["name", "what it does", "options (default)"],
                    [[f"`{name}`", _summary(split), _options(split)] for name, split in SPLITS.items()])

    lines += ["", "## Models (`model`)", ""]
    lines += _table(["name", "what it is", "options (default)"],
                    [[f"`{name}`", _summary(factory), _options(factory)] for name, factory in MODELS.items()])

    lines += ["", "## Attacks (`attacks`)", "",
              "Each entry of `attacks` is a mapping with these keys (`kind` and `clients` required): "
              + ", ".join(f"`{k}` ({t.__name__})" for k, t in schema.ATTACK_KEYS.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from what it would be")
    parser.add_argument("--out", type=Path, default=PAGE, help=f"the page (default {PAGE})")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        stale = not args.out.is_file() or args.out.read_text(encoding="utf-8") != text
        if stale:
            print(f"{args.out} is stale: run `{COMMAND}`", file=sys.stderr)
        return int(stale)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
