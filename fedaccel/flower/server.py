"""The server side on Flower: the engine's round, with the client side sent to SuperNodes.

:class:`FlowerClients` is a :class:`~fedaccel.engine.round.ClientRuntime`: the engine's
``run_round`` does participation, planning, aggregation and server state exactly as in process,
and asks this runtime to run ``plan_client`` / the local training on the clients' nodes. A
client that does not answer within ``run.timeout`` seconds (killed, disconnected), or whose
node the SuperLink declares gone (no heartbeat for about 45 s), is recorded in the round's
diagnostics as ``lost``, said with the time it took, and the round goes on with the others (the
aggregators renormalise the weights over the updates they get). An answer that the gate
(:mod:`fedaccel.flower.gate`) finds faulty in any part (unreadable, too large or deep, a delta or an
extra of another dtype or shape than the algorithm's, non-finite values, diagnostics that are no plain
values) is ``rejected`` with its reason, logged and never used.
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.superlink.grid import InMemoryGrid
from torch import Tensor

from fedaccel.algorithms.base import ClientContext, ClientUpdate, State
from fedaccel.errors import UserError
from fedaccel.flower import SERVER_PREFIX, STOP_FILE
from fedaccel.flower.client import (
    PLAN,
    SERVER_RUN,
    UPDATE,
    plain_content,
    shared_content,
    train_content,
)
from fedaccel.flower.dispatch import PUSHED, REPLIED
from fedaccel.flower.gate import (
    ReplyShape,
    check_plan,
    check_upload,
    expected_reply,
    norm_faults,
    overflowing,
    read_reply,
    upload_norm,
)
from fedaccel.flower.wire import BadMessage
from fedaccel.runs.checkpoint import load_checkpoint, restore_state
from fedaccel.runs.config import Config, dump_config, dump_yaml, plugin_note
from fedaccel.runs.folder import CHECKPOINT, CLIENT_STATES
from fedaccel.runs.loop import CLIENT_ERROR, CLIENT_RAISED, run_loop
from fedaccel.runs.secure import parse_secure
from fedaccel.runs.setup import Setup, build_setup
from fedaccel.runs.stopping import STOP

CONNECT_TIMEOUT = 300.0  # seconds for every SuperNode to connect and answer its first message
# A ServerApp run in a thread of a process that takes the signals (fedaccel.flower.simulation): IN_ROUNDS is set
# while its rounds run (a first Ctrl-C then finishes the round: STOP); NOW, set by that process, stops it at
# once, with KeyboardInterrupt from its next wait for SuperNodes or replies (a second Ctrl-C, or one before
# the first round), as the signal does in process.
IN_ROUNDS = threading.Event()
NOW = threading.Event()
QUIET = 3.0  # seconds of waiting for SuperNodes before saying how many are connected


class FlowerClients:
    """The client side of rounds on Flower nodes; ``nodes`` maps client id -> node id, ``plain``
    are the clients whose node runs a plain Flower ClientApp (Flower's message convention).
    ``trained_at``: the round each client was last sent to train in (0: none), kept in the checkpoints: a resume
    has each client restore its states of that round (:func:`hello`)."""

    def __init__(self, grid: Grid, setup: Setup, nodes: dict[int, int], timeout: float,
                 plain: frozenset[int] = frozenset(), trained_at: list[int] | None = None) -> None:
        self.grid, self.setup, self.nodes, self.timeout, self.plain = grid, setup, nodes, timeout, plain
        self.trained_at = list(trained_at or [0] * len(nodes))
        self.first_replies: list[float] = []  # seconds until the first reply, in the last exchanges
        self.said_absent: set[int] = set()  # clients whose loss was said: said again only once they answered
        self.tracebacks: dict[str, str] = {}  # the last exchange's clients whose code raised: their tracebacks
        self.secure = parse_secure(setup.config.run.secure_aggregation)  # SecAgg+'s settings, or None
        if self.secure is not None and plain:
            raise UserError(f"run.secure_aggregation: client(s) {sorted(plain)} run a plain Flower ClientApp "
                            "that keeps no update for SecAgg+; run fedaccel's ClientApp on every node")

    def _exchange(
        self, message_type: str, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...],
        secure: bool = False,
    ) -> tuple[dict[int, Message], dict[str, Any]]:
        """Send to every context's client, wait up to the timeout; (answers by client, diag)."""
        clients = {ctx.client for ctx in contexts}
        shared = (shared_content(w, self.setup.algorithm.client_view(server)) if clients - self.plain
                  else RecordDict())  # each built once; server state no client stage reads stays here
        model = plain_content(w) if clients & self.plain else RecordDict()
        messages = [
            Message(train_content(model if ctx.client in self.plain else shared, ctx, secure),
                    self.nodes[ctx.client], message_type, group_id=str(ctx.info.round))
            for ctx in contexts
        ]
        answers: dict[int, Message] = {}
        rejected: dict[str, str] = {}
        self.tracebacks = {}
        silent: list[tuple[int, float]] = []  # no answer within the timeout: (client, seconds waited)
        gone: list[tuple[int, float]] = []  # the SuperLink says the node is gone: (client, seconds until it said so)
        # Replies come at a steady pace: the first pull waits through 70% of the quickest of the
        # last 5 first replies (each pull of a SuperLink is a request, and it serves every node too).
        first_pull = 0.7 * min(self.first_replies) if self.first_replies else 0.0
        sent = push(self.grid, messages) if messages else None
        replies = collect(sent, self.timeout, first_pull=first_pull) if sent is not None else []
        came = [seconds for reply, seconds in replies if reply is not None]
        if came:
            self.first_replies = [*self.first_replies[-4:], min(came)]
        for k, (ctx, (reply, seconds)) in enumerate(zip(contexts, replies)):
            if reply is None and not sent.ids[k]:  # the SuperLink took no message for the node: it knew it gone
                gone.append((ctx.client, 0.0))
            elif reply is None:
                silent.append((ctx.client, seconds))
            elif reply.has_error() and reply.error.code == ErrorCode.NODE_UNAVAILABLE:
                gone.append((ctx.client, seconds))
            elif reply.has_error():
                raised = reply.error.code in (ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                              ErrorCode.LOAD_CLIENT_APP_EXCEPTION)  # not a dead actor: its code
                rejected[str(ctx.client)] = one_line(f"{CLIENT_ERROR} {CLIENT_RAISED} {own_error(reply.error.reason)}"
                                                     if raised else f"{CLIENT_ERROR} {reply.error.reason}")
                if raised:
                    self.tracebacks[str(ctx.client)] = client_traceback(reply.error.reason)
            else:
                answers[ctx.client] = reply
        diag: dict[str, Any] = {}
        round_ = contexts[0].info.round + 1 if contexts else 0
        absent = {c for c, _ in silent + gone}
        self.said_absent &= absent  # one that answered again is said again when it is lost again
        if new := [(c, t) for c, t in silent if c not in self.said_absent]:
            log(f"round {round_}: no answer from client(s) {sorted(c for c, _ in new)} in "
                f"{max(t for _, t in new):.1f} s (run.timeout); going on without them (said once, in each round's "
                "row: diag.lost)")
        if new := [(c, t) for c, t in gone if c not in self.said_absent]:
            log(f"round {round_}: client(s) {sorted(c for c, _ in new)} lost: the SuperLink found their node gone "
                f"(no heartbeat) {max(t for _, t in new):.1f} s into the round; going on without them (said once, in "
                "each round's row: diag.lost)")
        self.said_absent |= absent
        if silent or gone:
            diag["lost"] = sorted(c for c, _ in silent + gone)
        if rejected:
            diag["rejected"] = rejected
        return answers, diag

    def plan(
        self, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...]
    ) -> tuple[dict[int, dict[str, Tensor]], dict[str, Any]]:
        answers, diag = self._exchange("train.plan", contexts, w, server)
        plans = {}
        for client, reply in answers.items():
            try:
                plan = read_reply(reply.content, PLAN)
                fault = check_plan(plan, self.expected)
            except BadMessage as exc:
                fault = str(exc)
            if fault:
                self._reject(diag, client, fault, contexts[0].info.round)
            else:
                plans[client] = plan
        return plans, diag

    def train(
        self, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...]
    ) -> tuple[list[ClientUpdate], dict[str, Any]]:
        for ctx in contexts:  # sent: its states are of this round from now on, if it trains
            self.trained_at[ctx.client] = ctx.info.round + 1
        if self.secure is not None:
            return self._secure_train(contexts, w, server)
        answers, diag = self._exchange("train", contexts, w, server)
        uploads: dict[int, dict[str, Any]] = {}
        for ctx in contexts:
            reply = answers.get(ctx.client)
            if reply is None or not ctx.uploads:
                continue
            try:
                upload = read_reply(reply.content, UPDATE, fallback=lambda content: plain_upload(content, w))
                fault = check_upload(upload, self.expected)
            except BadMessage as exc:
                fault = str(exc)
            if fault:
                self._reject(diag, ctx.client, fault, ctx.info.round)
            else:
                uploads[ctx.client] = upload
        round_ = contexts[0].info.round if contexts else 0
        for client, fault in self._out_of_bounds(uploads).items():
            self._reject(diag, client, fault, round_)
            del uploads[client]
        updates = []
        for ctx in contexts:
            if (upload := uploads.get(ctx.client)) is not None:
                weight = float(self.setup.federation.weights[ctx.client])  # the server's, not the client's word
                updates.append(ClientUpdate(ctx.client, weight, ctx.steps, upload["delta"], upload["extras"],
                                            upload["diag"]))
        return updates, diag

    def _secure_train(
        self, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...]
    ) -> tuple[list[ClientUpdate], dict[str, Any]]:
        """The round with SecAgg+ (:mod:`fedaccel.flower.secure`): the clients train and keep their
        uploads, then the workflow sums them; every summed client's update is their weighted mean (the
        mean of identical updates is that mean, whatever the weights). The gate's per-upload checks
        cannot run: the server never sees an upload (SecAgg+ clips each coordinate to its range instead)."""
        from fedaccel.flower.secure import integer_weights, mean_of, secure_mean

        answers, diag = self._exchange("train", contexts, w, server, secure=True)
        trained = [ctx for ctx in contexts if ctx.client in answers and ctx.uploads]
        if not trained:
            return [], diag
        federation, round_ = self.setup.federation, trained[0].info.round
        _, part = self.setup.algorithm.single("aggregate")  # type: ignore[misc]
        fold = part.aggregate_fold(trained[0].info, w)  # type: ignore[misc]
        probe = {ctx.client: ClientUpdate(ctx.client, float(federation.weights[ctx.client]), ctx.steps, w[:0])
                 for ctx in trained}  # the aggregator's coefficient c_i of each (p_i, or 1 for a uniform mean)
        coefficients = {client: float(fold.coefficient(update)) for client, update in probe.items()}
        weights = integer_weights(coefficients, {i: len(federation.partition[i]) for i in coefficients})
        settings = self.secure
        if len(weights) * settings.quantization_range >= settings.modulus_range:  # type: ignore[union-attr]
            raise UserError(f"run.secure_aggregation: {len(weights)} clients' sum of values below quantization_range "
                            f"{settings.quantization_range} wraps around modulus_range {settings.modulus_range}: "  # type: ignore[union-attr]
                            "lower quantization_range")
        client_of = {self.nodes[client]: client for client in weights}
        outcome = secure_mean(self.grid, exchange, self.secure, {self.nodes[c]: n for c, n in weights.items()},
                              round_, self.timeout)
        for failure in outcome.failures:
            log(f"round {round_ + 1}: secure aggregation: a client's error: {one_line(failure)}")
        if outcome.mean is None:
            diag["secure"] = {"summed": 0, "halted": True}
            log(f"round {round_ + 1}: secure aggregation halted: too few of client(s) {sorted(weights)} took part "
                "in every stage of SecAgg+ (reconstruction_threshold); the model stays")
            return [], diag
        summed = [client_of[node] for node in outcome.summed if node in client_of]
        diag["secure"] = {"summed": len(summed)}
        if dropped := sorted(set(weights) - set(summed)):
            diag["lost"] = sorted({*diag.get("lost", []), *dropped})
            log(f"round {round_ + 1}: secure aggregation without client(s) {dropped}: they dropped out during SecAgg+")
        mean = torch.from_numpy(mean_of(outcome).reshape(w.shape)).to(w.dtype)  # type: ignore[union-attr]
        # each summed client's update, as far as the server knows it: the round's mean (one tensor, shared);
        # the aggregator's weighted mean of them is that mean, and uploaded and bytes_up count as in process
        return [ClientUpdate(ctx.client, float(federation.weights[ctx.client]), ctx.steps, mean)
                for ctx in trained if ctx.client in summed], diag

    def _out_of_bounds(self, uploads: dict[int, dict[str, Any]]) -> dict[int, str]:
        """The uploads that passed the gate but must not be aggregated, with the reason: a norm beyond
        ``run.norm_ratio`` times the others' median or ``run.norm_ceiling``, or, of what is left, those whose
        magnitude would make the round's aggregate non-finite (the largest first)."""
        run = self.setup.config.run
        norms = {client: upload_norm(upload) for client, upload in uploads.items()}
        faults = norm_faults(norms, run.norm_ratio, run.norm_ceiling)
        left = {client: [t for t in (upload["delta"], *upload["extras"].values()) if t.is_floating_point()]
                for client, upload in uploads.items() if client not in faults}
        for client in overflowing(left, norms):
            faults[client] = f"an update of norm {norms[client]:.3g} that would make the round's aggregate non-finite"
        return faults

    @cached_property
    def expected(self) -> ReplyShape:
        """What an honest client's reply holds, learnt from the algorithm at the first reply."""
        return expected_reply(self.setup)

    def _reject(self, diag: dict[str, Any], client: int, reason: str, round_: int) -> None:
        reason = one_line(reason)
        diag.setdefault("rejected", {})[str(client)] = reason
        log(f"round {round_ + 1}: rejected the answer of client {client}: {reason}")

    def states(self, previous: list[tuple[State, ...]]) -> list[tuple[State, ...]]:
        return previous  # the real ones live on the clients


