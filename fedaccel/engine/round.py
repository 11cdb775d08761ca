"""One federated round of a composed algorithm, in process.

``run_round(algorithm, state, federation) -> (state, report)`` walks the stages of
:mod:`fedaccel.algorithms.base` in order. The state is explicit and returned: the global model,
each part's server state, every client's part states, and running totals.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from torch import Tensor

from fedaccel.algorithms.base import (
    Algorithm,
    ClientContext,
    ClientUpdate,
    Participation,
    RoundInfo,
    State,
    finite_norm,
    tensor_bytes,
)
from fedaccel.algorithms.sampling import sample_clients, scheduled_clients
from fedaccel.engine.evaluated import track
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import batch_positions, train_local
from fedaccel.engine.work import ClientWork, client_steps, draw_work, drop_stragglers, work_diagnostics


@dataclass
class FLState:
    """Everything a run needs to continue: checkpoint this and nothing is lost."""

    round: int  # rounds completed
    w: Tensor
    server: tuple[State, ...]
    clients: list[tuple[State, ...]]
    totals: dict[str, int] = field(
        default_factory=lambda: {"bytes_up": 0, "bytes_down": 0, "local_steps": 0}
    )
    evaluated: dict[str, Tensor] = field(default_factory=dict)  # extra models' tensors (eval.models)


@dataclass
class RoundReport:
    """What happened in one round: who took part, what it cost, the parts' diagnostics;
    ``uploaded``: the updates aggregated (not those of clients lost, rejected, skipped or zeroed)."""

    round: int
    participation: Participation
    bytes_up: int
    bytes_down: int
    local_steps: int
    diag: dict[str, Any]
    uploaded: int = 0


def init_state(algorithm: Algorithm, w0: Tensor, n_clients: int) -> FLState:
    return FLState(
        round=0,
        w=w0.clone(),
        server=algorithm.init_server(w0),
        clients=[algorithm.init_client(w0) for _ in range(n_clients)],
    )


def round_info(federation: Federation, round_: int, schedule: Sequence[Sequence[int]] | None = None) -> RoundInfo:
    """What the stages may read about round ``round_``; ``schedule`` fixes who is selected."""
    options = federation.options
    return RoundInfo(
        round=round_,
        lr=options.lr_at(round_),
        prev_lr=options.lr_at(max(round_ - 1, 0)),
        weights=federation.weights,
        seed=federation.seed,
        momentum=options.momentum,
        weight_decay=options.weight_decay,
        scheduled=scheduled_clients(schedule, round_),
        initial_lr=options.lr,
        shared_steps=federation.shared_steps,
        sampling=options.sampling,
    )


def choose_participants(algorithm: Algorithm, info: RoundInfo, fraction: float) -> Participation:
    owner = algorithm.single("participation")
    if owner is not None:
        return owner[1].participation(info)  # type: ignore[misc]
    chosen = sample_clients(info, fraction)
    return Participation(train=chosen, upload=chosen)


class ClientRuntime(Protocol):
    """Where the client side of a round runs: in this process (:class:`InProcessClients`) or on
    remote nodes (:mod:`fedaccel.flower`). Client states live with the runtime.

    Both methods return what answered and a diagnostics dict (e.g. clients lost or rejected).
    """

    def plan(
        self, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...]
    ) -> tuple[dict[int, dict[str, Tensor]], dict[str, Any]]: ...

    def train(
        self, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...]
    ) -> tuple[list[ClientUpdate], dict[str, Any]]:
        """Train every context's client; return the updates of those that upload.

        A runtime whose ``train`` also takes ``sink=`` streams: each upload is handed to ``sink`` as soon
        as it is final (never one the runtime may still drop), and the list keeps what ``sink`` returns
        (the upload without its tensors, :class:`Streamed`). A subclass that overrides ``train`` without
        ``sink`` gets the stored path."""
        ...

    def states(self, previous: list[tuple[State, ...]]) -> list[tuple[State, ...]]:
        """The client states to keep in the server's FLState after the round."""
        ...


Sink = Callable[[ClientUpdate], ClientUpdate]


