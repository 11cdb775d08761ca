"""Row reading: the bounded JSON reader of run files (``fedaccel.runs.rows.parse_json``) against the plain
definition of its bounds (every integer checked by a hook as it is parsed, every value's depth walked), and the
check of BHerd's selected steps in diagnostics rows (``_counts``, a list at once) against one item at a time.

The reports (``fedaccel reproduce --render-only``, ``judge``, ``compare``) read every row of every run:
BHerd's committed grids alone hold 60,000 rows, 107 MB of JSON. The rows here are those of the committed
reproduction data (``docs/reproductions/<paper>/data``, unpacked into a temporary folder), each parsed by
both, alternated over ``--repeats``; the script checks that both give the same values and prints the time
ratio quick / plain (the median of the per-repeat ratios) with the load average; then the same for the packed
records themselves (one line a run, up to megabytes each, read before anything is unpacked); then, on both, the
depth check alone as it is (counted on the text) against as it was before 2026-11-29 (a walk of the parsed value);
and the check of every ``selected`` list of the diagnostics rows.

    python benchmarks/row_reading.py [--paper bherd] [--repeats 5] [--smoke]

``--smoke``: the first packed grid only, one repeat, to check that the script runs (its figures then mean
nothing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedaccel.reproductions.snapshot import _read, unpack
from fedaccel.nesting import could_nest_deeper, nesting_depth
from fedaccel.runs.rows import MAX_DEPTH, MAX_INT_DIGITS, MAX_STEPS, _count, _counts, parse_json
from stacked import load  # benchmarks/: the load average, as the other scripts print it

ROOT = Path(__file__).resolve().parents[1]


def plain(text: str) -> Any:
    """The bounds by their definition (fedaccel's reader before 2026-11-28's quick checks)."""

    def checked(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise ValueError("an integer too long")
        return int(digits)

    value = json.loads(text, parse_int=checked)
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > MAX_DEPTH:
            raise ValueError("nested too deep")
        stack.extend((child, depth + 1) for child in children)
    return value


def packed_files(paper: str, smoke: bool) -> list[Path]:
    return sorted((ROOT / "docs" / "reproductions" / paper / "data").glob("*.jsonl.xz"))[: 1 if smoke else None]


def records_of(paper: str, smoke: bool) -> list[str]:
    """The packed grids' lines, one a run (what ``read_records`` parses before anything is unpacked)."""
    return [line for file in packed_files(paper, smoke) for line in _read(file).decode("utf-8").splitlines()
            if line.strip()]


def alternated(readers: dict[str, Callable[[str], Any]], lines: list[str], repeats: int) -> dict[str, list[float]]:
    """Seconds each reader takes over ``lines``, per repeat, the readers alternated."""
    times: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(repeats):
        for name, reader in readers.items():
            started = time.perf_counter()
            for line in lines:
                reader(line)
            times[name].append(time.perf_counter() - started)
    return times


def walked(text: str) -> bool:
    """Whether ``text`` nests too deep, as fedaccel's reader checked it before 2026-11-29: parsed, then a walk of the
    value (where the text has more than MAX_DEPTH opening brackets). :func:`counted` is the check now."""
    value = json.loads(text)
    return could_nest_deeper(text, MAX_DEPTH) and _too_deep(value)


def counted(text: str) -> bool:
    """The same answer, the depth counted on the text (:func:`fedaccel.nesting.nesting_depth`), and parsed."""
    deep = could_nest_deeper(text, MAX_DEPTH) and nesting_depth(text) > MAX_DEPTH
    json.loads(text)
    return deep


def _too_deep(value: Any) -> bool:
    """fedaccel's walk before 2026-11-29, level by level, as :func:`walked` times it (:func:`plain` keeps the
    definition's own walk, so that the figures of both comparisons stay those published)."""
    level, depth = ([value] if isinstance(value, (dict, list)) else []), 1
    while level:
        if depth > MAX_DEPTH:
            return True
        level = [c for node in level for c in (node.values() if isinstance(node, dict) else node)
                 if isinstance(c, (dict, list))]
        depth += 1
    return False


