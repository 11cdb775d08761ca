"""Runtime overhead: the demo workload in process, on Flower's simulation engine, and deployed.

The demo config (FedAvg, squared-SVM, Fashion-MNIST, Case 2, 5 clients, its 60 rounds or
``--rounds``) runs three times in this one script: the in-process runtime, ``run.runtime:
flower-simulation`` and ``fedaccel deploy`` (a SuperLink and 5 SuperNode processes on
loopback). Each is timed from the call to the finished run folder (start-up included), and by
the run's own ``wall_s`` (the rounds only). The three must give the same test accuracy.

    python benchmarks/runtime_overhead.py [--rounds 60] [--algorithm fedavg] [--smoke]

``--smoke``: 2 clients, 2 rounds, 1,000 samples, to check that the script runs (its figures then mean nothing).

Goal (issue 6): deployment at most 3x in process. Absolute times drift on a shared machine;
the ratios of one run are what to compare.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from fedaccel.flower.deploy import deploy
from fedaccel.launch import run
from fedaccel.runs.config import load_config

ROOT = Path(__file__).resolve().parents[1]
GOAL = 3.0


def last_row(path: Path) -> dict:
    return json.loads((path / "metrics.jsonl").read_text().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="default: the demo's")
    parser.add_argument("--algorithm", default="fedavg")
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: 2 clients, 2 rounds, 1,000 samples (a test, not a measurement)")
    args = parser.parse_args()
    overrides = [f"algorithm={args.algorithm}", "run.progress=false"]
    if args.smoke:
        args.rounds = 2
        overrides += ["data.clients=2", "data.subset=1000", "data.test_subset=200", "eval.train_samples=200"]
    if args.rounds:
        overrides.append(f"train.rounds={args.rounds}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, runtime in (("in-process", "in-process"), ("simulation", "flower-simulation"),
                              ("deployment", "flower-deployment")):
            config = load_config(ROOT / "configs" / "demo.yaml", [*overrides, f"run.runtime={runtime}"])
            started = time.perf_counter()
            if name == "deployment":
                path = deploy(config, Path(tmp) / name)
            else:
                path = run(config, Path(tmp) / name)
            total = time.perf_counter() - started
            row = last_row(path)
            results[name] = (total, row["wall_s"], row["test_acc"])
            print(f"{name:10s}: {total:7.1f} s in all, {row['wall_s']:7.1f} s in rounds, "
                  f"test accuracy {row['test_acc']:.4f}", flush=True)
    base_total, base_rounds, base_acc = results["in-process"]
    for name in ("simulation", "deployment"):
        total, rounds, acc = results[name]
        assert abs(acc - base_acc) < 1e-5, f"{name} ended at {acc}, in process at {base_acc}"
        print(f"ratio {name}/in-process: {total / base_total:.2f} in all, {rounds / base_rounds:.2f} in rounds")
    ratio = results["deployment"][1] / base_rounds
    print(f"deployment/in-process (rounds): {ratio:.2f}  (goal <= {GOAL:g}) {'OK' if ratio <= GOAL else 'ABOVE GOAL'}")


if __name__ == "__main__":
    main()