class Streamed:
    """A round's uploads folded as they arrive (:meth:`Algorithm.streams`): the aggregator's and the
    ``server_end`` parts' running sums; each upload is kept without its tensors (for diagnostics)."""

    def __init__(self, algorithm: Algorithm, info: RoundInfo, w: Tensor, server: tuple[State, ...]) -> None:
        self.aggregate = algorithm.single("aggregate")[1].aggregate_fold(info, w)  # type: ignore[index,misc]
        self.server_end = [
            (k, p.server_end_fold(info, server[k]))  # type: ignore[misc]
            for k, p in algorithm.with_stage("server_end")
        ]
        self.nbytes = 0
        self.empty = w.new_empty(0)

    def add(self, update: ClientUpdate) -> ClientUpdate:
        self.nbytes += update.nbytes
        self.aggregate.add(update)
        for _, fold in self.server_end:
            fold.add(update)
        return replace(update, delta=self.empty, extras={})


class InProcessClients:
    """Every client trained in this process, one after another; states held here."""

    def __init__(self, algorithm: Algorithm, federation: Federation, states: list[tuple[State, ...]]) -> None:
        self.algorithm, self.federation, self.client_states = algorithm, federation, list(states)

    def plan(
        self, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...]
    ) -> tuple[dict[int, dict[str, Tensor]], dict[str, Any]]:
        k, part = self.algorithm.single("plan_server")  # type: ignore[misc]
        states = [self.client_states[ctx.client][k] for ctx in contexts]
        accesses = [self.federation.access(ctx.client) for ctx in contexts]
        if part.batched_plan_client is not None:  # all at once: the same messages, less overhead per client
            return part.batched_plan_client(contexts, w, server[k], states, accesses), {}
        return {ctx.client: part.plan_client(ctx, w, server[k], cs, access)  # type: ignore[misc]
                for ctx, cs, access in zip(contexts, states, accesses, strict=True)}, {}

    def train(
        self, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...], sink: Sink | None = None
    ) -> tuple[list[ClientUpdate], dict[str, Any]]:
        updates = []
        for ctx in contexts:
            i = ctx.client
            self.client_states[i], update = train_client(
                self.algorithm, ctx, w, server, self.client_states[i], self.federation
            )
            if ctx.uploads:
                updates.append(update if sink is None else sink(update))
        return updates, {}

    def states(self, previous: list[tuple[State, ...]]) -> list[tuple[State, ...]]:
        return self.client_states


