"""Stacked clients: K clients trained in one batched computation per local step.

A :class:`~fedaccel.engine.round.ClientRuntime` (``run.runtime: stacked``). The K clients of a chunk
hold their parameters as one (K, d) tensor; every client's batches are laid out once per round as
an index table (K, tau_max, b), and a local step is one batched gradient for all K rows:

- ``svm``: the squared-hinge gradient in closed form, two ``bmm`` in the shape (K, 1, D) @ (K, D, B)
  (on the CPU ~12x faster than (K, B, D) @ (K, D, 1), the shape ``vmap`` would produce);
- ``softmax`` and ``2nn`` (chains of ``nn.Linear`` and ReLU): batched matmuls, weights on the left,
  activations laid out (K, features, B), autograd for the backward;
- any other module (users' own): ``torch.func`` (functional_call + vmap + grad) over the rows.

With ``train.augment`` each row's batch is cropped and flipped with the draws of its own (seed,
round, client, step), as in process, and the (K, b) images are transformed in one call.
Everything else in a step is row-wise vector arithmetic on (K, d): clip per row (before or after
the local terms: ``train.clip_scope``), the local terms
(a part's ``batched_local_term``; otherwise its per-client term on each row, said once), weight
decay, momentum, the estimator (a part's ``batched_estimator``; otherwise one per-client estimator per
row). Unequal tau_k (FedGSNR's plans, epochs over clients of unequal size) shrink the active set:
the gradient is taken for the active rows only and finished rows stop moving. Short batches
(``train.last_batch: partial``) are padded in the table and their size kept: a step whose rows'
batches differ in size makes one kernel call per size, so each loss is the mean over its own batch.
``start`` and ``client_end`` stages run per client (cheap vector operations), so every recipe runs here with the
numbers of :class:`~fedaccel.engine.round.InProcessClients` (tests/test_stacked.py, every recipe).

Chunks: at most ``run.stack_size`` rows, and what fits ``MEMORY_CAP`` (a BHerd estimator's (K, tau, d)
store included); on a CPU by default what one step reads stays near cache size. A batched estimator
is called as ``observe(step, directions (K, d), active (K,) bool)`` and ``finish(updates (K, d))``;
the directions are buffers reused by the next step (copy what you keep; ignore inactive rows).

Clients are independent within a round, so the same code trains rows from several federations at
once (:func:`train_jobs`): that is how ``fedaccel experiment --stack-seeds`` stacks the S seeds of
a cell. A model with buffers (BatchNorm) has no stacked form: it falls back to one client after
another and says so once.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaccel.algorithms.base import Algorithm, ClientContext, ClientUpdate, State
from fedaccel.data.augment import crop_flip
from fedaccel.engine import graphed
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import clip_rows

MEMORY_CAP = 1 << 30  # bytes one chunk of stacked clients may hold (parameters, batches, estimator store)
GPU_MEMORY_SHARE = 8  # on a GPU, a chunk may hold 1/8 of the device's memory where that is more than MEMORY_CAP:
# an H200's 139 GiB takes the 2NN's K = 1,000 at batch 50 in one chunk (benchmarks/gpu_floor.py)
CPU_BATCH_BYTES = 4 << 20  # on a CPU, by default what a chunk's step reads (batches, parameters, gradients)
# stays near cache size: benchmarks/chunk_size.py (SVM, K = 100 and 300, 5 repeats) found the fastest
# chunks at 100, 20 and 10-20 rows for batches of 10, 50 and 100, which 4 MB gives (100, 25, 12 rows);
# 8 MB gave 200, 50 and 25 rows, 0.97-1.50x the fastest (4 MB: 0.81-1.13x)
SHARE_SAME_DATA = True  # stacked seeds with equal training data gather from one copy (SameData; turned off
# only by benchmarks/seed_group_overheads.py, to measure it)
Kernel = Callable[[Tensor, Tensor, Tensor], Tensor]  # (theta (m, d), x (m, b, ...), y (m, b)) -> grad (m, d)

_SAID: set[str] = set()


def say_once(message: str) -> None:
    """One line on stderr, once per process."""
    if message not in _SAID:
        _SAID.add(message)
        print(message, file=sys.stderr, flush=True)


# --- kernels: the batched gradient of K clients' losses -----------------------------------------


def kernel_kind(module: nn.Module) -> str | None:
    """Which batched gradient fits ``module``: "svm", "linear" (Linear/ReLU chains), "functional"
    (torch.func, any module without buffers), or None (no stacked form: buffers such as BatchNorm)."""
    from fedaccel.models import MLP2NN, Classifier, SoftmaxRegression, SquaredSVM

    if any(True for _ in module.buffers()):
        return None
    if type(module) is SquaredSVM:
        return "svm"
    if type(module) in (SoftmaxRegression, MLP2NN) and type(module).loss is Classifier.loss:
        return "linear"
    return "functional"


def make_kernel(module: nn.Module, loss_fn: Callable[[Tensor, Tensor], Tensor]) -> Kernel | None:
    """The batched gradient for ``module`` (see :func:`kernel_kind`); None if it has no stacked form."""
    kind = kernel_kind(module)
    if kind == "svm":
        return _svm_kernel(module)
    if kind == "linear":
        from fedaccel.models import chain_gradient

        chain = chain_gradient(module)  # one fused forward/backward, no autograd (fedaccel.models.chain)
        if chain is not None:
            return chain.stacked
        kind = "functional"  # a chain with a frozen parameter: torch.func
    if kind == "functional":
        return _functional_kernel(module, loss_fn)
    return None


def _svm_kernel(module: Any) -> Kernel:
    l2, labels = module.l2, module.labels

    def grad(theta: Tensor, x: Tensor, y: Tensor) -> Tensor:
        m, b = y.shape
        x = x.reshape(m, b, -1)  # (m, b, D)
        t = (1 - 2 * torch.remainder(y, 2)).to(theta.dtype) if labels == "parity" else y.to(theta.dtype)
        scores = torch.bmm(theta.unsqueeze(1), x.transpose(1, 2)).squeeze(1)  # (m,1,D)@(m,D,b) -> (m, b)
        margin = (1 - t * scores).clamp_(min=0)
        coef = (t * margin).mul_(-1.0 / b)  # d loss / d score
        g = torch.bmm(coef.unsqueeze(1), x).squeeze(1)  # (m,1,b)@(m,b,D) -> (m, D)
        return g.add_(theta, alpha=l2)

    return grad


def _functional_kernel(module: nn.Module, loss_fn: Callable[[Tensor, Tensor], Tensor]) -> Kernel:
    from torch.func import functional_call, grad, vmap

    from fedaccel.models import functional_loss

    named = [(n, p.shape) for n, p in module.named_parameters() if p.requires_grad]
    sizes = [math.prod(s) for _, s in named]
    has_loss = callable(getattr(module, "loss", None))

    def loss_one(flat: Tensor, x: Tensor, y: Tensor) -> Tensor:
        params = {n: t.view(s) for (n, s), t in zip(named, flat.split(sizes))}
        if has_loss:  # the module's own loss may read parameters (the SVM's L2 term)
            return functional_loss(module, params, x, y)  # type: ignore[arg-type]
        return loss_fn(functional_call(module, params, (x,)), y)

    batched = vmap(grad(loss_one))

    def gradient(theta: Tensor, x: Tensor, y: Tensor) -> Tensor:
        with torch.enable_grad():
            return batched(theta.detach(), x, y)

    return gradient


# --- jobs: the client side of one round of one federation ---------------------------------------


@dataclass
class Job:
    """One round's client side for one federation: which clients, from where, with what states.
    ``states`` (every client's part states) is updated in place; ``updates`` is filled."""

    algorithm: Algorithm
    federation: Federation
    contexts: Sequence[ClientContext]
    w: Tensor
    server: tuple[State, ...]
    states: list[tuple[State, ...]]
    updates: list[ClientUpdate] = field(default_factory=list)
    sink: Callable[[ClientUpdate], ClientUpdate] | None = None  # each upload handed over as it exists

    def upload(self, update: ClientUpdate) -> None:
        self.updates.append(update if self.sink is None else self.sink(update))


@dataclass
class _Row:
    job: Job
    ctx: ClientContext
    theta0: Tensor
    table: np.ndarray  # (tau_k, b) sample indices of each local step (a short batch: its first sizes[j])
    sizes: np.ndarray | None = None  # (tau_k,) batch sizes where some batch is short (train.last_batch: partial)


def _kernel_for(federation: Federation) -> Kernel | None:
    cached = getattr(federation, "_stacked_kernel", False)
    if cached is False:
        cached = make_kernel(federation.model.module, federation.loss_fn)
        federation._stacked_kernel = cached  # type: ignore[attr-defined]
    return cached


def train_jobs(jobs: Sequence[Job], *, stack_size: int | None = None, memory_cap: int | None = None,
               stop_now: threading.Event | None = None, same_data: SameData | None = None) -> None:
    """Train every job's clients, stacked in chunks of at most ``stack_size`` rows (and what fits
    ``memory_cap``, by default :func:`memory_cap_of` the device); jobs whose model has no stacked form run
    one client after another. ``stop_now`` set: ``KeyboardInterrupt`` before the next local step (or client).
    ``same_data``: batches of jobs with equal training data come from one copy (else each from its own)."""
    from fedaccel.engine.round import train_client

    rows: list[_Row] = []
    for job in jobs:
        if _kernel_for(job.federation) is None or job.algorithm.single("order") is not None:
            why = (f"{job.algorithm.name} orders each client's samples from its state" if _kernel_for(job.federation)
                   else f"{type(job.federation.model.module).__name__} has buffers (no batched form)")
            say_once(f"note: stacked runtime: {why}: its clients train one after another")
            for ctx in job.contexts:
                _check(stop_now)
                job.states[ctx.client], update = train_client(
                    job.algorithm, ctx, job.w, job.server, job.states[ctx.client], job.federation)
                if ctx.uploads:
                    job.upload(update)
            continue
        for ctx in job.contexts:
            theta0 = job.w
            for k, part in job.algorithm.with_stage("start"):
                theta0 = part.start(ctx, job.w, theta0, job.server[k], job.states[ctx.client][k])  # type: ignore[misc]
            rows.append(_Row(job, ctx, theta0, *job.federation.batch_table(ctx.client, ctx.info.round, ctx.steps)))
    # Rows that can share a batched step: same model kind, batch size, step size and optimiser.
    groups: dict[tuple[Any, ...], list[_Row]] = {}
    for row in rows:
        fed = row.job.federation
        key = (id(_kernel_for(fed)) if len(jobs) == 1 else _model_key(fed), row.table.shape[1],
               row.ctx.info.lr, fed.options, tuple(fed.x_train.shape[1:]), row.job.w.dtype, row.job.w.device)
        groups.setdefault(key, []).append(row)
    for group in groups.values():
        size = _chunk_size(group, stack_size, memory_cap)
        for lo in range(0, len(group), size):
            _train_chunk(group[lo : lo + size], stop_now, same_data)
    for job in jobs:  # uploads in the order of the job's contexts, as in process
        order = {ctx.client: n for n, ctx in enumerate(job.contexts)}
        job.updates.sort(key=lambda u: order[u.client])


def _model_key(fed: Federation) -> tuple[Any, ...]:
    module = fed.model.module
    shapes = tuple((n, tuple(p.shape)) for n, p in module.named_parameters())
    return (type(module), shapes, getattr(module, "l2", None), getattr(module, "labels", None))


def memory_cap_of(device: torch.device) -> int:
    """Bytes a chunk may hold on ``device``: ``MEMORY_CAP``, or on a GPU 1/``GPU_MEMORY_SHARE`` of its memory if more."""
    if device.type != "cuda":
        return MEMORY_CAP
    return max(MEMORY_CAP, torch.cuda.get_device_properties(device).total_memory // GPU_MEMORY_SHARE)


def _chunk_size(group: Sequence[_Row], stack_size: int | None, memory_cap: int | None) -> int:
    fed = group[0].job.federation
    if memory_cap is None:
        memory_cap = memory_cap_of(group[0].job.w.device)
    d, b = group[0].job.w.numel(), group[0].table.shape[1]
    features = math.prod(fed.x_train.shape[1:])
    tau = max(len(r.table) for r in group)
    has_estimator = group[0].job.algorithm.single("estimator") is not None
    activations = 1 if kernel_kind(fed.model.module) == "svm" else 16  # rough: a forward's activations
    per_row = 4 * (8 * d + b * features * (1 + activations) + (tau * d if has_estimator else 0))
    fits = max(1, memory_cap // per_row)
    if stack_size is None and group[0].job.w.device.type == "cpu":
        fits = min(fits, max(1, CPU_BATCH_BYTES // (4 * (b * features + 3 * d))))  # batches, theta, grad, d
    return max(1, min(len(group), fits, stack_size or len(group)))


def _gather(segments: Sequence[tuple[Job, int, int]], sources: Sequence[Data], index: Tensor,
            live: list[int] | None) -> tuple[Tensor, Tensor]:
    """The batches of the live rows (all if None): (m, b, *features) and (m, b), each job's rows from its
    ``sources`` entry (its federation's training data, or an equal copy: :class:`SameData`), gathered straight
    into place; one gather where every job reads one copy (one run, or stacked seeds of the same data)."""
    if all(source is sources[0] for source in sources):
        rows = index if live is None else index[live]
        flat = rows.reshape(-1)
        x, y = sources[0][0].index_select(0, flat), sources[0][1].index_select(0, flat)
        return x.view(*rows.shape, *x.shape[1:]), y.view(rows.shape)
    parts = []
    for (_, lo, hi), source in zip(segments, sources):
        rows = index[lo:hi] if live is None else index[[k for k in live if lo <= k < hi]]
        if len(rows):
            parts.append((source, rows))
    first = parts[0][0][0]
    m, b = sum(len(rows) for _, rows in parts), index.shape[1]
    x = first.new_empty((m * b, *first.shape[1:]))
    y = parts[0][0][1].new_empty((m * b,))
    at = 0
    for (x_train, y_train), rows in parts:
        n = rows.numel()
        torch.index_select(x_train, 0, rows.reshape(-1), out=x[at : at + n])
        torch.index_select(y_train, 0, rows.reshape(-1), out=y[at : at + n])
        at += n
    return x.view(m, b, *x.shape[1:]), y.view(m, b)


Data = tuple[Tensor, Tensor]  # a federation's training inputs and labels


class SameData:
    """Which runs of a seed stack train on equal data, so that their batches are gathered from one copy.

    Every seed of a grid cell loads its dataset on its own, so S seeds hold S equal copies, and a chunk's step
    gathered from each (S times the memory its rows are read from, one gather per run). :meth:`source` gives
    a federation's training data, or a copy seen before that holds the same bits (compared once); the copy it gives
    is read, never written, so the numbers are the same. A tensor replaced, or changed in place by a torch
    operation (its version counter moves), is looked at again; a change that torch does not count (through
    ``.data`` or a numpy view) is not seen: change a run's training data with ``Federation.set_training_data``."""

    def __init__(self) -> None:
        self._copies: list[Data] = []
        self._seen: dict[tuple[int, int], tuple[Data, Data, tuple[int, ...]]] = {}  # ids -> (own, copy, versions)

    def source(self, federation: Federation) -> Data:
        own = (federation.x_train, federation.y_train)
        key = (id(own[0]), id(own[1]))
        if (seen := self._seen.get(key)) is not None and seen[0][0] is own[0] and seen[0][1] is own[1] \
                and seen[2] == _versions(own, seen[1]):
            return seen[1]
        copy = next((c for c in self._copies if _equal(c, own)), None)
        if copy is None:
            copy = own
            self._copies.append(own)
        self._seen[key] = (own, copy, _versions(own, copy))  # holds ``own``: its id is not reused meanwhile
        return copy


def _versions(own: Data, copy: Data) -> tuple[int, ...]:
    return own[0]._version, own[1]._version, copy[0]._version, copy[1]._version


_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}  # element size -> the integers a float's bits are read as


def _equal(a: Data, b: Data) -> bool:
    """Whether two (inputs, labels) pairs hold the same bits (the same tensors, or copies: -0.0 is not 0.0 here)."""
    return all(p is q or (p.shape == q.shape and p.dtype == q.dtype and p.device == q.device and torch.equal(
        *((t.view(_BITS[t.element_size()]) for t in (p, q)) if p.is_floating_point() and p.element_size() in _BITS
          else (p, q)))) for p, q in zip(a, b))


def _segments(rows: Sequence[_Row]) -> list[tuple[Job, int, int]]:
    """(job, lo, hi): the contiguous rows of each job in a chunk (rows are grouped by job)."""
    out: list[tuple[Job, int, int]] = []
    for n, row in enumerate(rows):
        if out and out[-1][0] is row.job:
            out[-1] = (row.job, out[-1][1], n + 1)
        else:
            out.append((row.job, n, n + 1))
    return out


def _check(stop_now: threading.Event | None) -> None:
    """A second stop request stops the seeds' round between two steps (:meth:`SeedStack.stop_now`)."""
    if stop_now is not None and stop_now.is_set():
        raise KeyboardInterrupt


def _train_chunk(rows: Sequence[_Row], stop_now: threading.Event | None = None,
                 same_data: SameData | None = None) -> None:
    first = rows[0].job
    fed, options, lr = first.federation, first.federation.options, rows[0].ctx.info.lr
    kernel = _kernel_for(fed)
    assert kernel is not None
    device, dtype = first.w.device, first.w.dtype
    K, d = len(rows), first.w.numel()
    theta0 = torch.stack([r.theta0 for r in rows])  # (K, d)
    counts = [len(r.table) for r in rows]  # tau_k
    tau_max, tau_min = max(counts), min(counts)
    b = rows[0].table.shape[1]
    # laid out once per round; on a GPU in page-locked memory, copied without waiting (the copy is ordered
    # before the steps that read it on the stream, and the allocator keeps the buffer until it is done)
    host = torch.empty((K, tau_max, b), dtype=torch.int64, pin_memory=device.type == "cuda")
    table = host.numpy()
    if tau_min == tau_max:  # one copy, no zero fill first
        np.stack([r.table for r in rows], out=table)
    else:
        table.fill(0)
        for k, r in enumerate(rows):
            table[k, : len(r.table)] = r.table
    index = host.to(device, non_blocking=True)
    sizes = _batch_sizes(rows, tau_max, b)  # None: every batch full

    segments = _segments(rows)
    sources = [(job.federation.x_train, job.federation.y_train) if same_data is None else
               same_data.source(job.federation) for job, _, _ in segments]
    terms: list[tuple[Callable[[Tensor, Tensor], None], int, int]] = []
    estimators: list[tuple[Any, int, int, bool]] = []  # (estimator, lo, hi, batched?)
    for job, lo, hi in segments:
        contexts = [r.ctx for r in rows[lo:hi]]
        cstates = [job.states[c.client] for c in contexts]
        for k, part in job.algorithm.with_stage("local_term"):
            batched = getattr(part, "batched_local_term", None)
            if batched is not None:
                term = batched(contexts, job.w, job.server[k], [s[k] for s in cstates])
                if term is not None:
                    terms.append((term, lo, hi))
                continue
            say_once(f"note: stacked runtime: {part.name}'s local term has no batched form: applied row by row")
            for n, (ctx, s) in enumerate(zip(contexts, cstates)):
                term = part.local_term(ctx, job.w, job.server[k], s[k])  # type: ignore[misc]
                if term is not None:
                    terms.append((_row_term(term), lo + n, lo + n + 1))
        owner = job.algorithm.single("estimator")
        if owner is not None:
            part = owner[1]
            batched = getattr(part, "batched_estimator", None)
            if batched is not None:
                estimators.append((batched(contexts, d, dtype, device), lo, hi, True))
            else:
                say_once(f"note: stacked runtime: {part.name}'s estimator has no batched form: one per client")
                for n, ctx in enumerate(contexts):
                    estimators.append((part.estimator(ctx, d), lo + n, lo + n + 1, False))  # type: ignore[misc]

    steps = torch.tensor(counts, device=device) if estimators else None  # each row's tau, for the live masks

    def run_steps(theta: Tensor, index: Tensor) -> None:
        """The chunk's local steps from ``theta`` (K, d), moved in place, on the index table (K, tau_max, b)."""
        grad = torch.zeros_like(theta)
        buffer: Tensor | None = None
        for step in range(tau_max):
            _check(stop_now)
            live = None if steps is None else steps > step
            all_live = step < tau_min
            alive = None if all_live else [k for k in range(K) if counts[k] > step]
            active = None if alive is None else torch.tensor(alive, device=device)
            groups = [(alive, b)] if sizes is None else _size_groups(sizes[:, step], alive)
            if all_live and len(groups) == 1 and groups[0][1] == b:
                x, y = _gather(segments, sources, index[:, step], None)
                if options.augment is not None:
                    x = _augment(rows, range(K), step, x, options.augment)
                grad = kernel(theta, x, y)
            else:
                grad.zero_()
                for members, size in groups:  # one kernel call per batch size among the live rows
                    members = list(range(K)) if members is None else members
                    x, y = _gather(segments, sources, index[:, step, :size], members)
                    if options.augment is not None:
                        x = _augment(rows, members, step, x, options.augment)
                    at = torch.tensor(members, device=device)
                    grad.index_copy_(0, at, kernel(theta.index_select(0, at), x, y))
            with torch.no_grad():
                if options.clip is not None and options.clip_scope == "gradient":
                    clip_rows(grad, options.clip)
                for term, lo, hi in terms:
                    term(theta[lo:hi], grad[lo:hi])
                if options.clip is not None and options.clip_scope == "objective":
                    clip_rows(grad, options.clip)
                if options.weight_decay:
                    grad.add_(theta, alpha=options.weight_decay)
                direction = grad
                if options.momentum:
                    buffer = grad.clone() if buffer is None else buffer.mul_(options.momentum).add_(grad)
                    direction = buffer
                for estimator, lo, hi, is_batched in estimators:
                    if is_batched:
                        if step < max(counts[lo:hi]):  # a job's store ends at its own longest row, not the chunk's
                            estimator.observe(step, direction[lo:hi], live[lo:hi])  # type: ignore[index]
                    elif counts[lo] > step:
                        estimator.observe(step, direction[lo])
                if all_live:
                    theta.sub_(direction, alpha=lr)
                else:
                    theta.index_add_(0, active, direction.index_select(0, active), alpha=-lr)

    theta_end = None
    if (device.type == "cuda" and graphed.enabled() and tau_min == tau_max and sizes is None and options.augment is None
            and not terms and not estimators and kernel_kind(fed.model.module) in graphed.KINDS):  # see graphed
        key = (id(kernel), K, d, tau_max, b, lr, options, dtype, device,
               tuple((x_train.data_ptr(), y_train.data_ptr(), tuple(x_train.shape), lo, hi)
                     for (x_train, y_train), (_, lo, hi) in zip(sources, segments)))
        keep = (kernel, *sources)
        theta_end = graphed.GRAPHS.run(key, keep, run_steps, theta0, index, say=say_once)
    if theta_end is None:
        theta_end = theta0.clone()
        run_steps(theta_end, index)
    _finish(rows, segments, theta0, theta_end, estimators)


def _batch_sizes(rows: Sequence[_Row], tau_max: int, b: int) -> np.ndarray | None:
    """(K, tau_max) batch sizes of a chunk's rows (0 past a row's steps), or None when every batch is full."""
    if all(r.sizes is None for r in rows):
        return None
    sizes = np.zeros((len(rows), tau_max), dtype=np.int64)
    for k, r in enumerate(rows):
        sizes[k, : len(r.table)] = b if r.sizes is None else r.sizes
    return sizes


def _size_groups(sizes: np.ndarray, alive: Sequence[int] | None) -> list[tuple[list[int] | None, int]]:
    """The live rows (all if ``alive`` is None) grouped by their batch size this step, as (rows, size):
    a short batch's loss is the mean over its own samples, so it takes a kernel call of its size."""
    live = range(len(sizes)) if alive is None else alive
    groups: dict[int, list[int]] = {}
    for k in live:
        groups.setdefault(int(sizes[k]), []).append(k)
    if alive is None and len(groups) == 1:
        return [(None, next(iter(groups)))]
    return [(members, size) for size, members in sorted(groups.items(), reverse=True)]


def _augment(rows: Sequence[_Row], live: Sequence[int], step: int, x: Tensor, augment: Any) -> Tensor:
    """The live rows' batches x (m, b, C, H, W) cropped and flipped, row k with the draws of its
    client's (seed, round, client, step), as :meth:`Federation.augmenter` draws them in process."""
    draws = [augment.draw(rows[k].job.federation.augment_rng(rows[k].ctx.client, rows[k].ctx.info.round, step),
                          x.shape[1]) for k in live]
    offsets = np.concatenate([o for o, _ in draws])
    flips = np.concatenate([f for _, f in draws])
    flat = crop_flip(x.reshape(-1, *x.shape[2:]), offsets, flips, augment.crop_padding)
    return flat.view(x.shape)


def _row_term(term: Callable[[Tensor, Tensor], None]) -> Callable[[Tensor, Tensor], None]:
    def on_row(theta: Tensor, grad: Tensor) -> None:
        term(theta[0], grad[0])

    return on_row


def _finish(rows: Sequence[_Row], segments: Sequence[tuple[Job, int, int]], theta0: Tensor, theta_end: Tensor,
            estimators: Sequence[tuple[Any, int, int, bool]]) -> None:
    """Estimates, ``client_end`` stages and uploads, client by client (vector operations)."""
    trajectory = theta0 - theta_end  # (K, d)
    estimates: dict[int, tuple[Tensor, dict[str, Tensor], dict[str, Any]]] = {}
    for estimator, lo, hi, is_batched in estimators:
        if is_batched:
            for n, result in enumerate(estimator.finish(trajectory[lo:hi])):
                estimates[lo + n] = result
        else:
            estimates[lo] = estimator.finish(trajectory[lo])
    for job, lo, hi in segments:
        ends = job.algorithm.with_stage("client_end")
        for n in range(lo, hi):
            row, ctx = rows[n], rows[n].ctx
            update, extras, diag = estimates.get(n, (trajectory[n], {}, {}))
            extras = dict(extras)
            delta = update if row.theta0 is job.w else update + (job.w - row.theta0)
            end = theta_end[n].clone() if ends else None  # a copy only where a stage reads it
            old = job.states[ctx.client]
            new = list(old)
            for k, part in ends:
                new[k], more = part.client_end(ctx, job.w, row.theta0, end, job.server[k], old[k])  # type: ignore[misc]
                extras.update(more)
            job.states[ctx.client] = tuple(new)
            for k, part in job.algorithm.with_stage("upload"):
                delta = part.upload(ctx, delta, job.server[k])  # type: ignore[misc]
            if ctx.uploads:
                weight = float(job.federation.weights[ctx.client])
                job.upload(ClientUpdate(ctx.client, weight, ctx.steps, delta, extras, diag))


class StackedClients:
    """The client side of a round trained as stacked chunks of clients; states held here."""

    def __init__(self, algorithm: Algorithm, federation: Federation, states: list[tuple[State, ...]],
                 *, stack_size: int | None = None, memory_cap: int | None = None) -> None:
        self.algorithm, self.federation, self.client_states = algorithm, federation, list(states)
        self.stack_size, self.memory_cap = stack_size, memory_cap

    def plan(self, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...]
             ) -> tuple[dict[int, dict[str, Tensor]], dict[str, Any]]:
        from fedaccel.engine.round import InProcessClients

        return InProcessClients(self.algorithm, self.federation, self.client_states).plan(contexts, w, server)

    def train(self, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...],
              sink: Callable[[ClientUpdate], ClientUpdate] | None = None) -> tuple[list[ClientUpdate], dict[str, Any]]:
        job = Job(self.algorithm, self.federation, contexts, w, server, self.client_states, sink=sink)
        train_jobs([job], stack_size=self.stack_size, memory_cap=self.memory_cap)
        return job.updates, {}

    def states(self, previous: list[tuple[State, ...]]) -> list[tuple[State, ...]]:
        return self.client_states


# --- seeds stacked: several runs' client sides in one computation -------------------------------


class SeedStack:
    """Runs in lockstep, one per thread (``fedaccel experiment --stack-seeds``): each run's ``train``
    waits until every live run has handed in its round, then one :func:`train_jobs` trains them all.
    A run that ends (or fails) leaves, so the others never wait for it."""

    def __init__(self, members: int, *, stack_size: int | None = None) -> None:
        self.live, self.stack_size = members, stack_size
        self.pending: list[Job] = []
        self.generation = 0
        self.errors: dict[int, BaseException] = {}
        self.cond = threading.Condition()
        self.stopping = threading.Event()
        self.same_data = SameData() if SHARE_SAME_DATA else None

    def member(self, algorithm: Algorithm, federation: Federation, states: list[tuple[State, ...]]) -> StackedMember:
        return StackedMember(self, algorithm, federation, states)

    def stop_now(self) -> None:
        """Every run's round stops before its next local step with ``KeyboardInterrupt`` (the second stop request:
        nothing since the last checkpoint is kept, as a run in the main thread stops)."""
        self.stopping.set()

    def train(self, job: Job) -> None:
        _check(self.stopping)
        with self.cond:
            self.pending.append(job)
            generation = self.generation
            if len(self.pending) >= self.live:
                self._run()
            while self.generation == generation:
                self.cond.wait()
            if generation in self.errors:
                raise self.errors[generation]

    def leave(self) -> None:
        with self.cond:
            self.live -= 1
            if self.pending and len(self.pending) >= self.live:
                self._run()

    def _run(self) -> None:  # holding the lock; the waiting runs are woken when it is done
        jobs, self.pending = self.pending, []
        try:
            train_jobs(jobs, stack_size=self.stack_size, stop_now=self.stopping, same_data=self.same_data)
        except BaseException as exc:  # every run of this round raises it
            self.errors[self.generation] = exc
        self.generation += 1
        self.cond.notify_all()


class StackedMember(StackedClients):
    """One run's client runtime inside a :class:`SeedStack`."""

    def __init__(self, stack: SeedStack, algorithm: Algorithm, federation: Federation,
                 states: list[tuple[State, ...]]) -> None:
        super().__init__(algorithm, federation, states, stack_size=stack.stack_size)
        self.stack = stack

    def train(self, contexts: Sequence[ClientContext], w: Tensor, server: tuple[State, ...],
              sink: Callable[[ClientUpdate], ClientUpdate] | None = None) -> tuple[list[ClientUpdate], dict[str, Any]]:
        job = Job(self.algorithm, self.federation, contexts, w, server, self.client_states, sink=sink)
        self.stack.train(job)
        return job.updates, {}


_CURRENT = threading.local()


def current_seed_stack() -> SeedStack | None:
    """The seed stack this thread's run belongs to (set by :func:`in_seed_stack`), if any."""
    return getattr(_CURRENT, "stack", None)


def in_seed_stack(stack: SeedStack, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run as a member of ``stack`` (in its own thread), leaving the stack when it ends."""

    def member() -> Any:
        _CURRENT.stack = stack
        try:
            return fn()
        finally:
            _CURRENT.stack = None
            stack.leave()

    return member
