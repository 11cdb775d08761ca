"""Runs: a config in, a run folder out.

A run folder holds ``config.yaml`` (resolved), ``metrics.jsonl`` (one line per evaluated
round, flushed as it is written), ``checkpoint.pt`` (every ``run.checkpoint_every`` rounds,
written atomically; the one before it is kept as ``checkpoint.prev.pt``),
``model.pt`` (the final flat parameter vector) and ``summary.json``.
``run`` and ``resume`` hold the folder's lock (:mod:`fedaccel.runlock`) while they write: a
second writer of the same folder stops with one line naming the first one's PID.
``resume(run_dir)`` continues a killed run from its checkpoint and reaches the same numbers as
an uninterrupted run: every random draw derives from (seed, round, client), never from the
history of the process. SIGINT/SIGTERM finish the current round and checkpoint it
(:mod:`fedaccel.stopping`); a damaged checkpoint falls back to the previous one.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedaccel.algorithms.base import Algorithm, make_rng
from fedaccel.algorithms.registry import get_recipe
from fedaccel.config import (
    LOCAL_RUNTIMES,
    Config,
    build_algorithm_from,
    dump_config,
    from_dict,
    local_options,
    read_yaml,
    warn_if_fedavg_in_disguise,
)
from fedaccel.engine.device import check_device_name, resolve_device, to_device
from fedaccel.engine.federation import Federation
from fedaccel.engine.round import ClientRuntime, FLState, RoundReport, init_state, run_round
from fedaccel.engine.stacked import StackedClients, StackedMember, current_seed_stack, kernel_kind
from fedaccel.errors import UserError
from fedaccel.runlock import lock_run_dir
from fedaccel.stopping import STOP, Interrupted, clear_stop, signal_name, stop_signals

CHECKPOINT = "checkpoint.pt"
PREVIOUS_CHECKPOINT = "checkpoint.prev.pt"  # the one before; resume falls back to it if the newest is damaged
METRICS = "metrics.jsonl"
DIAGNOSTICS = "diagnostics.jsonl"  # the algorithm's diagnostics of every round, evaluated or not


@dataclass
class Setup:
    """Everything built from a config before the first round."""

    config: Config
    federation: Federation
    algorithm: Algorithm
    fraction: float
    num_classes: int = 0
    active_attacks: int = 0  # how many of config.attacks are applied to the training data now

    @property
    def schedule(self) -> list[list[int]] | None:
        """Who takes part in each round when ``train.participation`` fixes it (else sampled)."""
        return self.config.train.participation


def build_partition(config: Config) -> tuple[Any, list[np.ndarray]]:
    """Load the dataset and split it over the clients (one client for centralized SGD)."""
    from fedaccel.data import load_dataset
    from fedaccel.splits import split

    seed = config.run.seed
    d = config.data
    dataset = load_dataset(d.dataset, d.root, seed=seed, subset=d.subset, test_subset=d.test_subset)
    labels = dataset.y_train.numpy()
    if get_recipe(config.algorithm["name"]).centralized:
        return dataset, [np.arange(len(labels))]
    split_args = {k: v for k, v in d.split.items() if k != "name"}
    if d.split["name"] == "natural":
        split_args["partition"] = dataset.natural_partition
    return dataset, split(d.split["name"], labels, d.clients, make_rng(seed, "split"), **split_args)


def build_setup(config: Config) -> Setup:
    """Load data, split it, build the model and the algorithm (deterministic from the seed)."""
    from fedaccel.models import build_model

    seed = config.run.seed
    dataset, partition = build_partition(config)
    model_args = {k: v for k, v in config.model.items() if k != "name"}
    module = build_model(config.model["name"], dataset.input_shape, dataset.num_classes, seed=seed, **model_args)
    federation = Federation(
        module,
        dataset.x_train,
        dataset.y_train,
        partition,
        dataset.x_test,
        dataset.y_test,
        local_options(config),
        seed=seed,
        eval_train_samples=config.eval.train_samples,
        device=resolve_device(config.run.device),
    )
    algorithm = build_algorithm_from(config)
    return Setup(config, federation, algorithm, config.train.client_fraction, dataset.num_classes)


def apply_attacks(setup: Setup, round_: int) -> None:
    """Make the configured malicious clients' training data attacked from their start round on."""
    attacks = sorted(setup.config.attacks, key=lambda a: a.get("from_round", 0))
    active = sum(1 for a in attacks if round_ >= a.get("from_round", 0))
    if active == setup.active_attacks:
        return
    from fedaccel.attacks import attack_clients

    fed = setup.federation
    x, y = fed.clean_train
    for k, attack in enumerate(attacks[:active]):
        x, y = attack_clients(
            attack["kind"], x, y, fed.partition, attack["clients"], setup.num_classes,
            make_rng(setup.config.run.seed, "attack", k), shift=attack.get("shift", 1),
        )
    fed.set_training_data(x, y)
    setup.active_attacks = active


