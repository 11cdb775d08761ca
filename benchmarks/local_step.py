"""Lean local step: the engine's squared-SVM step against the raw arithmetic with batches gathered in advance.

Squared SVM (784 parameters) on a Fashion-MNIST subset, batch 100, FedAvg over 10 clients. Three
contenders do the same SGD steps in one process:

- ``raw``: the squared-hinge gradient written out by hand on batches (and ±1 labels) gathered
  before the clock starts: the floor the engine's step is measured against;
- ``step``: the engine's local step alone (the client's batches from
  :meth:`~fedaccel.engine.federation.Federation.client_batches`, laid out once in its fixed order,
  then :func:`fedaccel.engine.local.train_local`), one call per client-round;
- ``round``: whole FedAvg rounds through :func:`fedaccel.engine.round.run_round` (batch orders,
  client contexts, aggregation included).

Each is warmed up once untimed (the warm-up lays the clients' samples out: the steady state of
every round after the first is timed; ``--gather`` times batches gathered step by step instead);
the repeats alternate and the median per client-step is printed,
with the ratios step/raw and round/raw. Goal (issue 12): step/raw at most 1.5. Torch threads are
pinned (``--threads``, default 1). The three must end at the same model (relative tolerance).

    python benchmarks/local_step.py [--samples 10000] [--repeats 5] [--threads 1] [--device cpu] [--smoke]

``--smoke``: 1,000 samples, one repeat, to check that the script runs (its figures then mean nothing).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from fedaccel.algorithms.base import make_rng
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.data import load_dataset
from fedaccel.data.splits import split
from fedaccel.engine.device import resolve_device
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions, train_local
from fedaccel.engine.round import init_state, run_round
from fedaccel.models import build_model

CLIENTS, ROUNDS, BATCH, LR, GOAL = 10, 3, 100, 0.01, 1.5


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_fedavg(fed: Federation, w0: torch.Tensor, local: Callable[[int, int, torch.Tensor], torch.Tensor]
                 ) -> tuple[float, torch.Tensor]:
    """ROUNDS of FedAvg averaged by hand, ``local(client, round, w)`` giving each client's model; (seconds, w)."""
    sync(fed.device)
    started = time.perf_counter()
    w = w0.clone()
    for t in range(ROUNDS):
        new = torch.zeros_like(w)
        for i in range(CLIENTS):
            new.add_(local(i, t, w), alpha=float(fed.weights[i]))
        w = new
    sync(fed.device)
    return time.perf_counter() - started, w


def raw_run(fed: Federation, w0: torch.Tensor, gathered: dict) -> tuple[float, torch.Tensor]:
    """Hand-written squared-hinge SGD on batches gathered in advance; FedAvg of the clients."""
    l2 = fed.model.module.l2

    def local(i: int, t: int, w: torch.Tensor) -> torch.Tensor:
        theta = w.clone()
        for xb, tb in gathered[(i, t)]:
            margin = (1 - tb * (xb @ theta)).clamp_(min=0)
            theta -= LR * ((-(tb * margin) / BATCH) @ xb + l2 * theta)
        return theta

    return timed_fedavg(fed, w0, local)


def step_run(fed: Federation, w0: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The engine's local step for every client-round (its batches as the engine gets them, then
    train_local), averaged by hand."""
    gradient = fed.batch_gradient()

    def local(i: int, t: int, w: torch.Tensor) -> torch.Tensor:
        batches = fed.client_batches(i, t, int(fed.steps[i]))
        return train_local(fed.model, fed.x_train, fed.y_train, batches, w, fed.loss_fn, LR, fed.options,
                           gradient=gradient)

    return timed_fedavg(fed, w0, local)


def round_run(fed: Federation, w0: torch.Tensor) -> tuple[float, torch.Tensor]:
    algorithm = build_algorithm("fedavg")
    state = init_state(algorithm, w0, fed.n_clients)
    sync(fed.device)
    started = time.perf_counter()
    for _ in range(ROUNDS):
        state, _ = run_round(algorithm, state, fed)
    sync(fed.device)
    return time.perf_counter() - started, state.w


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--gather", action="store_true", help="no layout: gather every batch with index_select")
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: 1,000 samples, 1 repeat (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.samples, args.repeats = 1000, 1
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)

    data = load_dataset("fashion-mnist", subset=args.samples, test_subset=500)
    parts = split("iid", data.y_train.numpy(), CLIENTS, make_rng(0, "split"))
    fed = Federation(build_model("svm", data.input_shape, 10), data.x_train, data.y_train, parts,
                     data.x_test, data.y_test, LocalOptions(lr=LR, batch_size=BATCH), device=device)
    if args.gather:
        fed.layout_bytes = -1
    w0 = fed.model.theta.clone()
    batches = {(i, t): fed.batches(i, t, int(fed.steps[i])) for i in range(CLIENTS) for t in range(ROUNDS)}
    targets = fed.model.module.targets(fed.y_train)
    x_flat = fed.x_train.reshape(len(fed.y_train), -1)
    gathered = {}
    for key, client_batches in batches.items():
        rows = [torch.from_numpy(b).to(device) for b in client_batches]
        gathered[key] = [(x_flat[r].contiguous(), targets[r].contiguous()) for r in rows]
    steps = int(fed.steps.sum()) * ROUNDS
    print(f"FedAvg, squared SVM ({fed.model.size} parameters), {CLIENTS} clients, {ROUNDS} rounds, batch {BATCH}, "
          f"{steps} client-steps, device {device}, torch threads {torch.get_num_threads()}")

    contenders = {
        "raw": lambda: raw_run(fed, w0, gathered),
        "step": lambda: step_run(fed, w0),
        "round": lambda: round_run(fed, w0),
    }
    finals = {name: run()[1] for name, run in contenders.items()}  # warm-up, untimed
    scale = float(finals["raw"].norm())
    for name in ("step", "round"):
        gap = float((finals[name] - finals["raw"]).norm())
        assert gap <= 1e-4 * scale, f"{name} and raw disagree: |diff| = {gap:.3g}, |w| = {scale:.3g}"
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.repeats):
        for name, run in contenders.items():
            times[name].append(run()[0])
    per_step = {name: statistics.median(t) / steps * 1e6 for name, t in times.items()}
    print("same final model (relative 1e-4); per client-step, median of", args.repeats, "alternated repeats:")
    for name, us in per_step.items():
        print(f"  {name:6s} {us:8.1f} us")
    ratios = {name: statistics.median(a / b for a, b in zip(times[name], times["raw"])) for name in ("step", "round")}
    print(f"ratio round/raw: {ratios['round']:.2f}")
    print(f"ratio step/raw: {ratios['step']:.2f}  (goal <= {GOAL})")


if __name__ == "__main__":
    main()
