"""Report reading: the runs of the committed reproduction data read in memory (``read_packed``, what
``fedaccel reproduce --render-only`` and the reports' check do since 2026-11-29) against unpacked into run
folders and read back (``unpack`` then ``load_runs``, what they did before).

Both check every row against the same bounds; the folders' way writes every run's ``config.yaml``,
``metrics.jsonl`` and ``diagnostics.jsonl`` and parses them again. The script reads each packed grid of
``docs/reproductions/<paper>/data`` both ways, in turn first over ``--repeats``, checks that both give the same
configs, rows and summaries, and prints the time ratio memory / folders (the median of the per-repeat ratios)
with the load average. Then the check of every diagnostics row of those grids both ways, in turn first: the
values of each key at once (``check_diagnostics``, since 2026-11-30) against value by value (``first_misfit``,
what it did before, and still does to name a misfit); the ratio at once / value by value.

    python benchmarks/report_reading.py [--paper bherd-paper] [--repeats 5] [--smoke]

``--smoke``: the smallest packed grid of ``bherd``, one repeat, to check that the script runs (its figures then
mean nothing).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from fedaccel.report.reading import load_runs
from fedaccel.reproductions.snapshot import read_packed, read_records, unpack
from fedaccel.runs.rows import check_diagnostics, first_misfit
from stacked import load  # benchmarks/: the load average, as the other scripts print it

ROOT = Path(__file__).resolve().parents[1]


def packed_files(paper: str, smoke: bool) -> list[Path]:
    files = sorted((ROOT / "docs" / "reproductions" / paper / "data").glob("*.jsonl.xz"))
    return sorted(files, key=lambda f: f.stat().st_size)[:1] if smoke else files


def read_both(files: list[Path], folders_first: bool) -> tuple[float, float]:
    """Seconds to read ``files`` in memory and through folders (in the order asked), the runs checked equal."""
    times, runs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for way in ("folders", "memory") if folders_first else ("memory", "folders"):
            began = time.perf_counter()
            if way == "memory":
                runs[way] = [read_packed(file, Path(tmp) / way / file.stem) for file in files]
            else:
                runs[way] = [load_runs(unpack(file, Path(tmp) / way / file.stem)) for file in files]
            times[way] = time.perf_counter() - began
    for a_runs, b_runs in zip(runs["memory"], runs["folders"], strict=True):
        for a, b in zip(a_runs, b_runs, strict=True):
            assert (a.path.name, a.config, a.metrics, a.summary) == (b.path.name, b.config, b.metrics, b.summary)
    return times["memory"], times["folders"]


def check_both(rows: list[dict], by_value_first: bool) -> tuple[float, float]:
    """Seconds to check ``rows`` (diagnostics rows that fit) at once and value by value (in the order asked)."""
    times = {}
    for way in ("by value", "at once") if by_value_first else ("at once", "by value"):
        began = time.perf_counter()
        if way == "at once":
            for row in rows:
                check_diagnostics(Path("diagnostics.jsonl"), row)
        else:
            assert not any(first_misfit(row.get("clients") or {}, row) for row in rows)
        times[way] = time.perf_counter() - began
    return times["at once"], times["by value"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paper", default="bherd-paper", help="a folder of docs/reproductions (bherd, bherd-paper, ...)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one small packed grid, one repeat (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.paper, args.repeats = "bherd", 1
    files = packed_files(args.paper, args.smoke)
    print(f"load average (1, 5, 15 min) before: {load()}")
    print(f"{len(files)} packed grid(s) of docs/reproductions/{args.paper}/data, "
          f"{sum(f.stat().st_size for f in files) / 2**20:.1f} MB compressed")
    memory, folders = zip(*(read_both(files, folders_first=k % 2 == 1) for k in range(args.repeats)))
    ratio = statistics.median(m / f for m, f in zip(memory, folders))
    print(f"in memory {statistics.median(memory):.2f} s, through folders {statistics.median(folders):.2f} s "
          f"(medians of {args.repeats} repeats, each reading both, in turn first)")
    print(f"ratio memory/folders: {ratio:.3f}; load average (1, 5, 15 min) after: {load()}")
    rows = [row for file in files for record in read_records(file) for row in record["diagnostics"] or []]
    at_once, by_value = zip(*(check_both(rows, by_value_first=k % 2 == 1) for k in range(args.repeats)))
    ratio = statistics.median(a / b for a, b in zip(at_once, by_value))
    print(f"{len(rows):,} diagnostics rows checked: each key's values at once {statistics.median(at_once):.2f} s, "
          f"value by value {statistics.median(by_value):.2f} s; ratio at once/by value: {ratio:.3f}; "
          f"load average after: {load()}")


if __name__ == "__main__":
    main()