def log(text: str) -> None:
    print(f"{SERVER_PREFIX}{text}", file=sys.stderr, flush=True)


REASON_LIMIT = 300  # characters of a rejection's reason, as logged and recorded


def own_error(reason: str) -> str:
    """A client's error as its own exception's line (``RuntimeError: client 2 broke``) where Flower's reason wraps it
    in a Ray traceback (its first 300 characters were Ray's actor and process ids): the line before the last "direct
    cause" (the outermost of a chain), read from the reason's end only (a hostile node's may be 2 GB of newlines);
    ``reason`` itself otherwise."""
    before = _before_last_cause(reason)
    if before is None:
        return reason
    return before[before.rfind("\n") + 1:].strip() or reason


def _before_last_cause(reason: str) -> str | None:
    """The reason's last :data:`OWN_ERROR_WINDOW` characters up to its last "direct cause" (the outermost exception
    of the client's own chain ends there), or None where it has none."""
    text = reason[-OWN_ERROR_WINDOW:]
    cause = text.rfind("The above exception was the direct cause")
    return text[:cause].rstrip() if cause >= 0 else None


OWN_ERROR_WINDOW = 1 << 16  # characters of a client's error reason searched for its own exception's line


def client_traceback(reason: str) -> str:
    """A client's own traceback out of Flower's error reason, for ``error.txt``: the frames of its code up to its
    exception (the outermost of a chain), without Ray's wrapper after it or its colour codes, from the reason's
    last :data:`OWN_ERROR_WINDOW` characters; printable text only (a node's reason is its own words)."""
    before = _before_last_cause(reason)
    own = re.sub(r"\x1b\[[0-9;]*m", "", reason[-OWN_ERROR_WINDOW:] if before is None else before)
    frames = own.find("\n  File ")
    own = own[frames + 1:] if frames >= 0 else own
    return "\n".join("".join(c if c.isprintable() else " " for c in line) for line in own.splitlines())


