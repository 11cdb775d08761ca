"""Local training on one client: tau_i SGD steps on the flat parameter vector.

A step is ``theta <- theta - eta * d`` where the direction d is built from the mini-batch
gradient z in this order: clip z (optional), add the algorithm's local terms (FedProx,
SCAFFOLD, ...), add weight decay, apply heavy-ball momentum (PyTorch's convention). An
estimator part (BHerd, GraB) observes every d; with plain SGD, d = z + local terms.
``clip_scope: objective`` clips z + local terms instead (the reference codes' clip_grad_norm_
after backward of the whole local loss; weight decay, in their optimiser, comes after it).
With ``augment`` set, each batch's images are cropped and flipped before z is taken
(:mod:`fedaccel.data.augment`; the caller gives the per-batch transform).

The step is lean: batches come laid out in the client's order already (see
``Federation.client_batches``), or a client-round's batch indices reach the data's device in one
transfer and each batch is gathered with ``index_select`` (bit-identical to ``x[idx]``, several
times faster); the whole loop runs under one ``no_grad``; and
a model with an exact closed-form gradient (:func:`fedaccel.models.closed_form_gradient`: the
SVM, softmax regression and the 2NN's fused Linear/ReLU chain, :mod:`fedaccel.models.chain`) skips autograd, with its labels prepared once per training set.
Where nothing but the update reads z (plain SGD: no clip, term, decay, momentum, estimator or
augmentation), a chain takes the whole step in place (:meth:`~fedaccel.models.chain.ChainGradient.step`:
each layer's weights move inside their gradient's product, and no gradient vector is written).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedaccel.algorithms.base import Estimator, LocalTerm
from fedaccel.data.augment import Augment, parse_augment
from fedaccel.algorithms.sampling import SAMPLINGS
from fedaccel.engine.flat import FlatModel
from fedaccel.engine.schedule import LRSchedule
from fedaccel.engine.work import LocalWork
from fedaccel.errors import ConfigError, shown

ORDERS = ("fixed", "reshuffle", "reshuffle_epoch", "given")
REORDERED = ("reshuffle", "reshuffle_epoch")  # orders drawn anew every round
# drop: every batch holds B samples, tau_i = floor(E |D_i| / B) (the papers' count); partial: each epoch is
# ceil(|D_i| / B) batches, the last one short (a PyTorch DataLoader with drop_last=False)
LAST_BATCHES = ("drop", "partial")
SHARED = "shared"  # train.local_steps: every client runs K = int(E ceil(mean |D_i| / B)), the reference codes' count
CLIP_SCOPES = ("gradient", "objective")  # what train.clip bounds: the mini-batch gradient, or it + local terms


def batch_order(order: str, reshuffle: bool = False) -> str:
    """The batch order, with ``reshuffle: true`` read as the older spelling of ``order: reshuffle``.

    fixed: one seeded permutation of the client's samples for all rounds (BHerd's default);
    reshuffle: a new permutation every round (RR), the same for each epoch of the round;
    reshuffle_epoch: a new permutation every epoch (a DataLoader with ``shuffle=True``);
    given: the client's index array as it is.
    """
    if order not in ORDERS:
        raise ConfigError(f"train.order must be one of {', '.join(ORDERS)}, got {shown(order)}")
    if reshuffle and order == "given":
        raise ConfigError("train.reshuffle: true (the old spelling of train.order: reshuffle) contradicts "
                          "train.order: given; set train.order alone")
    return "reshuffle" if reshuffle else order


@dataclass(frozen=True)
class LocalOptions:
    """Client optimiser settings (the same on every client)."""

    lr: float = 0.01  # eta_0
    batch_size: int = 50  # B
    local_epochs: float = 1.0  # E, fractional allowed
    local_steps: int | str | None = None  # tau_i for every client, in place of E |D_i| / B; SHARED: K (shared_steps)
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_decay: float = 1.0  # gamma: eta_t = eta_0 * gamma^t (the shorthand of lr_schedule's exponential)
    lr_schedule: LRSchedule | None = None  # eta_t / eta_0 per round (fedaccel.engine.schedule); None: lr_decay's
    clip: float | None = None  # max L2 norm of each mini-batch gradient
    order: str = "fixed"  # the sample order: fixed, reshuffle (RR), reshuffle_epoch or given (see batch_order)
    reshuffle: bool = False  # the older spelling of order="reshuffle"; always equal to order == "reshuffle"
    clip_scope: str = "gradient"  # clip the mini-batch gradient, or the objective's (gradient + local terms)
    augment: Augment | None = None  # random crop / flip of image batches (fedaccel.data.augment); None = off
    work: LocalWork = LocalWork()  # local work per client per round and partial work (fedaccel.engine.work)
    sampling: str = "fixed"  # who is selected: fixed (round(C N) clients) or bernoulli (each with probability C)
    last_batch: str = "drop"  # drop (full batches only) or partial (each epoch's last batch short): LAST_BATCHES
    dp_sgd: Any = None  # sample-level DP-SGD (fedaccel.engine.dp_sgd.SampleDP), or None

    def __post_init__(self) -> None:
        object.__setattr__(self, "augment", parse_augment(self.augment))
        if self.clip_scope not in CLIP_SCOPES:
            raise ConfigError(f"train.clip_scope must be one of {', '.join(CLIP_SCOPES)}, got {shown(self.clip_scope)}")
        object.__setattr__(self, "order", batch_order(self.order, self.reshuffle))
        object.__setattr__(self, "reshuffle", self.order == "reshuffle")
        if not self.lr > 0:
            raise ConfigError(f"train.lr must be > 0, got {self.lr}")
        if self.batch_size < 1:
            raise ConfigError(f"train.batch_size must be >= 1, got {self.batch_size}")
        if not self.local_epochs > 0:
            raise ConfigError(f"train.local_epochs must be > 0, got {self.local_epochs}")
        steps = self.local_steps
        if steps is not None and steps != SHARED and (isinstance(steps, (bool, str)) or steps < 1):
            raise ConfigError(f"train.local_steps must be an integer >= 1, {SHARED} (K on every client) or null, "
                              f"got {shown(steps)}")
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"train.momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise ConfigError(f"train.weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 < self.lr_decay <= 1:
            raise ConfigError(f"train.lr_decay must be in (0, 1], got {self.lr_decay}")
        if self.lr_schedule is None:
            object.__setattr__(self, "lr_schedule", LRSchedule("exponential", decay=self.lr_decay))
        elif self.lr_decay != 1 and self.lr_schedule != LRSchedule("exponential", decay=self.lr_decay):
            raise ConfigError("train.lr_decay is the shorthand of train.lr_schedule: {name: exponential, "
                              "decay: ...}; set one")
        if self.last_batch not in LAST_BATCHES:
            raise ConfigError(f"train.last_batch must be one of {', '.join(LAST_BATCHES)}, "
                              f"got {shown(self.last_batch)}")
        if self.clip is not None and not self.clip > 0:
            raise ConfigError(f"train.clip must be > 0 or null, got {self.clip}")
        if self.sampling not in SAMPLINGS:
            raise ConfigError(f"train.sampling must be one of {', '.join(SAMPLINGS)}, got {shown(self.sampling)}")
        self.work.check(self.local_epochs)

    def lr_at(self, round_: int) -> float:
        """eta_t = eta_0 * the schedule's factor at round t (gamma^t by default)."""
        return self.lr * self.lr_schedule.factor_at(round_)  # type: ignore[union-attr]

    def for_clients(self, sizes: Sequence[int]) -> LocalOptions:
        """These options for clients of ``sizes``: ``local_steps: shared`` becomes the number K
        (:meth:`shared_steps`), which every client then runs.

        Example:
            >>> LocalOptions(batch_size=10, local_epochs=2, local_steps="shared").for_clients([10, 25]).local_steps
            4
        """
        return replace(self, local_steps=self.shared_steps(sizes)) if self.local_steps == SHARED else self

    def steps(self, n_samples: int) -> int:
        """tau_i for E epochs (:meth:`epoch_steps`); or ``local_steps`` when it is set."""
        if self.local_steps == SHARED:
            raise ValueError("local_steps: shared is a number only for given clients: call for_clients first")
        if self.local_steps is not None:
            return int(self.local_steps)
        return self.epoch_steps(self.local_epochs, n_samples)

    def epoch_steps(self, epochs: float, n_samples: int) -> int:
        """The steps of ``epochs`` epochs over |D_i| = ``n_samples``, at least 1: floor(e |D_i| / B) full
        batches (``last_batch: drop``), or floor(e ceil(|D_i| / B)) batches with a short one ending each
        epoch (``partial``).

        Example:
            >>> [LocalOptions(batch_size=10, last_batch=k).epoch_steps(2, 25) for k in LAST_BATCHES]
            [5, 6]
        """
        if self.last_batch == "partial":
            return max(1, math.floor(epochs * math.ceil(n_samples / self.batch_size) + 1e-9))
        return max(1, math.floor(epochs * n_samples / self.batch_size + 1e-9))

    def shared_steps(self, sizes: Sequence[int]) -> int:
        """K: one step count for every client, as the FedDC/SCAFFOLD reference code computes it: epochs x
        batches per epoch of the *average* client, ``int(E * ceil(mean |D_i| / B))``; or ``local_steps`` when set.

        Example:
            >>> LocalOptions(batch_size=10, local_epochs=2).shared_steps([10, 25])  # 2 * ceil(17.5 / 10)
            4
        """
        if self.local_steps is not None and self.local_steps != SHARED:
            return int(self.local_steps)
        return max(1, int(self.local_epochs * math.ceil(sum(sizes) / len(sizes) / self.batch_size - 1e-9)))


