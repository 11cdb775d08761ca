"""Scale: time per client-round and peak memory from 10 to 10,000 clients, in process and stacked.

FedAvg on Fashion-MNIST, every client holding 20 samples (client i: samples 20 i ... 20 i + 19, modulo the
data, so 10,000 clients reuse a 60,000-sample set), batch 10, one epoch (2 local steps), every client
trained every round; the SVM and the 2NN. Each (model, clients, runtime) runs in a fresh process with torch
pinned to ``--threads`` (1): a warm-up round, then a timed one. Memory is that process's peak resident set
during the two rounds (``/proc/self/clear_refs`` resets the peak once the federation is built) minus its
resident set just before them: what the rounds add to the model and the data (the client order caches and,
in process, the batches laid out once per client included; with glibc's dynamic mmap threshold, freed
blocks kept in the heap count too: ``--mmap-threshold 131072`` fixes it, to tell the two apart).
``stored`` rows keep every update until aggregation (``run_round(stream=False)``, today's path for parts
without a fold form) to show what the streamed aggregation saves. Rows are interleaved (every runtime
of a row before the next row); the load average is printed before and after, and figures are worth
comparing as ratios within one run. The table and what it shows: docs/architecture.md "Scale".

    python benchmarks/scale.py [--clients 10,100,1000,10000] [--models svm,2nn] [--stored-at 10,1000]
    python benchmarks/scale.py --mmap-threshold 131072   # glibc's heap retention left out of the memory
    python benchmarks/scale.py --device cuda --runtimes stacked --clients 100,1000,10000 --stored-at ""
    python benchmarks/scale.py --smoke      # 2 and 4 clients, in this process: a test, not a measurement
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SAMPLES, BATCH, LR = 20, 10, {"svm": 0.01, "2nn": 0.05}
RUNTIMES = ("in-process", "stacked")


def federation(model: str, clients: int, data: Any, device: str = "cpu") -> Any:
    import numpy as np

    from fedaccel.engine.federation import Federation
    from fedaccel.engine.local import LocalOptions
    from fedaccel.models import build_model

    n = len(data.y_train)
    parts = [(np.arange(SAMPLES) + SAMPLES * i) % n for i in range(clients)]
    module = build_model(model, data.input_shape, 10, seed=0).to(device)
    options = LocalOptions(lr=LR[model], batch_size=BATCH, local_epochs=1.0)
    x, y, xt, yt = (t.to(device) for t in (data.x_train, data.y_train, data.x_test, data.y_test))
    return Federation(module, x, y, parts, xt, yt, options, seed=0)


@functools.lru_cache(maxsize=2)
def dataset(samples: int) -> Any:
    from fedaccel.data import load_dataset

    return load_dataset("fashion-mnist", subset=samples, test_subset=10)


def memory_mb(field: str) -> float:
    """``VmRSS`` or ``VmHWM`` of this process in MB (the peak from getrusage where /proc has none)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: the peak RSS starts again from the current one
    except OSError:
        pass


def measure(model: str, clients: int, runtime: str, stream: bool, threads: int, device: str = "cpu"
            ) -> dict[str, float]:
    """One federation's warm-up round and timed round; seconds per client-round and MB the rounds added
    (on a GPU: of GPU memory, ``torch.cuda.max_memory_allocated``, and the peak is the GPU's)."""
    import torch

    from fedaccel.algorithms.registry import build_algorithm
    from fedaccel.engine.round import init_state, run_round
    from fedaccel.engine.stacked import StackedClients

    torch.set_num_threads(threads)
    data = dataset(min(60000, clients * SAMPLES))
    fed = federation(model, clients, data, device)
    algorithm = build_algorithm("fedavg")
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    engine = StackedClients(algorithm, fed, state.clients) if runtime == "stacked" else None
    gpu = device.startswith("cuda")
    reset_peak()
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated() / 2**20 if gpu else memory_mb("VmRSS")
    state, _ = run_round(algorithm, state, fed, fraction=1.0, runtime=engine, stream=stream)  # warm-up
    if gpu:
        torch.cuda.synchronize()
    began = time.perf_counter()
    state, _ = run_round(algorithm, state, fed, fraction=1.0, runtime=engine, stream=stream)
    if gpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - began
    assert bool(torch.isfinite(state.w).all())
    peak = torch.cuda.max_memory_allocated() / 2**20 if gpu else memory_mb("VmHWM")
    return {"s_per_client": seconds / clients, "added_mb": peak - start, "peak_mb": peak}


def in_fresh_process(model: str, clients: int, runtime: str, stream: bool, threads: int, device: str = "cpu",
                     mmap_threshold: int | None = None) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if mmap_threshold:  # glibc: a fixed threshold (no dynamic raise), so freed blocks above it go back to the system
        env["MALLOC_MMAP_THRESHOLD_"] = str(mmap_threshold)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, __file__, "--one", json.dumps([model, clients, runtime, stream, threads, device])],
                          capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def load() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="10,100,1000,10000")
    parser.add_argument("--models", default="svm,2nn")
    parser.add_argument("--stored-at", default="10,1000", help="client counts that also get a stored-updates row")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (then memory is the GPU's: "
                        "torch.cuda.max_memory_allocated)")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help="in-process,stacked (default: both)")
    parser.add_argument("--mmap-threshold", type=int, default=0,
                        help="glibc MALLOC_MMAP_THRESHOLD_ for the measured processes (0: the allocator as it is)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child: measure one row, print it as JSON
    parser.add_argument("--smoke", action="store_true", help="2 and 4 clients in this process (a test)")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*json.loads(args.one))))
        return
    run = functools.partial(in_fresh_process, mmap_threshold=args.mmap_threshold)
    if args.smoke:
        args.clients, args.stored_at, run = "2,4", "4", measure
    counts = [int(k) for k in args.clients.split(",")]
    runtimes = args.runtimes.split(",")
    stored_at = {int(k) for k in args.stored_at.split(",") if k}
    allocator = f"MALLOC_MMAP_THRESHOLD_={args.mmap_threshold}" if args.mmap_threshold else "glibc malloc as it is"
    where = f"device {args.device}" + (" (MB: GPU memory)" if args.device.startswith("cuda") else "")
    print(f"FedAvg, {SAMPLES} samples a client, batch {BATCH}, 1 epoch; {where}; {args.threads} torch thread(s); {allocator}; "
          f"load average (1, 5, 15 min) before: {load()}")
    print("| model | clients | runtime | aggregation | ms per client-round | MB the rounds add | peak RSS MB |\n"
          "|---|---|---|---|---|---|---|")
    added: dict[tuple[str, str, int], float] = {}
    for model in args.models.split(","):
        for k in counts:
            rows = [(runtime, True) for runtime in runtimes] + ([("in-process", False)] if k in stored_at else [])
            for runtime, stream in rows:
                got = run(model, k, runtime, stream, args.threads, args.device)
                if stream:
                    added[(model, runtime, k)] = got["added_mb"]
                print(f"| {model} | {k} | {runtime} | {'streamed' if stream else 'stored'} | "
                      f"{1e3 * got['s_per_client']:.3f} | {got['added_mb']:.1f} | {got['peak_mb']:.0f} |", flush=True)
    print(f"load average (1, 5, 15 min) after: {load()}")
    low, high = min(counts), max(k for k in counts if k <= 1000)
    for model in args.models.split(","):
        for runtime in runtimes:
            extra = added[(model, runtime, high)] - added[(model, runtime, low)]
            print(f"{model} {runtime}: memory the rounds add at {high} clients minus at {low}: {extra:.1f} MB "
                  "(goal <= 100)")


if __name__ == "__main__":
    main()
