"""Stacked seed groups in parallel workers: ``experiment --stack-seeds -j N`` against ``--stack-seeds`` in one
process, the whole grid timed (the workers' start-up included).

The grid: the squared SVM on scikit-learn's digits, 5 clients, ``--rounds`` rounds, 4 learning rates x 5 seeds,
so 4 groups of 5 stacked seeds. Each way runs the grid into a fresh folder, taking turns first over
``--repeats``; the script checks that both give every run the same rows and prints the median wall times and
the median of the per-repeat ratios (N workers / one process), with the load average. On a machine with N free
cores the ratio is what ``-j N`` saves; beside other work it is less.

    python benchmarks/stacked_workers.py [--workers 2] [--rounds 200] [--repeats 3] [--smoke]

``--smoke``: 3 rounds, one repeat, to check that the script runs (its figures then mean nothing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from fedaccel.grids.experiment import load_experiment, run_experiment
from stacked import load  # benchmarks/: the load average, as the other scripts print it


def run_grid(folder: Path, rounds: int, workers: int) -> tuple[float, dict[str, list[dict]]]:
    """Wall seconds of the grid with ``workers`` workers, and each run's rows without their clock."""
    spec = {"name": "groups", "out_dir": str(folder / "out"),
            "base": {"data": {"dataset": "digits", "clients": 5}, "model": "svm",
                     "train": {"rounds": rounds, "lr": 0.05, "batch_size": 20}, "run": {"progress": False}},
            "grid": {"train.lr": [0.1, 0.05, 0.02, 0.01], "run.seed": [0, 1, 2, 3, 4]}}
    path = folder / "groups.yaml"
    path.write_text(yaml.safe_dump(spec))
    began = time.perf_counter()
    result = run_experiment(load_experiment(path), progress=False, stack_seeds=True, workers=workers)
    seconds = time.perf_counter() - began
    rows = {d.name: [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
                     for line in (d / "metrics.jsonl").read_text().splitlines()] for d in result.run_dirs}
    return seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="3 rounds, one repeat (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.repeats = 3, 1
    print(f"load average (1, 5, 15 min) before: {load()}")
    times: dict[int, list[float]] = {1: [], args.workers: []}
    for repeat in range(args.repeats):
        rows = {}
        for workers in (1, args.workers) if repeat % 2 == 0 else (args.workers, 1):
            with tempfile.TemporaryDirectory() as tmp:
                seconds, rows[workers] = run_grid(Path(tmp), args.rounds, workers)
            times[workers].append(seconds)
        assert rows[1] == rows[args.workers], "the workers' runs differ from one process's"
    ratio = statistics.median(n / one for n, one in zip(times[args.workers], times[1]))
    print(f"4 groups of 5 stacked seeds, {args.rounds} rounds: one process {statistics.median(times[1]):.1f} s, "
          f"{args.workers} workers {statistics.median(times[args.workers]):.1f} s (medians of {args.repeats})")
    print(f"ratio {args.workers} workers / one process: {ratio:.3f}; load average (1, 5, 15 min) after: {load()}")


if __name__ == "__main__":
    main()