def batch_positions(
    order: np.ndarray | Callable[[int], np.ndarray], steps: int, batch_size: int, last_batch: str = "drop"
) -> list[np.ndarray]:
    """Indices of each of ``steps`` mini-batches, reading the samples epoch after epoch.

    ``order``: the samples in the order of every epoch, or ``epoch -> order`` (a new order per epoch).
    ``drop``: a batch that crosses the end of an epoch continues at the start of the next, so every
    batch has exactly ``batch_size`` samples (or all of the client's data when it has fewer);
    ``partial``: each epoch is cut into ceil(n / B) batches, the last one short, as a ``DataLoader`` loop
    (a fixed step count runs on into the next epoch: the references' ``local_steps``).

    Example:
        >>> [b.tolist() for b in batch_positions(np.arange(5), 4, 2, "partial")]
        [[0, 1], [2, 3], [4], [0, 1]]
    """
    of_epoch = order if callable(order) else (lambda epoch: order)
    first = of_epoch(0)
    n = len(first)
    if last_batch == "partial":
        batches: list[np.ndarray] = []
        epoch = 0
        while len(batches) < steps:
            epoch_order = first if epoch == 0 else of_epoch(epoch)
            batches.extend(epoch_order[lo : lo + batch_size] for lo in range(0, n, batch_size))
            epoch += 1
        return batches[:steps]
    stream, size = _drop_stream(of_epoch, first, steps, batch_size)
    return [stream[k * size : (k + 1) * size] for k in range(steps)]


