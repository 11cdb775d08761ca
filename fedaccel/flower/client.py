"""The fedaccel ClientApp: the client side of any composed algorithm, on a Flower SuperNode.

Message types (Flower's ``<category>.<action>``):

* ``query.hello``  carries the run's config (YAML). The client builds the run's setup once
  per process (data, split, model, algorithm: all deterministic from the seed), keeps the
  config and its part states in ``context.state``, and answers with its ``partition-id``.
* ``train.plan``   the planning phase (FedGSNR): statistics at the global model.
* ``train``        one round of local training: global model ``w``, the parts' server states,
  steps and whether to upload; the answer carries the update only if the client uploads
  (FedUMF's unauthorised clients train, store, and answer with an acknowledgement).

A train message holds the round's ``shared`` value (packed once a round, so Flower sends it
once) and the client's ``config``. A node that answers no ``hello`` (a plain Flower ClientApp)
gets Flower's convention instead: the model in ``arrays``, see :func:`plain_content`.

Per-client state (SCAFFOLD's c_i, FedDyn/FedDC drifts, FedUMF's stored update) never leaves the
client: it lives in Flower's ``Context`` between rounds, and on disk after every round the client trains
(:func:`keep_states`), so that a run resumed from any checkpoint finds each client's state of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedaccel.algorithms.base import Algorithm, ClientContext
from fedaccel.algorithms.states import from_plain, to_plain
from fedaccel.engine.round import round_info, train_client
from fedaccel.errors import UserError
from fedaccel.flower.notices import quiet_notices
from fedaccel.flower.secure import fitres_content, masking_stage, secure_mod
from fedaccel.flower.wire import pack, unpack
from fedaccel.runs.config import check_plugins, from_dict, parse_yaml
from fedaccel.runs.files import UnsafeFile, load_plain, save_plain
from fedaccel.runs.folder import CLIENT_STATES
from fedaccel.runs.lock import LOCK_FILE
from fedaccel.runs.setup import Setup, apply_attacks, build_setup

STATE = "fedaccel.client."  # prefix of the client's part states in context.state
SHARED = "fedaccel.shared."  # prefix of the round's model and the parts' server states in a train message
UPDATE = "fedaccel.update."  # prefix of an upload
PLAN = "fedaccel.plan."  # prefix of a planning answer
KEPT = "fedaccel.kept."  # prefix of a secure round's delta in context.state, until SecAgg+ masks it

quiet_notices()  # in a simulation's Ray actor: no "Manually terminating ClientAppActor" as the run ends

_SETUPS: dict[str, Setup] = {}  # per process: a SuperNode's ClientApp process serves many rounds


SERVER_RUN = "the server's run"  # how a client's plugin check names the run: the server spots its refusal by it


def config_key(config_text: str) -> str:
    """A run's config, as a name for its setup and its saved states."""
    return hashlib.sha256(config_text.encode()).hexdigest()


def setup_for(config_text: str) -> Setup:
    """The run's setup, built once per process and config."""
    key = config_key(config_text)
    if key not in _SETUPS:
        _SETUPS.clear()
        check_plugins(config_text, SERVER_RUN)  # the same plugin version as the server's, or one line
        _SETUPS[key] = build_setup(from_dict(parse_yaml(config_text, "the config from the server")))
        print(f"fedaccel client: built the run's setup in process {os.getpid()}", file=sys.stderr, flush=True)
    return _SETUPS[key]


app = ClientApp()