LARGE_MODEL = 1_000_000  # parameters; below this, extra intra-op threads lost in benchmarks/threads.py


def choose_threads(config: Config, n_params: int) -> tuple[int, str]:
    """Torch threads for a run, and why: ``run.threads`` if set; 1 in a parallel worker
    (``FEDACCEL_TORCH_THREADS``, set by ``experiment -j`` and Flower nodes); else the measured rule
    (benchmarks/threads.py, 2 shared cores: one thread was 4.5-7x faster than two for the SVM and
    the BHerd CNN): 1 for a model under a million parameters, otherwise the cores the other
    processes leave idle (one per core minus the 1-minute load average, at least 1)."""
    if config.run.threads is not None:
        return config.run.threads, "run.threads"
    if os.environ.get("FEDACCEL_TORCH_THREADS"):
        return max(1, int(os.environ["FEDACCEL_TORCH_THREADS"])), "parallel worker"
    if n_params < LARGE_MODEL:
        return 1, f"auto: {n_params:,} parameters < {LARGE_MODEL:,}"
    cores = os.cpu_count() or 1
    idle = max(1, cores - round(os.getloadavg()[0]) if hasattr(os, "getloadavg") else cores)
    return idle, f"auto: large model, {idle} of {cores} cores idle"


def choose_runtime(requested: str, federation: Federation, clients: int) -> tuple[str, str]:
    """The client runtime of a local run, and why: ``run.runtime`` unless it is ``auto``; then the
    measured rule of benchmarks/stacked.py (README "Speed"): stacked for any model with a batched
    form on a GPU, with at least two clients a round; in process on a CPU, where the lean
    in-process step (closed-form linear gradients, batches laid out once) was as fast or faster
    than stacked for every model measured (SVM 6.1x the plain loop against 5.0x stacked at K = 20;
    2NN 1.1x against 1.0x; the CNN stacked slower still)."""
    if requested != "auto":
        return requested, "run.runtime"
    kind = kernel_kind(federation.model.module)
    device = federation.x_train.device.type
    if kind is None:
        return "in-process", "auto: the model has buffers, no stacked form"
    if clients < 2:
        return "in-process", "auto: one client a round"
    if device != "cpu":
        return "stacked", f"auto: {kind} model on {device}"
    return "in-process", f"auto: on a cpu the in-process step is as fast ({kind} model)"


def local_runtime(setup: Setup, state: FLState) -> tuple[ClientRuntime | None, str, str]:
    """The runtime object for ``run.runtime`` in this process (None: in process), its name and why."""
    config, federation = setup.config, setup.federation
    clients = max(1, round(setup.fraction * federation.n_clients))
    if setup.algorithm.single("participation") is not None:
        clients = federation.n_clients  # e.g. FedUMF: every client trains
    stack = current_seed_stack()
    if stack is not None:  # fedaccel experiment --stack-seeds: this run's seeds train as one computation
        return stack.member(setup.algorithm, federation, state.clients), "stacked", "seeds stacked"
    name, why = choose_runtime(config.run.runtime, federation, clients)
    if name != "stacked":
        return None, name, why
    runtime = StackedClients(setup.algorithm, federation, state.clients, stack_size=config.run.stack_size)
    return runtime, name, why