def _drop_stream(of_epoch: Callable[[int], np.ndarray], first: np.ndarray, steps: int, batch_size: int
                 ) -> tuple[np.ndarray, int]:
    """The samples ``steps`` full batches read (``drop``: epoch after epoch) and the batch size."""
    n = len(first)
    size = min(batch_size, n)
    reps = math.ceil(steps * size / n)
    return (np.concatenate([first, *(of_epoch(e) for e in range(1, reps))]) if reps > 1 else first), size


def batch_table(
    order: np.ndarray | Callable[[int], np.ndarray], steps: int, batch_size: int, last_batch: str = "drop"
) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`batch_positions` as one (steps, b) table, b the longest batch, and every batch's size, or None
    when all are full (a short batch padded; its padding never read). ``drop`` reshapes the samples read
    (no list of batches: the stacked runtime's table for every client every round)."""
    if last_batch == "partial":
        return row_table(batch_positions(order, steps, batch_size, last_batch))
    of_epoch = order if callable(order) else (lambda epoch: order)
    stream, size = _drop_stream(of_epoch, of_epoch(0), steps, batch_size)
    return stream[: steps * size].reshape(steps, size), None


def row_table(batches: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
    """The batches as one (tau, b) table, b the longest; a short batch padded (its padding never read)
    and every batch's size, or None when all are full."""
    sizes = np.array([len(batch) for batch in batches])
    b = int(sizes.max())
    if (sizes == b).all():
        return np.stack(batches), None
    table = np.zeros((len(batches), b), dtype=np.int64)
    for j, batch in enumerate(batches):
        table[j, : len(batch)] = batch
    return table, sizes


class BatchGradient:
    """The mini-batch gradient on the training data ``(x, y)``: the model's closed form when it has
    one (and ``closed_form``), else autograd through ``loss_fn``.

    ``gather(idx)`` gives a batch as ``(x rows, labels)``, the labels prepared once for the closed
    form (the SVM's ±1); ``gradient(xb, lb)`` writes the gradient at the model's current parameters
    into the flat gradient buffer and returns it.
    """

    def __init__(
        self, model: FlatModel, x: Tensor, y: Tensor, loss_fn: Callable[[Tensor, Tensor], Tensor],
        *, closed_form: bool = True,
    ) -> None:
        from fedaccel.models import closed_form_gradient

        self.model, self.x, self.loss_fn = model, x, loss_fn
        self.kernel = closed_form_gradient(model.module) if closed_form else None
        self.image_shape = channels_last_shape(model.module)
        self.labels = self.kernel.prepare(y) if self.kernel is not None else y  # once per training set

    def gather(self, idx: Tensor) -> tuple[Tensor, Tensor]:
        return self.x.index_select(0, idx), self.labels.index_select(0, idx)

    def sgd_step(self) -> Callable[[Tensor, Tensor, float], None] | None:
        """``step(xb, lb, lr)``: one plain SGD step on the model's parameters in place, with no gradient
        vector written, where the closed form has one (the Linear/ReLU chains); else None."""
        step = getattr(self.kernel, "step", None)
        if step is None:
            return None
        theta = self.model.theta
        return lambda xb, lb, lr: step(theta, xb, lb, lr)

    def __call__(self, xb: Tensor, lb: Tensor) -> Tensor:
        model = self.model
        if self.kernel is not None:
            self.kernel(model.theta, xb, lb, model.grad)
            return model.grad
        if self.image_shape is not None:  # same values, NHWC memory: the convolutions' and pools' faster layout
            xb = xb.reshape(xb.shape[0], *self.image_shape).contiguous(memory_format=torch.channels_last)
        with torch.enable_grad():  # the step itself runs under no_grad
            return model.gradient(self.loss_fn(model.module(xb), lb))


def channels_last_shape(module: torch.nn.Module) -> tuple[int, int, int] | None:
    """The (C, H, W) a model's image batches are laid out channels-last in (its class's ``CHANNELS_LAST_FROM``
    channels or more), or None: keep PyTorch's layout."""
    shape = getattr(module, "input_shape", None)
    least = getattr(type(module), "CHANNELS_LAST_FROM", 0)
    if least and isinstance(shape, tuple) and len(shape) == 3 and shape[0] >= least:
        return shape
    return None


def clip_rows(grad: Tensor, clip: float) -> None:
    """Scale each row of ``grad`` (d,) or (K, d) down to L2 norm ``clip`` where it is longer, in place
    (as a tensor: no device-to-host sync per step; rows within the bound are left exact)."""
    norm = torch.linalg.vector_norm(grad, dim=-1, keepdim=True)
    grad.mul_(torch.where(norm > clip, clip / norm, torch.ones_like(norm)))


def _index_rows(batches: Sequence[np.ndarray] | Tensor, device: torch.device) -> Sequence[Tensor]:
    """The batches' sample indices on ``device``, moved in one transfer."""
    if isinstance(batches, Tensor):
        return batches.to(device)
    if len(batches) == 0:
        return []
    sizes = [len(b) for b in batches]
    flat = torch.from_numpy(np.concatenate(batches).astype(np.int64, copy=False)).to(device)
    return flat.view(len(sizes), sizes[0]) if len(set(sizes)) == 1 else flat.split(sizes)


def train_local(
    model: FlatModel,
    x: Tensor,
    y: Tensor,
    batches: Sequence[np.ndarray] | Tensor | Sequence[tuple[Tensor, Tensor]],
    start: Tensor,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    lr: float,
    options: LocalOptions,
    terms: Sequence[LocalTerm] = (),
    estimator: Estimator | None = None,
    gradient: BatchGradient | None = None,
    augment: Callable[[int, Tensor], Tensor] | None = None,
) -> Tensor:
    """Run one SGD step per batch from ``start``; return the final parameters (a new tensor).

    ``batches``: index arrays (or one (steps, B) tensor) into ``x``/``y``, gathered per step, or
    the batches laid out already as ``(x rows, gradient.labels rows)`` pairs
    (:meth:`fedaccel.engine.federation.Federation.client_batches`); ``gradient`` the mini-batch
    gradient (default: :class:`BatchGradient` of ``model``, ``x``, ``y``); ``augment(step, x rows)``
    the batch's inputs as trained on (:meth:`fedaccel.engine.federation.Federation.augmenter`)."""
    model.load(start)
    theta = model.theta
    model.module.train()
    if gradient is None:
        gradient = BatchGradient(model, x, y, loss_fn)
    clip, weight_decay, momentum = options.clip, options.weight_decay, options.momentum
    clip_gradient = clip is not None and options.clip_scope == "gradient"
    clip_objective = clip is not None and options.clip_scope == "objective"
    buffer: Tensor | None = None
    laid_out = len(batches) > 0 and isinstance(batches[0], tuple)
    rows = batches if laid_out else _index_rows(batches, x.device)  # type: ignore[arg-type]
    plain = not (terms or clip is not None or weight_decay or momentum or estimator is not None or augment is not None)
    sgd_step = gradient.sgd_step() if plain else None  # nothing reads the gradient
    with torch.no_grad():
        for step, batch in enumerate(rows):
            xb, lb = batch if laid_out else gradient.gather(batch)
            if sgd_step is not None:
                sgd_step(xb, lb, lr)
                continue
            grad = gradient(xb if augment is None else augment(step, xb), lb)
            if clip_gradient:
                clip_rows(grad, clip)  # type: ignore[arg-type]
            for term in terms:
                term(theta, grad)
            if clip_objective:
                clip_rows(grad, clip)  # type: ignore[arg-type]
            if weight_decay:
                grad.add_(theta, alpha=weight_decay)
            direction = grad
            if momentum:
                if buffer is None:
                    buffer = grad.clone()
                else:
                    buffer.mul_(momentum).add_(grad)
                direction = buffer
            if estimator is not None:
                estimator.observe(step, direction)
            theta.sub_(direction, alpha=lr)
    return theta.clone()