def one_line(text: str) -> str:
    """``text`` as one short printable line: a client's words cannot forge the server's log lines."""
    line = "".join(c if c.isprintable() else " " for c in text[:REASON_LIMIT + 1])
    return line if len(line) <= REASON_LIMIT else line[:REASON_LIMIT - 3] + "..."


class RoundLines:
    """A progress bar as log lines, for the ServerApp of a deployment: one line per round,
    ``fedaccel server: round 3/60  test_acc 0.9132  (1.4 s)`` (``test_acc`` on evaluated
    rounds). It has the part of tqdm's interface that :func:`fedaccel.runs.loop.run_loop` uses;
    ``fedaccel deploy`` turns the lines back into a bar (:data:`fedaccel.flower.ROUND_LINE`)."""

    def __init__(self, total: int, initial: int = 0, **_: Any) -> None:
        self.total, self.n, self.acc = total, initial, None
        self.since = time.perf_counter()

    def set_postfix(self, acc: str | None = None, **_: Any) -> None:
        self.acc = acc

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        acc = f"  test_acc {self.acc}" if self.acc is not None else ""
        log(f"round {self.n}/{self.total}{acc}  ({now - self.since:.1f} s)")
        self.acc, self.since = None, now

    def close(self) -> None:
        pass


LINK_POLL = 0.05  # seconds between pulls of replies from a SuperLink (each is an HTTP request it serves)
MEMORY_POLL = 0.05  # the same on Flower's simulation engine, where a stored reply also wakes the pull (REPLIED)


