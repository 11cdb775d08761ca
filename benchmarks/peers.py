"""Measured against the peers: the same FedAvg work done six ways, interleaved, with their accuracies.

The ways (``--ways``, default all but the last):

- ``plain``: a plain PyTorch loop, the floor (copy the global model into each client's model,
  train it with ``torch.optim.SGD`` on shuffled batches, average the state dicts by data size);
- ``in-process``: ``fedaccel run`` in this process (``fedaccel.launch.run``, start-up included);
- ``stacked``: the same with ``run.runtime: stacked``;
- ``simulation``: the same with ``run.runtime: flower-simulation`` (Flower's simulation engine on Ray);
- ``deployment``: ``fedaccel deploy`` (a SuperLink and one SuperNode process per client on loopback);
- ``flower-app``: a bare Flower 1.42 app as Flower's PyTorch quickstart writes it today
  (``benchmarks/peers_flower_app``: Message API, ``flwr.serverapp.strategy.FedAvg`` with
  ``ArrayRecord``s and a server-side ``evaluate_fn``, a ``ClientApp`` training on a shuffled
  ``DataLoader``), run by ``flwr run APP local --stream`` on a local simulation SuperLink (the
  one ``flwr`` would start itself for a ``:local:`` connection, started here with the same
  command so that this script owns and stops it), ``--flower-cpus`` CPUs per client (default 1).

The workloads (``--workload``, default all): every round all clients train one epoch at B = 50,
eta = 0.05, and the global model's test accuracy on 2,000 images and training loss on 1,000 are
computed, on Fashion-MNIST split IID:

- ``2nn``: 2NN 784-100-100-10, 10 clients x 600 samples, 30 rounds;
- ``cnn``: BHerd's CNN, 10 clients x 600 samples, 5 rounds (``--cnn-rounds``);
- ``2nn-100``: 2NN 784-100-100-10, 100 clients x 50 samples, 30 rounds (deployment left out: 100
  SuperNode processes do not fit a small machine; ``--max-deploy`` to change).

A client's data is a whole number of batches: fedaccel trains floor(E n / B) full batches, the
plain loop and the Flower app would also train a last partial one (at 60 samples a client, two
steps against one: not the same work).

Each way runs once untimed first (one round: imports, caches), then ``--repeats`` times,
interleaved (A B C ... A B C ...) so that the machine's load falls on all alike; the table gives
each way's median seconds (start-up included), its fastest, the median of its per-repeat ratios
to the plain loop, and its median seconds through the rounds (from the first round's start to
the last round's evaluation: the run's ``wall_s``; for the bare app, between its round-0 and last
evaluations) with the ratio to fedaccel in process. Every way's accuracy (the mean test accuracy
of the last 5 rounds, the median of the repeats) must be within ``--tolerance`` (0.02; 0.05 for
``cnn``, whose 5 rounds are still climbing fast) of the plain loop's (the ways draw batches
differently, the bare Flower app's shuffles unseeded; the fedaccel ways agree with each other to
1e-5), else the script exits non-zero. Torch threads are pinned to 1 everywhere
(OMP_NUM_THREADS=1 in every process started); the 1-minute load average is printed at the start
and the end.

    python benchmarks/peers.py [--workload 2nn,cnn,2nn-100] [--ways plain,in-process,...] [--repeats 3]
    python benchmarks/peers.py --smoke     # 2 clients x 300 samples, 2 rounds, 1 repeat: a test

``--smoke`` runs the three in-process ways only unless ``--ways`` names others (the Flower ways
take 10-30 s each to start).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", FLWR_TELEMETRY_ENABLED="0",
                  FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1")

import torch  # noqa: E402  (after the thread pinning above)
import torch.nn.functional as F  # noqa: E402

from fedaccel.algorithms.base import make_rng  # noqa: E402
from fedaccel.data import load_dataset  # noqa: E402
from fedaccel.data.splits import split  # noqa: E402
from fedaccel.disk import open_no_link, write_atomic  # noqa: E402
from fedaccel.models import build_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "benchmarks" / "peers_flower_app"
WAYS = ["plain", "in-process", "stacked", "simulation", "deployment", "flower-app", "flower-app-deployed"]
DEFAULT_WAYS = WAYS[:-1]  # the deployed bare app: a fresh ClientApp process per message, ~1 min a round here
LAST = 5  # rounds averaged into the final accuracy
FLOWER_WAYS = {"simulation", "deployment", "flower-app", "flower-app-deployed"}
LABEL = {"plain": "plain PyTorch loop", "in-process": "fedaccel run, in process", "stacked": "fedaccel run, stacked",
         "simulation": "fedaccel run, flower-simulation", "deployment": "fedaccel deploy",
         "flower-app": "bare Flower app (flwr run)", "flower-app-deployed": "bare Flower app, deployed"}


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    clients: int
    per_client: int
    rounds: int
    batch: int = 50
    lr: float = 0.05
    test_samples: int = 2000
    loss_samples: int = 1000
    seed: int = 0
    tolerance: float = 0.02  # largest gap to the plain loop's accuracy

    @property
    def options(self) -> dict[str, int]:
        return {"hidden": 100} if self.model == "2nn" else {}

    def describe(self) -> str:
        net = "2NN 784-100-100-10" if self.model == "2nn" else "BHerd CNN"
        return (f"FedAvg, {net}, Fashion-MNIST, {self.clients} IID clients x {self.per_client} samples, B = {self.batch}, "
                f"1 epoch, eta = {self.lr:g}, {self.rounds} rounds, every round test accuracy on {self.test_samples} "
                f"images and training loss on {self.loss_samples}")


WORKLOADS = {"2nn": Workload("2nn", "2nn", 10, 600, 30), "cnn": Workload("cnn", "cnn", 10, 600, 5, tolerance=0.05),
             "2nn-100": Workload("2nn-100", "2nn", 100, 50, 30)}


# ---- the plain loop -----------------------------------------------------------------------------

def final_accuracy(per_round: list[float]) -> float:
    """The mean test accuracy of the last (up to) 5 rounds: one round's swings by a point or two
    early in training, and the ways draw their batches differently."""
    last = per_round[-LAST:]
    return float(sum(last) / len(last))


Outcome = tuple[float, float]  # (final accuracy, seconds through the rounds)


def run_plain(w: Workload, out: Path) -> Outcome:  # noqa: ARG001  (writes nothing)
    """FedAvg written without a framework."""
    data = load_dataset("fashion-mnist", seed=w.seed, subset=w.clients * w.per_client, test_subset=w.test_samples)
    parts = split("iid", data.y_train.numpy(), w.clients, make_rng(w.seed, "split"))
    x, y = data.x_train, data.y_train
    sizes = torch.tensor([len(p) for p in parts], dtype=torch.float32)
    weights = sizes / sizes.sum()
    net = build_model(w.model, data.input_shape, 10, seed=w.seed, **w.options)
    global_state = {k: v.clone() for k, v in net.state_dict().items()}
    generator = torch.Generator().manual_seed(w.seed)
    accuracy = []
    started = time.perf_counter()
    for _ in range(w.rounds):
        average = {k: torch.zeros_like(v) for k, v in global_state.items()}
        for i, part in enumerate(parts):
            net.load_state_dict(global_state)
            optimizer = torch.optim.SGD(net.parameters(), lr=w.lr)
            index = torch.from_numpy(part)[torch.randperm(len(part), generator=generator)]
            for batch in index.split(w.batch):
                optimizer.zero_grad()
                F.cross_entropy(net(x[batch]), y[batch]).backward()
                optimizer.step()
            with torch.no_grad():
                for k, v in net.state_dict().items():
                    average[k].add_(v, alpha=float(weights[i]))
        global_state = average
        net.load_state_dict(global_state)
        with torch.no_grad():
            accuracy.append(float((net(data.x_test).argmax(1) == data.y_test).float().mean()))
            F.cross_entropy(net(x[:w.loss_samples]), y[:w.loss_samples])
    return final_accuracy(accuracy), time.perf_counter() - started


# ---- fedaccel ----------------------------------------------------------------------------------

def fedaccel_config(w: Workload, runtime: str):  # noqa: ANN201
    from fedaccel.runs.config import load_config

    overrides = ["algorithm=fedavg", f"model.name={w.model}", *(f"model.{k}={v}" for k, v in w.options.items()),
                 "data.dataset=fashion-mnist", "data.split=iid", f"data.clients={w.clients}",
                 f"data.subset={w.clients * w.per_client}", f"data.test_subset={w.test_samples}",
                 f"train.rounds={w.rounds}", f"train.lr={w.lr}", f"train.batch_size={w.batch}", "train.local_epochs=1",
                 "eval.every=1", f"eval.train_samples={w.loss_samples}", f"run.seed={w.seed}", "run.threads=1",
                 "run.progress=false", f"run.runtime={runtime}"]
    return load_config(None, overrides)


def outcome(run_dir: Path) -> Outcome:
    """A fedaccel run folder's final accuracy and its seconds through the rounds (``wall_s``)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return final_accuracy([row["test_acc"] for row in rows]), float(rows[-1]["wall_s"])


