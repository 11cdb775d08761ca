"""Report reading: the runs of the committed reproduction data read in memory (``read_packed``, what
``fedaccel reproduce --render-only`` and the reports' check do since 2026-11-29) against unpacked into run
folders and read back (``unpack`` then ``load_runs``, what they did before).

Both check every row against the same bounds; the folders' way writes every run's ``config.yaml``,
``metrics.jsonl`` and ``diagnostics.jsonl`` and parses them again. The script reads each packed grid of
``docs/reproductions/<paper>/data`` both ways, in turn first over ``--repeats``, checks that both give the same
configs, rows and summaries, and prints the time ratio memory / folders (the median of the per-repeat ratios)
with the load average.

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
from fedaccel.reproductions.snapshot import read_packed, unpack
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


if __name__ == "__main__":
    main()