@dataclass
class Pushed:
    """Messages pushed at ``started`` (monotonic s), their replies still to :func:`collect`."""

    grid: Grid
    ids: list[str]
    started: float


def push(grid: Grid, messages: list[Message]) -> Pushed:
    pushed = list(grid.push_messages(messages))
    PUSHED.set()  # wakes the simulation engine's dispatch (fedaccel.flower.dispatch), if it runs here
    ids = pushed if len(pushed) == len(messages) else [m.metadata.message_id for m in messages]
    return Pushed(grid, ids, time.monotonic())


def collect(
    sent: Pushed, timeout: float, poll: float | None = None, first_pull: float = 0.0,
) -> list[tuple[Message | None, float]]:
    """The replies to ``sent`` until all answered or ``timeout`` s after the push: for each
    message, in order, its reply (None: none in time) and the seconds from the push until it came
    (or until the wait ended). ``poll``: seconds between pulls (default :data:`MEMORY_POLL` on
    the simulation engine's in-memory grid, where the engine's :data:`REPLIED` also ends the wait,
    :data:`LINK_POLL` on a SuperLink); ``first_pull``: seconds after the push before the first pull."""
    grid, started = sent.grid, sent.started
    in_memory = isinstance(grid, InMemoryGrid)
    if poll is None:
        poll = MEMORY_POLL if in_memory else LINK_POLL
    wait = REPLIED.wait if in_memory else time.sleep  # the engine's stored reply ends a wait in memory
    index = {message_id: k for k, message_id in enumerate(sent.ids) if message_id}
    waiting = set(index)
    deadline = started + timeout
    replies: list[tuple[Message | None, float]] = [(None, 0.0)] * len(sent.ids)
    NOW.wait(max(0.0, started + min(first_pull, timeout) - time.monotonic()))  # a sleep that NOW ends
    while waiting and time.monotonic() < deadline:
        if NOW.is_set():
            raise KeyboardInterrupt
        REPLIED.clear()  # before the pull: a reply stored after it sets the event again
        with objects_pulled_within(deadline - time.monotonic()):
            got = [m for m in grid.pull_messages(waiting) if m.metadata.reply_to_message_id in waiting]
        for reply in got:
            waiting.discard(reply.metadata.reply_to_message_id)
            replies[index[reply.metadata.reply_to_message_id]] = (reply, time.monotonic() - started)
        if waiting and not got:
            wait(poll)
    waited = time.monotonic() - started
    return [(reply, seconds if reply is not None else waited) for reply, seconds in replies]