def new_run_dir(config: Config) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(config.run.out_dir) / f"{config.label}-s{config.run.seed}-{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


def run(config: Config, run_dir: str | Path | None = None, *, progress: bool | None = None) -> Path:
    """Run ``config`` into ``run_dir`` (default: a new folder under ``run.out_dir``)."""
    path = Path(run_dir) if run_dir is not None else new_run_dir(config)
    warn_if_fedavg_in_disguise(config)
    before = set(path.iterdir()) if path.is_dir() else None
    with lock_run_dir(path):  # before anything is read or written: one writer per folder
        if (path / METRICS).exists():
            raise UserError(f"{path} already holds a run; use `fedaccel run --resume {path}` or another folder")
        with _removed_on_failed_start(path, before):
            dump_config(config, path / "config.yaml")
            if config.run.runtime not in LOCAL_RUNTIMES:
                return _run_on_flower(config, path, progress)
            setup = build_setup(config)  # data or split errors surface here: nothing is left behind
        state = init_state(setup.algorithm, setup.federation.model.theta.clone(), setup.federation.n_clients)
        run_loop(setup, state, path, wall=0.0, progress=progress)
    return path


@contextmanager
def _removed_on_failed_start(path: Path, before: set[Path] | None) -> Iterator[None]:
    """Remove the run folder (``before`` is None: it did not exist) or what this start added to it
    if the start fails before the first metrics line: no folder left holding only ``config.yaml``."""
    try:
        yield
    except BaseException:
        if not (path / METRICS).exists():
            if before is None:
                shutil.rmtree(path, ignore_errors=True)
            else:
                for item in set(path.iterdir()) - before:
                    shutil.rmtree(item) if item.is_dir() else item.unlink()
        raise


def _run_on_flower(config: Config, path: Path, progress: bool | None) -> Path:
    if config.run.runtime == "flower-simulation":
        from fedaccel.flower.simulation import simulate

        return simulate(config, path, progress=progress)
    raise UserError("run.runtime flower-deployment runs with `fedaccel deploy` (SuperLink + SuperNodes)")


def resume(run_dir: str | Path, *, progress: bool | None = None, device: str | None = None) -> Path:
    """Continue a run from its last checkpoint (or from scratch if it never wrote one); ``device``
    replaces its ``run.device`` (e.g. a run started on a GPU continues on a CPU)."""
    path = Path(run_dir)
    if not (path / "config.yaml").is_file():
        raise UserError(f"{path} is not a run folder (no config.yaml)")
    config = from_dict(read_yaml(path / "config.yaml"))
    if device is not None:
        check_device_name(device)
        config.run.device = device
    with lock_run_dir(path):  # before restore_state cuts the metrics back
        if config.run.runtime not in LOCAL_RUNTIMES:
            return _run_on_flower(config, path, progress)
        setup = build_setup(config)
        state, wall = restore_state(setup, path)
        run_loop(setup, state, path, wall=wall, progress=progress)
    return path


