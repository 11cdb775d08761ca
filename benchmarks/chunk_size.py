"""The stacked runtime's chunk size on a CPU: microseconds per client-step at each ``run.stack_size``.

For each model (``--models``, default svm,2nn), batch size (``--batches``, default 10,50,100) and
client count (``--ks``, default 100,300: 2 x K x batch samples must fit Fashion-MNIST's 60,000), one FedAvg round of ``--steps`` local steps is timed with
the clients stacked in chunks of each size of ``--sizes`` (default 2,5,10,20,50,100,200, those
not above K) and with the default (``null``: what ``CPU_BATCH_BYTES`` of batches a step allows,
``fedaccel/engine/stacked.py``); each timed ``--repeats`` times, interleaved, the fastest
counting. A row gives each size's microseconds per client-step, the best size, and the default's
time over the best's (goal: <= 1.10). All sizes must end at the same model (to 1e-5).

    python benchmarks/chunk_size.py [--models svm,2nn] [--batches 10,50,100] [--ks 100,300] [--repeats 3]
    python benchmarks/chunk_size.py --smoke   # svm, K = 8, sizes 2,4,8, 1 repeat: a test
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from fedaccel.algorithms.registry import build_algorithm
from fedaccel.data import load_dataset
from fedaccel.engine.round import init_state, run_round
from fedaccel.engine.stacked import StackedClients
from stacked import make_federation  # noqa: E402  (benchmarks/stacked.py)


def one_round(fed, stack_size: int | None) -> torch.Tensor:  # noqa: ANN001
    algorithm = build_algorithm("fedavg")
    state = init_state(algorithm, fed.w0, fed.n_clients)
    runtime = StackedClients(algorithm, fed, state.clients, stack_size=stack_size)
    return run_round(algorithm, state, fed, runtime=runtime)[0].w


def row(data, model: str, batch: int, k: int, steps: int, sizes: list[int], repeats: int) -> float:  # noqa: ANN001
    """Time one row; print it; return the default's time over the best's."""
    if 2 * k * batch > len(data.y_train):
        raise SystemExit(f"K = {k} at batch {batch} needs {2 * k * batch} samples; Fashion-MNIST has {len(data.y_train)}")
    fed = make_federation(data, model, k, steps, seed=0, device="cpu", batch=batch)
    contenders: list[int | None] = [s for s in sizes if s <= k] + [None]
    results = {s: one_round(fed, s) for s in contenders}  # warm-up, and the models to compare
    best = {s: float("inf") for s in contenders}
    for _ in range(repeats):
        for s in contenders:
            started = time.perf_counter()
            one_round(fed, s)
            best[s] = min(best[s], time.perf_counter() - started)
    reference = results[contenders[0]]
    for s, w in results.items():
        gap = float((w - reference).abs().max())
        assert gap < 1e-5, f"{model} K={k} b={batch}: stack size {s} ends {gap:.2e} from size {contenders[0]}"
    per = {s: 1e6 * t / (k * steps) for s, t in best.items()}
    fastest = min((s for s in contenders if s is not None), key=lambda s: per[s])
    ratio = per[None] / per[fastest]
    cells = " | ".join(f"{per[s]:.1f}" for s in contenders[:-1])
    print(f"| {model} | {batch} | {k} | {cells} | {per[None]:.1f} | {fastest} | {ratio:.2f} |", flush=True)
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="svm,2nn")
    parser.add_argument("--batches", default="10,50,100")
    parser.add_argument("--ks", default="100,300")
    parser.add_argument("--sizes", default="2,5,10,20,50,100,200")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="svm, K = 8, batch 10, sizes 2,4,8, 1 step, 1 repeat")
    args = parser.parse_args()
    if args.smoke:
        args.models, args.batches, args.ks, args.sizes, args.steps, args.repeats = "svm", "10", "8", "2,4,8", 1, 1
    torch.set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load average (1, 5, 15 min) before: {', '.join(f'{v:.2f}' for v in os.getloadavg())}; torch threads 1; "
          f"{args.steps} local steps; fastest of {args.repeats}")
    data = load_dataset("fashion-mnist", seed=0)
    ratios = []
    for model in args.models.split(","):
        for k in (int(k) for k in args.ks.split(",")):
            shown = [s for s in sizes if s <= k]
            print(f"\n| model | batch | K | {' | '.join(f'size {s}' for s in shown)} | default | best size | "
                  f"default/best |\n|---|---|---|{'---|' * len(shown)}---|---|---|")
            for batch in (int(b) for b in args.batches.split(",")):
                ratios.append(row(data, model, batch, k, args.steps, sizes, args.repeats))
    print(f"\nthe default chunk against the best size: worst {max(ratios):.2f}x (goal <= 1.10)")
    print(f"load average (1, 5, 15 min) after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
