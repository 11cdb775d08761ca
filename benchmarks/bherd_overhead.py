"""BHerd overhead: one round of BHerd-FedAvg against one round of FedAvg, both through the engine.

BHerd CNN on a Fashion-MNIST subset, 5 clients (iid split), batch 50, E = 1, so with the default
25000 samples every client runs tau = 100 local steps; alpha = 0.5. Both variants do the same SGD
steps; BHerd also stores each client's tau x d matrix of step directions and herds it.

    python benchmarks/bherd_overhead.py [--samples 25000] [--repeats 3] [--threads N] [--smoke]

``--smoke``: 500 samples (tau = 2), one repeat, one thread, to check that the script runs (its figures
then mean nothing).

Time: the rounds run in this process, alternating between the two variants (and which goes
first), and the ratio is of the medians, since the machine may be shared; the ratio of the
process CPU times (all threads, ``time.process_time``) is printed too, being less disturbed by
other processes competing for the cores. The BHerd rounds run the recipe built by
``build_algorithm("bherd", alpha=0.5)`` with its estimator wrapped in a stopwatch, so the time
spent storing directions (``observe``) and herding (``finish``) is printed as well: BHerd's own
work measured directly, less sensitive to a noisy machine than the ratio. On a machine shared
with other torch processes use ``--threads 1``: two processes of 2 OpenMP threads each on 2
cores made rounds 2-5x slower and the ratio meaningless (0.51 once), while one thread kept
the rounds within 10% of each other.

Memory: the engine trains clients one after another, so BHerd holds one client's tau x d float32
matrix at a time. Each variant's round runs once in a fresh interpreter (after a few warm-up SGD
steps); the peak growth is VmHWM after the round minus VmRSS just before it, with the high-water
mark reset first (``/proc/self/clear_refs``). BHerd's extra memory is the difference of the two.
At the default tau = 100 the matrix (164 MiB) is always a fresh mmap; a small --samples puts it
under glibc's 32 MiB mmap ceiling, where heap reuse moves the difference by several MiB
(1.1-2.0 x tau d 4 seen at tau = 10, exactly 1.00 x with MALLOC_MMAP_THRESHOLD_=131072).

Goals (issue 3): time ratio bherd/fedavg at most 1.15; extra memory at most 1.2 tau d 4 bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import statistics
import subprocess
import sys
import time
from typing import Any

import torch

from fedaccel.algorithms.base import Algorithm, make_rng
from fedaccel.algorithms.bherd import selected_count
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.data import load_dataset
from fedaccel.data.splits import split
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions, train_local
from fedaccel.engine.round import init_state, run_round
from fedaccel.models import build_model

CLIENTS, BATCH, LR, ALPHA = 5, 50, 0.05, 0.5
TIME_GOAL, MEMORY_GOAL = 1.15, 1.2
VARIANTS = {"fedavg": {}, "bherd": {"alpha": ALPHA}}


def make_federation(samples: int) -> Federation:
    data = load_dataset("fashion-mnist", subset=samples, test_subset=500)
    parts = split("iid", data.y_train.numpy(), CLIENTS, make_rng(0, "split"))
    return Federation(
        build_model("cnn", data.input_shape, 10), data.x_train, data.y_train, parts,
        data.x_test, data.y_test, LocalOptions(lr=LR, batch_size=BATCH, local_epochs=1.0),
    )


# --- time ---------------------------------------------------------------------------------------


class Stopwatch:
    """Wall and CPU seconds spent in the BHerd estimators' ``observe`` and ``finish`` calls."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seconds = {"observe": [0.0, 0.0], "finish": [0.0, 0.0]}  # [wall, cpu]

    def add(self, key: str, wall: float, cpu: float) -> None:
        self.seconds[key][0] += time.perf_counter() - wall
        self.seconds[key][1] += time.process_time() - cpu

    def wrap(self, algorithm: Algorithm) -> Algorithm:
        parts = tuple(
            dataclasses.replace(p, estimator=self._timed(p.estimator)) if p.estimator is not None else p
            for p in algorithm.parts
        )
        return Algorithm(algorithm.name, parts)

    def _timed(self, factory: Any) -> Any:
        watch = self

        class Timed:
            def __init__(self, inner: Any) -> None:
                self.inner = inner

            def observe(self, step: int, direction: torch.Tensor) -> None:
                wall, cpu = time.perf_counter(), time.process_time()
                self.inner.observe(step, direction)
                watch.add("observe", wall, cpu)

            def finish(self, full_update: torch.Tensor) -> Any:
                wall, cpu = time.perf_counter(), time.process_time()
                result = self.inner.finish(full_update)
                watch.add("finish", wall, cpu)
                return result

        return lambda ctx, dim: Timed(factory(ctx, dim))


def timed_round(algorithm: Algorithm, federation: Federation, w0: torch.Tensor) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process's threads, report) of one round from w0."""
    state = init_state(algorithm, w0, federation.n_clients)
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    state, report = run_round(algorithm, state, federation)
    return time.perf_counter() - wall, time.process_time() - cpu, report


# --- memory (in a fresh interpreter per variant) ------------------------------------------------


def status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def memory_child(name: str, samples: int) -> None:
    """Run one round of ``name`` and print its peak resident growth as one JSON line."""
    federation = make_federation(samples)
    w0 = federation.model.theta.clone()
    # Warm-up: the first forward/backward passes allocate workspaces both variants share.
    warm = federation.batches(0, 0, 3)
    train_local(federation.model, federation.x_train, federation.y_train, warm, w0,
                federation.loss_fn, LR, federation.options)
    algorithm = build_algorithm(name, **VARIANTS[name])
    state = init_state(algorithm, w0, federation.n_clients)
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current VmRSS
        reset = True
    except OSError:
        reset = False
    before, hwm_before = status_kib("VmRSS"), status_kib("VmHWM")
    started = time.perf_counter()
    state, report = run_round(algorithm, state, federation)
    elapsed = time.perf_counter() - started
    peak = status_kib("VmHWM")
    stored = [c["memory_bytes"] for c in report.diag.get("clients", {}).values()]
    print(json.dumps({
        "variant": name, "rss_before_kib": before, "hwm_before_kib": hwm_before, "hwm_after_kib": peak,
        "growth_bytes": (peak - before) * 1024, "hwm_reset": reset, "seconds": elapsed,
        "stored_bytes": max(stored, default=0),
    }))