@app.query("hello")
def hello(message: Message, context: Context) -> Message:
    config_text = str(message.content["config"]["yaml"])
    client = int(context.node_config["partition-id"])
    setup = setup_for(config_text)
    if not 0 <= client < setup.federation.n_clients:
        raise ValueError(f"partition-id {client} but the run has {setup.federation.n_clients} clients")
    start_round = int(message.content["config"].get("round", 0))
    known = context.state.get("fedaccel")
    restored, why = False, ""
    if known is None or known["config"] != config_text:  # a new Flower run: the states of round start_round
        record: dict[str, Any] = {"config": config_text, "client": client, "start": start_round,
                                  "run": str(message.content["config"].get("run", ""))[:64]}
        if folder := simulation_folder(message.content["config"].get("state-dir")):
            record["state-dir"] = folder
        context.state["fedaccel"] = ConfigRecord(record)
        fresh = setup.algorithm.init_client(setup.federation.model.theta.clone())
        trained_at = message.content["config"].get("trained-at")  # the round each client last trained in by then
        state_round = int(trained_at[client]) if trained_at else start_round  # type: ignore[index]
        # its states of that round; else (its answer lost before it trained, or the file gone) the newest before
        kept = newest_kept(context, config_text, state_round) if state_round else None
        try:
            states = saved_states(context, config_text, kept) if kept else None
        except UserError as exc:  # damaged or planted: this client starts afresh, and the server says why
            states, kept, why = None, None, str(exc)
        restored = kept == state_round or not state_round or keeps_no_state(setup.algorithm)
        if states is None:
            states = fresh
        pack(states, into=context.state, prefix=STATE)
        forget_states_after(context, start_round)  # a crashed run's later rounds: trained again from here
    said: dict[str, Any] = {"client": client, "pid": os.getpid(), "restored": restored}
    if not restored:
        said["round"] = state_round  # the round whose states it lacks
        if kept:
            said["from"] = kept  # the older states it resumes from instead
    if why:
        said["why"] = why[:300]
    reply = RecordDict({"hello": ConfigRecord(said)})
    return Message(reply, reply_to=message)


def keeps_no_state(algorithm: Algorithm) -> bool:
    """Whether a method keeps no state on its clients (FedAvg): nothing to keep, nothing to restore. Judged by its
    parts' stages, not by a fresh state's values: SCAFFOLD's c_i is None until the client first trains, and a
    client that lost one after a crash went unsaid."""
    return not any(part.init_client or part.client_end for part in algorithm.parts)