def restore_state(setup: Setup, path: Path) -> tuple[FLState, float]:
    """The state of the newest checkpoint in ``path`` that loads (or the initial one), metrics
    cut to match; says on stderr which round the run continues from."""
    loaded = load_checkpoint(path)
    if loaded is not None:  # saved on the CPU: moved to this run's device, whichever it is
        state, wall = to_device(loaded["state"], setup.federation.device), loaded["wall_s"]
        print(f"resuming {path} from round {state.round}", file=sys.stderr, flush=True)
        kept = state.round
    else:
        state = init_state(setup.algorithm, setup.federation.model.theta.clone(), setup.federation.n_clients)
        wall, kept = 0.0, -1  # from scratch: run_loop writes round 0 again
    for name in (METRICS, DIAGNOSTICS):
        _truncate_metrics(path / name, kept)
    return state, wall


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    """The newest of ``checkpoint.pt`` and ``checkpoint.prev.pt`` in ``path`` that loads; None if
    neither exists. A damaged file is named in one line on stderr and skipped; if every
    checkpoint there is damaged, that is a :class:`UserError`."""
    damaged = []
    for name in (CHECKPOINT, PREVIOUS_CHECKPOINT):
        file = path / name
        if not file.is_file():
            continue
        try:
            saved = torch.load(file, weights_only=False, map_location="cpu")  # our own file
            if not isinstance(saved, dict) or not isinstance(saved.get("state"), FLState):
                raise ValueError("not a fedaccel checkpoint")
        except Exception as exc:  # truncated zip, 0 bytes (EOFError), pickle garbage, ...
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            damaged.append(f"{file} ({reason[:120]})")
            print(f"warning: {file} is damaged and is skipped ({reason[:120]})", file=sys.stderr, flush=True)
            continue
        return saved
    if damaged:
        raise UserError(f"no checkpoint in {path} loads: {'; '.join(damaged)}; "
                        f"delete them to start the run again from round 0")
    return None


