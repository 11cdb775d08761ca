"""The composable algorithm structure: parts with stages, composed by :func:`compose`.

An FL algorithm is a chain of small :class:`Part` objects, in the spirit of optax's
``chain``. Each part touches only the stages it needs and owns its named state; the engine
holds every client's state and hands it in and out explicitly. One round, in stage order:

1. ``participation``  who trains and who uploads (default: a seeded fraction does both;
   FedUMF: everybody trains, a fraction uploads). A participation schedule fixes the selected
   clients instead (``RoundInfo.scheduled``, honoured by :func:`~fedaccel.algorithms.sampling.sample_clients`).
2. ``plan_client`` / ``plan_server``  an optional planning message round (FedGSNR): clients
   send statistics at the global model, the server answers each with instructions
   (e.g. ``{"steps": 7}``; ``steps == 0`` means "do not train this round").
3. ``start``  the client's start point (FedUMF fusion of a stored update).
4. ``local_term``  a term added to the gradient at every local step (FedProx, SCAFFOLD,
   FedDyn, FedDC); returns a closure ``(theta, grad) -> None`` that adds in place.
5. ``estimator``  watches every local step direction and replaces the full local update by an
   estimate (BHerd, GraB). At most one per algorithm. A part with an ``order`` stage (GraB's
   reordering) sets the client's sample order this round from its client state; its estimator is then
   called with that state, the order and the batches, and the ``next_state`` it leaves becomes the
   part's client state (before ``client_end``). At most one per algorithm.
6. ``client_end``  the client's state after training and extra tensors to upload
   (SCAFFOLD's control delta, FedDyn/FedDC drift; FedUMF keeps its stored update and uploads nothing extra).
   ``upload``  the last thing a client does to its update before it leaves (client-side DP: clip and
   add the client's share of the noise).
7. ``server_adjust``  server-side rescaling of the uploaded updates (GraB's 1/alpha_t).
8. ``aggregate``  the server aggregator (mean, FedNova). Exactly one.
9. ``server_end``  server state after aggregation (SCAFFOLD c, FedDyn h). It runs in rounds where someone
   was selected to upload, or every round for a part with ``releases_every_round`` (adaptive-clipping DP,
   whose noised step is a release even when nobody uploads).

Streaming (opt-in): an aggregator that can fold the uploads one by one as they arrive declares
``aggregate_fold``, and a ``server_end`` part ``server_end_fold``; an algorithm whose every update-reading
server stage has one (:meth:`Algorithm.streams`) is aggregated in O(model) memory, no client's update
kept until the round ends. Without them (robust aggregation, BHerd's server side, GraB's rescaling)
the updates are kept and handed over as a list, as always.

``docs/architecture.md`` has the diagram. A named method is a recipe: ``compose(...)`` of parts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

State = Any
LocalTerm = Callable[[Tensor, Tensor], None]


@dataclass(frozen=True)
class RoundInfo:
    """What every stage may read about the current round."""

    round: int  # t, 0-based: 0 in the round metrics.jsonl and the progress bar call round 1
    lr: float  # eta_t, the local learning rate this round
    prev_lr: float  # eta_{t-1} (equal to lr in round 0)
    weights: np.ndarray  # p_i = |D_i| / sum_j |D_j| for all N clients
    seed: int
    momentum: float = 0.0  # local optimiser settings, for parts whose maths depends on them
    weight_decay: float = 0.0
    scheduled: tuple[int, ...] | None = None  # the clients a participation schedule selects now (None: sampled)
    initial_lr: float | None = None  # eta_0, undecayed (None: not known, read as lr)
    shared_steps: int | None = None  # K: one step count for every client, as reference codes use (None: not known)
    sampling: str = "fixed"  # fixed: round(C N) clients are sampled; bernoulli: each with probability C

    @property
    def n_clients(self) -> int:
        return len(self.weights)

    def rng(self, stream: str, *keys: int) -> np.random.Generator:
        """A generator for (seed, stream, round, keys...): the only source of randomness."""
        return make_rng(self.seed, stream, self.round, *keys)


def make_rng(seed: int, stream: str, *keys: int) -> np.random.Generator:
    """Independent generator per (seed, named stream, integer keys)."""
    tag = int.from_bytes(stream.encode()[:8].ljust(8, b"\0"), "little")
    return np.random.default_rng([seed, tag, *keys])


def seeded_normal(shape: torch.Size | int, seed: int, stream: str, *keys: int) -> Tensor:
    """N(0, I) of ``shape`` drawn on the CPU in float64 from (seed, stream, *keys): the same vector on every
    runtime and device (every DP noise of this package is one such draw)."""
    generator = torch.Generator().manual_seed(int(make_rng(seed, stream, *keys).integers(2**63 - 1)))
    return torch.randn(shape, generator=generator, dtype=torch.float64)


@dataclass(frozen=True)
class Participation:
    """Clients that train this round, and the subset of them whose update is uploaded."""

    train: tuple[int, ...]
    upload: tuple[int, ...]


@dataclass(frozen=True)
class ClientContext:
    """What a client-side stage may read: the round, who it is, how long it trains."""

    info: RoundInfo
    client: int
    steps: int  # tau_i for this round
    uploads: bool  # whether this client's update reaches the server this round
    instructions: Mapping[str, Any] = field(default_factory=dict)


class ClientAccess(Protocol):
    """What a planning stage may ask of a client's data and model (FedGSNR statistics)."""

    def sample(self, n: int, rng: np.random.Generator) -> tuple[Tensor, Tensor]: ...

    def per_sample_grads(self, theta: Tensor, x: Tensor, y: Tensor) -> Tensor: ...

    def gradient_moments(self, theta: Tensor, x: Tensor, y: Tensor, groups: int = 1) -> tuple[Tensor, Tensor] | None:
        """Mean of the per-sample gradients and mean of their squares over each of ``groups`` equal runs of the
        samples, (groups, d), where a closed form exists (new tensors, float64: the caller may overwrite them)."""
        ...


