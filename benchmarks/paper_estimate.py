"""The GPU time of BHerd's paper-scale grids, estimated before they run.

For each grid in ``experiments/bherd/paper/`` (on the full Fashion-MNIST: ``data.dataset=fashion-mnist``), one
group of seeds per algorithm, stacked as ``fedaccel experiment --stack-seeds`` stacks them, runs R1 and then R2
rounds into a scratch folder; (t(R2) - t(R1)) / (R2 - R1) is its seconds a round, t(R1) less R1 of them its
fixed cost (after one untimed run that pays the process's start). The grid's estimate is, over all its seed groups, fixed cost + T rounds at the rate of the group's
method (its model, algorithm name and selection: groups that differ only in the split, the step size, α or the
server step cost what the first such group costs, measured once across the grids).

    python benchmarks/paper_estimate.py --device cuda [--grids svm_cases,svm_case2,fig3_alpha,cnn_case2]
    python benchmarks/paper_estimate.py --device cuda --stack-arms   # as `fedaccel experiment --stack-arms` runs them
    python benchmarks/paper_estimate.py --smoke    # fig3_alpha, 2 seeds, 1 and 2 rounds, 1,000 samples, on the CPU
    python benchmarks/paper_estimate.py --smoke --stack-arms   # 8 of fig3_alpha's runs, 1,000 samples each: a test
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from fedaccel.grids.experiment import _run_seed_group, _seed_groups, load_experiment
from fedaccel.grids.progress import GridProgress

PAPER = Path(__file__).resolve().parents[1] / "experiments" / "bherd" / "paper"


def timed_group(path: Path, group_index: int, rounds: int, device: str, seeds: int | None, out: Path,
                free: tuple[str, ...] = ("run.seed",), more: tuple[str, ...] = ()) -> float:
    """Seconds one group of the grid (cells alike but for the ``free`` keys) takes for ``rounds`` rounds (a fresh
    folder); ``seeds``: that many of its cells, spread over it."""
    experiment = load_experiment(path, ["data.dataset=fashion-mnist", f"train.rounds={rounds}",
                                        f"run.device={device}", "run.progress=false", *more])
    todo = [(k, name, config, out / name) for k, (name, config) in enumerate(experiment.cells, start=1)]
    group = _seed_groups(todo, free)[group_index]
    group = group[:: max(1, len(group) // seeds)][:seeds] if seeds else group  # spread over the group's arms
    report = GridProgress(len(group), bars=False)
    started = time.perf_counter()
    _run_seed_group(group, report, False)
    report.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--grids", default="svm_cases,svm_case2,fig3_alpha,cnn_case2")
    parser.add_argument("--rounds", default="3,8", help="R1,R2")
    parser.add_argument("--seeds", type=int, default=None, help="seeds a group (default: the grid's)")
    parser.add_argument("--stack-arms", action="store_true",
                        help="each group is every algorithm and seed of a cell (fedaccel experiment --stack-arms); the "
                             "first group of a grid is timed and the others taken to cost the same")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.device, args.grids, args.rounds, args.seeds = "cpu", "fig3_alpha", "1,2", 2
    if args.stack_arms:
        args.seeds = 8 if args.smoke else args.seeds  # the smoke: one run of each of fig3_alpha's 8 arms, small data
        arms_estimates(args, ("data.subset=1000",) if args.smoke else ())
        return
    r1, r2 = (int(r) for r in args.rounds.split(","))
    more = ("data.subset=1000",) if args.smoke else ()  # the smoke's small data
    measured: dict[str, tuple[float, float]] = {}  # method -> (seconds a round, fixed seconds)
    for grid in args.grids.split(","):
        path = PAPER / f"{grid}.yaml"
        experiment = load_experiment(path, ["data.dataset=fashion-mnist", f"run.device={args.device}"])
        T = experiment.cells[0][1].train.rounds
        todo = [(k, name, config, Path(name)) for k, (name, config) in enumerate(experiment.cells, start=1)]
        groups = _seed_groups(todo)
        by_method: dict[str, list[int]] = {}
        for n, group in enumerate(groups):
            config = group[0][2]
            spec = config.algorithm if isinstance(config.algorithm, dict) else {"name": config.algorithm}
            model = config.model.get("name") if isinstance(config.model, dict) else config.model
            method = f"{model}/{spec.get('name')}" + (
                f"/{spec['selection']}" if "selection" in spec else "") + (f"/{spec['variant']}" if "variant" in spec else "")
            by_method.setdefault(method, []).append(n)
        total = 0.0
        if not measured and not args.smoke:  # untimed: the process's first run pays CUDA's and the data's start (on
            # an H200 the first method measured came out at 0 s a round without it: t(R2) < t(R1)); not at smoke size,
            # whose figures mean nothing
            with tempfile.TemporaryDirectory() as scratch:
                timed_group(path, 0, r1, args.device, args.seeds, Path(scratch))
        for method, members in by_method.items():
            if method not in measured:
                with tempfile.TemporaryDirectory() as scratch:
                    t1 = timed_group(path, members[0], r1, args.device, args.seeds, Path(scratch) / "a", more=more)
                    t2 = timed_group(path, members[0], r2, args.device, args.seeds, Path(scratch) / "b", more=more)
                rate = max(t2 - t1, 0.0) / (r2 - r1)
                measured[method] = (rate, max(t1 - r1 * rate, 0.0))
            rate, fixed = measured[method]
            total += len(members) * (fixed + T * rate)
            print(f"  {grid}: {method}: {rate:.3f} s a round (fixed {fixed:.1f} s) x {len(members)} group(s)", flush=True)
        seeds = args.seeds or len(groups[0])
        print(f"estimate: {grid}: {len(groups)} groups of {seeds} stacked seeds, T = {T}: "
              f"{total / 60:.1f} min on {args.device}", flush=True)


def arms_estimates(args: argparse.Namespace, more: tuple[str, ...] = ()) -> None:
    """Per grid: its groups of every algorithm and seed stacked, the first one timed at R1 and R2 rounds (``more``:
    overrides, the smoke's small data)."""
    r1, r2 = (int(r) for r in args.rounds.split(","))
    free = ("run.seed", "algorithm")
    for grid in args.grids.split(","):
        path = PAPER / f"{grid}.yaml"
        experiment = load_experiment(path, ["data.dataset=fashion-mnist", f"run.device={args.device}"])
        todo = [(k, name, config, Path(name)) for k, (name, config) in enumerate(experiment.cells, start=1)]
        groups = _seed_groups(todo, free)
        with tempfile.TemporaryDirectory() as scratch:
            if not args.smoke:  # untimed: the start (not at smoke size, whose figures mean nothing)
                timed_group(path, 0, r1, args.device, args.seeds, Path(scratch) / "warm", free, more)
            t1 = timed_group(path, 0, r1, args.device, args.seeds, Path(scratch) / "a", free, more)
            t2 = timed_group(path, 0, r2, args.device, args.seeds, Path(scratch) / "b", free, more)
        rate = max(t2 - t1, 0.0) / (r2 - r1)
        fixed = max(t1 - r1 * rate, 0.0)
        T = experiment.cells[0][1].train.rounds
        runs = min(len(groups[0]), args.seeds or len(groups[0]))
        print(f"  {grid}: {runs} runs stacked: {rate:.3f} s a round (fixed {fixed:.1f} s) x {len(groups)} "
              f"group(s)", flush=True)
        print(f"estimate: {grid}, arms stacked: {len(groups)} groups of {runs} runs, T = {T}: "
              f"{len(groups) * (fixed + T * rate) / 60:.1f} min on {args.device}", flush=True)


if __name__ == "__main__":
    main()