def _truncate_metrics(path: Path, last_round: int) -> None:
    """Drop metric lines written after the checkpoint (and a half-written last line)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break
        if row["round"] <= last_round:
            kept.append(line)
    path.write_text("".join(k + "\n" for k in kept))


def run_loop(
    setup: Setup,
    state: FLState,
    path: Path,
    *,
    wall: float,
    progress: Any,
    runtime: ClientRuntime | None = None,
    on_eval: Callable[[FLState, dict[str, Any]], None] | None = None,
) -> FLState:
    """Rounds until the configured number, with metrics, diagnostics and checkpoints written as
    they come; ``runtime`` runs the client side (default: in this process); ``on_eval(state, row)``
    is called after every metrics row written (round 0 included)."""
    config, federation = setup.config, setup.federation
    rounds = config.train.rounds
    show = config.run.progress if progress is None else progress
    threads, why = choose_threads(config, federation.model.theta.numel())
    torch.set_num_threads(threads)
    if runtime is None and config.run.runtime in LOCAL_RUNTIMES:
        runtime, name, runtime_why = local_runtime(setup, state)
        shown = name if runtime_why == "run.runtime" else f"{name} ({runtime_why})"
    else:
        shown = _runtime_name(config, runtime)
    if show:
        from tqdm import tqdm  # its write: above a grid's bars (fedaccel.grid_progress), not through them

        tqdm.write(f"{config.label}: {type(federation.model.module).__name__} ({federation.model.theta.numel():,} "
                   f"parameters), {federation.n_clients} clients, rounds {state.round + 1}-{rounds} -> {path} "
                   f"[runtime {shown}, device {federation.device}, {threads} torch thread"
                   f"{'s' if threads > 1 else ''} ({why})]", file=sys.stderr)
    bar = _progress_bar(rounds, state.round, config.label, show)
    checkpointed = state.round
    events = _event_log(config, path, state.round)
    try:
        with stop_signals(), open(path / METRICS, "a") as metrics_file, open(path / DIAGNOSTICS, "a") as diag_file:
            if state.round == 0:
                _write(metrics_file, first := _metrics(setup, state, None, wall))
                events.metrics(first)
                if on_eval:
                    on_eval(state, first)
            last: dict[str, Any] = {}
            while state.round < rounds:
                apply_attacks(setup, state.round)
                started = time.perf_counter()
                state, report = run_round(
                    setup.algorithm, state, federation, fraction=setup.fraction, schedule=setup.schedule,
                    runtime=runtime,
                )
                wall += time.perf_counter() - started
                if report.diag:
                    _write(diag_file, diag_row := {"round": state.round, **report.diag})
                    events.diagnostics(diag_row)
                if state.round % config.eval.every == 0 or state.round == rounds:
                    last = _metrics(setup, state, report, wall)
                    _write(metrics_file, last)
                    events.metrics(last)
                    if on_eval:
                        on_eval(state, last)
                    bar.set_postfix(acc=f"{last['test_acc']:.4f}", refresh=False)
                stopping = STOP.is_set() and state.round < rounds
                if state.round % config.run.checkpoint_every == 0 or state.round == rounds or stopping:
                    save_checkpoint(path / CHECKPOINT, state, wall)
                    checkpointed = state.round
                bar.update(1)
                if stopping:
                    raise Interrupted(path, state.round, signal_name())
    except KeyboardInterrupt:  # a second signal, or Ctrl-C where no handler could be set
        raise Interrupted(path, checkpointed, "a second signal" if STOP.is_set() else "KeyboardInterrupt") from None
    finally:
        if not isinstance(runtime, StackedMember):  # stacked seeds: their experiment clears it once all stopped
            clear_stop()
        bar.close()  # before anything else is printed: no message in the middle of the bar
        events.close()
    torch.save({"w": state.w.cpu(), "config": config.to_dict()}, path / "model.pt")
    final = last or _last_metrics(path / METRICS)
    (path / "summary.json").write_text(json.dumps({"finished": True, "rounds": rounds, "final": final}, indent=1))
    return state


def _event_log(config: Config, path: Path, start_round: int) -> Any:
    from fedaccel.tensorboard import EventLog, NoEvents

    return EventLog(path, start_round) if config.run.tensorboard else NoEvents()


def _runtime_name(config: Config, runtime: ClientRuntime | None) -> str:
    return config.run.runtime if runtime is not None else "in-process"


def _metrics(setup: Setup, state: FLState, report: RoundReport | None, wall: float) -> dict[str, Any]:
    row: dict[str, Any] = {"round": state.round}
    row.update(setup.federation.evaluate(state.w))
    row["wall_s"] = round(wall, 4)
    row.update(state.totals)
    if report is not None:
        row["clients"] = len(report.participation.train)
        row["uploaded"] = len(report.participation.upload)
        row["round_bytes_up"] = report.bytes_up  # this round's own (the others are running totals)
        row["round_bytes_down"] = report.bytes_down
        row["round_local_steps"] = report.local_steps
        if report.diag:
            row["diag"] = report.diag
    return row


def _write(file: Any, row: dict[str, Any]) -> None:
    file.write(json.dumps(row, default=_jsonable) + "\n")
    file.flush()
    os.fsync(file.fileno())


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to metrics")


def _last_metrics(path: Path) -> dict[str, Any]:
    lines = path.read_text().splitlines()
    return json.loads(lines[-1]) if lines else {}


def save_checkpoint(path: Path, state: FLState, wall: float) -> None:
    """Write atomically and keep the one before as ``checkpoint.prev.pt``: a kill during the write
    leaves the previous checkpoint intact, and a damaged newest one still has a predecessor.
    Tensors are saved on the CPU, so the run resumes on any device."""
    tmp = path.with_suffix(".tmp")
    torch.save({"state": to_device(state, "cpu"), "wall_s": wall}, tmp)
    with open(tmp, "rb") as file:
        os.fsync(file.fileno())
    if path.exists():
        os.replace(path, path.with_name(PREVIOUS_CHECKPOINT))
    os.replace(tmp, path)


def _progress_bar(total: int, done: int, label: str, show: Any) -> Any:
    """tqdm's bar on stderr; ``show`` may instead be a class with tqdm's interface (``update``,
    ``set_postfix``, ``close``) that reports rounds another way, e.g. one log line each."""
    from tqdm import tqdm

    if not isinstance(show, bool):
        return show(total=total, initial=done, desc=label)
    return tqdm(
        total=total,
        initial=done,
        desc=label,
        unit="round",
        disable=not show,
        file=sys.stderr,
        dynamic_ncols=True,
    )