class Estimator(Protocol):
    """Replaces the full local update by an estimate built from the local step directions."""

    def observe(self, step: int, direction: Tensor) -> None: ...

    def finish(self, full_update: Tensor) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        """Return (estimated update, tensors to upload, diagnostics)."""
        ...


class BatchedEstimator(Protocol):
    """An [Estimator][fedaccel.algorithms.base.Estimator] for K clients at once (the stacked runtime): row k is
    client ``contexts[k]``."""

    def observe(self, step: int, directions: Tensor, active: Tensor) -> None:
        """Step ``step``'s (K, d) directions; rows where the (K,) bool ``active`` is False are ignored."""
        ...

    def finish(self, updates: Tensor) -> list[tuple[Tensor, dict[str, Tensor], dict[str, Any]]]:
        """Per client, what ``Estimator.finish`` gives for its row of the (K, d) ``updates``."""
        ...


class BatchedEstimatorFactory(Protocol):
    """``Part.batched_estimator``: builds a [BatchedEstimator][fedaccel.algorithms.base.BatchedEstimator] and
    says what one costs in memory."""

    def __call__(
        self, contexts: Sequence[ClientContext], dim: int, dtype: torch.dtype, device: torch.device
    ) -> BatchedEstimator: ...

    def chunk_bytes(self, clients: int, steps: int, dim: int, dtype: torch.dtype) -> int:
        """Peak bytes the estimator allocates for ``clients`` clients of at most ``steps`` steps (linear in clients)."""
        ...


class AggregateFold(Protocol):
    """``Part.aggregate_fold(info, w)``: the part's ``aggregate`` as a running reduction over the uploads."""

    def add(self, update: ClientUpdate) -> None:
        """Fold one upload in (its tensors may be freed afterwards)."""
        ...

    def finish(self, w: Tensor) -> Tensor:
        """w_next: what ``aggregate(info, w, updates)`` gives for the uploads added (to float rounding)."""
        ...


class ServerEndFold(Protocol):
    """``Part.server_end_fold(info, ss)``: the part's ``server_end`` as a running reduction over the uploads."""

    def add(self, update: ClientUpdate) -> None: ...

    def finish(self, w: Tensor, w_next: Tensor) -> tuple[Tensor, State]:
        """(w_next, ss): what ``server_end(info, w, w_next, updates, ss)`` gives for the uploads added."""
        ...


@dataclass
class ClientUpdate:
    """One client's upload: ``delta = w_t - theta_end`` (or its estimate) plus extras."""

    client: int
    weight: float  # p_i
    steps: int
    delta: Tensor
    extras: dict[str, Tensor] = field(default_factory=dict)
    diag: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        tensors = [self.delta, *self.extras.values()]
        return sum(t.numel() * t.element_size() for t in tensors)


