"""FedGSNR planning overhead: the share of a round's time spent in the planning phase.

On the quick Table-1 setup (``experiments/fedgsnr/quick/table1.yaml``: Fashion-MNIST, 2NN with
100 hidden units, 30 clients, B = 64, E_const = 20, B_s = 64) one FedGSNR cell is run for a few
rounds through the engine's ``run_round``. The planning part's ``plan_client`` and
``batched_plan_client`` (per-sample gradients, their mean and variance, for every participant: the
in-process runtime plans them all at once) and ``plan_server`` (n_k, E_k, r_k) are wrapped with timers
(``dataclasses.replace`` on the algorithm's parts; the engine is not touched), and their time is compared
with the whole round's. Goal: at most 20%.

    python benchmarks/fedgsnr_overhead.py [--rounds 3] [--warmup 1] [--cell NAME] [--set key=value ...]
        [--threads N] [--smoke]

Without ``--cell`` the first FedGSNR cell on the Dirichlet split is timed, found by its config's
values (a cell's folder name changes whenever the grid gains a key). ``--smoke``: one round on
1,000 samples with 2 local steps, to check that the script runs (its figures then mean nothing).

Both wall-clock and process CPU time are reported: the machine may be shared, and CPU time is
then the better estimate of what the phases cost on an idle machine.

Then the server's scores alone for ``--server-clients`` K synthetic float32 messages of the model's size:
``client_scores`` (1 MB blocks of coordinates) against the same formulas on whole K x d float64 matrices
(``global_statistics`` and ``gsnr_scores``, four such matrices), alternated, the median time ratio printed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedaccel.algorithms.base import Algorithm
from fedaccel.algorithms.fedgsnr import client_scores, global_statistics, gsnr_scores
from fedaccel.engine.round import init_state, run_round
from fedaccel.errors import UserError
from fedaccel.grids.experiment import Experiment, load_experiment
from fedaccel.report.reading import value_at
from fedaccel.runs.setup import build_setup

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "fedgsnr" / "quick" / "table1.yaml"
#: The default cell's values, most important first: a FedGSNR cell, on the Dirichlet split if there is one.
PREFERRED = {"algorithm.name": "fedgsnr", "data.split.name": "dirichlet"}
SMOKE = ["data.subset=1000", "data.test_subset=100", "train.local_steps=2"]
GOAL = 0.20


class Clock:
    """Accumulated wall and CPU seconds per stage."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def reset(self) -> None:
        self.wall.clear()
        self.cpu.clear()

    def wrap(self, key: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.wall[key] = self.wall.get(key, 0.0) + time.perf_counter() - wall
                self.cpu[key] = self.cpu.get(key, 0.0) + time.process_time() - cpu

        return timed


def with_timed_planning(algorithm: Algorithm, clock: Clock) -> Algorithm:
    """The same algorithm with its planning stages timed (no other change)."""
    parts = []
    for part in algorithm.parts:
        if part.plan_server is not None:
            part = replace(
                part,
                plan_client=clock.wrap("plan_client", part.plan_client),
                plan_server=clock.wrap("plan_server", part.plan_server),
                batched_plan_client=part.batched_plan_client and clock.wrap("plan_client", part.batched_plan_client),
            )
        parts.append(part)
    if not any(p.plan_server is not None for p in parts):
        raise SystemExit(f"{algorithm.name} has no planning phase: pick a FedGSNR cell")
    return replace(algorithm, parts=tuple(parts))


def default_cell(experiment: Experiment) -> str:
    """The first cell with every value of PREFERRED, dropping the last ones while none has them all."""
    configs = [(name, config.to_dict()) for name, config in experiment.cells]
    wanted = list(PREFERRED.items())
    while wanted:
        for name, config in configs:
            if all(value_at(config, key) == value for key, value in wanted):
                return name
        wanted.pop()
    raise SystemExit(f"no cell of {experiment.name!r} has {PREFERRED}: pick one with --cell")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", type=Path, default=EXPERIMENT)
    parser.add_argument("--cell", help="cell (folder) name in the experiment grid (default: a FedGSNR cell, by values)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--server-clients", type=int, default=300, help="K for the server's scores alone")
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: 1 round, 1,000 samples, 2 local steps, 1 thread (a test, not a measurement)")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.warmup, args.threads, args.set = 1, 0, 1, [*SMOKE, *args.set]
        args.server_clients = 4
    if args.threads:
        torch.set_num_threads(args.threads)

    experiment = load_experiment(args.experiment, args.set)
    args.cell = args.cell or default_cell(experiment)
    try:
        config = experiment.cell(args.cell)
    except UserError as error:
        raise SystemExit(f"error: {error}") from None
    setup = build_setup(config)
    clock = Clock()
    algorithm = with_timed_planning(setup.algorithm, clock)
    federation = setup.federation
    state = init_state(algorithm, federation.model.theta.clone(), federation.n_clients)

    print(f"{args.experiment.relative_to(ROOT) if args.experiment.is_relative_to(ROOT) else args.experiment} "
          f"cell {args.cell}: {config.model['name']} ({federation.model.size} parameters), "
          f"{federation.n_clients} clients, fraction {setup.fraction:g}, batch {config.train.batch_size}, "
          f"algorithm {config.algorithm}, torch threads {torch.get_num_threads()}")
    totals = {"round_wall": 0.0, "round_cpu": 0.0, "plan_wall": 0.0, "plan_cpu": 0.0, "server_wall": 0.0}
    for r in range(args.warmup + args.rounds):
        clock.reset()
        wall, cpu = time.perf_counter(), time.process_time()
        state, report = run_round(algorithm, state, federation, fraction=setup.fraction)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        plan_wall = sum(clock.wall.values())
        plan_cpu = sum(clock.cpu.values())
        counted = r >= args.warmup
        print(f"round {r + 1}{'' if counted else ' (warm-up)'}: {wall:.3f} s wall ({cpu:.3f} s CPU), "
              f"planning {plan_wall:.3f} s wall = {plan_wall / wall:.1%} "
              f"(plan_client {clock.wall.get('plan_client', 0.0):.3f} s, plan_server {clock.wall.get('plan_server', 0.0):.4f} s), "
              f"CPU share {plan_cpu / cpu:.1%}; {report.local_steps} local steps")
        if counted:
            totals["round_wall"] += wall
            totals["round_cpu"] += cpu
            totals["plan_wall"] += plan_wall
            totals["plan_cpu"] += plan_cpu
            totals["server_wall"] += clock.wall.get("plan_server", 0.0)
    share = totals["plan_wall"] / totals["round_wall"]
    cpu_share = totals["plan_cpu"] / totals["round_cpu"]
    print(f"planning share of a round over {args.rounds} rounds: {share:.1%} wall, {cpu_share:.1%} CPU "
          f"(plan_server alone {totals['server_wall'] / totals['round_wall']:.2%}); "
          f"mean round {totals['round_wall'] / args.rounds:.3f} s")
    print(f"goal: planning <= {GOAL:.0%} of a round -> {'met' if share <= GOAL else 'NOT met'}")
    server_scores(args.server_clients, federation.model.size, repeats=1 if args.smoke else 5)


def server_scores(k: int, d: int, repeats: int) -> None:
    """The server's scores for k random float32 messages of d entries: blocked against whole matrices."""
    g = torch.Generator().manual_seed(0)
    means = [torch.randn(d, generator=g) for _ in range(k)]
    variances = [torch.rand(d, generator=g) for _ in range(k)]
    p = np.full(k, 1.0 / k)

    def whole() -> tuple[np.ndarray, np.ndarray]:
        rows = torch.stack(means).double(), torch.stack(variances).double()
        return gsnr_scores(*rows, *global_statistics(*rows, p), 64)

    times: dict[str, list[float]] = {"blocked": [], "whole": []}
    results = {}
    for _ in range(repeats + 1):  # the first of each untimed
        for name, scores in (("blocked", lambda: client_scores(means, variances, p, 64)), ("whole", whole)):
            started = time.perf_counter()
            results[name] = scores()
            times[name].append(time.perf_counter() - started)
    blocked, whole_s = (statistics.median(times[name][1:]) for name in ("blocked", "whole"))
    n_blocked, n_whole = results["blocked"][0], results["whole"][0]
    gap = float(np.max(np.abs(n_blocked - n_whole) / np.maximum(np.abs(n_whole), 1e-300)))
    print(f"server scores, {k} clients x {d} parameters: blocked {blocked * 1e3:.1f} ms, whole {whole_s * 1e3:.1f} ms "
          f"(medians of {repeats}); ratio blocked/whole: {blocked / whole_s:.2f}; whole holds four {k} x {d} float64 "
          f"matrices ({4 * k * d * 8 / 2**20:.0f} MB), blocked 1 MB blocks; largest relative gap in n_k {gap:.1e}")


if __name__ == "__main__":
    main()
