"""The stacked runtime's batch tables: one reshaped table per client against the list of batches stacked.

Every round the stacked runtime lays out each client's sample indices as a (tau, b) table and the chunk's
as one (K, tau, b) array. Before: ``federation.batches`` (a list of ``tau`` batch arrays), ``np.stack`` per
client, then a zero-filled (K, tau, b) array filled row by row. Now: ``federation.batch_table`` (``drop``:
the samples read, reshaped) and the rows stacked straight into the chunk's array. Both build the same
array (checked); the host time per client-round and its ratio come from the same run (fastest of
``--repeats``, interleaved).

    python benchmarks/batch_tables.py [--clients 1000] [--batch 100] [--steps 5,40] [--repeats 7]
    python benchmarks/batch_tables.py --smoke
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions, row_table


def before(fed: Federation, k: int, steps: int, b: int) -> np.ndarray:
    rows = [row_table(fed.batches(i, 0, steps))[0] for i in range(k)]
    table = np.zeros((k, steps, b), dtype=np.int64)
    for i, r in enumerate(rows):
        table[i, : len(r)] = r
    return table


def after(fed: Federation, k: int, steps: int, b: int) -> np.ndarray:
    table = np.empty((k, steps, b), dtype=np.int64)
    np.stack([fed.batch_table(i, 0, steps)[0] for i in range(k)], out=table)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--steps", default="5,40")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="10 clients, 2 repeats: a test")
    args = parser.parse_args()
    if args.smoke:
        args.clients, args.repeats = 10, 2
    k, b = args.clients, args.batch
    m = 4 * b  # samples a client holds: 4 batches (more steps run on into further epochs)
    x, y = torch.zeros(k * m, 1), torch.zeros(k * m, dtype=torch.long)
    parts = [np.arange(m) + m * i for i in range(k)]
    fed = Federation(torch.nn.Linear(1, 2), x, y, parts, x[:2], y[:2], LocalOptions(batch_size=b), seed=0)
    print(f"{k} clients, batch {b}; us per client-round (fastest of {args.repeats})")
    print("| steps | before | after | after/before |\n|---|---|---|---|")
    for steps in (int(s) for s in args.steps.split(",")):
        assert np.array_equal(before(fed, k, steps, b), after(fed, k, steps, b)), "the two layouts differ"
        best = {"before": float("inf"), "after": float("inf")}
        for _ in range(args.repeats):
            for name, fn in (("before", before), ("after", after)):
                started = time.perf_counter()
                fn(fed, k, steps, b)
                best[name] = min(best[name], time.perf_counter() - started)
        us = {name: 1e6 * t / k for name, t in best.items()}
        print(f"| {steps} | {us['before']:.1f} | {us['after']:.1f} | {us['after'] / us['before']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
