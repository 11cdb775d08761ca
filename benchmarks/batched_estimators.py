"""Batched BHerd and GraB estimators against the per-client ones: time of K clients' estimator work.

K = 20 clients, tau = 12 steps each, d = 784 (the squared SVM) and d = 100,000; random step directions laid
out in advance, so only the estimators are timed: the per-client form builds K estimators and feeds each its
12 directions, then finishes them one by one; the batched form (``Part.batched_estimator``) gets 12 (K, d)
steps and finishes once. Each contender runs once untimed (warm-up), then ``--repeats`` times alternating;
the ratio is of the medians. Torch threads are pinned (1 by default, ``--threads``). Times are the process's
CPU time on the CPU (``time.process_time``: a shared, loaded machine disturbs it less than wall time) and wall
time with synchronisation on a GPU.

    python benchmarks/batched_estimators.py [--repeats 7] [--threads 1] [--device cpu] [--smoke]
    python benchmarks/batched_estimators.py --clients 50 --tau 120 --dims 785   # BHerd's paper: 10 seeds' SVM clients

``--smoke``: one repeat, d = 784 and 1,000, to check that the script runs (its figures then mean nothing).

Prints one line per (estimator, d) with both times and the ratio batched / per-client (below 1: batched wins).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from fedaccel.algorithms.base import ClientContext, Part, RoundInfo
from fedaccel.algorithms.bherd import bherd_selection
from fedaccel.algorithms.grab import grab_selection

CLIENTS, STEPS = 20, 12


def contexts(k: int, steps: int) -> list[ClientContext]:
    info = RoundInfo(round=0, lr=0.05, prev_lr=0.05, weights=np.full(k, 1 / k), seed=0)
    return [ClientContext(info, client, steps, True) for client in range(k)]


def per_client(part: Part, z: torch.Tensor, steps: list[torch.Tensor]) -> None:
    assert part.estimator is not None
    dim = z.shape[2]
    for ctx in contexts(z.shape[0], z.shape[1]):
        estimator = part.estimator(ctx, dim)
        for step in range(z.shape[1]):
            estimator.observe(step, z[ctx.client, step])
        estimator.finish(z[ctx.client, 0])


def batched(part: Part, z: torch.Tensor, steps: list[torch.Tensor]) -> None:
    assert part.batched_estimator is not None
    estimator = part.batched_estimator(contexts(z.shape[0], z.shape[1]), z.shape[2], z.dtype, z.device)
    active = torch.ones(z.shape[0], dtype=torch.bool, device=z.device)
    for step, directions in enumerate(steps):
        estimator.observe(step, directions, active)
    estimator.finish(steps[0])


def seconds(run: Callable[[], None], device: torch.device) -> float:
    """CPU seconds of this process on the CPU (less disturbed by other processes on a shared machine), else wall."""
    if device.type == "cpu":
        started = time.process_time()
        run()
        return time.process_time() - started
    torch.cuda.synchronize()
    started = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clients", type=int, default=CLIENTS, help=f"K (default {CLIENTS})")
    parser.add_argument("--tau", type=int, default=STEPS, help=f"local steps a client (default {STEPS}; BHerd's "
                                                               "paper: 120)")
    parser.add_argument("--dims", default=None, help="comma-separated d (default 784,100000)")
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: 1 repeat, small d (a test, not a measurement)")
    args = parser.parse_args()
    dims = (784, 1_000) if args.smoke else tuple(int(d) for d in (args.dims or "784,100000").split(","))
    if args.smoke:
        args.repeats = 1
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"K = {args.clients} clients, tau = {args.tau}, float32 on {device}, torch threads {torch.get_num_threads()}, "
          f"median of {args.repeats}")
    for dim in dims:
        g = torch.Generator().manual_seed(0)
        z = torch.randn(args.clients, args.tau, dim, generator=g).to(device)
        steps = [z[:, step].contiguous() for step in range(args.tau)]  # what a stacked step hands over
        for label, part in (("bherd (alpha 0.5)", bherd_selection(alpha=0.5)), ("grab", grab_selection())):
            runs = {
                "per-client": lambda p=part: per_client(p, z, steps),
                "batched": lambda p=part: batched(p, z, steps),
            }
            for run in runs.values():
                run()  # warm-up, untimed
            times: dict[str, list[float]] = {name: [] for name in runs}
            for repeat in range(args.repeats):
                for name in sorted(runs, reverse=repeat % 2 == 1):
                    times[name].append(seconds(runs[name], device))
            single, both = statistics.median(times["per-client"]), statistics.median(times["batched"])
            print(f"{label:18s} d = {dim:>6}: per-client {single * 1e3:8.2f} ms, batched {both * 1e3:8.2f} ms, "
                  f"batched/per-client {both / single:.2f}")


if __name__ == "__main__":
    main()
