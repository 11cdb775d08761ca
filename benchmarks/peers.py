"""Measured against the peers: the same FedAvg work done six ways, interleaved, with their accuracies.

The ways (``--ways``, default all):

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
each way's median seconds (start-up included), its fastest, and the median of its per-repeat
ratios to the plain loop. Every way's accuracy (the mean test accuracy of the last 5 rounds, the
median of the repeats) must be within ``--tolerance`` (0.02; 0.05 for ``cnn``, whose 5 rounds
are still climbing fast) of the plain loop's (the ways draw
batches differently, the bare Flower app's shuffles unseeded; the fedaccel ways agree with each
other to 1e-5), else the script exits non-zero. Torch threads are pinned to 1 everywhere (OMP_NUM_THREADS=1 in
every process started); the 1-minute load average is printed at the start and the end.

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

os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", FLWR_TELEMETRY_ENABLED="0",
                  FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1")

import torch  # noqa: E402  (after the thread pinning above)
import torch.nn.functional as F  # noqa: E402

from fedaccel.algorithms.base import make_rng  # noqa: E402
from fedaccel.data import load_dataset  # noqa: E402
from fedaccel.data.splits import split  # noqa: E402
from fedaccel.models import build_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "benchmarks" / "peers_flower_app"
WAYS = ["plain", "in-process", "stacked", "simulation", "deployment", "flower-app"]
LAST = 5  # rounds averaged into the final accuracy
FLOWER_WAYS = {"simulation", "deployment", "flower-app"}
LABEL = {"plain": "plain PyTorch loop", "in-process": "fedaccel run, in process", "stacked": "fedaccel run, stacked",
         "simulation": "fedaccel run, flower-simulation", "deployment": "fedaccel deploy",
         "flower-app": "bare Flower app (flwr run)"}


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


def run_plain(w: Workload, out: Path) -> float:  # noqa: ARG001  (writes nothing)
    """FedAvg written without a framework; returns the test accuracy of each round."""
    data = load_dataset("fashion-mnist", seed=w.seed, subset=w.clients * w.per_client, test_subset=w.test_samples)
    parts = split("iid", data.y_train.numpy(), w.clients, make_rng(w.seed, "split"))
    x, y = data.x_train, data.y_train
    sizes = torch.tensor([len(p) for p in parts], dtype=torch.float32)
    weights = sizes / sizes.sum()
    net = build_model(w.model, data.input_shape, 10, seed=w.seed, **w.options)
    global_state = {k: v.clone() for k, v in net.state_dict().items()}
    generator = torch.Generator().manual_seed(w.seed)
    accuracy = []
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
    return final_accuracy(accuracy)


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


def run_fedaccel(w: Workload, out: Path, runtime: str) -> float:
    from fedaccel.launch import run

    path = run(fedaccel_config(w, runtime), out)
    return final_accuracy([json.loads(line)["test_acc"] for line in (path / "metrics.jsonl").read_text().splitlines()])


def run_deployed(w: Workload, out: Path) -> float:
    from fedaccel.flower.deploy import deploy

    path = deploy(fedaccel_config(w, "flower-deployment"), out)
    return final_accuracy([json.loads(line)["test_acc"] for line in (path / "metrics.jsonl").read_text().splitlines()])


# ---- the bare Flower app -------------------------------------------------------------------------

class LocalSuperLink:
    """The simulation SuperLink ``flwr run APP local`` starts for a ``:local:`` connection (same
    command), on free ports under a private FLWR_HOME, started and stopped by this script."""

    def __init__(self, home: Path, cpus_per_client: float) -> None:
        from fedaccel.flower.deploy import free_port

        self.home, self.cpus = home, cpus_per_client
        taken: set[int] = set()
        ports = {"FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": free_port(taken), "FLWR_LOCAL_CONTROL_API_PORT": free_port(taken)}
        self.env = {**os.environ, "FLWR_HOME": str(home), **{k: str(v) for k, v in ports.items()},
                    "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
                    "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
                    "RAY_ADDRESS": ""}
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text('[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n')
        log = home / "superlink.log"
        command = ["flower-superlink", "--insecure", "--simulation", "--isolation", "subprocess",
                   "--control-api-address", f"127.0.0.1:{ports['FLWR_LOCAL_CONTROL_API_PORT']}", "--host", "127.0.0.1",
                   "--port", str(ports["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]), "--database", str(home / "state.db")]
        self.process = subprocess.Popen(command, env=self.env, stdout=log.open("w"), stderr=subprocess.STDOUT,
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

    def run(self, w: Workload, out: Path) -> float:
        result = out / "rounds.json"
        out.mkdir(parents=True, exist_ok=True)
        settings = {"model": w.model, "hidden": w.options.get("hidden", 0), "num-server-rounds": w.rounds,
                    "clients": w.clients, "samples": w.clients * w.per_client, "test-samples": w.test_samples,
                    "loss-samples": w.loss_samples, "batch-size": w.batch, "lr": w.lr, "seed": w.seed}
        run_config = " ".join(f"{k}={json.dumps(v)}" for k, v in settings.items()) + f" out='{result}'"
        federation = f"num-supernodes={w.clients} client-resources-num-cpus={self.cpus:g}"
        command = ["flwr", "run", str(APP), "local", "--stream", "--run-config", run_config,
                   "--federation-config", federation]
        done = subprocess.run(command, env=self.env, cwd=out, capture_output=True, text=True, timeout=3600, check=False)
        (out / "flwr-run.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0 or not result.exists():
            raise SystemExit(f"the bare Flower app failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
        rows = json.loads(result.read_text())
        return final_accuracy([rows[str(r)]["test_acc"] for r in range(1, w.rounds + 1)])

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # the SuperLink and the simulation processes it started
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


# ---- the comparison ------------------------------------------------------------------------------

def measure(ways: list[str], w: Workload, repeats: int, tmp: Path,
            superlink: LocalSuperLink | None) -> dict[str, tuple[list[float], float]]:
    runners = {"plain": run_plain, "in-process": lambda w, o: run_fedaccel(w, o, "in-process"),
               "stacked": lambda w, o: run_fedaccel(w, o, "stacked"),
               "simulation": lambda w, o: run_fedaccel(w, o, "flower-simulation"),
               "deployment": run_deployed, "flower-app": lambda w, o: superlink.run(w, o)}  # type: ignore[union-attr]
    counter = iter(range(10**6))

    def once(way: str, workload: Workload) -> tuple[float, float]:
        out = tmp / f"{workload.name}-{way}-{next(counter)}"
        started = time.perf_counter()
        accuracy = runners[way](workload, out)
        elapsed = time.perf_counter() - started
        shutil.rmtree(out, ignore_errors=True)
        return elapsed, accuracy

    for way in ways:  # warm-up, untimed: one round
        once(way, replace(w, rounds=1))
    times: dict[str, list[float]] = {way: [] for way in ways}
    accuracy: dict[str, list[float]] = {way: [] for way in ways}
    for r in range(repeats):
        for way in ways:
            elapsed, acc = once(way, w)
            times[way].append(elapsed)
            accuracy[way].append(acc)
            print(f"  repeat {r + 1}/{repeats} {way:10s} {elapsed:8.2f} s  test accuracy {acc:.4f}", flush=True)
    return {way: (times[way], statistics.median(accuracy[way])) for way in ways}


def report(w: Workload, results: dict[str, tuple[list[float], float]], tolerance: float) -> list[str]:
    """Print the workload's table; return the ways whose accuracy is off."""
    base_times, base_acc = results.get("plain", (None, None))
    print(f"\n{w.name}: the table ({len(next(iter(results.values()))[0])} repeats)\n")
    print(f"| how | median s | fastest s | / plain | test accuracy (last {LAST} rounds, median of repeats) |")
    print("|---|---|---|---|---|")
    for way, (times, acc) in results.items():
        ratio = statistics.median(t / b for t, b in zip(times, base_times)) if base_times else float("nan")
        print(f"| {LABEL[way]} | {statistics.median(times):.2f} | {min(times):.2f} | {ratio:.2f} | {acc:.4f} |")
    for way, (times, _) in results.items():
        if base_times and way != "plain":
            ratio = statistics.median(t / b for t, b in zip(times, base_times))
            print(f"ratio {way}/plain ({w.name}): {ratio:.2f}")
    reference = base_acc if base_acc is not None else next(iter(results.values()))[1]
    off = [f"{way} ({acc:.4f})" for way, (_, acc) in results.items() if abs(acc - reference) > tolerance]
    print(f"accuracies within {tolerance:g} of the plain loop's {reference:.4f}: {'no: ' + ', '.join(off) if off else 'yes'}")
    return off


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="2nn,cnn,2nn-100", help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated, of {', '.join(WAYS)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cnn-rounds", type=int, default=5)
    parser.add_argument("--flower-cpus", type=float, default=1.0, help="CPUs per client of the bare Flower app")
    parser.add_argument("--max-deploy", type=int, default=20, help="deploy only workloads of at most this many clients")
    parser.add_argument("--tolerance", type=float, help="largest gap to the plain loop's accuracy (mean of the last 5 "
                        "rounds, median of the repeats); default 0.02, 0.05 for cnn (5 rounds: still climbing fast)")
    parser.add_argument("--smoke", action="store_true",
                        help="smallest size: 2 clients x 300 samples, 2 rounds, 1 repeat (a test, not a measurement)")
    args = parser.parse_args()
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