@dataclass(frozen=True)
class Part:
    """One piece of an FL algorithm. Every stage is optional; see the module docstring.

    Signatures (``ss`` = this part's server state, ``cs`` = this part's state for the client):

    - ``init_server(w0) -> ss``; ``init_client(w0) -> cs``
    - ``participation(info) -> Participation``
    - ``plan_client(ctx, w, ss, cs, access) -> dict[str, Tensor]`` (the message sent up)
    - ``batched_plan_client(contexts, w, ss, css, accesses) -> dict[int, dict[str, Tensor]]``: ``plan_client``'s
      messages for K clients at once (runtimes that hold the clients in this process), by client
    - ``plan_server(info, messages: dict[int, dict], ss) -> (dict[int, dict], diag)``
    - ``start(ctx, w, theta0, ss, cs) -> theta0``
    - ``local_term(ctx, w, ss, cs) -> LocalTerm | None``
    - ``batched_local_term(contexts, w, ss, css) -> LocalTerm | None``: the same term for K clients at
      once (stacked runtime), adding to (K, d) ``theta``/``grad`` in place, row k for ``contexts[k]``
    - ``estimator(ctx, d) -> Estimator`` (d = number of parameters); ``estimator(ctx, d, cs, order, batches)``
      in a part with an ``order`` stage (module docstring)
    - ``order(ctx, cs, default: np.ndarray) -> np.ndarray``: the client's sample order this round (``default``:
      the federation's, from ``train.order``)
    - ``batched_estimator(contexts, d, dtype, device) -> BatchedEstimator``: the estimator for K clients at
      once (optional; a ``BatchedEstimatorFactory``, which also gives ``chunk_bytes``)
    - ``client_end(ctx, w, theta0, theta_end, ss, cs) -> (cs, extras: dict[str, Tensor])``
    - ``upload(ctx, delta, ss) -> delta``: the update as it leaves the client (after ``client_end``)
    - ``server_adjust(info, updates, ss) -> updates``
    - ``aggregate(info, w, updates) -> w_next``
    - ``server_end(info, w, w_next, updates, ss) -> (w_next, ss)``
    - ``broadcast(ss) -> dict[str, Tensor]``: server state sent down with the model (bytes)
    - ``aggregate_fold(info, w) -> AggregateFold`` / ``server_end_fold(info, ss) -> ServerEndFold``: the same
      stages as running reductions (optional; module docstring, "Streaming")
    """

    name: str
    init_server: Callable[[Tensor], State] | None = None
    init_client: Callable[[Tensor], State] | None = None
    participation: Callable[[RoundInfo], Participation] | None = None
    plan_client: Callable[..., dict[str, Tensor]] | None = None
    batched_plan_client: Callable[..., dict[int, dict[str, Tensor]]] | None = None
    plan_server: Callable[..., tuple[dict[int, dict[str, Any]], dict[str, Any]]] | None = None
    start: Callable[..., Tensor] | None = None
    local_term: Callable[..., LocalTerm | None] | None = None
    batched_local_term: Callable[..., LocalTerm | None] | None = None
    estimator: Callable[..., Estimator] | None = None
    order: Callable[..., np.ndarray] | None = None
    batched_estimator: BatchedEstimatorFactory | None = None
    client_end: Callable[..., tuple[State, dict[str, Tensor]]] | None = None
    server_adjust: Callable[..., list[ClientUpdate]] | None = None
    aggregate: Callable[..., Tensor] | None = None
    server_end: Callable[..., tuple[Tensor, State]] | None = None
    broadcast: Callable[[State], dict[str, Tensor]] | None = None
    aggregate_fold: Callable[[RoundInfo, Tensor], AggregateFold] | None = None
    server_end_fold: Callable[[RoundInfo, State], ServerEndFold] | None = None
    upload: Callable[..., Tensor] | None = None
    releases_every_round: bool = False  # server_end runs in a round nobody uploads too (module docstring, 9.)
    # what client-level DP (fedaccel.algorithms.dp) reads to admit a part with these stages:
    upload_fraction: float | None = None  # C: participation uploads exactly sample_clients(info, C)
    no_extras: bool = False  # client_end never returns extras: the part's client state stays on the client
    models_only: bool = False  # server_end reads w, w_next and whether anyone uploaded, never an upload's values
    zeroes_non_finite: bool = False  # counts an upload of no finite norm as zero: the round's diag lists them


# the stages that run on a client and are given the part's server state ``ss``
CLIENT_STAGES = ("plan_client", "batched_plan_client", "start", "local_term", "batched_local_term", "client_end",
                 "upload")


