"""Runtime overhead: the demo workload in process, stacked, on Flower's simulation engine, and deployed.

The demo config (FedAvg, squared-SVM, Fashion-MNIST, Case 2, 5 clients, its 60 rounds or
``--rounds``) runs four ways in this one script: the in-process runtime, ``run.runtime:
stacked``, ``run.runtime: flower-simulation`` and ``fedaccel deploy`` (a SuperLink and 5
SuperNode processes on loopback). Each is timed from the call to the finished run folder
(start-up included) and by the run's own ``wall_s`` (the rounds only); both are printed as
seconds per round, with their ratio to in process. Repetitions are interleaved (each repetition
runs the four in turn, the order rotated), the figures are the medians over them, torch runs
one thread everywhere, and the load average is printed before and after (a shared machine's
figures drift; compare the ratios of one run). All four must end at the same test accuracy.

    python benchmarks/runtime_overhead.py [--rounds 60] [--repeats 3] [--algorithm fedavg] [--smoke]

``--smoke``: 2 clients, 2 rounds, 1,000 samples, one repetition, to check that the script runs
(its figures then mean nothing).

Goals (issue 23): deployment at most 0.1 s a round beyond in process, simulation at most 1.5x
in process, in rounds.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "FEDACCEL_TORCH_THREADS"):
    os.environ[_name] = "1"  # before torch is imported, here and in every process started from here

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from fedaccel.flower.deploy import deploy  # noqa: E402
from fedaccel.launch import run  # noqa: E402
from fedaccel.runs.config import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = {"in-process": "in-process", "stacked": "stacked", "simulation": "flower-simulation",
            "deployment": "flower-deployment"}
DEPLOYMENT_GOAL = 0.1  # seconds a round beyond in process
SIMULATION_GOAL = 1.5  # x in process


def last_row(path: Path) -> dict:
    return json.loads((path / "metrics.jsonl").read_text().splitlines()[-1])


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def once(name: str, overrides: list[str], folder: Path) -> tuple[float, float, float]:
    """One run: (seconds in all, seconds in rounds, final test accuracy)."""
    config = load_config(ROOT / "configs" / "demo.yaml", [*overrides, f"run.runtime={RUNTIMES[name]}"])
    started = time.perf_counter()
    path = deploy(config, folder) if name == "deployment" else run(config, folder)
    total = time.perf_counter() - started
    row = last_row(path)
    return total, float(row["wall_s"]), float(row["test_acc"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="default: the demo's")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repetitions (median reported)")
    parser.add_argument("--algorithm", default="fedavg")
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: 2 clients, 2 rounds, 1,000 samples, 1 repetition (a test, not a measurement)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    overrides = [f"algorithm={args.algorithm}", "run.progress=false"]
    if args.smoke:
        args.rounds, args.repeats = 2, 1
        overrides += ["data.clients=2", "data.subset=1000", "data.test_subset=200", "eval.train_samples=200"]
    if args.rounds:
        overrides.append(f"train.rounds={args.rounds}")
    rounds = load_config(ROOT / "configs" / "demo.yaml", overrides).train.rounds
    print(f"load average (1, 5, 15 min) before: {load()}; {os.cpu_count()} cores; torch threads 1; "
          f"{rounds} rounds, {args.repeats} interleaved repetition(s)", flush=True)
    names = list(RUNTIMES)
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                total, in_rounds, acc = once(name, overrides, Path(tmp) / f"{name}-{rep}")
                results[name].append((total, in_rounds, acc))
                print(f"  repetition {rep + 1} {name:10s}: {total / rounds:.4f} s/round with start-up, "
                      f"{in_rounds / rounds:.4f} s/round in rounds, test accuracy {acc:.4f}  (load {load()})",
                      flush=True)
    median = {name: (statistics.median(r[0] for r in runs) / rounds, statistics.median(r[1] for r in runs) / rounds)
              for name, runs in results.items()}
    base_total, base_rounds = median["in-process"]
    base_acc = results["in-process"][0][2]
    print(f"\nseconds per round, median of {args.repeats} (load average after: {load()})")
    print("| runtime | in rounds | / in process | with start-up | / in process |\n|---|---:|---:|---:|---:|")
    for name in names:
        total, in_rounds = median[name]
        print(f"| {name} | {in_rounds:.4f} | {in_rounds / base_rounds:.2f} | {total:.4f} | {total / base_total:.2f} |")
    for name in names[1:]:
        for _, _, acc in results[name]:
            assert abs(acc - base_acc) < 1e-3 if name == "stacked" else abs(acc - base_acc) < 1e-5, \
                f"{name} ended at {acc}, in process at {base_acc}"
        total, in_rounds = median[name]
        print(f"ratio {name}/in-process: {total / base_total:.2f} with start-up, {in_rounds / base_rounds:.2f} in rounds")
    ratio = median["simulation"][1] / base_rounds
    beyond = median["deployment"][1] - base_rounds
    print(f"simulation/in-process (rounds): {ratio:.2f}  (goal <= {SIMULATION_GOAL:g}) "
          f"{'OK' if ratio <= SIMULATION_GOAL else 'ABOVE GOAL'}")
    print(f"deployment beyond in process: {beyond:.4f} s/round  (goal <= {DEPLOYMENT_GOAL:g}) "
          f"{'OK' if beyond <= DEPLOYMENT_GOAL else 'ABOVE GOAL'}")


if __name__ == "__main__":
    main()