@contextmanager
def objects_pulled_within(seconds: float) -> Iterator[None]:
    """Flower's grid pulls a reply's objects (its arrays) until they all came, retrying for up to
    2 hours (``PULL_MAX_TIME``; ours: 500 tries, about 4 minutes): a client that died after
    pushing its reply but before its objects held the round that long, whatever run.timeout said.
    Within this block the pull gives up after ``seconds`` (and Flower answers with an error reply)."""
    from flwr.supercore.inflatable import inflatable_utils

    pull = inflatable_utils.pull_objects  # the function object HttpGrid calls, defaults and all
    before = pull.__kwdefaults__
    pull.__kwdefaults__ = {**(before or {}), "max_time": max(seconds, 0.05)}
    try:
        yield
    finally:
        pull.__kwdefaults__ = before


def exchange(
    grid: Grid, messages: list[Message], timeout: float, poll: float | None = None, first_pull: float = 0.0,
) -> list[tuple[Message | None, float]]:
    """Push ``messages`` and :func:`collect` their replies.

    Like ``Grid.send_and_receive``, which on a SuperLink waits 3 s between polls. A reply is
    matched by the message it answers: the SuperLink's own error replies (a node gone) come from
    no node.
    """
    if not messages:
        return []
    return collect(push(grid, messages), timeout, poll, first_pull)