def rows_of(paper: str, smoke: bool) -> list[str]:
    packed = packed_files(paper, smoke)
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for file in packed:
            for run_dir in unpack(file, Path(tmp) / file.name):
                for rows in sorted(run_dir.glob("*.jsonl")):
                    lines += [line for line in rows.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paper", default="bherd", help="docs/reproductions/<paper>/data")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one packed grid, one repeat (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.repeats = 1
    lines = rows_of(args.paper, args.smoke)
    print(f"load average (1, 5, 15 min) before: {load()}")
    print(f"{len(lines):,} rows of docs/reproductions/{args.paper}/data, {sum(map(len, lines)) / 2**20:.1f} MB of JSON")
    assert all(parse_json(line) == plain(line) for line in lines[:: max(1, len(lines) // 2000)]), "they disagree"
    times = alternated({"quick": parse_json, "plain": plain}, lines, args.repeats)
    quick, slow = (statistics.median(times[name]) for name in ("quick", "plain"))
    ratio = statistics.median(q / p for q, p in zip(times["quick"], times["plain"]))
    print(f"quick {quick:.2f} s, plain {slow:.2f} s (medians of {args.repeats} alternated repeats)")
    print(f"ratio quick/plain: {ratio:.3f}; load average (1, 5, 15 min) after: {load()}")

    records = records_of(args.paper, args.smoke)
    assert all(parse_json(line) == plain(line) for line in records[:: max(1, len(records) // 100)]), "they disagree"
    times = alternated({"quick": parse_json, "plain": plain}, records, args.repeats)
    ratio = statistics.median(q / p for q, p in zip(times["quick"], times["plain"]))
    print(f"{len(records):,} packed records, {sum(map(len, records)) / 2**20:.1f} MB: quick "
          f"{statistics.median(times['quick']):.2f} s, plain {statistics.median(times['plain']):.2f} s; "
          f"ratio quick/plain (records): {ratio:.3f}")
    for name, texts in (("packed records", records), ("rows", lines)):
        assert all(counted(text) == walked(text) for text in texts[:: max(1, len(texts) // 500)]), "they disagree"
        times = alternated({"counted": counted, "walked": walked}, texts, args.repeats)
        ratio = statistics.median(c / w for c, w in zip(times["counted"], times["walked"]))
        print(f"{name}: parsed with the depth counted on the text {statistics.median(times['counted']):.2f} s, "
              f"walked on the value {statistics.median(times['walked']):.2f} s; ratio counted/walked: {ratio:.3f}")

    clients = [row["clients"] for row in map(parse_json, lines) if isinstance(row.get("clients"), dict)]
    selected = [value["selected"] for each in clients for value in each.values()
                if isinstance(value, dict) and isinstance(value.get("selected"), list)]
    checks = {"list": lambda v: _counts(v, MAX_STEPS - 1), "items": lambda v: all(_count(i, MAX_STEPS - 1) for i in v)}
    assert all(checks["list"](v) == checks["items"](v) for v in selected), "they disagree"
    spent: dict[str, list[float]] = {name: [] for name in checks}
    for _ in range(args.repeats):
        for name, check in checks.items():
            started = time.perf_counter()
            for value in selected:
                check(value)
            spent[name].append(time.perf_counter() - started)
    ratio = statistics.median(a / b for a, b in zip(spent["list"], spent["items"]))
    print(f"{len(selected):,} lists of selected steps ({sum(map(len, selected)):,} items): the list at once "
          f"{statistics.median(spent['list']):.3f} s, item by item {statistics.median(spent['items']):.3f} s; "
          f"ratio list/items: {ratio:.3f}")


if __name__ == "__main__":
    main()
