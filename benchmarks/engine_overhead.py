"""Engine overhead: FedAvg through fedaccel's engine against a plain PyTorch loop.

Both do exactly the same SGD steps (the BHerd CNN or the 2NN, Fashion-MNIST subset, 5 clients, 2
rounds, batch 50, the same batches in the same order) in one process; the script checks that they end
at the same model and prints the time ratio engine / plain. Goals: CNN at most 0.9, 2NN at most 0.7
(issue 32). For the 2NN it also prints the arithmetic rate of each side's steps against
one-thread ``torch.mm`` 1024 x 1024 x 1024 measured in the same run (goal: the engine's 2NN step at
>= 60% of it), and the rate of the chain's matrix products alone (same shapes, same batches): the floor
the step's other operations stand on.

    python benchmarks/engine_overhead.py [--model cnn|2nn|svm] [--hidden 100] [--samples 5000] [--repeats 3]
                                         [--threads 1] [--device cpu] [--smoke]

Torch threads are pinned (``--threads``, default 1: on a shared 2-core machine two threads made one
CNN step 20x slower and the timings noise). Each contender runs once untimed first (the plain
loop's first ``optimizer.step()`` imports torch's optimiser code, 1-4 s), then the repeats
alternate between the two; the ratio printed is the median of the per-repeat ratios. For the 2NN, ``torch.mm``'s
rate is measured beside each repeat (the machine's speed drifts between repeats); the share printed is
the median of the per-repeat shares, and the share of the best rate seen is printed beside it. The
equality check runs one round of both in float64 (relative gap at most 1e-9): in float32 the two
round differently (hand-written gradients, other summation orders, more threads' split reductions) and
this early training amplifies that. ``--smoke``: 250 samples (one step a client), one repeat, to check that the
script runs (its figures then mean nothing).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np
import torch

from fedaccel.algorithms.base import make_rng
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.data import load_dataset
from fedaccel.data.splits import split
from fedaccel.engine.device import resolve_device
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, run_round
from fedaccel.models import build_model
from stacked import load  # benchmarks/: the load average, as the other scripts print it

CLIENTS, ROUNDS, BATCH, LR = 5, 2, 50, 0.05


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def engine_run(federation: Federation, w0: torch.Tensor, rounds: int = ROUNDS) -> tuple[float, torch.Tensor]:
    algorithm = build_algorithm("fedavg")
    state = init_state(algorithm, w0, federation.n_clients)
    sync(federation.device)
    started = time.perf_counter()
    for _ in range(rounds):
        state, _ = run_round(algorithm, state, federation)
    sync(federation.device)
    return time.perf_counter() - started, state.w


def plain_run(
    federation: Federation, w0: torch.Tensor, shape: tuple[int, ...], rounds: int = ROUNDS
) -> tuple[float, torch.Tensor]:
    """The same computation written as one would without a framework (the same model class, its own loss)."""
    device = federation.device
    model = copy.deepcopy(federation.model.module).to(device)
    params = list(model.parameters())
    x, y = federation.x_train, federation.y_train
    batches = {(i, t): [torch.from_numpy(b).to(device) for b in federation.batches(i, t, int(federation.steps[i]))]
               for i in range(CLIENTS) for t in range(ROUNDS)}
    global_params = [p.detach().clone() for p in unflatten(w0, params)]
    sync(device)
    started = time.perf_counter()
    for t in range(rounds):
        new = [torch.zeros_like(p) for p in params]
        for i in range(CLIENTS):
            with torch.no_grad():
                for p, g in zip(params, global_params):
                    p.copy_(g)
            opt = torch.optim.SGD(params, lr=LR)
            for idx in batches[(i, t)]:
                opt.zero_grad()
                model.loss(model(x[idx]), y[idx]).backward()
                opt.step()
            with torch.no_grad():
                for acc, p in zip(new, params):
                    acc.add_(p, alpha=float(federation.weights[i]))
        global_params = new
    sync(device)
    elapsed = time.perf_counter() - started
    return elapsed, torch.cat([p.reshape(-1) for p in global_params])


def products_run(federation: Federation, rounds: int = ROUNDS) -> float:
    """The floor under a Linear chain's steps: its matrix products alone (forward, input gradients, weight
    updates by ``addmm_``), same shapes, on the same batches gathered in advance; no bias, activation, loss
    or any other op. Its values mean nothing (the gradients are fixed random matrices); only its time counts."""
    device = federation.device
    weights = [m.weight.detach().clone().to(device)
               for m in federation.model.module.modules() if isinstance(m, torch.nn.Linear)]
    x = federation.x_train.reshape(len(federation.x_train), -1)
    batches = [x[torch.from_numpy(b).to(device)] for t in range(rounds) for i in range(CLIENTS)
               for b in federation.batches(i, t, int(federation.steps[i]))]
    g = torch.Generator().manual_seed(0)
    grads = [(torch.randn(BATCH, w.shape[0], generator=g) * 1e-3).to(device) for w in weights]
    sync(device)
    started = time.perf_counter()
    for xb in batches:
        inputs = [xb]
        for w in weights:
            inputs.append(torch.mm(inputs[-1], w.t()))
        for k in range(len(weights) - 1, -1, -1):
            if k:
                torch.mm(grads[k], weights[k])
            weights[k].addmm_(grads[k].t(), inputs[k], alpha=-LR)
    sync(device)
    return time.perf_counter() - started


def unflatten(vector: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    return [chunk.view_as(p) for chunk, p in zip(vector.split([p.numel() for p in like]), like)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn", choices=("cnn", "2nn", "svm"))
    parser.add_argument("--hidden", type=int, default=100, help="the 2NN's hidden units (784-h-h-10)")
    parser.add_argument("--samples", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (pinned)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: 250 samples, 1 repeat (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.samples, args.repeats = 250, 1  # 50 samples a client: one step of batch 50 a round
    torch.set_num_threads(args.threads)

    data = load_dataset("fashion-mnist", subset=args.samples, test_subset=500)
    parts = split("iid", data.y_train.numpy(), CLIENTS, make_rng(0, "split"))
    options = {"hidden": args.hidden} if args.model == "2nn" else {}

    def federation_in(dtype: torch.dtype) -> Federation:
        return Federation(
            build_model(args.model, data.input_shape, 10, **options).to(dtype),
            data.x_train.to(dtype), data.y_train, parts,
            data.x_test.to(dtype), data.y_test, LocalOptions(lr=LR, batch_size=BATCH, local_epochs=1.0),
            device=resolve_device(args.device),
        )

    federation = federation_in(torch.float32)
    w0 = federation.model.theta.clone()
    steps = int(federation.steps.sum()) * ROUNDS
    print(f"load average (1, 5, 15 min) before: {load()}")
    print(f"FedAvg, {args.model} ({federation.model.size} parameters), {CLIENTS} clients, {ROUNDS} rounds, "
          f"batch {BATCH}, {steps} SGD steps, device {federation.device}, torch threads {torch.get_num_threads()}")
    # Warm-ups, untimed, then the equality check, in float64: the two do the same steps but not the same
    # float operations (the engine's hand-written gradients, its averaging of deltas w - theta_i, more
    # threads' split reductions), and this early training amplifies float32's rounding ~1e3-fold a round.
    engine_run(federation, w0, rounds=1)
    plain_run(federation, w0, data.input_shape, rounds=1)
    exact = federation_in(torch.float64)
    w0_exact = exact.model.theta.clone()
    _, w_engine = engine_run(exact, w0_exact, rounds=1)
    _, w_plain = plain_run(exact, w0_exact, data.input_shape, rounds=1)
    gap, moved = float((w_engine - w_plain).norm()), float((w_plain - w0_exact).norm())
    assert gap <= 1e-9 * moved, f"engine and plain loop disagree after a round: |diff| = {gap:.3g}, |w - w0| = {moved:.3g}"
    flops = step_flops(federation.model.module, BATCH)
    engine_times, plain_times, mm_rates, products_times = [], [], [], []
    if flops:
        products_run(federation, rounds=1)
    for _ in range(args.repeats):
        engine_times.append(engine_run(federation, w0)[0])
        plain_times.append(plain_run(federation, w0, data.input_shape)[0])
        if flops:  # the practical peak beside each repeat: the machine's speed drifts between repeats
            products_times.append(products_run(federation))
            mm_rates.append(mm_rate(federation.device))
    engine, plain = statistics.median(engine_times), statistics.median(plain_times)
    ratio = statistics.median(e / p for e, p in zip(engine_times, plain_times))
    print(f"same model after round 1 in float64: |engine - plain| = {gap:.2e} = {gap / moved:.1e} |w - w0|")
    print(f"engine {engine:.3f} s, plain {plain:.3f} s (medians of {args.repeats} alternated repeats)")
    goal = {"cnn": 0.9, "2nn": 0.7}.get(args.model, 1.1)
    print(f"ratio engine/plain: {ratio:.3f}  (goal <= {goal:.2f}); load average (1, 5, 15 min) after: {load()}")
    if flops:
        peak, best = statistics.median(mm_rates), max(mm_rates)
        rate = {name: flops * steps / t / 1e9 for name, t in (("engine", engine), ("plain", plain))}
        share = {name: statistics.median(flops * steps / t / 1e9 / r for t, r in zip(times, mm_rates))
                 for name, times in (("engine", engine_times), ("plain", plain_times))}
        print(f"one step {flops / 1e6:.2f} MFLOP; torch.mm 1024^3 at {peak:.1f} GFLOP/s on {torch.get_num_threads()} "
              f"thread(s) (median of {len(mm_rates)}, one beside each repeat; best {best:.1f}): engine "
              f"{rate['engine']:.1f} GFLOP/s ({share['engine']:.0%} of its repeat's rate, {rate['engine'] / best:.0%} "
              f"of the best), plain {rate['plain']:.1f} GFLOP/s ({share['plain']:.0%}, {rate['plain'] / best:.0%})  "
              "(goal for the 2NN: engine >= 60%)")
        products = statistics.median(flops * steps / t / 1e9 / r for t, r in zip(products_times, mm_rates))
        print(f"the chain's matrix products alone (same shapes and batches, nothing else): {products:.0%} of the "
              f"repeat's rate; engine time / their time {statistics.median(e / p for e, p in zip(engine_times, products_times)):.2f}")


def step_flops(module: torch.nn.Module, batch: int) -> float:
    """Multiply-adds x 2 of one SGD step of a Linear chain: forward B·out·in a layer, backward twice that
    (weight gradient and input gradient; no input gradient for the first layer); 0 for other models."""
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    if not linears or any(isinstance(m, torch.nn.Conv2d) for m in module.modules()):
        return 0.0
    return 2.0 * batch * sum(m.in_features * m.out_features * (3 if k else 2) for k, m in enumerate(linears))


def mm_rate(device: torch.device, n: int = 1024, repeats: int = 5) -> float:
    """GFLOP/s of ``torch.mm`` n x n x n (the practical peak of the threads in use), best of ``repeats``."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        started = time.perf_counter()
        torch.mm(a, b)
        sync(device)
        best = min(best, time.perf_counter() - started)
    return 2 * n**3 / best / 1e9


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
