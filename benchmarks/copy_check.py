"""The copy check of a report: no two runs hold the same rows, clock included (``fedaccel.report.identity``).

Every report, ``judge`` and ``compare`` checks it over all the runs it reads. It compared each run's rows as
canonical JSON text; since 2026-11-29 only runs whose ``wall_s`` columns coincide are compared whole (equal rows
have equal clocks). The runs here are a paper's committed reproduction data (``docs/reproductions/<paper>/data``,
unpacked into a temporary folder), checked both ways, alternated over ``--repeats``; the script checks both find
no copy and prints the seconds of each and the ratio clocks first / every run's rows (median of the per-repeat
ratios), with the load average.

    python benchmarks/copy_check.py [--paper bherd-paper] [--repeats 5] [--smoke]

``--smoke``: the smallest packed grid of any report, one repeat, to check that the script runs (its figures then
mean nothing).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from fedaccel.report.identity import _clock, _fingerprint, _refuse_equal
from fedaccel.report.reading import Run, load_runs
from fedaccel.reproductions.snapshot import unpack
from stacked import load  # benchmarks/: the load average, as the other scripts print it

ROOT = Path(__file__).resolve().parents[1]


def every_rows(runs: Sequence[Run]) -> None:
    """The check as it was: every run's rows as canonical text."""
    _refuse_equal(runs, _fingerprint, "hold the same rows")


def clocks_first(runs: Sequence[Run]) -> None:
    """The check as it is: whole rows only among runs that share a clock."""
    _refuse_equal(runs, _fingerprint, "hold the same rows", alike=_clock)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paper", default="bherd-paper", help="docs/reproductions/<paper>/data")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest packed grid of any report, one repeat (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.repeats = 1
    print(f"load average (1, 5, 15 min) before: {load()}")
    data = ROOT / "docs" / "reproductions" / args.paper / "data"
    packed = sorted(data.glob("*.jsonl.xz"))
    if args.smoke:  # the smallest packed grid of any report
        packed = [min((ROOT / "docs" / "reproductions").glob("*/data/*.jsonl.xz"), key=lambda f: f.stat().st_size)]
        data = packed[0].parent
    with tempfile.TemporaryDirectory() as tmp:
        runs = load_runs([d for file in packed for d in unpack(file, Path(tmp) / file.name)])
    print(f"{len(runs)} runs of {data.relative_to(ROOT)}, {sum(len(r.metrics) for r in runs):,} rows")
    times: dict[str, list[float]] = {"every": [], "clocks": []}
    for _ in range(args.repeats):
        for name, check in (("every", every_rows), ("clocks", clocks_first)):
            started = time.perf_counter()
            check(runs)  # raises if either finds a copy: the committed data has none
            times[name].append(time.perf_counter() - started)
    ratio = statistics.median(c / e for c, e in zip(times["clocks"], times["every"]))
    print(f"every run's rows {statistics.median(times['every']):.3f} s, clocks first "
          f"{statistics.median(times['clocks']):.3f} s (medians of {args.repeats} alternated repeats)")
    print(f"ratio clocks first/every run's rows: {ratio:.3f}; load average (1, 5, 15 min) after: {load()}")


if __name__ == "__main__":
    main()
