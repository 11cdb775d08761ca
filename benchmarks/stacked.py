"""Stacked clients: cost per client-step of a plain PyTorch loop, fedaccel in process, fedaccel stacked.

For SVM (batch 100), 2NN and the BHerd CNN (batch 50) on Fashion-MNIST at K = 5, 20, 100 clients
(each trains ``--steps`` local steps in one FedAvg round), and for 5 seeds x 20 clients, three
contenders do the same SGD steps on the same batches:

(a) plain: an honest PyTorch loop, as one writes it without a framework (a module, autograd,
    ``torch.optim.SGD``, ``x[idx]`` batches, a weighted average of the client models);
(b) fedaccel in process (``run.runtime: in-process``): one client after another;
(c) fedaccel stacked (``run.runtime: stacked``): K clients in one batched step; for the seeds row,
    the S seeds' federations stacked as well (what ``fedaccel experiment --stack-seeds`` does).

Each contender is warmed up once untimed, then timed ``--repeats`` times interleaved with the
others, its fastest time counting (other processes on a shared machine only add time); torch threads are pinned (``--threads``,
1 by default). The columns are microseconds per client-step and ratios against (a) from the same run;
``auto`` is the runtime ``run.runtime: auto`` picks for the row (``choose_runtime``, the rule fitted to
this grid: docs/architecture.md "Choosing the runtime"), and ``auto/faster`` its time over the faster of
(b) and (c); the line ``auto against the faster runtime: worst X`` gives the largest (goal: <= 1.10). The
final models of (a), (b) and (c) must agree. The last line is ``fedaccel/plain speed-up (svm, K=20): X``,
X = (a) / the faster of (b) and (c) (another K where 20 is not measured).

    python benchmarks/stacked.py [--threads 1] [--steps 5] [--models svm,2nn,cnn] [--ks 5,20,100] [--repeats 3]
    python benchmarks/stacked.py --batches 10,50   # every model at these batch sizes (default: its own)
    python benchmarks/stacked.py --device cuda     # on a GPU (the data and models live there)
    python benchmarks/stacked.py --smoke           # each model at K = 2 and 2 seeds x 2, 1 step, 1 repeat: a test
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import torch
import torch.nn.functional as F

from fedaccel.algorithms.base import ClientContext, make_rng
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.data import load_dataset
from fedaccel.data.splits import split
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, round_info, run_round
from fedaccel.engine.stacked import Job, StackedClients, train_jobs
from fedaccel.models import build_model
from fedaccel.runs.loop import choose_runtime

BATCH = {"svm": 100, "2nn": 50, "cnn": 50}
LR = {"svm": 0.01, "2nn": 0.05, "cnn": 0.05}


def make_federation(data: Any, model: str, clients: int, steps: int, seed: int, device: str,
                    batch: int | None = None) -> Federation:
    batch = batch or BATCH[model]
    n = clients * batch * 2
    parts = split("iid", data.y_train[:n].numpy(), clients, make_rng(seed, "split"))
    x, y = data.x_train[:n].to(device), data.y_train[:n].to(device)
    module = build_model(model, data.input_shape, 10, seed=seed).to(device)
    options = LocalOptions(lr=LR[model], batch_size=batch, local_steps=steps)
    fed = Federation(module, x, y, parts, x[:10], y[:10], options, seed=seed)
    fed.w0 = fed.model.theta.clone().to(device)  # type: ignore[attr-defined]  # in-process training moves model.theta
    return fed


def plain(feds: list[Federation], model: str, data: Any) -> list[torch.Tensor]:
    """One FedAvg round per federation, written without a framework."""
    results = []
    for fed in feds:
        net = build_model(model, data.input_shape, 10, seed=fed.seed).to(fed.x_train.device)
        params = list(net.parameters())
        start = [p.detach().clone() for p in params]
        average = [torch.zeros_like(p) for p in params]
        x, y = fed.x_train, fed.y_train
        for i in range(fed.n_clients):
            with torch.no_grad():
                for p, s in zip(params, start):
                    p.copy_(s)
            opt = torch.optim.SGD(params, lr=fed.options.lr)
            for index in fed.batches(i, 0, int(fed.steps[i])):
                idx = torch.from_numpy(index).to(x.device)
                opt.zero_grad()
                net.loss(net(x[idx]), y[idx]).backward()
                opt.step()
            with torch.no_grad():
                for acc, p in zip(average, params):
                    acc.add_(p, alpha=float(fed.weights[i]))
        results.append(torch.cat([a.reshape(-1) for a in average]))
    return results


def in_process(feds: list[Federation]) -> list[torch.Tensor]:
    algorithm = build_algorithm("fedavg")
    out = []
    for fed in feds:
        state = init_state(algorithm, fed.w0, fed.n_clients)
        out.append(run_round(algorithm, state, fed)[0].w)
    return out


def stacked(feds: list[Federation]) -> list[torch.Tensor]:
    algorithm = build_algorithm("fedavg")
    if len(feds) == 1:
        fed = feds[0]
        state = init_state(algorithm, fed.w0, fed.n_clients)
        runtime = StackedClients(algorithm, fed, state.clients)
        return [run_round(algorithm, state, fed, runtime=runtime)[0].w]
    jobs = []  # the seeds' client sides in one stacked computation, then each seed's server step
    for fed in feds:
        state = init_state(algorithm, fed.w0, fed.n_clients)
        info = round_info(fed, 0)
        contexts = [ClientContext(info, i, int(fed.steps[i]), True) for i in range(fed.n_clients)]
        jobs.append(Job(algorithm, fed, contexts, state.w, state.server, state.clients))
    train_jobs(jobs)
    aggregate = algorithm.parts[0].aggregate
    return [aggregate(job.contexts[0].info, job.w, job.updates) for job in jobs]  # type: ignore[misc]


def load() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(contenders: list[tuple[Any, tuple[Any, ...]]], repeats: int) -> list[tuple[float, list[torch.Tensor]]]:
    """Each contender warmed up once untimed, then timed ``repeats`` times, interleaved; the fastest
    time of each (on a shared machine other processes only ever add time)."""
    results = [fn(*args) for fn, args in contenders]  # warm-up
    best = [float("inf")] * len(contenders)
    for _ in range(repeats):
        for n, (fn, args) in enumerate(contenders):
            sync()
            started = time.perf_counter()
            results[n] = fn(*args)
            sync()
            best[n] = min(best[n], time.perf_counter() - started)
    return list(zip(best, results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5, help="local steps per client")
    parser.add_argument("--models", default="svm,2nn,cnn")
    parser.add_argument("--ks", default="5,20,100")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of the seeds row (x 20 clients); 0: none")
    parser.add_argument("--batches", default="", help="batch sizes, comma-separated (default: each model's own)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each contender; the fastest counts")
    parser.add_argument("--smoke", action="store_true", help="smallest size: K = 2, 2 seeds x 2, 1 step, 1 repeat "
                        "(a test, not a measurement)")
    args = parser.parse_args()
    seeds_k = 20
    if args.smoke:
        args.ks, args.seeds, args.steps, args.repeats, seeds_k = "2", 2, 1, 1, 2
    torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",")]
    largest = max([*BATCH.values(), *(int(b) for b in args.batches.split(",") if b)])
    data = load_dataset("fashion-mnist", subset=max(ks) * 2 * largest, test_subset=10)
    print(f"torch {torch.__version__}, {args.threads} thread(s), device {args.device}, {args.steps} local steps; "
          f"us per client-step (ratio vs plain); load average (1, 5, 15 min) before: {load()}")
    print(f"| model | batch | clients | plain | in process | stacked | auto picks | auto/faster |\n"
          "|---|---|---|---|---|---|---|---|")
    speedup: tuple[int, float] | None = None  # (K, ratio) of the svm row nearest K = 20 from below
    worst: tuple[float, str] = (0.0, "")  # auto's time over the faster runtime's, and where
    for model in args.models.split(","):
        rows = [(k, 1) for k in ks] + ([(seeds_k, args.seeds)] if args.seeds else [])
        batches = [int(b) for b in args.batches.split(",")] if args.batches else [BATCH[model]]
        for (k, seeds), batch in ((row, batch) for row in rows for batch in batches):
            feds = [make_federation(data, model, k, args.steps, seed, args.device, batch) for seed in range(seeds)]
            client_steps = sum(int(f.steps.sum()) for f in feds)
            (t_plain, w_plain), (t_engine, w_engine), (t_stacked, w_stacked) = timed(
                [(plain, (feds, model, data)), (in_process, (feds,)), (stacked, (feds,))], args.repeats)
            for a, b, c in zip(w_plain, w_engine, w_stacked):
                scale = float(a.abs().max()) + 1e-12
                assert float((a - b).abs().max()) <= 1e-3 * scale, "in process and plain disagree"
                assert float((a - c).abs().max()) <= 1e-3 * scale, "stacked and plain disagree"
            runtime, _ = choose_runtime("auto", feds[0], k)
            us = [1e6 * t / client_steps for t in (t_plain, t_engine, t_stacked)]
            label = f"{k}" if seeds == 1 else f"{seeds} seeds x {k}"
            auto = (t_stacked if runtime == "stacked" else t_engine) / min(t_engine, t_stacked)
            if seeds == 1 and auto > worst[0]:  # seeds rows are stacked by --stack-seeds, not by auto
                worst = (auto, f"{model}, batch {batch}, K={k}")
            print(f"| {model} | {batch} | {label} | {us[0]:.0f} | {us[1]:.0f} ({t_plain / t_engine:.2f}x) | "
                  f"{us[2]:.0f} ({t_plain / t_stacked:.2f}x) | {runtime} | {auto:.2f} |", flush=True)
            if model == "svm" and seeds == 1 and (speedup is None or speedup[0] < k <= 20):
                speedup = (k, t_plain / min(t_engine, t_stacked))
    print(f"load average (1, 5, 15 min) after: {load()}")
    if worst[1]:
        print(f"auto against the faster runtime: worst {worst[0]:.2f}x ({worst[1]}; goal <= 1.10)")
    if speedup is not None:
        print(f"fedaccel/plain speed-up (svm, K={speedup[0]}): {speedup[1]:.2f}")


if __name__ == "__main__":
    main()
