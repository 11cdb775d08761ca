"""Torch threads per run: one thread against one per core, alone and beside busy processes.

The rule ``run.threads: null`` (auto) follows is measured here: FedAvg rounds of the demo
workload (squared-SVM) and of the BHerd CNN on Fashion-MNIST (5 clients, Case 2), timed with 1
thread and with ``os.cpu_count()`` threads, each contender warmed up once untimed, alternated;
first with the machine as it is, then with as many busy-looping processes as there are cores
(another run, a compiler, a second experiment). Prints the ratio time(1 thread) / time(all
cores) per case: below 1, one thread is faster.

    python benchmarks/threads.py [--rounds 3] [--repeats 3] [--samples 6000] [--smoke]

``--smoke``: the SVM only, 500 samples, one round, one repeat, to check that the script runs (its figures
then mean nothing).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

import torch

from pathlib import Path

from fedaccel.engine.round import init_state, run_round
from fedaccel.runs.config import load_config
from fedaccel.runs.setup import build_setup


ROOT = Path(__file__).resolve().parents[1]


def busy() -> None:
    while True:
        pass


def time_rounds(setup, rounds: int, threads: int) -> float:  # type: ignore[no-untyped-def]
    torch.set_num_threads(threads)
    fed = setup.federation
    state = init_state(setup.algorithm, fed.model.theta.clone(), fed.n_clients)
    started = time.perf_counter()
    for _ in range(rounds):
        state, _ = run_round(setup.algorithm, state, fed)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=6000)
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: SVM only, 500 samples, 1 round, 1 repeat (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.samples, args.rounds, args.repeats = 500, 1, 1
    cores = os.cpu_count() or 1
    base = ["data.split=case2", f"data.subset={args.samples}", "eval.train_samples=1000", "run.progress=false"]
    setups = {"svm": build_setup(load_config(ROOT / "configs" / "demo.yaml", base))}
    if not args.smoke:
        setups["cnn"] = build_setup(load_config(None, [*base, "model=cnn", "train.lr=0.05"]))
    print(f"{cores} cores; FedAvg, 5 clients, {args.samples} samples, {args.rounds} rounds per timing, "
          f"median of {args.repeats}")
    for condition in ("as it is", f"{cores} busy processes beside"):
        hogs = []
        if condition != "as it is":
            hogs = [multiprocessing.Process(target=busy, daemon=True) for _ in range(cores)]
            for hog in hogs:
                hog.start()
        try:
            for name, setup in setups.items():
                for threads in (1, cores):  # warm-up, untimed
                    time_rounds(setup, 1, threads)
                times: dict[int, list[float]] = {1: [], cores: []}
                for _ in range(args.repeats):
                    for threads in (1, cores):
                        times[threads].append(time_rounds(setup, args.rounds, threads))
                one, many = statistics.median(times[1]), statistics.median(times[cores])
                print(f"{name:>4}, machine {condition}: 1 thread {one:.2f} s, {cores} threads {many:.2f} s, "
                      f"ratio 1/{cores} threads {one / many:.2f}")
        finally:
            for hog in hogs:
                hog.terminate()


if __name__ == "__main__":
    main()