def in_simulation() -> bool:
    """Whether this ClientApp runs in a Flower simulation: in a worker of Ray, which only a simulation starts here
    (a deployment's node runs none)."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def simulation_folder(given: Any) -> str | None:
    """The folder a simulation's server names for its clients' states (``RUN/client-states``), where this node
    takes it: in a simulation only (a deployment's node keeps its own ``state-dir``: its server could otherwise have
    it write anywhere), and only a ``client-states`` folder of a run folder being written (its ``config.yaml`` and
    its writer's lock beside it); None otherwise."""
    if not given or not in_simulation():
        return None
    folder = Path(str(given))
    run = folder.parent
    if folder.name != CLIENT_STATES or not (run / "config.yaml").is_file() or not (run / LOCK_FILE).is_file():
        return None
    return str(folder)


def _state_folder(context: Context, config_text: str) -> Path | None:
    """Where this node keeps its part states: node config ``state-dir`` (a folder per run, named by the server's
    name for its run folder, so that two runs of one config keep apart; by its config from a server that gives
    none), else in a simulation the run folder's ``client-states``, a folder per client (:func:`hello`)."""
    folder = context.node_config.get("state-dir")
    known = context.state.get("fedaccel")
    if folder:  # the run's name alone where the server gives it: a resume may change some of its config's keys
        run = str(known.get("run", "")) if known is not None else ""
        return Path(str(folder)) / (config_key(f"run: {run}") if run else config_key(config_text))[:16]
    given = known.get("state-dir") if known is not None else None
    return Path(str(given)) / f"client-{int(known['client'])}" if given else None  # type: ignore[index]


def saved_states(context: Context, config_text: str, round_: int) -> tuple[Any, ...] | None:
    """This client's part states of ``round_`` from node config ``state-dir`` (None: not kept).
    Plain data only: a file that would need code to load is refused with one line, never run."""
    folder = _state_folder(context, config_text)
    file = folder / f"round-{round_}.pt" if folder else None
    if not file or not file.is_file():
        return None
    try:
        return tuple(from_plain(load_plain(file)))
    except (UnsafeFile, UserError):
        raise
    except Exception as exc:
        raise UserError(f"{file} is damaged ({str(exc).strip()[:120] or type(exc).__name__})") from None


def newest_kept(context: Context, config_text: str, round_: int) -> int | None:
    """The newest round at or before ``round_`` whose states this client kept (None: none)."""
    folder = _state_folder(context, config_text)
    return next((kept for kept, _ in reversed(_kept_rounds(folder)) if kept <= round_), None) if folder else None


def _kept_rounds(folder: Path) -> list[tuple[int, Path]]:
    """The ``round-N.pt`` files in ``folder`` as (N, file), oldest first (none: no folder)."""
    if not folder.is_dir() or folder.is_symlink():
        return []
    return sorted((int(match[1]), file) for file in folder.iterdir()
                  if (match := re.fullmatch(r"round-(\d+)\.pt", file.name)))


def forget_states_after(context: Context, round_: int) -> None:
    """Delete this client's kept states of rounds after ``round_``: a run resumed from ``round_`` trains them
    again, and a second crash must not take them for states of its own rounds."""
    folder = _state_folder(context, str(context.state["fedaccel"]["config"]))
    for kept, file in _kept_rounds(folder) if folder else ():
        if kept > round_:
            file.unlink(missing_ok=True)


def keep_states(context: Context, round_: int, states: tuple[Any, ...], algorithm: Algorithm, every: int) -> None:
    """Write the states of ``round_`` where node config ``state-dir`` says, or in a simulation the run folder's
    ``client-states`` (there, a write that fails is said and the round goes on: a Ray worker on another machine of
    a cluster may not reach the folder). Called after every round the client trains: a resume from checkpoint R
    restores those of the round the client last trained in by R (the server's checkpoint names it, :func:`hello`).

    Kept: this round's, and the newest at or before each of the server's last two checkpoints (a resume starts at
    the newest, or at ``checkpoint.prev.pt``'s where that one is damaged). In this stretch of the run (since the
    hello's round, itself a checkpoint) the server has checkpointed the hello's round and each multiple of
    ``every`` (``run.checkpoint_every``) since, before it sent the next round; a stop checkpoints a later round and
    ends the stretch. Before the stretch's second checkpoint, what the last stretch kept up to its hello's round
    stays (``checkpoint.prev.pt`` is the last stretch's). So at most three files once a stretch has checkpointed a
    round of its own; the rest are deleted. The write costs 0.15-0.30 of a 2NN client's round, 0.01-0.02 of a
    CNN's (``benchmarks/client_states.py``)."""
    folder = _state_folder(context, str(context.state["fedaccel"]["config"]))
    if folder is None or keeps_no_state(algorithm):
        return
    try:
        if folder.is_symlink():
            raise UserError(f"{folder} is a link; its states were not kept")
        folder.mkdir(parents=True, exist_ok=True)
        save_plain(folder / f"round-{round_}.pt", to_plain(states))
    except (OSError, UserError) as exc:
        if context.node_config.get("state-dir"):
            raise  # a deployment's own folder: the node's operator is told by the failed round
        print(f"fedaccel client: the states of round {round_} were not kept ({exc}): a resume from a checkpoint "
              "before this client next trains takes older ones, and says so", file=sys.stderr, flush=True)
        return
    start = int(context.state["fedaccel"].get("start", 0))
    rhythm = (round_ - 1) // every * every  # the last checkpoint of the rhythm before this round
    checkpoints = [start, *(c for c in (rhythm - every, rhythm) if c > start)]
    kept = _kept_rounds(folder)
    needed = {round_} | {max((r for r, _ in kept if r <= c), default=-1) for c in checkpoints[-2:]}
    if len(checkpoints) == 1:  # the stretch's first checkpoint is its only one: the one before is the last stretch's
        needed |= {r for r, _ in kept if r <= start}
    for r, file in kept:
        if r not in needed:
            file.unlink(missing_ok=True)


def _prepare(message: Message, context: Context) -> tuple[Setup, ClientContext, torch.Tensor, tuple[Any, ...]]:
    known = context.state["fedaccel"]
    setup = setup_for(str(known["config"]))
    content = message.content
    round_ = int(content["config"]["round"])
    apply_attacks(setup, round_)  # malicious clients' data, as in process
    ctx = ClientContext(
        round_info(setup.federation, round_),
        int(known["client"]),
        int(content["config"]["steps"]),
        bool(content["config"]["uploads"]),
        json.loads(str(content["config"]["instructions"])),
    )
    shared = unpack(content, prefix=SHARED)
    return setup, ctx, shared["w"], tuple(shared["server"])


@app.train("plan")
def plan(message: Message, context: Context) -> Message:
    setup, ctx, w, server = _prepare(message, context)
    k, part = setup.algorithm.single("plan_server")  # type: ignore[misc]
    client_state = tuple(unpack(context.state, prefix=STATE))
    answer = part.plan_client(ctx, w, server[k], client_state[k], setup.federation.access(ctx.client))  # type: ignore[misc]
    return Message(pack(answer, prefix=PLAN), reply_to=message)


@app.train(mods=[secure_mod])
def train(message: Message, context: Context) -> Message:
    if masking_stage(message):  # SecAgg+'s masking stage: the delta kept at this round's train, as a FitRes
        return Message(fitres_content(kept_delta(context), message), reply_to=message)
    setup, ctx, w, server = _prepare(message, context)
    client_state = tuple(unpack(context.state, prefix=STATE))
    new_state, update = train_client(setup.algorithm, ctx, w, server, client_state, setup.federation)
    # kept first: a deployment's write that fails fails the round, and the state in memory must not move on with it
    keep_states(context, ctx.info.round + 1, new_state, setup.algorithm, setup.config.run.checkpoint_every)
    pack(new_state, into=context.state, prefix=STATE)
    reply = RecordDict()
    if ctx.uploads and message.content["config"].get("secure", False):  # kept until SecAgg+ masks it
        pack(update.delta, into=context.state, prefix=KEPT)
    elif ctx.uploads:
        pack({"delta": update.delta, "extras": update.extras, "diag": update.diag}, into=reply, prefix=UPDATE)
    return Message(reply, reply_to=message)


def kept_delta(context: Context) -> Any:
    """The delta the secure round's train kept (taken: a repeated masking stage finds none)."""
    if KEPT + "packed" not in context.state:
        raise ValueError("no kept update: the masking stage came before this round's train")
    delta = unpack(context.state, prefix=KEPT)
    for key in [k for k in context.state if k.startswith(KEPT)]:
        del context.state[key]
    return delta.numpy()


def shared_content(w: torch.Tensor, server: tuple[Any, ...]) -> RecordDict:
    """What every client gets in a round: the global model and the parts' server states."""
    return pack({"w": w, "server": server}, prefix=SHARED)


def plain_content(w: torch.Tensor) -> RecordDict:
    """The round's model for a plain Flower ClientApp: Flower's convention, ``arrays["w"]``."""
    return RecordDict({"arrays": ArrayRecord({"w": Array(w.detach().numpy())})})


def train_content(shared: RecordDict, ctx: ClientContext, secure: bool = False) -> RecordDict:
    """What the server sends one client with ``train`` and ``train.plan``: the round's shared
    records (built once a round) and this client's instructions; ``secure``: keep the upload for
    SecAgg+ (:mod:`fedaccel.flower.secure`) and answer without it."""
    content = RecordDict(dict(shared.items()))
    content["config"] = ConfigRecord({
        "round": ctx.info.round, "steps": ctx.steps, "uploads": ctx.uploads,
        "instructions": json.dumps(dict(ctx.instructions)), **({"secure": True} if secure else {}),
    })
    return content
