"""The cost of keeping a Flower client's states after every round it trains (``fedaccel.flower.client.keep_states``).

Since 2026-12-01 a Flower client of a method with client states (SCAFFOLD, FedDyn, FedDC, FedUMF) writes them after
every round it trains, not only at checkpoint rounds, so that a crash resumes every client exactly. This script
trains clients in process as a Flower client does (``train_client``), a round of ``--clients`` clients at a time,
and writes each one's states as the ClientApp now does (atomically: fsynced and renamed, older rounds deleted),
timing both. It prints, per recipe and model, the milliseconds of each a client-round and the ratio keep/train
(median of the per-repeat ratios), with the load average.

    python benchmarks/client_states.py [--models 2nn,cnn] [--recipes scaffold,fedumf-feddc] [--clients 5]
                                       [--rounds 3] [--repeats 3] [--smoke]

``--smoke``: the 2NN and SCAFFOLD, 2 clients, one round of 250 samples, one repeat, to check that the script runs
(its figures then mean nothing).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from fedaccel.engine.round import InProcessClients, init_state, run_round
from fedaccel.flower.client import keep_states
from fedaccel.runs.config import load_config
from fedaccel.runs.setup import build_setup
from stacked import load  # benchmarks/: the load average, as the other scripts print it


class KeptClients(InProcessClients):
    """Clients trained in process, each one's states then kept as a Flower client keeps them; both timed."""

    def __init__(self, setup, states, folder: Path) -> None:  # type: ignore[no-untyped-def]
        super().__init__(setup.algorithm, setup.federation, states)
        self.every = setup.config.run.checkpoint_every
        self.context = SimpleNamespace(node_config={"state-dir": str(folder)}, state={"fedaccel": {"config": ""}})
        self.train_s = self.keep_s = 0.0
        self.client_rounds = 0

    def train(self, contexts, w, server, sink=None):  # type: ignore[no-untyped-def]
        updates = []
        for ctx in contexts:
            start = time.perf_counter()
            answer, diag = super().train([ctx], w, server, sink)
            middle = time.perf_counter()
            keep_states(self.context, ctx.info.round + 1, self.client_states[ctx.client], self.algorithm, self.every)
            self.train_s += middle - start
            self.keep_s += time.perf_counter() - middle
            self.client_rounds += 1
            updates += answer
        return updates, {}


def measure(recipe: str, model: str, clients: int, rounds: int, samples: int) -> tuple[float, float]:
    """Milliseconds a client-round of training and of keeping its states."""
    config = load_config(None, [f"algorithm={recipe}", f"model={model}", f"data.clients={clients}",
                                f"data.subset={samples}", "data.test_subset=100", "train.batch_size=50",
                                f"train.rounds={rounds}", "run.progress=false"])
    setup = build_setup(config)
    state = init_state(setup.algorithm, setup.federation.model.theta.clone(), setup.federation.n_clients)
    with tempfile.TemporaryDirectory() as folder:
        runtime = KeptClients(setup, state.clients, Path(folder))
        for _ in range(rounds):
            state, _ = run_round(setup.algorithm, state, setup.federation, fraction=config.train.client_fraction,
                                 runtime=runtime)
    return 1e3 * runtime.train_s / runtime.client_rounds, 1e3 * runtime.keep_s / runtime.client_rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="2nn,cnn")
    parser.add_argument("--recipes", default="scaffold,fedumf-feddc")
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=5000, help="data.subset, split among the clients")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="smallest size (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.models, args.recipes, args.clients, args.rounds, args.samples, args.repeats = (
            "2nn", "scaffold", 2, 1, 250, 1)
    torch.set_num_threads(1)
    print(f"load average (1, 5, 15 min) before: {load()}")
    print("| recipe | model | train ms a client-round | keep ms a client-round | ratio keep/train |")
    print("|---|---|---|---|---|")
    for recipe in args.recipes.split(","):
        for model in args.models.split(","):
            measured = [measure(recipe, model, args.clients, args.rounds, args.samples) for _ in range(args.repeats)]
            ratio = statistics.median(keep / train for train, keep in measured)
            print(f"| {recipe} | {model} | {statistics.median(t for t, _ in measured):.1f} | "
                  f"{statistics.median(k for _, k in measured):.2f} | {ratio:.4f} |")
    print(f"load average (1, 5, 15 min) after: {load()}")


if __name__ == "__main__":
    main()