def wait_for_nodes(grid: Grid, n_clients: int, timeout: float, *, quiet: float = QUIET) -> list[int]:
    """The ids of the connected nodes, once there are exactly ``n_clients`` (one per client).

    After ``quiet`` s of waiting it says how many are connected, and again whenever that
    changes (more nodes than clients is a mismatch too); after ``timeout`` s it fails with one line.
    """
    started = time.monotonic()
    told = None
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) == n_clients:
            return nodes
        waited = time.monotonic() - started
        if waited > timeout:
            raise UserError(f"{_node_count(len(nodes), n_clients)} after {timeout:g} s: start one SuperNode "
                            "per client, or set data.clients to the number of SuperNodes")
        if waited >= quiet and len(nodes) != told:
            log(f"{_node_count(len(nodes), n_clients)}; waiting up to {timeout:g} s")
            told = len(nodes)
        if NOW.is_set():
            raise KeyboardInterrupt
        if STOP.is_set():
            raise UserError("stopped while waiting for SuperNodes, before the first round")
        time.sleep(0.2)


def hello(grid: Grid, config_text: str, nodes: list[int], start_round: int = 0, state_dir: Path | None = None,
          trained_at: list[int] | None = None, run: str = "") -> Pushed:
    """Send every node the config (each builds the run's setup on it); :func:`connect` collects
    the answers. ``start_round`` > 0 (a resumed run): nodes restore their part states of that
    round if they kept them (node config ``state-dir``; in a simulation, ``state_dir``, which only a simulation's
    nodes take: :func:`fedaccel.flower.client.in_simulation`): each client's of the round it last trained in by
    then, ``trained_at`` (from the checkpoint). ``run``: the run's name for the nodes' state folders (two runs of
    one config keep their states apart)."""
    said: dict[str, Any] = {"yaml": config_text, "round": start_round, "run": run}
    if state_dir is not None:
        said["state-dir"] = str(state_dir)
    if start_round and trained_at is not None:
        said["trained-at"] = list(trained_at)
    return push(grid, [Message(RecordDict({"config": ConfigRecord(said)}), node, "query.hello") for node in nodes])


