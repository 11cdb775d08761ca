"""The round loop of a run: rounds until the configured number, with metrics, diagnostics and
checkpoints written as they come, whichever runtime trains the clients.

``run_loop`` picks the torch threads (:func:`choose_threads`) and, for a local run, the client
runtime (:func:`choose_runtime`: in process or stacked); a Flower ServerApp hands in its own.
SIGINT/SIGTERM finish the current round and checkpoint it (:mod:`fedaccel.runs.stopping`).

After every round the model must be finite, and so must the losses of a metrics row: a run that
diverges stops there (:class:`Diverged`, ``run.on_divergence: stop``, the default) keeping its last
finite checkpoint, or goes on recording NaNs (``continue``); either way ``summary.json`` says
``"diverged": true`` with the round. A resumed run whose checkpoint's metrics row is missing or
damaged evaluates that round again from the checkpoint (:func:`repair_checkpoint_row`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedaccel.algorithms.dp import clip_column, epsilon_column
from fedaccel.disk import appending
from fedaccel.engine.evaluated import column, init_evaluated, kept, scored_models
from fedaccel.engine.federation import Federation
from fedaccel.engine.round import ClientRuntime, FLState, RoundReport, run_round
from fedaccel.engine.stacked import StackedClients, StackedMember, current_seed_stack, kernel_kind
from fedaccel.errors import ConfigError, UserError, shown
from fedaccel.runs.checkpoint import continued_parts, save_checkpoint
from fedaccel.runs.config import LOCAL_RUNTIMES, Config
from fedaccel.runs.files import save_plain, write_atomic
from fedaccel.runs.folder import CHECKPOINT, DIAGNOSTICS, ERROR_FILE, METRICS
from fedaccel.runs.rows import LOSSES, read_rows, summary_text
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


#: On a CPU, per kernel kind (:func:`fedaccel.engine.stacked.kernel_kind`): stacked from this many clients a
#: round, at batch sizes in this range; in process otherwise. Fitted to benchmarks/stacked.py's grid on the
#: 2-core CPU (docs/architecture/client-side.md "Choosing the runtime"): the closed-form SVM step is dominated by per-client
#: overhead until its batch grows; since the 2NN and softmax step through the fused chain in process too
#: (fedaccel.models.chain), their per-client matmuls beat the batched ones at every K and batch measured
#: (5 to 100 clients, batch 10 to 100: in process 0.74-0.91 of stacked's time); torch.func models (the CNN) never gained.
CPU_STACKED: dict[str, tuple[int, range]] = {"svm": (10, range(1, 51))}


def choose_runtime(requested: str, federation: Federation, clients: int) -> tuple[str, str]:
    """The client runtime of a local run, and why: ``run.runtime`` unless it is ``auto``; then the rule
    measured with benchmarks/stacked.py: in process for a model with no batched form or one client a round;
    stacked on a GPU (it won every row, docs/gpu.md); on a CPU stacked where :data:`CPU_STACKED` says
    (clients a round, batch size, kernel kind), in process elsewhere."""
    if federation.options.dp_sgd is not None:
        if requested == "stacked":
            raise ConfigError("run.runtime stacked cannot run train.dp_sgd (Opacus hooks per-sample gradients into "
                              "one client's module, not the stacked step): use in-process or auto")
        return "in-process", "train.dp_sgd runs in process" if requested == "auto" else "run.runtime"
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
    batch = federation.options.batch_size
    if kind in CPU_STACKED:
        least, batches = CPU_STACKED[kind]
        if clients >= least and batch in batches:
            return "stacked", f"auto: {kind} model, {clients} clients a round, batch {batch} on a cpu"
    return "in-process", f"auto: {kind} model, {clients} clients a round, batch {batch}: in process on a cpu"


def local_runtime(setup: Setup, state: FLState) -> tuple[ClientRuntime | None, str, str]:
    """The runtime object for ``run.runtime`` in this process (None: in process), its name and why."""
    config, federation = setup.config, setup.federation
    clients = max(1, round(setup.fraction * federation.n_clients))
    if setup.algorithm.single("participation") is not None:
        clients = federation.n_clients  # e.g. FedUMF: every client trains
    stack = current_seed_stack()
    if stack is not None and federation.options.dp_sgd is not None:
        raise ConfigError("--stack-seeds cannot run train.dp_sgd (the seeds' stacked step has no per-sample "
                          "gradients): run the grid without it")
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
    parts: list[dict[str, Any]] | None = None,
    runtime: ClientRuntime | None = None,
    on_eval: Callable[[FLState, dict[str, Any]], None] | None = None,
    stop_after: int | None = None,
) -> FLState:
    """Rounds until the configured number, with metrics, diagnostics and checkpoints written as
    they come; ``runtime`` runs the client side (default: in this process); ``on_eval(state, row)``
    is called after every metrics row written (round 0 included); ``parts``: where the run's earlier
    rounds ran (:func:`~fedaccel.runs.checkpoint.restore_state`), kept in its checkpoints and summary;
    ``stop_after``: the round after which the run stops as a signal stops it (:func:`fedaccel.launch.check_resume`)."""
    config, federation = setup.config, setup.federation
    rounds = config.train.rounds
    show = config.run.progress if progress is None else progress
    threads, why = choose_threads(config, federation.model.theta.numel())
    torch.set_num_threads(threads)
    state = with_evaluated(state, config.eval.models, federation.n_clients,
                           federation.weights if config.eval.mean_weighting == "data" else None)
    if runtime is None and config.run.runtime in LOCAL_RUNTIMES:
        runtime, name, runtime_why = local_runtime(setup, state)
        shown = name if runtime_why == "run.runtime" else f"{name} ({runtime_why})"
    else:
        shown = _runtime_name(config, runtime)
    if show and getattr(show, "announce", True):  # a grid in a log says its cells its own way
        from tqdm import tqdm  # its write: above a grid's bars (fedaccel.grids.progress), not through them

        what = (f"{type(federation.model.module).__name__} ({federation.model.theta.numel():,} parameters), "
                f"{federation.n_clients} clients{dp_noise_said(setup)}")
        tqdm.write(run_line(config, path, state.round, what, f"runtime {shown}, device {federation.device}, "
                            f"{threads} torch thread{'s' if threads > 1 else ''} ({why})"), file=sys.stderr)
    bar = progress_bar(rounds, state.round, config.display_name, show)
    ran_on = {"device": str(federation.device), "runtime": shown}  # run.device auto: where it was
    dp_noise = setup.privacy.noise_multiplier if setup.privacy is not None else None  # target_epsilon's calibration
    parts = continued_parts(parts or [], state.round, ran_on)  # a run resumed elsewhere: each part's device
    checkpointed = state.round
    events = _event_log(config, path, state.round)
    diverged = first_divergence(path / METRICS)  # (round, why) of an earlier part of this run, if any
    refused_rounds = 0  # rounds in a row in which the server refused every answer
    (path / ERROR_FILE).unlink(missing_ok=True)  # an earlier part's error: this part runs again
    try:
        with stop_signals(), appending(path / METRICS) as metrics_file, appending(path / DIAGNOSTICS) as diag_file:
            last: dict[str, Any] = repair_checkpoint_row(setup, state, path, metrics_file, wall)
            if last:
                events.metrics(last)
                if on_eval:
                    on_eval(state, last)
            while state.round < rounds:
                apply_attacks(setup, state.round)
                started = time.perf_counter()
                state, report = run_round(
                    setup.algorithm, state, federation, fraction=setup.fraction, schedule=setup.schedule,
                    runtime=runtime,
                )
                wall += time.perf_counter() - started
                if STOP.is_set() and (lost := lost_to_the_stop(report)):
                    _say(f"round {state.round}: {lost} while stopping, so it is not kept; the run continues after "
                         f"round {checkpointed}")
                    raise Interrupted(path, checkpointed, signal_name())
                if error := simulated_client_error(config, report):  # as in process: the error stops the run
                    keeps = _what_it_keeps(config, path, f"its checkpoint of round {checkpointed}", stops=True)
                    raise ClientError(f"round {state.round}: {error}; a simulation's clients run this machine's code, "
                                      f"so the run stops as it would in process (its traceback: {path / ERROR_FILE})"
                                      f"{keeps}", getattr(runtime, "tracebacks", None) or {})
                if report.diag:
                    _write(diag_file, diag_row := {"round": state.round, **report.diag})
                    if SYNC_EVERY_ROW:
                        _sync(diag_file)
                    events.diagnostics(diag_row)
                cause = None if diverged else non_finite_model(state)
                if state.round % config.eval.every == 0 or state.round == rounds or cause:
                    last = _metrics(setup, state, report, wall)
                    _write(metrics_file, last)  # a diverging round's row is kept even off the eval rhythm
                    if SYNC_EVERY_ROW:
                        _sync(metrics_file)
                    events.metrics(last)
                    if on_eval:
                        on_eval(state, last)
                    bar.set_postfix(acc=f"{last['test_acc']:.4f}", refresh=False)
                    cause = cause or (None if diverged else non_finite_losses(last))
                refused = None if cause else every_answer_refused(report)
                refused_rounds = refused_rounds + 1 if refused else 0
                if refused and refused_rounds >= refused_rounds_that_stop(config, report):
                    message = refused_message(config, state.round, refused, path, checkpointed, refused_rounds)
                    refused_rounds = 0
                    if config.run.on_divergence == "stop":  # no summary: the run stays resumable, as if stopped
                        _sync(metrics_file, diag_file)
                        raise Diverged(message)
                    _say(f"warning: {message}")
                if cause:
                    diverged = (state.round, cause)
                    message = divergence_message(config, state.round, cause, report, path, checkpointed)
                    if config.run.on_divergence == "stop":  # no checkpoint of this round: the last finite one stays
                        _sync(metrics_file, diag_file)
                        write_summary(path, rounds, last, finished=False, diverged=state.round, ran_on=ran_on,
                                      parts=parts, dp_noise=dp_noise)
                        raise Diverged(message)
                    _say(f"warning: {message}")
                stopping = (STOP.is_set() or state.round == stop_after) and state.round < rounds
                if state.round % config.run.checkpoint_every == 0 or state.round == rounds or stopping:
                    _sync(metrics_file, diag_file)
                    save_checkpoint(path / CHECKPOINT, state, wall, config.to_dict(), parts,
                                    getattr(runtime, "trained_at", None))  # Flower's: whose states are kept
                    checkpointed = state.round
                bar.update(1)
                if stopping:
                    raise Interrupted(path, state.round, signal_name())
            _sync(metrics_file, diag_file)  # a resume at the last round writes its row here, not in the loop
    except KeyboardInterrupt:  # a second signal, or Ctrl-C where no handler could be set
        raise Interrupted(path, checkpointed, "a second signal" if STOP.is_set() else "KeyboardInterrupt") from None
    except Exception as exc:
        if not isinstance(exc, (Interrupted, Diverged)):  # a client's error: its round is not kept
            keep_error(path, exc, state.round - isinstance(exc, ClientError), checkpointed, config.run.runtime)
        raise
    finally:
        if not isinstance(runtime, StackedMember):  # stacked seeds: their experiment clears it once all stopped
            clear_stop()
        bar.close()  # before anything else is printed: no message in the middle of the bar
        events.close()
    save_plain(path / "model.pt", {"w": state.w.cpu(), "config": config.to_dict()})
    write_summary(path, rounds, last or _last_metrics(path / METRICS), finished=True,
                  diverged=diverged[0] if diverged else None, ran_on=ran_on, parts=parts, dp_noise=dp_noise)
    return state


def keep_error(path: Path, exc: BaseException, rounds: int, checkpointed: int, runtime: str = "in-process") -> None:
    """``error.txt`` in the run folder: what stopped the rounds, with its traceback (a grid's log, or a terminal
    closed since, may not keep them); a write that fails (a full disk, a link planted at its name) leaves it out:
    the error itself is what the caller sees."""
    import traceback

    import shlex

    command = "deploy" if runtime == "flower-deployment" else "run"
    where = (f"continues from its checkpoint of round {checkpointed}" if (path / CHECKPOINT).is_file() else
             "starts it again from round 0 (no checkpoint was due before the error)")
    text = (f"an error stopped the run after {rounds} round(s); `fedaccel {command} --resume "
            f"{shlex.quote(str(path))}` {where}\n\n"
            + "".join(traceback.format_exception(exc))
            + "".join(f"\nclient {client}'s traceback, in its ClientApp's process:\n{text}\n"
                      for client, text in getattr(exc, "tracebacks", {}).items()))
    try:
        write_atomic(path / ERROR_FILE, text)
    except Exception:  # noqa: BLE001
        pass


def with_evaluated(state: FLState, models: list[str], n_clients: int, weights: Any = None) -> FLState:
    """``state`` keeping the tensors ``eval.models`` needs (:mod:`fedaccel.engine.evaluated`; ``weights``: the
    clients' p_i where the means are data-weighted), made at round 0; a later state (a checkpoint) must
    already hold them."""
    if state.round == 0:
        return replace(state, evaluated=init_evaluated(models, state.w, n_clients, weights))
    wanted = kept(models, "uniform" if weights is None else "data")
    if set(state.evaluated) != wanted:
        raise UserError(f"the checkpoint of round {state.round} keeps {sorted(state.evaluated) or 'no'} extra models' "
                        f"tensors, but eval.models {models} needs {sorted(wanted) or 'none'}: start the run again")
    return state


class Diverged(UserError):
    """A run whose model or loss became non-finite, stopped at that round (its folder keeps the
    last finite checkpoint; ``summary.json`` says ``"diverged": true``)."""


def non_finite_model(state: FLState) -> str | None:
    """Why the model after this round cannot go on (NaN or infinite parameters), or None."""
    return None if bool(torch.isfinite(state.w).all()) else "the model's parameters became NaN or infinite"


def non_finite_losses(row: dict[str, Any]) -> str | None:
    """Why this metrics row shows divergence (a NaN or infinite loss), or None."""
    bad = [name for name in LOSSES if isinstance(row.get(name), (int, float, np.floating))
           and not isinstance(row[name], bool) and not math.isfinite(float(row[name]))]
    return f"{' and '.join(bad)} {row[bad[0]]}" if bad else None


def first_divergence(metrics: Path) -> tuple[int, str] | None:
    """The first round of ``metrics`` whose losses are not finite (an earlier part of a resumed run)."""
    for row in read_rows(metrics)[0]:
        if why := non_finite_losses(row):
            return int(row["round"]), why
    return None


def dp_noise_said(setup: Setup) -> str:
    """The run line's words on client-level DP's noise multiplier z (calibrated where a target epsilon is given)."""
    privacy = setup.privacy
    if privacy is None:
        return ""
    target = (setup.config.algorithm.get("dp") or {}).get("target_epsilon")
    return f", client-level DP noise multiplier z = {privacy.noise_multiplier:.4g}" + (
        f" (calibrated to epsilon {target:g})" if isinstance(target, (int, float)) else "")


def lost_to_the_stop(report: RoundReport) -> str:
    """Why a round in which a stop was asked for is no round to keep: a client's answer was lost or was an error (a
    signal to a simulation's process group ends its Ray workers mid-round, and the round aggregated what was left);
    '' where none was. The gate's refusals of an answer's values (a hostile client's) come stop or not: they count
    not, and such a round is kept, its clients keeping their states."""
    lost = report.diag.get("lost") or []
    rejected = report.diag.get("rejected") or {}
    failed = [c for c, why in rejected.items() if str(why).startswith(CLIENT_ERROR)] if isinstance(rejected, dict) else []
    return f"{len(lost) + len(failed)} client(s)' answers were lost or errors" if lost or failed else ""


CLIENT_ERROR = "client error:"  # how the Flower server records an answer that is an error (fedaccel.flower.server)
CLIENT_RAISED = "its code raised"  # ... after CLIENT_ERROR where the client's code raised (not a dead worker)


class ClientError(UserError):
    """A simulation's client whose code raised: the run stops at that round, not kept, as it does in process;
    ``tracebacks``: the clients' own, by client id, which ``error.txt`` keeps."""

    def __init__(self, message: str, tracebacks: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.tracebacks = dict(tracebacks or {})


def simulated_client_error(config: Config, report: RoundReport) -> str | None:
    """The error of a Flower simulation's client whose code raised this round (an answer that is an error), said in
    words; None elsewhere. A simulation's clients are this machine's fedaccel code, so an error is a bug (a plugin's,
    say) and stops the run as in process; a deployment's clients are other hosts, and the server goes on without
    them (a node's bad luck), stopping only after :data:`REFUSED_ROUNDS` rounds with every answer refused."""
    rejected = report.diag.get("rejected") if isinstance(report.diag, dict) else None
    if config.run.runtime != "flower-simulation" or not isinstance(rejected, dict):
        return None
    said = f"{CLIENT_ERROR} {CLIENT_RAISED} "
    failed = [(client, str(why)[len(said):]) for client, why in rejected.items() if str(why).startswith(said)]
    if not failed:
        return None
    (client, why), more = failed[0], len(failed) - 1
    return f"client {client}'s code raised {why}" + (f" ({more} more client(s) raised too)" if more else "")


def refused_rounds_that_stop(config: Config, report: RoundReport) -> int:
    """Rounds in a row with every answer refused that stop a run: one in a simulation (its clients are this
    machine's code: nothing to wait out), unless a norm bound of the Flower gate refused one (run.norm_ceiling,
    run.norm_ratio: a bound the user set, which in process takes the update; the next rounds may pass it);
    :data:`REFUSED_ROUNDS` in a deployment."""
    rejected = report.diag.get("rejected") if isinstance(report.diag, dict) else None
    bounded = isinstance(rejected, dict) and any(key in str(why) for why in rejected.values() for key in NORM_BOUNDS)
    return 1 if config.run.runtime == "flower-simulation" and not bounded else REFUSED_ROUNDS


NORM_BOUNDS = ("run.norm_ceiling", "run.norm_ratio")  # the settings a gate's norm refusal names (fedaccel.flower.gate)


def every_answer_refused(report: RoundReport) -> str | None:
    """Why nothing of this round could be aggregated: clients answered, none was lost, and the server refused every
    answer (a client's error, or values its gate refuses); None otherwise."""
    rejected = report.diag.get("rejected") if isinstance(report.diag, dict) else None
    if report.uploaded or report.diag.get("lost") or not isinstance(rejected, dict) or not rejected:
        return None
    client, reason = next(iter(rejected.items()))
    return f"the server refused the answer of every client ({len(rejected)}; client {client}: {reason})"


REFUSED_ROUNDS = 3  # rounds in a row with every answer refused that stop a run (one may be a client's bad luck)


def refused_message(config: Config, round_: int, why: str, path: Path, checkpointed: int, rounds: int) -> str:
    """One line: the ``rounds`` nothing was aggregated in, why, where to see the cause, and what the folder keeps."""
    what = "the run stopped at" if config.run.on_divergence == "stop" else "nothing aggregated up to"
    in_a_row = f"in {rounds} rounds in a row " if rounds > 1 else ""
    return (f"{what} round {round_}: {in_a_row}{why}; does the method's client code raise "
            f"or send non-finite values? run.runtime=in-process runs it with its traceback"
            f"{_what_it_keeps(config, path, f'its checkpoint of round {checkpointed}')}")


def _what_it_keeps(config: Config, path: Path, checkpoint: str, stops: bool = False) -> str:
    """The end of a stopping round's line: the run goes on (``run.on_divergence: continue``, unless it ``stops``
    whatever that says), or what its folder keeps (``checkpoint``: the checkpoint's words)."""
    if config.run.on_divergence == "continue" and not stops:
        return "; run.on_divergence=continue: the run goes on"
    return f"; {path} keeps {checkpoint}" if (path / CHECKPOINT).is_file() else "; no checkpoint was due before it"


def divergence_message(
    config: Config, round_: int, why: str, report: RoundReport, path: Path, checkpointed: int
) -> str:
    """One line: the round, the clients if known, the likely cause and what the folder keeps."""
    rejected = report.diag.get("rejected") if isinstance(report.diag, dict) else None
    clients = (f" (client(s) {', '.join(sorted(rejected))} uploaded rejected updates)"
               if isinstance(rejected, dict) and rejected else "")
    keeps = _what_it_keeps(config, path, f"its last finite checkpoint, of round {checkpointed}")
    return (f"the run diverged at round {round_}: {why}{clients}; learning rate too high? "
            f"(train.lr = {config.train.lr:g}){_dp_suspect(config)}{_plugin_suspect(config)}{keeps}")


def _dp_suspect(config: Config) -> str:
    """Words naming client-level DP's noise as a suspect where the run has it (its scale is z times the clip: a
    clip of 1e300 made noise of 1e300, and the line blamed only the learning rate)."""
    dp = config.algorithm.get("dp")
    clip = dp.get("clip") if isinstance(dp, dict) else None
    return "" if clip is None else f" or algorithm.dp's noise, z times its clip ({shown(clip)})?"


def _plugin_suspect(config: Config) -> str:
    """Words naming the run's algorithm as a suspect where it is a plugin's (its own code may make the NaN)."""
    from fedaccel.algorithms.registry import get_recipe

    try:
        plugin = get_recipe(str(config.algorithm["name"])).plugin
    except ConfigError:  # a composed Algorithm under a name of its own (fedaccel.train): no recipe
        return ""
    return "" if plugin is None else f" or algorithm {plugin.name!r}'s own code ({plugin.origin})?"


def write_summary(path: Path, rounds: int, final: dict[str, Any], *, finished: bool, diverged: int | None,
                  ran_on: dict[str, str] | None = None, parts: list[dict[str, Any]] | None = None,
                  dp_noise: float | None = None) -> None:
    """``summary.json``, atomically: whether the run finished, its last metrics row, the round it diverged at (if
    it did), and the device and runtime of its last part (``ran_on``); ``parts`` where a run resumed on another
    device or runtime ran each stretch of its rounds (:func:`~fedaccel.runs.checkpoint.continued_parts`);
    ``dp_noise``: client-level DP's noise multiplier z (``algorithm.dp.target_epsilon`` calibrates it)."""
    summary: dict[str, Any] = {"finished": finished, "rounds": rounds, "final": final, **(ran_on or {})}
    if dp_noise is not None:
        summary["dp_noise_multiplier"] = dp_noise
    if parts is not None and len(parts) > 1:
        summary["parts"] = parts
    if diverged is not None:
        summary.update(diverged=True, diverged_round=diverged)
    write_atomic(path / "summary.json", summary_text(summary))


def repair_checkpoint_row(setup: Setup, state: FLState, path: Path, metrics_file: Any, wall: float) -> dict[str, Any]:
    """Write the metrics row of the round the run starts from when it is due and missing: round 0
    of a new run, or the checkpoint's round whose row was lost (a cut-short last line), evaluated
    again from the checkpoint and said so on stderr. Returns the row written ({} if none)."""
    config = setup.config
    due = state.round == 0 or state.round % config.eval.every == 0 or state.round == config.train.rounds
    if not due or _last_round(path / METRICS) == state.round:
        return {}
    row = _metrics(setup, state, None, wall)
    if state.round > 0:
        diag = _diagnostics_of(path / DIAGNOSTICS, state.round)
        if diag:
            row["diag"] = diag
        row["reevaluated"] = True  # the round's participation and bytes were in the lost row
        print(f"{path / METRICS}: the row of round {state.round} was missing or damaged; "
              f"evaluated it again from the checkpoint", file=sys.stderr, flush=True)
    _write(metrics_file, row)
    return row


def _say(line: str) -> None:
    from tqdm import tqdm  # above a progress bar, not through it

    tqdm.write(line, file=sys.stderr)


def _diagnostics_of(file: Path, round_: int) -> dict[str, Any] | None:
    """The diagnostics row of ``round_`` (without its round), as a metrics row carries it."""
    for row in read_rows(file)[0]:
        if row["round"] == round_:
            return {k: v for k, v in row.items() if k != "round"}
    return None


def _last_round(metrics: Path) -> int | None:
    rows, _ = read_rows(metrics)
    return rows[-1]["round"] if rows else None


def run_line(config: Config, path: Path, done: int, what: str, how: str) -> str:
    """The first line a run prints: what runs, which rounds, where to, and how."""
    return f"{config.display_name}: {what}, rounds {done + 1}-{config.train.rounds} -> {path} [{how}]"


def _event_log(config: Config, path: Path, start_round: int) -> Any:
    from fedaccel.runs.tensorboard import EventLog, NoEvents

    return EventLog(path, start_round) if config.run.tensorboard else NoEvents()


def _runtime_name(config: Config, runtime: ClientRuntime | None) -> str:
    return config.run.runtime if runtime is not None else "in-process"


def _metrics(setup: Setup, state: FLState, report: RoundReport | None, wall: float) -> dict[str, Any]:
    row: dict[str, Any] = {"round": state.round}
    for model, theta in scored_models(setup.config.eval.models, state.w, state.evaluated):
        row.update({column(model, k): v for k, v in setup.federation.evaluate(theta).items()})
    row["wall_s"] = round(wall, 4)
    row.update(state.totals)
    row.update(epsilon_column(setup.privacy, state.round))  # client-level DP: epsilon(delta) so far
    row.update(clip_column(setup.privacy, [part.name for part in setup.algorithm.parts], state.server))
    row.update(sample_epsilon_columns(setup, state))  # sample-level DP-SGD: each client's epsilon(delta) so far
    if report is not None:
        row["clients"] = len(report.participation.train)
        row["uploaded"] = report.uploaded  # aggregated: not the clients lost, rejected, skipped or zeroed
        if isinstance(rejected := report.diag.get("rejected"), dict):
            row["rejected"] = len(rejected)  # replies not used (why, by client: diag.rejected)
        row["round_bytes_up"] = report.bytes_up  # this round's own (the others are running totals)
        row["round_bytes_down"] = report.bytes_down
        row["round_local_steps"] = report.local_steps
        if report.diag:
            row["diag"] = report.diag
    return row


def sample_epsilon_columns(setup: Setup, state: FLState) -> dict[str, Any]:
    """``sample_epsilon`` (the largest client's) and ``sample_epsilon_clients`` with ``train.dp_sgd``."""
    from fedaccel.engine.dp_sgd import PART_NAME, epsilon_columns

    options = setup.federation.options
    if options.dp_sgd is None:
        return {}
    k = [part.name for part in setup.algorithm.parts].index(PART_NAME)
    steps = [client[k] or 0 for client in state.clients]
    sizes = [len(p) for p in setup.federation.partition]
    return epsilon_columns(options.dp_sgd, steps, sizes, options.batch_size)


def _write(file: Any, row: dict[str, Any]) -> None:
    """Append ``row`` and flush it (a reader sees it at once; :func:`_sync` makes it durable)."""
    with _naming(file):
        file.write(json.dumps(row, default=_jsonable) + "\n")
        file.flush()


SYNC_EVERY_ROW = False  # True: fsync each row as written (as before; benchmarks/seed_group_overheads.py times both)


def _sync(*files: Any) -> None:
    """fsync the rows written so far, before a checkpoint claims their rounds: a resumed run drops the rows past
    its checkpoint's round (and re-runs those rounds), so a crash loses nothing a checkpoint counts on."""
    for file in files:
        with _naming(file):
            os.fsync(file.fileno())


@contextmanager
def _naming(file: Any) -> Iterator[None]:
    """A write's error names no file (a full disk): give it the file's name (the message says which, and its space)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = getattr(file, "name", None)
        raise


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to metrics")


def _last_metrics(path: Path) -> dict[str, Any]:
    rows, _ = read_rows(path)
    return rows[-1] if rows else {}


def progress_bar(total: int, done: int, label: str, show: Any) -> Any:
    """tqdm's bar on stderr at a terminal; elsewhere (a log, a pipe) a line now and then
    (:class:`~fedaccel.runs.progress.RoundLines`). ``show`` may instead be a class with tqdm's
    interface (``update``, ``set_postfix``, ``close``) that reports rounds another way."""
    from tqdm import tqdm

    from fedaccel.runs.progress import RoundLines, on_terminal

    if not isinstance(show, bool):
        return show(total=total, initial=done, desc=label)
    if show and not on_terminal():
        return RoundLines(total, done, label)
    return tqdm(
        total=total,
        initial=done,
        desc=label,
        unit="round",
        disable=not show,
        file=sys.stderr,
        dynamic_ncols=True,
    )