def run_round(
    algorithm: Algorithm,
    state: FLState,
    federation: Federation,
    *,
    fraction: float = 1.0,
    schedule: Sequence[Sequence[int]] | None = None,
    runtime: ClientRuntime | None = None,
    stream: bool = True,
) -> tuple[FLState, RoundReport]:
    """Advance ``state`` by one round; ``fraction`` is used when no part chooses participants.

    ``schedule`` (a list of client lists, round t (0-based) uses entry t mod its length) fixes the
    selected clients in place of sampling, for every algorithm: who trains and uploads, or with
    FedUMF, who uploads. ``runtime`` runs the client side (default: in this process, with ``state.clients``).
    Each client's local work is drawn by ``federation.options.work`` (:mod:`fedaccel.engine.work`); a round
    whose selection uploads nobody (Bernoulli sampling may select no one) leaves the model and server
    states as they were. With a planning phase (FedGSNR), a participant whose planning answer never came (lost,
    or rejected by the runtime's gate) is left out of the plan and does not train that round (``diag.unplanned``).
    ``stream``: fold the uploads as they arrive (O(model) memory) where the algorithm
    (:meth:`~fedaccel.algorithms.base.Algorithm.streams`), the runtime (:func:`takes_sink`) and ``eval.models``
    (only the broadcast model) allow it; False keeps every update until aggregation.
    """
    runtime = runtime or InProcessClients(algorithm, federation, state.clients)
    info = round_info(federation, state.round, schedule)
    who = choose_participants(algorithm, info, fraction)
    server = state.server
    diag: dict[str, Any] = {}
    down_message = sum(
        (tensor_bytes(p.broadcast(server[k])) for k, p in algorithm.with_stage("broadcast")),
        start=state.w.numel() * state.w.element_size(),
    )
    bytes_up = 0
    bytes_down = down_message * len(who.train)
    draws = draw_work(federation.options.work, info, who.train, federation.options.local_epochs)
    who, dropped = drop_stragglers(federation.options.work, algorithm.name, who, draws)
    diag.update(work_diagnostics(draws, dropped))

    # Planning phase (FedGSNR): a message round of its own.
    instructions: dict[int, dict[str, Any]] = {i: {} for i in who.train}
    planner = algorithm.single("plan_server")
    if planner is not None:
        k, part = planner
        contexts = [_context(info, federation, i, who, {}, draws.get(i)) for i in who.train]
        messages, plan_runtime_diag = runtime.plan(contexts, state.w, server)
        bytes_up += sum(tensor_bytes(m) for m in messages.values())
        instructions, plan_diag = part.plan_server(info, messages, server[k])  # type: ignore[misc]
        bytes_down += sum(8 * len(v) for v in instructions.values())
        diag.update(plan_diag)
        _merge(diag, plan_runtime_diag)
        # an answer that never came (lost, or rejected by the gate) leaves its client out of the plan: no steps
        unplanned = [i for i in who.train if i not in instructions]
        if unplanned:
            instructions = {**instructions, **{i: {"steps": 0} for i in unplanned}}
            diag["unplanned"] = unplanned

    contexts = [_context(info, federation, i, who, instructions.get(i, {}), draws.get(i)) for i in who.train]
    contexts = [ctx for ctx in contexts if ctx.steps > 0]
    streamed = None
    if stream and not state.evaluated and algorithm.streams() and takes_sink(runtime):
        streamed = Streamed(algorithm, info, state.w, server)
        updates, train_diag = runtime.train(contexts, state.w, server, sink=streamed.add)  # type: ignore[call-arg]
    else:
        updates, train_diag = runtime.train(contexts, state.w, server)
    _merge(diag, train_diag)
    lost = set(train_diag.get("lost", ()))  # no answer: their steps are not known to have run
    local_steps = sum(ctx.steps for ctx in contexts if ctx.client not in lost)
    bytes_up += streamed.nbytes if streamed else sum(u.nbytes for u in updates)

    server_list = list(server)
    if streamed is not None:
        w_next = streamed.aggregate.finish(state.w)
        for k, fold in streamed.server_end if who.upload else ():
            w_next, server_list[k] = fold.finish(state.w, w_next)
    else:
        for k, part in algorithm.with_stage("server_adjust"):
            updates = part.server_adjust(info, updates, server[k])  # type: ignore[misc]
        if zeroed := zeroed_clients(algorithm, updates):
            diag["zeroed"] = zeroed
        k_agg, aggregator = algorithm.single("aggregate")  # type: ignore[misc]
        w_next = aggregator.aggregate(info, state.w, updates)  # type: ignore[misc]
        for k, part in algorithm.with_stage("server_end"):
            if who.upload or part.releases_every_round:  # nobody selected to upload: no step, but a DP release
                w_next, server_list[k] = part.server_end(info, state.w, w_next, updates, server_list[k])  # type: ignore[misc]

    if any(u.diag for u in updates):
        diag["clients"] = {str(u.client): u.diag for u in updates if u.diag}
        errors = [e for u in updates if isinstance(e := u.diag.get("estimate_error"), float)]
        if errors:  # an estimator's round scalar: the mean relative error over the clients that have one
            diag["estimate_error"] = sum(errors) / len(errors)
    totals = {
        "bytes_up": state.totals["bytes_up"] + bytes_up,
        "bytes_down": state.totals["bytes_down"] + bytes_down,
        "local_steps": state.totals["local_steps"] + local_steps,
    }
    new_state = replace(
        state, round=state.round + 1, w=w_next, server=tuple(server_list),
        clients=runtime.states(state.clients), totals=totals, evaluated=track(state.evaluated, state.w, updates),
    )
    uploaded = len(updates) - len(diag.get("zeroed", ()))  # a zeroed upload moved nothing, as one Flower refuses
    report = RoundReport(state.round, who, bytes_up, bytes_down, local_steps, diag, uploaded=uploaded)
    return new_state, report