def connect(
    sent: Pushed, nodes: list[int], n_clients: int, timeout: float, start_round: int = 0
) -> tuple[dict[int, int], frozenset[int]]:
    """The answers to :func:`hello` from ``nodes``: (client id -> node id for the run's
    ``n_clients`` clients, the clients whose node answered no hello: plain Flower ClientApps).
    Clients of a resumed run that kept no states of the round they last trained in start from fresh states, said
    in one line (a line each where the node says why: a damaged file)."""
    mapping: dict[int, int] = {}
    foreign: list[int] = []
    fresh: list[str] = []  # "client (round)" of those that kept no states and say no more
    for node, (reply, _) in zip(nodes, collect(sent, timeout)):
        if reply is None or (reply.has_error() and reply.error.code == ErrorCode.NODE_UNAVAILABLE):
            continue
        if reply.has_error() and refusal(reply.error.reason):
            raise UserError(f"SuperNode {node} refuses the run: {refusal(reply.error.reason)}")
        if reply.has_error() or "hello" not in reply.content:
            foreign.append(node)  # a plain Flower ClientApp: no hello of ours
            continue
        client = int(reply.content["hello"]["client"])
        if start_round and not reply.content["hello"].get("restored", False):
            why = one_line(str(reply.content["hello"].get("why", "")))
            lacked = reply.content["hello"].get("round", start_round)
            lacked = lacked if type(lacked) is int else start_round
            older = reply.content["hello"].get("from")
            if why:
                log(f"client {client} kept no state of round {lacked}, the last it trained in: it starts from a "
                    f"fresh state ({why})")
            elif type(older) is int:  # its answer was lost before it trained, say; or the file is gone
                log(f"client {client} kept no state of round {lacked}, the last it was sent to train in: it resumes "
                    f"from its states of round {older}, the newest it kept")
            else:
                fresh.append(f"{client} (round {lacked})")
        if client in mapping:
            raise UserError(f"two SuperNodes claim partition-id {client}")
        mapping[client] = node
    if len(fresh) == 1:
        log(f"client {fresh[0]} kept no state of the round it last trained in: it starts from a fresh state")
    elif fresh:
        log(f"clients {', '.join(fresh)} kept no state of the round they last trained in: they start from fresh "
            "states")
    plain = set()
    for client, node in zip(sorted(set(range(n_clients)) - set(mapping)), sorted(foreign)):
        log(f"node {node} answers no fedaccel hello: it takes client id {client} (plain Flower protocol)")
        mapping[client] = node
        plain.add(client)
    missing = sorted(set(range(n_clients)) - set(mapping))
    if missing:
        raise UserError(f"no SuperNode with partition-id {missing[0]} answered (need 0..{n_clients - 1})")
    return mapping, frozenset(plain)


def refusal(reason: str) -> str | None:
    """A fedaccel client's refusal of the run at the hello (its plugin is missing or differs:
    :func:`fedaccel.runs.config.check_plugins`), out of Flower's error reason ``<class '...'>:<'message'>``."""
    match = re.fullmatch(rf"<class 'fedaccel\.errors\.ConfigError'>:<'({re.escape(SERVER_RUN)} uses .*)'>", reason,
                         re.S)
    return " ".join(match[1].split()) if match else None


def _node_count(connected: int, needed: int) -> str:
    """How many SuperNodes are connected, against the one per client the run needs."""
    if connected > needed:
        return (f"{connected} SuperNodes connected, more than data.clients = {needed} "
                f"(one per client, partition-id 0..{needed - 1})")
    return f"{connected} of {needed} SuperNodes connected (data.clients = {needed})"


def plain_upload(content: RecordDict, w: Tensor) -> dict[str, Any]:
    """A client speaking Flower's own convention (its new model in ``arrays``) for FedAvg-like
    algorithms: the update is ``w - new model``; no extras, no diagnostics."""
    try:
        arrays = content["arrays"]
        new = torch.from_numpy(np.array(arrays["w"].numpy() if "w" in arrays else
                                        np.concatenate([a.numpy().ravel() for a in arrays.values()]), copy=True))
    except (KeyError, TypeError, ValueError) as exc:
        raise BadMessage(f"no fedaccel upload and no model in 'arrays': {exc}") from exc
    delta = w - new if new.shape == w.shape and new.dtype == w.dtype else new
    return {"delta": delta, "extras": {}, "diag": {}}


