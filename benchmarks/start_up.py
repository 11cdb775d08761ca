"""A fresh process's start: importing fedaccel's client side and building a digits run's setup.

Every Flower ClientApp and SuperNode, every grid worker and every ``fedaccel`` command starts this way. Two
fresh interpreters are timed, alternated, each ``--repeats`` times (median reported):

- **fedaccel**: ``import fedaccel.flower.client``, then ``build_setup`` of a digits config (as a ClientApp's hello);
- **as before**: the same, plus what fedaccel no longer pays at start: ``import sklearn.datasets`` (digits were
  read with ``load_digits``) and ``to_empty`` of a meta-built model (its ``empty_like`` imports sympy).

Prints the seconds of each and the ratio fedaccel / as before (below 1: faster).

    python benchmarks/start_up.py [--repeats 5] [--smoke]

``--smoke``: one repeat and no untimed first start, to check that the script runs (its figures then mean nothing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUP = ("import fedaccel.flower.client\n"
         "from fedaccel.runs.config import load_config\n"
         "from fedaccel.runs.setup import build_setup\n"
         "build_setup(load_config(None, ['data.dataset=digits', 'model=softmax', 'data.clients=3']))\n")
BEFORE = ("import sklearn.datasets, torch\n"
          "with torch.device('meta'):\n"
          "    model = torch.nn.Linear(64, 10)\n"
          "model.to_empty(device='cpu')\n")
WAYS = {"fedaccel": SETUP, "as before": SETUP + BEFORE}


def timed(code: str) -> float:
    """Seconds a fresh interpreter takes to run ``code`` and exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true",
                        help="one repeat, no untimed first start (a test, not a measurement)")
    args = parser.parse_args()
    repeats = 1 if args.smoke else args.repeats
    print(f"load average (1, 5, 15 min) before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"{os.cpu_count()} cores; {repeats} interleaved repetition(s)", flush=True)
    if not args.smoke:  # a fresh interpreter importing torch costs seconds of CPU: not for a figure that means nothing
        timed(SETUP)  # untimed: the file cache warm for both
    seconds: dict[str, list[float]] = {name: [] for name in WAYS}
    for rep in range(repeats):
        names = list(WAYS) if rep % 2 == 0 else list(WAYS)[::-1]
        for name in names:
            seconds[name].append(timed(WAYS[name]))
    median = {name: statistics.median(values) for name, values in seconds.items()}
    for name, value in median.items():
        print(f"{name}: {value:.2f} s (median of {repeats}: {', '.join(f'{v:.2f}' for v in seconds[name])})")
    print(f"ratio fedaccel/as before: {median['fedaccel'] / median['as before']:.2f}; load average (1 min) "
          f"at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
