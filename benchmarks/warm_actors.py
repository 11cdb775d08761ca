"""Flower simulations one after another in one process: on the ClientApp actors the last one kept
(:mod:`fedaccel.flower.warm_actors`) against new actors for each, as Flower starts them.

Both keep Ray up between simulations (:mod:`fedaccel.flower.warm_ray`); "new actors" stops the kept
ones before each simulation (``warm_actors.release()``), which is what each simulation paid before.
The workload is ``configs/demo.yaml`` (FedAvg, squared-SVM, Case 2, 5 clients) for ``--rounds``
rounds, as the cells of a grid on ``run.runtime: flower-simulation`` run one after another: each
simulation with a seed of its own, so a kept worker builds the run's setup again (its data, split and
model), as for a grid's next cell; only the process and its imports carry over.
One untimed simulation first (Ray's start); then ``--repeats`` of each, alternated. Each is timed
from the call to its return; the figures are medians, with the ratio warm / new (below 1: faster).

    python benchmarks/warm_actors.py [--rounds 10] [--repeats 5] [--smoke]

``--smoke``: 2 rounds, one repeat, no untimed first simulation, to check that the script runs (its figures then
mean nothing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fedaccel.flower import warm_actors
from fedaccel.flower.simulation import simulate
from fedaccel.runs.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="2 rounds, one repeat (a test, not a measurement)")
    args = parser.parse_args()
    rounds, repeats = (2, 1) if args.smoke else (args.rounds, args.repeats)

    def config(seed: int) -> Any:
        return load_config(ROOT / "configs" / "demo.yaml", [f"train.rounds={rounds}", "run.progress=false",
                                                            "run.runtime=flower-simulation", f"run.seed={seed}"])

    print(f"load average (1, 5, 15 min) before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"{os.cpu_count()} cores; configs/demo.yaml, {rounds} rounds; {repeats} alternated repetition(s)",
          flush=True)
    seconds: dict[str, list[float]] = {"warm": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs = iter(range(1 << 30))
        if not args.smoke:  # untimed: Ray's start, and actors for the first "warm"
            simulate(config(1000), Path(tmp) / "start")
        for rep in range(repeats):
            for way in ("new", "warm") if (rep + args.smoke) % 2 else ("warm", "new"):  # smoke: one start
                if way == "new":
                    warm_actors.release()
                seed = next(runs)
                run_config = config(seed)
                started = time.perf_counter()
                simulate(run_config, Path(tmp) / str(seed))
                seconds[way].append(time.perf_counter() - started)
    median = {way: statistics.median(values) for way, values in seconds.items()}
    for way, value in median.items():
        print(f"{way} actors: {value:.2f} s a simulation (median of {repeats}: "
              f"{', '.join(f'{v:.2f}' for v in seconds[way])})")
    print(f"ratio warm/new: {median['warm'] / median['new']:.3f}; saved {median['new'] - median['warm']:.1f} s a "
          f"simulation; load average (1 min) at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