@dataclass(frozen=True)
class Algorithm:
    """A composed algorithm: its parts in order, plus the recipe name."""

    name: str
    parts: tuple[Part, ...]

    def init_server(self, w0: Tensor) -> tuple[State, ...]:
        return tuple(p.init_server(w0) if p.init_server else None for p in self.parts)

    def init_client(self, w0: Tensor) -> tuple[State, ...]:
        return tuple(p.init_client(w0) if p.init_client else None for p in self.parts)

    def client_view(self, server: tuple[State, ...]) -> tuple[State, ...]:
        """The server states as clients need them: None for a part no client stage reads (a server
        optimiser's moments, say), so a runtime that sends states down sends only what is read."""
        return tuple(ss if any(getattr(p, stage) is not None for stage in CLIENT_STAGES) else None
                     for p, ss in zip(self.parts, server, strict=True))

    def with_stage(self, stage: str) -> list[tuple[int, Part]]:
        """(index, part) for the parts that implement ``stage``, in composition order."""
        return [(k, p) for k, p in enumerate(self.parts) if getattr(p, stage) is not None]

    def single(self, stage: str) -> tuple[int, Part] | None:
        found = self.with_stage(stage)
        return found[0] if found else None

    def streams(self) -> bool:
        """Whether the uploads can be folded as they arrive: the aggregator and every ``server_end`` part
        have a fold form and no part rescales the updates first (``server_adjust`` needs them all)."""
        aggregator = self.single("aggregate")
        return (aggregator is not None and aggregator[1].aggregate_fold is not None
                and not self.with_stage("server_adjust")
                and all(p.server_end_fold is not None for _, p in self.with_stage("server_end")))


EXCLUSIVE_STAGES = ("participation", "estimator", "aggregate", "plan_server", "order")


def compose(name: str, *parts: Part) -> Algorithm:
    """Chain parts into an algorithm. Stages that must have one owner are checked here.

    Example:
        >>> from fedaccel.algorithms.mean import mean_aggregate
        >>> compose("fedavg", mean_aggregate()).name
        'fedavg'
    """
    if not isinstance(name, str):
        raise TypeError(f"compose's first argument is the algorithm's name, got {type(name).__name__}")
    for part in parts:
        if not isinstance(part, Part):  # a recipe's name, say: AttributeError 'str' object has no attribute 'name'
            raise TypeError(f"compose({name!r}, ...) takes Part objects (the part functions of fedaccel.algorithms "
                            f"make them), got {type(part).__name__} {part!r}")
    algorithm = Algorithm(name, tuple(parts))
    for stage in EXCLUSIVE_STAGES:
        owners = [p.name for _, p in algorithm.with_stage(stage)]
        if len(owners) > 1:
            raise ValueError(f"{name}: stage {stage!r} is claimed by several parts: {owners}")
    if algorithm.single("aggregate") is None:
        raise ValueError(f"{name}: no part aggregates the updates (add mean_aggregate())")
    planners = [bool(p.plan_client) for _, p in algorithm.with_stage("plan_server")]
    if planners and not all(planners):
        raise ValueError(f"{name}: plan_server without plan_client")
    return algorithm


def finite_norm(delta: Tensor) -> float | None:
    """``delta``'s Euclidean norm in float64, or None where it is not finite (an element that is not, or a float64
    update too large to square)."""
    norm = float(torch.linalg.vector_norm(delta.to(torch.float64)))
    return norm if math.isfinite(norm) else None


def tensor_bytes(tensors: Sequence[Tensor] | Mapping[str, Tensor]) -> int:
    """Bytes on the wire for a message made of tensors."""
    values = tensors.values() if isinstance(tensors, Mapping) else tensors
    return sum(t.numel() * t.element_size() for t in values)


@dataclass
class _UpdatesIgnored:
    """The fold of a ``server_end`` that reads w and w_next only, never the updates."""

    server_end: Callable[..., tuple[Tensor, State]]
    info: RoundInfo
    ss: State

    def add(self, update: ClientUpdate) -> None:
        pass

    def finish(self, w: Tensor, w_next: Tensor) -> tuple[Tensor, State]:
        return self.server_end(self.info, w, w_next, (), self.ss)


def updates_ignored(server_end: Callable[..., tuple[Tensor, State]]) -> Callable[[RoundInfo, State], ServerEndFold]:
    """``server_end_fold`` for a ``server_end`` that does not read the updates (e.g. a server momentum)."""
    return lambda info, ss: _UpdatesIgnored(server_end, info, ss)


def weighted_sum(updates: Sequence[ClientUpdate], coefficients: Sequence[float]) -> Tensor:
    """sum_k c_k * delta_k as a running sum (client updates need not all be kept)."""
    total = torch.zeros_like(updates[0].delta)
    for u, c in zip(updates, coefficients, strict=True):
        total.add_(u.delta, alpha=float(c))
    return total
