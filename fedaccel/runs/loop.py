"""The round loop of a run: rounds until the configured number, with metrics, diagnostics and
checkpoints written as they come, whichever runtime trains the clients.

``run_loop`` picks the torch threads (:func:`choose_threads`) and, for a local run, the client
runtime (:func:`choose_runtime`: in process or stacked); a Flower ServerApp hands in its own.
SIGINT/SIGTERM finish the current round and checkpoint it (:mod:`fedaccel.runs.stopping`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedaccel.engine.federation import Federation
from fedaccel.engine.round import ClientRuntime, FLState, RoundReport, run_round
from fedaccel.engine.stacked import StackedClients, StackedMember, current_seed_stack, kernel_kind
from fedaccel.runs.checkpoint import save_checkpoint
from fedaccel.runs.config import LOCAL_RUNTIMES, Config
from fedaccel.runs.folder import CHECKPOINT, DIAGNOSTICS, METRICS
from fedaccel.runs.setup import Setup, apply_attacks
from fedaccel.runs.stopping import STOP, Interrupted, clear_stop, signal_name, stop_signals


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
        from tqdm import tqdm  # its write: above a grid's bars (fedaccel.grids.progress), not through them

        what = (f"{type(federation.model.module).__name__} ({federation.model.theta.numel():,} parameters), "
                f"{federation.n_clients} clients")
        tqdm.write(run_line(config, path, state.round, what, f"runtime {shown}, device {federation.device}, "
                            f"{threads} torch thread{'s' if threads > 1 else ''} ({why})"), file=sys.stderr)
    bar = progress_bar(rounds, state.round, config.label, show)
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


def run_line(config: Config, path: Path, done: int, what: str, how: str) -> str:
    """The first line a run prints: what runs, which rounds, where to, and how."""
    return f"{config.label}: {what}, rounds {done + 1}-{config.train.rounds} -> {path} [{how}]"


def _event_log(config: Config, path: Path, start_round: int) -> Any:
    from fedaccel.runs.tensorboard import EventLog, NoEvents

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
        row["uploaded"] = report.uploaded  # aggregated: not the clients lost, rejected or skipped
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


def progress_bar(total: int, done: int, label: str, show: Any) -> Any:
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