def run_fedaccel(w: Workload, out: Path, runtime: str) -> Outcome:
    from fedaccel.launch import run

    return outcome(run(fedaccel_config(w, runtime), out))


def run_deployed(w: Workload, out: Path) -> Outcome:
    from fedaccel.flower.deploy import deploy

    return outcome(deploy(fedaccel_config(w, "flower-deployment"), out))


# ---- the bare Flower app -------------------------------------------------------------------------

def app_env(home: Path) -> dict[str, str]:
    """The environment of a bare-app process: FLWR_HOME ``home``, this repository importable, this
    Python's commands first, no Ray cluster."""
    return {**os.environ, "FLWR_HOME": str(home), "RAY_ADDRESS": "",
            "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}


class LocalSuperLink:
    """The simulation SuperLink ``flwr run APP local`` starts for a ``:local:`` connection (same
    command), on free ports under a private FLWR_HOME, started and stopped by this script."""

    def __init__(self, home: Path, cpus_per_client: float) -> None:
        from fedaccel.flower.deploy import free_port

        self.home, self.cpus = home, cpus_per_client
        taken: set[int] = set()
        ports = {"FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": free_port(taken), "FLWR_LOCAL_CONTROL_API_PORT": free_port(taken)}
        self.env = {**app_env(home), **{k: str(v) for k, v in ports.items()}}
        home.mkdir(parents=True, exist_ok=True)
        write_atomic(home / "config.toml", '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n')
        log = home / "superlink.log"
        command = ["flower-superlink", "--insecure", "--simulation", "--isolation", "subprocess",
                   "--control-api-address", f"127.0.0.1:{ports['FLWR_LOCAL_CONTROL_API_PORT']}", "--host", "127.0.0.1",
                   "--port", str(ports["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]), "--database", str(home / "state.db")]
        self.process = subprocess.Popen(command, env=self.env, stdout=open_no_link(log, "w"), stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self.url = f"http://127.0.0.1:{ports['FLWR_LOCAL_SUPERLINK_HTTP_API_PORT']}/health"
        self._wait_ready(log)

    def _wait_ready(self, log: Path) -> None:
        import urllib.request

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"flower-superlink exited {self.process.returncode}:\n{log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url, timeout=0.5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise SystemExit(f"flower-superlink not ready after 60 s:\n{log.read_text()[-2000:]}")

    def run(self, w: Workload, out: Path) -> Outcome:
        federation = ["--federation-config", f"num-supernodes={w.clients} client-resources-num-cpus={self.cpus:g}"]
        return run_bare_app(w, out, self.env, "local", federation)

    def stop(self) -> None:
        stop_group(self.process)


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to ``process``'s group (it and what it started), SIGKILL after 20 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def run_bare_app(w: Workload, out: Path, env: dict[str, str], connection: str, extra: list[str]) -> Outcome:
    """``flwr run APP CONNECTION --stream`` of the bare app on workload ``w``; its final accuracy and
    seconds from its round-0 evaluation to its last."""
    result = out / "rounds.json"
    out.mkdir(parents=True, exist_ok=True)
    settings = {"model": w.model, "hidden": w.options.get("hidden", 0), "num-server-rounds": w.rounds,
                "clients": w.clients, "samples": w.clients * w.per_client, "test-samples": w.test_samples,
                "loss-samples": w.loss_samples, "batch-size": w.batch, "lr": w.lr, "seed": w.seed}
    run_config = " ".join(f"{k}={json.dumps(v)}" for k, v in settings.items()) + f" out='{result}'"
    command = ["flwr", "run", str(APP), connection, "--stream", "--run-config", run_config, *extra]
    done = subprocess.run(command, env=env, cwd=out, capture_output=True, text=True, timeout=3600, check=False)
    write_atomic(out / "flwr-run.log", done.stdout + done.stderr)
    if done.returncode != 0 or not result.exists():
        raise SystemExit(f"the bare Flower app failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    rows = json.loads(result.read_text())
    accuracy = final_accuracy([rows[str(r)]["test_acc"] for r in range(1, w.rounds + 1)])
    return accuracy, rows[str(w.rounds)]["time"] - rows["0"]["time"]


#: ``python -c STOCK_SUPERLINK ARGS``: Flower's ``flower-superlink``, unchanged, with fedaccel's
#: request log in front when FEDACCEL_REQUEST_LOG is set (fedaccel.flower.link.RequestLog).
STOCK_SUPERLINK = ("import sys; from fedaccel.flower.link import with_outer_middleware; with_outer_middleware(); "
                   "from flwr.superlink.cli.flower_superlink import flower_superlink; "
                   "sys.argv[0] = 'flower-superlink'; sys.exit(flower_superlink() or 0)")


class BareDeployment:
    """The bare app deployed as ``fedaccel deploy`` deploys: Flower's own SuperLink and one Flower
    SuperNode process per client on loopback, both with Flower's default ``--isolation subprocess``
    (the SuperLink starts the ServerApp's process, each SuperNode a fresh ClientApp process per
    message), and ``flwr run APP deployed`` against it; the SuperLink's state in memory, as
    ``fedaccel deploy``'s (a state file was locked by concurrent requests under load and lost
    replies). Started for each run, stopped after it."""

    def __init__(self, request_log: Path | None = None) -> None:
        self.request_log = request_log  # the SuperLink's requests, one line each (fedaccel.flower.link.RequestLog)

    def run(self, w: Workload, out: Path) -> Outcome:
        from fedaccel.flower.deploy import free_port, wait_for_port

        home = out / "flwr-home"
        home.mkdir(parents=True, exist_ok=True)
        taken: set[int] = set()
        link_port = free_port(taken)
        write_atomic(home / "config.toml", f'[superlink]\ndefault = "deployed"\n\n[superlink.deployed]\n'
                                           f'address = "127.0.0.1:{link_port}"\ninsecure = true\n')
        env = app_env(home)
        if self.request_log is not None:
            env["FEDACCEL_REQUEST_LOG"] = str(self.request_log)
        started: list[tuple[subprocess.Popen, IO[str]]] = []

        def start(name: str, command: list[str], environment: dict[str, str]) -> subprocess.Popen:
            log = open_no_link(out / f"{name}.log", "w")
            started.append((subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True), log))
            return started[-1][0]

        try:
            link = start("superlink", [sys.executable, "-c", STOCK_SUPERLINK, "--insecure", "--isolation", "subprocess",
                                       "--host", "127.0.0.1", "--port", str(link_port)], env)
            wait_for_port(link_port, link, "flower-superlink")
            node_env = {key: value for key, value in env.items() if key != "FEDACCEL_REQUEST_LOG"}
            for i in range(w.clients):
                start(f"supernode{i}", ["flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link_port}",
                                        "--host", "127.0.0.1", "--port", str(free_port(taken)), "--isolation",
                                        "subprocess", "--node-config", f"partition-id={i} num-partitions={w.clients}"],
                      {**node_env, "FLWR_HOME": str(home / f"node{i}")})
            return run_bare_app(w, out, env, "deployed", [])
        finally:
            for process, log in reversed(started):
                stop_group(process)
                log.close()


# ---- the comparison ------------------------------------------------------------------------------

@dataclass
class Result:
    seconds: list[float]  # each repeat's, start-up included
    in_rounds: list[float]  # each repeat's seconds through the rounds
    accuracies: list[float]  # each repeat's final accuracy

    @property
    def accuracy(self) -> float:
        """The median of the repeats' final accuracies."""
        return statistics.median(self.accuracies)


def measure(ways: list[str], w: Workload, repeats: int, tmp: Path,
            superlink: LocalSuperLink | None) -> dict[str, Result]:
    runners = {"plain": run_plain, "in-process": lambda w, o: run_fedaccel(w, o, "in-process"),
               "stacked": lambda w, o: run_fedaccel(w, o, "stacked"),
               "simulation": lambda w, o: run_fedaccel(w, o, "flower-simulation"),
               "deployment": run_deployed, "flower-app": lambda w, o: superlink.run(w, o),  # type: ignore[union-attr]
               "flower-app-deployed": BareDeployment().run}
    counter = iter(range(10**6))

    def once(way: str, workload: Workload) -> tuple[float, Outcome]:
        out = tmp / f"{workload.name}-{way}-{next(counter)}"
        started = time.perf_counter()
        result = runners[way](workload, out)
        elapsed = time.perf_counter() - started
        shutil.rmtree(out, ignore_errors=True)
        return elapsed, result

    for way in ways:  # warm-up, untimed: one round
        once(way, replace(w, rounds=1))
    results = {way: Result([], [], []) for way in ways}
    for r in range(repeats):
        for way in ways:
            elapsed, (acc, in_rounds) = once(way, w)
            results[way].seconds.append(elapsed)
            results[way].in_rounds.append(in_rounds)
            results[way].accuracies.append(acc)
            print(f"  repeat {r + 1}/{repeats} {way:10s} {elapsed:8.2f} s  ({in_rounds:.2f} s through the rounds)  "
                  f"test accuracy {acc:.4f}", flush=True)
    return results


def paired_ratio(a: list[float], b: list[float] | None) -> float:
    """The median of the per-repeat ratios a/b (NaN without b)."""
    return statistics.median(x / y for x, y in zip(a, b)) if b else float("nan")


def report(w: Workload, results: dict[str, Result], tolerance: float) -> list[str]:
    """Print the workload's table; return the ways whose accuracy is off."""
    plain, in_process = results.get("plain"), results.get("in-process")
    print(f"\n{w.name}: the table ({len(next(iter(results.values())).seconds)} repeats)\n")
    print(f"| how | median s | fastest s | / plain | through the rounds s | / in process | "
          f"test accuracy (last {LAST} rounds, median of repeats) |")
    print("|---|---|---|---|---|---|---|")
    for way, r in results.items():
        print(f"| {LABEL[way]} | {statistics.median(r.seconds):.2f} | {min(r.seconds):.2f} | "
              f"{paired_ratio(r.seconds, plain and plain.seconds):.2f} | {statistics.median(r.in_rounds):.2f} | "
              f"{paired_ratio(r.in_rounds, in_process and in_process.in_rounds):.2f} | {r.accuracy:.4f} |")
    for way, r in results.items():
        if plain and way != "plain":
            print(f"ratio {way}/plain ({w.name}): {paired_ratio(r.seconds, plain.seconds):.2f}")
    if in_process and "simulation" in results:
        ratio = paired_ratio(results["simulation"].in_rounds, in_process.in_rounds)
        print(f"simulation/in-process through the rounds ({w.name}): {ratio:.2f} (goal <= 1.5: "
              f"{'met' if ratio <= 1.5 else 'not met'})")
    reference = plain.accuracy if plain else next(iter(results.values())).accuracy
    off = [f"{way} ({r.accuracy:.4f})" for way, r in results.items() if abs(r.accuracy - reference) > tolerance]
    print(f"accuracies within {tolerance:g} of the plain loop's {reference:.4f}: {'no: ' + ', '.join(off) if off else 'yes'}")
    return off


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="2nn,cnn,2nn-100", help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--ways", default=",".join(DEFAULT_WAYS), help=f"comma-separated, of {', '.join(WAYS)} "
                        "(default: all but flower-app-deployed)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cnn-rounds", type=int, default=5)
    parser.add_argument("--flower-cpus", type=float, default=1.0, help="CPUs per client of the bare Flower app")
    parser.add_argument("--max-deploy", type=int, default=20, help="deploy only workloads of at most this many clients")
    parser.add_argument("--tolerance", type=float, help="largest gap to the plain loop's accuracy (mean of the last 5 "
                        "rounds, median of the repeats); default 0.02, 0.05 for cnn (5 rounds: still climbing fast)")
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: 2 clients x 300 samples, 2 rounds, 1 repeat (a test, not a measurement)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill or a timeout still stops the processes started
    names = [n for n in args.workload.split(",") if n]
    ways = [n for n in args.ways.split(",") if n]
    unknown = [n for n in names if n not in WORKLOADS] + [n for n in ways if n not in WAYS]
    if unknown:
        parser.error(f"unknown workload or way: {', '.join(unknown)}")
    workloads = [WORKLOADS[n] if n != "cnn" else replace(WORKLOADS[n], rounds=args.cnn_rounds) for n in names]
    if args.smoke:
        if "--ways" not in sys.argv:
            ways = [way for way in ways if way not in FLOWER_WAYS]
            print(f"--smoke: skipped {', '.join(sorted(FLOWER_WAYS))} (each takes 10-30 s to start; --ways to run them)")
        workloads = [replace(w, clients=2, per_client=300, rounds=2, test_samples=200, loss_samples=100)
                     for w in workloads[:1]]
        args.repeats, args.tolerance = 1, 0.25 if args.tolerance is None else args.tolerance
    torch.set_num_threads(1)
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; torch threads 1; "
          f"torch {torch.__version__}", flush=True)
    off: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        superlink = None
        if "flower-app" in ways:
            import flwr

            superlink = LocalSuperLink(Path(tmp) / "flwr-home", args.flower_cpus)
            print(f"bare Flower app: Flower {flwr.__version__}, Message API (flwr.serverapp.strategy.FedAvg, ArrayRecord, "
                  f"evaluate_fn), `flwr run APP local --stream` on a local simulation SuperLink, "
                  f"{args.flower_cpus:g} CPU per client", flush=True)
        try:
            for w in workloads:
                chosen = [way for way in ways if way != "deployment" or w.clients <= args.max_deploy]
                if len(chosen) < len(ways):
                    print(f"{w.name}: deployment left out ({w.clients} SuperNode processes > --max-deploy {args.max_deploy})")
                print(f"\n{w.name}: {w.describe()}", flush=True)
                tolerance = w.tolerance if args.tolerance is None else args.tolerance
                results = measure(chosen, w, args.repeats, Path(tmp), superlink)
                off += [f"{w.name}: {o} off by more than {tolerance:g}" for o in report(w, results, tolerance)]
        finally:
            if superlink is not None:
                superlink.stop()
    print(f"\nload average (1 min) at end: {os.getloadavg()[0]:.2f}")
    if off:
        raise SystemExit(f"accuracy: {'; '.join(off)}")


if __name__ == "__main__":
    main()