def zeroed_clients(algorithm: Algorithm, updates: Sequence[ClientUpdate]) -> list[int]:
    """The clients whose upload a part counts as zero, having no finite norm (``Part.zeroes_non_finite``:
    client-level DP; Flower's gate refuses such an upload before it, under ``rejected``)."""
    if not any(part.zeroes_non_finite for part in algorithm.parts):
        return []
    return [u.client for u in updates if finite_norm(u.delta) is None]


def takes_sink(runtime: ClientRuntime) -> bool:
    """Whether ``runtime.train`` streams (takes ``sink=``, :meth:`ClientRuntime.train`)."""
    try:
        return "sink" in inspect.signature(runtime.train).parameters
    except (TypeError, ValueError):
        return False


def _merge(diag: dict[str, Any], more: dict[str, Any]) -> None:
    """Add a runtime's diagnostics (lists and dicts of lost / rejected clients accumulate)."""
    for key, value in more.items():
        if isinstance(value, list):
            diag[key] = [*diag.get(key, []), *value]
        elif isinstance(value, dict):
            diag[key] = {**diag.get(key, {}), **value}
        else:
            diag[key] = value


def _context(
    info: RoundInfo, federation: Federation, client: int, who: Participation, instructions: dict[str, Any],
    work: ClientWork | None = None,
) -> ClientContext:
    steps = client_steps(federation.options, len(federation.partition[client]), instructions.get("steps"), work)
    return ClientContext(info, client, steps, client in who.upload, instructions)


def train_client(
    algorithm: Algorithm,
    ctx: ClientContext,
    w: Tensor,
    server: tuple[State, ...],
    client_state: tuple[State, ...],
    federation: Federation,
) -> tuple[tuple[State, ...], ClientUpdate]:
    """The client side of a round: start point, local steps, estimate, state update."""
    theta0 = w
    for k, part in algorithm.with_stage("start"):
        theta0 = part.start(ctx, w, theta0, server[k], client_state[k])  # type: ignore[misc]
    terms = []
    for k, part in algorithm.with_stage("local_term"):
        term = part.local_term(ctx, w, server[k], client_state[k])  # type: ignore[misc]
        if term is not None:
            terms.append(term)
    owner = algorithm.single("estimator")
    ordering = algorithm.single("order")  # a part that orders the client's samples from its state (GraB)
    if ordering is None:
        batches = federation.client_batches(ctx.client, ctx.info.round, ctx.steps)
        estimator = owner[1].estimator(ctx, w.numel()) if owner else None  # type: ignore[misc]
    else:
        k, part = ordering
        order = part.order(ctx, client_state[k], federation.order(ctx.client, ctx.info.round))  # type: ignore[misc]
        batches = batch_positions(order, ctx.steps, federation.options.batch_size, federation.options.last_batch)
        estimator = None
        if owner is not None:
            args = (client_state[k], order, batches) if owner[0] == k else ()
            estimator = owner[1].estimator(ctx, w.numel(), *args)  # type: ignore[misc]
    theta_end = train_local(
        federation.model,
        federation.x_train,
        federation.y_train,
        batches,
        theta0,
        federation.loss_fn,
        ctx.info.lr,
        federation.options,
        terms,
        estimator,
        gradient=federation.batch_gradient(ctx.client, ctx.info.round),
        augment=federation.augmenter(ctx.client, ctx.info.round),
    )
    trajectory = theta0 - theta_end
    extras: dict[str, Tensor] = {}
    diag: dict[str, Any] = {}
    if estimator is not None:
        trajectory, more, diag = estimator.finish(trajectory)
        extras.update(more)
    delta = trajectory if theta0 is w else trajectory + (w - theta0)

    new_state = list(client_state)
    if ordering is not None and owner is not None and owner[0] == ordering[0]:
        new_state[owner[0]] = estimator.next_state  # type: ignore[union-attr]
    for k, part in algorithm.with_stage("client_end"):
        new_state[k], more = part.client_end(ctx, w, theta0, theta_end, server[k], new_state[k])  # type: ignore[misc]
        extras.update(more)
    for k, part in algorithm.with_stage("upload"):
        delta = part.upload(ctx, delta, server[k])  # type: ignore[misc]
    weight = float(federation.weights[ctx.client])
    return tuple(new_state), ClientUpdate(ctx.client, weight, ctx.steps, delta, extras, diag)

