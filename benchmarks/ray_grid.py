"""A grid on a local Ray instance against ``-j N`` processes, and Ray's start-up cost.

The same grid (FedAvg and BHerd-FedAvg x seeds, squared-SVM on digits, 3 clients) is run into
fresh folders twice, alternating which goes first over the repeats: with ``-j N`` (a process
pool) and as Ray tasks (one CPU each) on a local instance with N CPUs. Ray's start-up
(``ray.init``: the GCS, the raylet and its first workers) is timed on its own and left out of
the Ray grid time; the grids include their workers' start (spawn and import of torch; Ray keeps
its workers, so only its first grid pays it). Prints the median times, the ratio Ray / ``-j N``
(above 1: Ray is slower) and what one command costs: start-up plus the first, cold grid.

    python benchmarks/ray_grid.py [--workers 2] [--seeds 4] [--rounds 30] [--repeats 2] [--smoke]

``--smoke``: one seed, 2 rounds, one repeat, to check that the script runs (its figures then mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml


def write_grid(folder: Path, seeds: int, rounds: int) -> Path:
    path = folder / "grid.yaml"
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "svm",
            "train": {"rounds": rounds, "lr": 0.1, "batch_size": 20}, "run": {"progress": False}}
    grid = {"algorithm": ["fedavg", {"name": "bherd", "alpha": 0.5}], "run.seed": list(range(seeds))}
    path.write_text(yaml.safe_dump({"name": "bench", "out_dir": str(folder / "out"), "base": base, "grid": grid}))
    return path


def time_grid(seeds: int, rounds: int, **how: object) -> float:
    from fedaccel.grids.experiment import load_experiment, run_experiment

    with tempfile.TemporaryDirectory() as tmp:
        experiment = load_experiment(write_grid(Path(tmp), seeds, rounds))
        started = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()):
            run_experiment(experiment, progress=False, **how)  # type: ignore[arg-type]
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: 1 seed, 2 rounds, 1 repeat (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.seeds, args.rounds, args.repeats = 1, 2, 1
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    import ray

    from fedaccel.grids.ray_tasks import RayOptions

    started = time.perf_counter()
    ray.init(address="local", num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    start_up = time.perf_counter() - started
    cells = 2 * args.seeds
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {cells} cells of {args.rounds} rounds "
          f"(digits, SVM, 3 clients), median of {args.repeats}")
    times: dict[str, list[float]] = {"pool": [], "ray": []}
    for repeat in range(args.repeats):
        order = ["pool", "ray"] if repeat % 2 == 0 else ["ray", "pool"]
        for how in order:
            options = {"workers": args.workers} if how == "pool" else {"ray": RayOptions("auto")}
            times[how].append(time_grid(args.seeds, args.rounds, **options))
    ray.shutdown()
    pool, on_ray = statistics.median(times["pool"]), statistics.median(times["ray"])
    print(f"-j {args.workers}:            {pool:7.1f} s   {times['pool']}")
    print(f"--ray ({args.workers} CPUs):    {on_ray:7.1f} s   {times['ray']}")
    cold = times["ray"][0]  # the first grid on a fresh instance: its workers start (and import torch) too
    print(f"ratio ray / -j {args.workers}:     {on_ray / pool:7.2f}  (warm Ray workers)")
    print(f"ray start-up (ray.init): {start_up:5.1f} s")
    print(f"one command (start-up + first grid, cold workers) / -j {args.workers}: "
          f"{(start_up + cold) / pool:.2f}  ({start_up:.1f} + {cold:.1f} s vs {pool:.1f} s)")


if __name__ == "__main__":
    main()