def measure_memory(name: str, samples: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--memory-child", name, "--samples", str(samples),
         "--threads", str(torch.get_num_threads())],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory run of {name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=25000, help="training samples, split over 5 clients")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of each variant for the time ratio")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--memory-child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: 500 samples, 1 repeat (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.samples, args.repeats, args.threads = 500, 1, 1
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(args.memory_child, args.samples)
        return

    federation = make_federation(args.samples)
    w0 = federation.model.theta.clone()
    d, tau = federation.model.size, int(federation.steps.max())
    matrix = tau * d * 4
    print(f"BHerd-FedAvg (alpha {ALPHA}) vs FedAvg, one round: BHerd CNN (d = {d}), {CLIENTS} clients, "
          f"tau = {federation.steps.tolist()}, batch {BATCH}, torch threads {torch.get_num_threads()}")
    print(f"one client's stored directions tau*d*4 = {matrix} bytes ({mib(matrix)})")

    # Memory first, one fresh interpreter per variant, nothing else of ours running meanwhile.
    memory = {name: measure_memory(name, args.samples) for name in ("fedavg", "bherd")}
    for name, m in memory.items():
        note = "" if m["hwm_reset"] else "  (VmHWM could not be reset: an upper bound)"
        print(f"memory {name:6s}: peak growth during the round {mib(m['growth_bytes'])} "
              f"(RSS before {mib(m['rss_before_kib'] * 1024)}, round took {m['seconds']:.1f} s){note}")
    assert memory["bherd"]["stored_bytes"] == matrix, "BHerd's memory_bytes diagnostic is not tau*d*4"

    # Time: alternate the variants and which one goes first.
    watch = Stopwatch()
    algorithms = {"fedavg": build_algorithm("fedavg"), "bherd": watch.wrap(build_algorithm("bherd", alpha=ALPHA))}
    wall: dict[str, list[float]] = {"fedavg": [], "bherd": []}
    cpu: dict[str, list[float]] = {"fedavg": [], "bherd": []}
    inside: dict[str, list[list[float]]] = {"observe": [], "finish": []}
    for r in range(args.repeats):
        for name in ("fedavg", "bherd") if r % 2 == 0 else ("bherd", "fedavg"):
            watch.reset()
            seconds, cpu_seconds, report = timed_round(algorithms[name], federation, w0)
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)
            if name == "bherd":
                for key, spent in inside.items():
                    spent.append(watch.seconds[key])
                k = {len(c["selected"]) for c in report.diag["clients"].values()}
                assert k == {selected_count(ALPHA, tau)}, f"unexpected herd sizes {k}"
    extra = memory["bherd"]["growth_bytes"] - memory["fedavg"]["growth_bytes"]

    def median(values: list[float]) -> float:
        return statistics.median(values)

    for label, table in (("wall", wall), ("CPU", cpu)):
        print(f"{label:4s} s per round: fedavg {', '.join(f'{t:.2f}' for t in table['fedavg'])}; "
              f"bherd {', '.join(f'{t:.2f}' for t in table['bherd'])}")
    for column, label in ((0, "wall"), (1, "CPU")):
        observe = median([s[column] for s in inside["observe"]])
        finish = median([s[column] for s in inside["finish"]])
        base = median(wall["fedavg"] if column == 0 else cpu["fedavg"])
        print(f"inside BHerd's rounds ({label}, median): storing directions {observe:.2f} s, "
              f"herding {finish:.2f} s = {(observe + finish) / base:.1%} of a FedAvg round")
    ratio = median(wall["bherd"]) / median(wall["fedavg"])
    cpu_ratio = median(cpu["bherd"]) / median(cpu["fedavg"])
    print(f"fedavg {median(wall['fedavg']):.2f} s, bherd {median(wall['bherd']):.2f} s "
          f"(wall, median of {args.repeats}, alternating)")
    print(f"time ratio bherd/fedavg: {ratio:.3f}  (goal <= {TIME_GOAL:.2f}) "
          f"{'OK' if ratio <= TIME_GOAL else 'ABOVE GOAL'}")
    print(f"CPU-time ratio bherd/fedavg: {cpu_ratio:.3f}  (the same goal; less sensitive to other "
          f"processes on the cores) {'OK' if cpu_ratio <= TIME_GOAL else 'ABOVE GOAL'}")
    spread = max(max(t) / min(t) for t in wall.values())
    if spread > 1.3:
        print(f"warning: the rounds of one variant differ by up to {spread:.2f}x, so the ratio is unreliable; "
              "on a machine shared with other torch processes, --threads 1 avoids OpenMP oversubscription")
    print(f"peak memory growth: fedavg {mib(memory['fedavg']['growth_bytes'])}, "
          f"bherd {mib(memory['bherd']['growth_bytes'])}")
    print(f"BHerd extra memory: {mib(extra)} = {extra / matrix:.3f} x tau*d*4  "
          f"(goal <= {MEMORY_GOAL:.1f} x = {mib(MEMORY_GOAL * matrix)}) "
          f"{'OK' if extra <= MEMORY_GOAL * matrix else 'ABOVE GOAL'}")


if __name__ == "__main__":
    main()
