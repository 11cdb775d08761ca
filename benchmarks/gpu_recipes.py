"""Every recipe for a few rounds on ``run.device=cuda`` against ``run.device=cpu``: the same numbers.

Fashion-MNIST (a seeded subset), squared-SVM, Case 2, 5 clients, 3 rounds; then one BHerd CNN run at
the paper's Case 2 settings (full training set, B = 100, E = 1, η = 1e-4) on the GPU for as long as
five rounds take, which prints seconds per round and the peak GPU memory.

    python benchmarks/gpu_recipes.py [--rounds 3] [--device cuda] [--cnn-rounds 5] [--runtimes in-process,stacked] [--composed]
    python benchmarks/gpu_recipes.py --smoke    # 2 recipes, 1 round, no CNN; cuda where there is one, else cpu: a test
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from fedaccel.algorithms.registry import RECIPES
from fedaccel.launch import run
from fedaccel.runs.config import load_config

SMALL = ["model=svm", "data.dataset=fashion-mnist", "data.split=case2", "data.clients=5", "train.client_fraction=0.6", "data.subset=3000",
         "data.test_subset=1000", "eval.train_samples=1000", "train.lr=0.001", "train.batch_size=50",
         "run.progress=false"]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines() if line.strip()]


# compositions and the authors'-code presets, beside the plain recipes (each a list of overrides)
COMPOSED = {
    "bherd+adam": ["algorithm=bherd", "algorithm.server_opt=adam", "algorithm.server_opt.lr=0.01"],
    "fedumf+yogi": ["algorithm=fedumf", "algorithm.server_opt=yogi", "algorithm.server_opt.lr=0.01"],
    "fedgsnr+trimmed_mean": ["algorithm=fedgsnr", "algorithm.aggregate=trimmed_mean"],
    "fedavg+krum": ["algorithm=fedavg", "algorithm.aggregate=krum"],
    "scaffold/feddc-code": ["algorithm=scaffold", "algorithm.preset=feddc-code"],
    "fednova/fednova-code": ["algorithm=fednova", "algorithm.preset=fednova-code"],
}


def compare_recipes(rounds: int, device: str, out: Path, cases: dict[str, list[str]], runtimes: list[str]) -> int:
    """Each case on ``device`` under each runtime against the CPU in process; prints the largest gap."""
    failures = 0
    for name, overrides in cases.items():
        got = {}
        for where, runtime in dict.fromkeys([("cpu", "in-process"), *((device, r) for r in runtimes)]):
            config = load_config(None, [*SMALL, *overrides, f"train.rounds={rounds}", f"run.device={where}",
                                        f"run.runtime={runtime}"])
            got[where, runtime] = rows(run(config, out / f"{name.replace('/', '-')}-{where}-{runtime}", progress=False))
        for (where, runtime), got_rows in got.items():
            if (where, runtime) == ("cpu", "in-process") and len(got) > 1:
                continue
            gap = max(abs(a[k] - b[k]) for a, b in zip(got["cpu", "in-process"], got_rows, strict=True)
                      for k in ("test_loss", "test_acc", "train_loss") if k in a and a[k] is not None)
            ok = gap <= 1e-4
            failures += not ok
            print(f"{name:22s} {runtime:10s} largest |cpu - {device}| over {rounds} rounds' loss/accuracy: {gap:.2e} "
                  f"{'ok' if ok else 'DIFFERS'}", flush=True)
    return failures


def cnn_paper_case2(rounds: int, device: str, out: Path) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    overrides = ["algorithm=bherd", "model=cnn", "data.dataset=fashion-mnist", "data.split=case2", "data.clients=5",
                 "train.lr=0.0001", "train.batch_size=100", "train.local_epochs=1", "eval.every=5",
                 "eval.train_samples=10000", f"run.device={device}", "run.progress=false"]
    started = time.perf_counter()
    probe = rows(run(load_config(None, [*overrides, "train.rounds=1"]), out / "cnn-1", progress=False))
    first = time.perf_counter() - started
    started = time.perf_counter()
    done = rows(run(load_config(None, [*overrides, f"train.rounds={rounds}"]), out / "cnn-5", progress=False))
    took = time.perf_counter() - started
    print(f"BHerd CNN, Case 2, full Fashion-MNIST, B=100, E=1 (120 steps/client): 1 round incl. start {first:.1f} s; "
          f"{rounds} rounds {took:.1f} s = {took / rounds:.2f} s/round wall (eval every 5); "
          f"wall_s of the last row {done[-1].get('wall_s')}; acc {done[-1].get('test_acc')}; probe {probe[-1].get('test_acc')}")
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
    print(f"peak GPU memory: {peak:.0f} MiB; the full paper run (500 rounds) would take about "
          f"{500 * took / rounds / 60:.0f} min", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda", help="compared against cpu")
    parser.add_argument("--recipes", default="", help="comma-separated; default: every recipe")
    parser.add_argument("--runtimes", default="in-process", help="comma-separated runtimes run on --device")
    parser.add_argument("--composed", action="store_true", help="also the compositions and code presets")
    parser.add_argument("--cnn-rounds", type=int, default=5, help="rounds of the timed BHerd CNN run; 0: none")
    parser.add_argument("--smoke", action="store_true", help="smallest size: fedavg and scaffold, 1 round, no CNN")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.cnn_rounds, args.recipes = 1, 0, "fedavg,scaffold"
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as folder:
        names = args.recipes.split(",") if args.recipes else sorted(RECIPES)
        cases = {name: [f"algorithm={name}"] for name in names} | (COMPOSED if args.composed else {})
        failures = compare_recipes(args.rounds, args.device, Path(folder), cases, args.runtimes.split(","))
        print(f"{failures} recipe(s) differ between cpu and {args.device}", flush=True)
        if args.cnn_rounds:
            cnn_paper_case2(args.cnn_rounds, args.device, Path(folder))
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
