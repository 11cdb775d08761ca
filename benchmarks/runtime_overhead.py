"""Runtime overhead: one workload in process, stacked, on Flower's simulation engine, deployed, and
the bare Flower app deployed the same way; with the SuperLink's requests a round.

The workloads (``--workload``):

- ``2nn`` (default): the 2NN peer workload of ``benchmarks/peers.py`` (FedAvg, 2NN 784-100-100-10,
  Fashion-MNIST, 10 IID clients x 600 samples, B = 50, eta = 0.05, evaluated every round), its 30
  rounds (``--rounds``); the bare app deployed runs ``--bare-rounds`` (3: ~1 min a round here);
- ``demo``: ``configs/demo.yaml`` (FedAvg, squared-SVM, Case 2, 5 clients), its 60 rounds.

The ways: fedaccel ``in-process``, ``stacked``, ``simulation`` (``run.runtime: flower-simulation``;
``simulation-one``: the same with one message at a time per ClientApp worker, as Flower sends them,
instead of two, :mod:`fedaccel.flower.in_flight`)
and ``deployment`` (``fedaccel deploy``: a SuperLink and one SuperNode process per client on
loopback; ``deployment-wait``: the same, ending when ``flwr run`` ends, as before 2026-11-30, instead of once the
run wrote its summary and the stream showed its last round); for ``2nn`` also ``flower-app``: the bare Flower app of ``benchmarks/peers_flower_app``
(Message API, Flower's FedAvg strategy) deployed the same way, on Flower's own ``flower-superlink``
and ``flower-supernode`` processes with Flower's default isolation (``--isolation subprocess``).
Each run is timed from the call to its end (start-up included) and through the rounds (fedaccel:
the run's ``wall_s``; the bare app: from its round-0 evaluation to its last), printed as seconds a
round with the ratio to in process. Repetitions are interleaved (the order rotated), the figures
are medians, torch runs one thread everywhere, the load average is printed before and after
(compare the ratios of one run). The fedaccel ways must end at the same test accuracy.

Requests: both deployments' SuperLinks log every request (``FEDACCEL_REQUEST_LOG``,
:class:`fedaccel.flower.link.RequestLog`); a round's are those between the server's pushes of
two rounds' messages, counted from its second push to its last, in three kinds:

- *messages and objects*: what Flower's protocol sends for the messages the app exchanges (the
  pushes and pulls of messages and their objects, confirmations, the tasks' inputs and outputs);
- *empty polls*: pulls of messages and tasks that found none, how a process waits; in ``fedaccel
  deploy`` their pace is fedaccel's (its SuperNodes' and ServerApp's polling), in the bare app
  Flower's defaults;
- *other*: heartbeats, logs, the run's set-up.

    python benchmarks/runtime_overhead.py [--workload 2nn|demo] [--ways in-process,simulation] [--rounds N]
                                          [--bare-rounds 3] [--repeats 3] [--smoke]

``--ways``: only these (in process is always run: the ratios' base), e.g. ``in-process,simulation``
for the simulation's goal alone (~15 s a repetition instead of ~6 min).

``--smoke``: 2 clients, 2 rounds, 1,000 samples, one repetition, without the bare app and (unless
``--ways`` names them) simulation-one and deployment-wait, to check that the script runs (its figures then mean nothing).

Goals (issue 32): simulation at most 1.5x in process through the rounds on the 2NN peer workload;
``fedaccel deploy`` at most the bare Flower app's seconds a round.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "FEDACCEL_TORCH_THREADS"):
    os.environ[_name] = "1"  # before torch is imported, here and in every process started from here

import argparse  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from peers import WORKLOADS, BareDeployment, Outcome, Workload, fedaccel_config, outcome  # noqa: E402  (benchmarks/)

from fedaccel.flower import deploy as deployment  # noqa: E402
from fedaccel.flower import in_flight  # noqa: E402
from fedaccel.flower.deploy import deploy  # noqa: E402
from fedaccel.flower.link import REQUEST_LOG  # noqa: E402
from fedaccel.launch import run  # noqa: E402
from fedaccel.runs.config import Config, load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = {"in-process": "in-process", "stacked": "stacked", "simulation": "flower-simulation",
            "simulation-one": "flower-simulation",
            "deployment": "flower-deployment", "deployment-wait": "flower-deployment"}
AS_BEFORE = ("simulation-one", "deployment-wait")  # fedaccel's code at a former pace: not at smoke size unless asked
DEPLOYED = {"deployment": "fedaccel deploy", "flower-app": "bare Flower app"}  # way: its name in the requests table
SIMULATION_GOAL = 1.5  # x in process, through the rounds
POLLS = ("/v1/fleet/pull-messages", "/v1/runtime/pull-messages", "/v1/runtime/acquire-task")
PROTOCOL = ("-messages", "-object", "/confirm-message-received", "/pull-task-input", "/push-task-output",
            "/get-nodes", "/get-run", "/get-fab")
KINDS = ("messages and objects", "empty polls", "other")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def kind(path: str, sent: int) -> str:
    """A logged request's kind (see the module's docstring)."""
    if path in POLLS and sent == 0:
        return "empty polls"
    return "messages and objects" if path.endswith(PROTOCOL) else "other"


def requests_a_round(log: Path) -> tuple[dict[str, float], int]:
    """The mean requests a round of each kind, between the server's second and last pushes of
    messages (whole rounds only), and how many rounds that is."""
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    pushes = [t for t, path, _ in rows if path == "/v1/runtime/push-messages"]
    rounds = len(pushes) - 2
    if rounds < 1:
        return {k: float("nan") for k in KINDS}, 0
    counts = Counter(kind(path, sent) for t, path, sent in rows if pushes[1] <= t < pushes[-1])
    return {k: counts[k] / rounds for k in KINDS}, rounds


class Ways:
    """Each way as a function of a fresh folder: (test accuracy, seconds through the rounds).
    ``configure(runtime)``: the workload's fedaccel config; ``bare``: the bare app's workload."""

    def __init__(self, configure: Callable[[str], Config], bare: Workload | None, only: list[str] | None = None) -> None:
        self.configure, self.bare, self.only = configure, bare, only
        self.fedaccel_rounds = configure("in-process").train.rounds

    def names(self) -> list[str]:
        every = [*RUNTIMES, *(["flower-app"] if self.bare is not None else [])]
        return [name for name in every if self.only is None or name in self.only or name == "in-process"]

    def rounds(self, name: str) -> int:
        return self.bare.rounds if name == "flower-app" and self.bare else self.fedaccel_rounds

    def __call__(self, name: str, folder: Path) -> Outcome:
        if name == "flower-app":
            return BareDeployment(folder / "requests.jsonl").run(self.bare, folder)  # type: ignore[arg-type]
        config = self.configure(RUNTIMES[name])
        if name == "simulation-one":  # Flower's own pace: one message at a time per ClientApp worker
            usual, in_flight.IN_FLIGHT = in_flight.IN_FLIGHT, 1
            try:
                return outcome(run(config, folder / "run"))
            finally:
                in_flight.IN_FLIGHT = usual
        if name == "deployment":
            os.environ[REQUEST_LOG] = str(folder / "requests.jsonl")
            try:
                return outcome(deploy(config, folder / "run"))
            finally:
                del os.environ[REQUEST_LOG]
        if name == "deployment-wait":  # as before: the end of `flwr run` waited for
            usual_end, deployment.finished_since = deployment.finished_since, lambda *_: False
            try:
                return outcome(deploy(config, folder / "run"))
            finally:
                deployment.finished_since = usual_end
        return outcome(run(config, folder / "run"))


def workload(args: argparse.Namespace) -> Ways:
    """The ways of ``--workload``: the bare app only on the 2NN peer workload, and not at smoke size."""
    if args.workload == "demo":
        overrides = ["run.progress=false", "run.threads=1"]
        if args.smoke:
            overrides += ["data.clients=2", "data.subset=1000", "data.test_subset=200", "eval.train_samples=200"]
        if args.rounds:
            overrides.append(f"train.rounds={args.rounds}")
        return Ways(lambda runtime: load_config(ROOT / "configs" / "demo.yaml", [*overrides, f"run.runtime={runtime}"]),
                    None, args.ways)
    peer = replace(WORKLOADS["2nn"], rounds=args.rounds or WORKLOADS["2nn"].rounds)
    if args.smoke:
        peer = replace(peer, clients=2, per_client=500, test_samples=200, loss_samples=200)
    return Ways(lambda runtime: fedaccel_config(peer, runtime), None if args.smoke else replace(peer, rounds=args.bare_rounds),
                args.ways)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--workload", choices=("2nn", "demo"), default="2nn")
    parser.add_argument("--ways", type=lambda text: text.split(","), help="comma-separated, of "
                        f"{', '.join([*RUNTIMES, 'flower-app'])} (default: all; in-process always runs)")
    parser.add_argument("--rounds", type=int, help="default: 30 for 2nn (the peer workload's), the demo's 60")
    parser.add_argument("--bare-rounds", type=int, default=3, help="rounds of the bare Flower app deployed (>= 3)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repetitions (median reported)")
    parser.add_argument("--smoke", action="store_true", help="smallest size: 2 clients, 2 rounds, 1 repetition, "
                        "no bare app, no simulation-one unless --ways names it (a test, not a measurement)")
    args = parser.parse_args()
    unknown = set(args.ways or ()) - {*RUNTIMES, "flower-app"}
    if unknown:
        parser.error(f"--ways: unknown {', '.join(sorted(unknown))}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill or a timeout still stops the processes started
    if args.bare_rounds < 3:
        parser.error("--bare-rounds must be at least 3 (a round's requests are counted between the 2nd and last pushes)")
    torch.set_num_threads(1)
    if args.smoke:  # the ways at a former pace run the same code: left out unless asked
        args.rounds, args.repeats = 2, 1
        args.ways = args.ways or [name for name in RUNTIMES if name not in AS_BEFORE]
    ways = workload(args)
    config = ways.configure("in-process")
    names = ways.names()
    print(f"load average (1, 5, 15 min) before: {load()}; {os.cpu_count()} cores; torch threads 1; "
          f"workload {args.workload}: {config.label}, {config.model['name']}, {config.data.clients} clients, "
          f"{config.train.rounds} rounds (the bare app {args.bare_rounds}); {args.repeats} interleaved repetition(s)",
          flush=True)
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    requests: dict[str, list[dict[str, float]]] = {name: [] for name in DEPLOYED}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                folder = Path(tmp) / f"{name}-{rep}"
                folder.mkdir()
                started = time.perf_counter()
                acc, in_rounds = ways(name, folder)
                total = time.perf_counter() - started
                rounds = ways.rounds(name)
                results[name].append((total / rounds, in_rounds / rounds, acc))
                if name in DEPLOYED:
                    counted, whole = requests_a_round(folder / "requests.jsonl")
                    requests[name].append(counted)
                    said = ", ".join(f"{k} {v:.1f}" for k, v in counted.items())
                    said = f"; requests a round ({whole} rounds): {said}"
                else:
                    said = ""
                print(f"  repetition {rep + 1} {name:10s}: {total / rounds:.4f} s/round with start-up, "
                      f"{in_rounds / rounds:.4f} s/round in rounds, test accuracy {acc:.4f}{said}  (load {load()})",
                      flush=True)
    report(results, requests, args.repeats, ways.fedaccel_rounds)


def report(results: dict[str, list[tuple[float, float, float]]], requests: dict[str, list[dict[str, float]]],
           repeats: int, rounds: int) -> None:
    """``results``: each way's (seconds a round with start-up, through the rounds, accuracy) per repetition;
    ``rounds``: a fedaccel run's."""
    median = {name: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
              for name, runs in results.items()}
    base_total, base_rounds = median["in-process"]
    base_acc = results["in-process"][0][2]
    print(f"\nseconds per round, median of {repeats} (load average after: {load()})")
    print("| runtime | in rounds | / in process | with start-up | / in process |\n|---|---:|---:|---:|---:|")
    for name, (total, in_rounds) in median.items():
        print(f"| {name} | {in_rounds:.4f} | {in_rounds / base_rounds:.2f} | {total:.4f} | {total / base_total:.2f} |")
    for name in RUNTIMES:
        if name == "in-process" or name not in results:
            continue
        for _, _, acc in results[name]:
            assert abs(acc - base_acc) < (1e-3 if name == "stacked" else 1e-5), \
                f"{name} ended at {acc}, in process at {base_acc}"
        total, in_rounds = median[name]
        print(f"ratio {name}/in-process: {total / base_total:.2f} with start-up, {in_rounds / base_rounds:.2f} in rounds")
    if "deployment" in median and "deployment-wait" in median:
        saved = (median["deployment-wait"][0] - median["deployment"][0]) * rounds
        print(f"deployment/deployment-wait (with start-up): {median['deployment'][0] / median['deployment-wait'][0]:.3f}"
              f"  ({saved:.1f} s a run sooner)")
    if "simulation" in median:
        ratio = median["simulation"][1] / base_rounds
        print(f"simulation/in-process (rounds): {ratio:.2f}  (goal <= {SIMULATION_GOAL:g}) "
              f"{'OK' if ratio <= SIMULATION_GOAL else 'ABOVE GOAL'}")
    if not any(requests.values()):
        return
    print("\nthe SuperLink's requests a round, median of the repetitions")
    print(f"| deployment | {' | '.join(KINDS)} | all |\n|---|---:|---:|---:|---:|")
    for name, label in DEPLOYED.items():
        if requests[name]:
            kinds = [statistics.median(r[k] for r in requests[name]) for k in KINDS]
            print(f"| {label} | {' | '.join(f'{v:.1f}' for v in kinds)} | {sum(kinds):.1f} |")
    if "flower-app" in median and "deployment" in median:
        ours, theirs = median["deployment"][1], median["flower-app"][1]
        print(f"fedaccel deploy / bare Flower app deployed (rounds): {ours / theirs:.2f}  "
              f"({ours:.4f} against {theirs:.4f} s a round; goal <= 1) {'OK' if ours <= theirs else 'ABOVE GOAL'}")


if __name__ == "__main__":
    main()