def serve(
    grid: Grid, config: Config, path: Path, *, progress: Any = None, connect_timeout: float | None = None,
) -> Path:
    """Run (or, if ``path`` has a checkpoint, resume) ``config`` with clients on ``grid``.

    ``progress``: as :func:`fedaccel.runs.loop.run_loop`'s (a deployment's ServerApp gives
    :class:`RoundLines`); ``connect_timeout``: seconds to wait for the SuperNodes (default
    ``max(CONNECT_TIMEOUT, run.timeout)``). A file ``path/stop`` (``fedaccel deploy`` writes it
    on Ctrl-C) makes the run finish its round, checkpoint it and raise
    :class:`~fedaccel.runs.stopping.Interrupted`; the nodes have kept their clients' states of every round they
    trained (:func:`fedaccel.flower.client.keep_states`), a resume takes each one's of the checkpoint.
    """
    path.mkdir(parents=True, exist_ok=True)
    if not (path / "config.yaml").is_file():
        dump_config(config, path / "config.yaml")
    done = threading.Event()
    threading.Thread(target=_stop_when_asked, args=(path / STOP_FILE, done), daemon=True).start()
    try:
        # the first message starts every node's ClientApp and loads its data: give that time
        timeout = connect_timeout or max(CONNECT_TIMEOUT, config.run.timeout)
        node_ids = wait_for_nodes(grid, config.data.clients, timeout)  # before the set-up: said at once
        saved = load_checkpoint(path)
        start_round = int(saved["state"].round) if saved is not None else 0
        # the nodes build the run's setup on the hello while this process builds its own
        kept = path / CLIENT_STATES if config.run.runtime == "flower-simulation" else None
        if kept is not None:
            check_client_states(kept)
        trained_at = None if saved is None else saved["trained_at"]
        if saved is not None and trained_at is None:  # a checkpoint of an earlier fedaccel: the states it kept then
            trained_at = [start_round] * config.data.clients
        sent = hello(grid, dump_yaml(config.to_dict(), sort_keys=True) + plugin_note(config), node_ids, start_round,
                     kept.resolve() if kept is not None else None, trained_at, run_name(path))
        setup = build_setup(config)
        state, wall, parts = restore_state(setup, path, saved)
        if (path / CHECKPOINT).is_file():
            log(f"resuming {path} after round {state.round}")
        nodes, plain = connect(sent, node_ids, setup.federation.n_clients, timeout, start_round=state.round)
        runtime = FlowerClients(grid, setup, nodes, config.run.timeout, plain, trained_at)
        IN_ROUNDS.set()
        run_loop(setup, state, path, wall=wall, progress=progress, parts=parts, runtime=runtime)
    finally:
        IN_ROUNDS.clear()
        done.set()
    return path


def run_name(path: Path) -> str:
    """The run's name for its nodes: its folder's path, hashed (a node learns nothing of the server's folders)."""
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]


def check_client_states(folder: Path) -> None:
    """A simulation's ``client-states`` folder, from someone else maybe: a folder of ``client-K`` folders of
    ``round-N.pt`` files, no link at any level (its clients would write, and delete, through it); one line
    otherwise, before any client is told of it."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise UserError(f"{folder} is not a plain folder; nothing was written (remove it, or use another folder)")
    for client in folder.iterdir() if folder.is_dir() else ():
        inner = list(client.iterdir()) if client.is_dir() and not client.is_symlink() else None
        if (not re.fullmatch(r"client-\d+", client.name) or inner is None
                or any(file.is_symlink() or not file.is_file() for file in inner)):
            raise UserError(f"{client} is not a client's folder of plain files; nothing was written (remove it, "
                            "or use another folder)")


def _stop_when_asked(file: Path, done: threading.Event, poll: float = 0.2) -> None:
    """Set STOP when ``file`` appears (and remove it: the request is taken), until ``done``."""
    while not done.wait(poll):
        if file.exists():
            log(f"stop asked ({file}): stopping after the current round")
            STOP.set()
            file.unlink(missing_ok=True)
            return
