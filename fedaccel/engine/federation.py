"""A federation: the model, the training data split over clients, and the test data.

It is everything a round needs besides the algorithm and its state: client weights p_i,
local steps tau_i, each client's batch order per round, evaluation, and the client-side
access that planning stages use (per-sample gradients with ``torch.func``).

Model and data live on one device (``device``; default: where the module is): they are moved
there once, here, and every state a round creates follows them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedaccel.algorithms.base import make_rng
from fedaccel.data.augment import augment_batch, check_images
from fedaccel.engine.flat import FlatModel
from fedaccel.engine.local import REORDERED, BatchGradient, LocalOptions, batch_positions, batch_table
from fedaccel.errors import ConfigError

if TYPE_CHECKING:
    from fedaccel.models.chain import ChainGradient

LossFn = Callable[[Tensor, Tensor], Tensor]
LAYOUT_BYTES = 2 * 2**30  # training data up to this size is also kept laid out in client order (a second copy)


def _cross_entropy(output: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(output, y)


def _argmax_correct(output: Tensor, y: Tensor) -> Tensor:
    return (output.argmax(dim=1) == y).sum()


class Federation:
    """Model + data + split. Modules without ``loss``/``correct`` methods get cross-entropy/argmax."""

    def __init__(
        self,
        module: nn.Module,
        x_train: Tensor,
        y_train: Tensor,
        partition: Sequence[np.ndarray],
        x_test: Tensor,
        y_test: Tensor,
        options: LocalOptions,
        *,
        seed: int = 0,
        eval_train_samples: int | None = None,
        eval_batch_size: int = 2000,
        device: str | torch.device | None = None,
        closed_form: bool = True,
    ) -> None:
        if len(partition) == 0:
            raise ConfigError("the partition has no clients")
        sizes = np.array([len(p) for p in partition])
        if (sizes == 0).any():
            raise ConfigError(f"client(s) {np.flatnonzero(sizes == 0).tolist()} hold no samples: the split left them "
                              "empty (fewer clients, more data, or dirichlet's min_size above 0)")
        if options.dp_sgd is not None:  # every way in (a config, fedaccel.train, a Flower client) builds one
            from fedaccel.engine.dp_sgd import check_delta

            check_delta(options.dp_sgd, sizes.tolist())
        if device is None:  # where the module is (FlatModel refuses one without parameters)
            device = next(module.parameters(), torch.empty(0)).device
        self.device = torch.device(device)
        module.to(self.device)
        self.model = FlatModel(module)
        self.loss_fn: LossFn = getattr(module, "loss", _cross_entropy)
        self.correct_fn: LossFn = getattr(module, "correct", _argmax_correct)
        self.closed_form = closed_form  # use the model's exact closed-form gradient where it has one
        self._gradient: BatchGradient | None = None
        self._per_sample: Any = None  # Opacus's GradSampleModule around the model (train.dp_sgd), once built
        self._chain: tuple[ChainGradient | None] | None = None  # chain()'s, once built
        self._layouts: dict[int, tuple[np.ndarray, Tensor, Tensor]] = {}  # client -> (order, x rows, labels)
        self._orders: dict[int, np.ndarray] = {}  # client -> its fixed order, drawn once (train.order: fixed)
        self.layout_bytes = LAYOUT_BYTES
        x_train, y_train = x_train.to(self.device), y_train.to(self.device)
        self.x_train, self.y_train = x_train, y_train  # what clients train on (attacks may replace it)
        self.clean_train = (x_train, y_train)  # what the training-set metrics are measured on
        self.x_test, self.y_test = x_test.to(self.device), y_test.to(self.device)
        self.partition = [np.asarray(p, dtype=np.int64) for p in partition]
        options = options.for_clients([int(n) for n in sizes])  # local_steps: shared is K of these clients
        self.options = options
        if options.augment is not None:
            check_images(tuple(x_train.shape[1:]))
        self.seed = seed
        self.weights = sizes / sizes.sum()
        self.steps = np.array([options.steps(int(n)) for n in sizes])
        self.shared_steps = options.shared_steps([int(n) for n in sizes])  # K of the reference codes
        self.eval_batch_size = eval_batch_size
        self._train_eval_index = self._pick_train_eval(eval_train_samples)
        index = self._train_eval_index  # the training-set metrics' samples, gathered once (not every evaluation)
        self._train_eval = self.clean_train if index is None else (x_train[index], y_train[index])

    @property
    def n_clients(self) -> int:
        return len(self.partition)

    def _pick_train_eval(self, limit: int | None) -> Tensor | None:
        n = len(self.y_train)
        if limit is None or limit >= n:
            return None
        chosen = make_rng(self.seed, "train-eval").choice(n, size=limit, replace=False)
        return torch.from_numpy(np.sort(chosen)).to(self.device)

    def order(self, client: int, round_: int, epoch: int = 0) -> np.ndarray:
        """The client's sample order in epoch ``epoch`` of round ``round_``: its index array as given, one
        seeded permutation of it for all rounds (fixed, drawn once and kept: the same array every round), a
        new one every round (reshuffle, RR), or a new one every epoch (reshuffle_epoch, from (seed, round,
        client, epoch)). Callers must not write into the array."""
        index = self.partition[client]
        order = self.options.order
        if order == "given":
            return index
        if order == "reshuffle":
            return index[make_rng(self.seed, "order", client, round_).permutation(len(index))]
        if order == "reshuffle_epoch":
            return index[make_rng(self.seed, "epoch-order", round_, client, epoch).permutation(len(index))]
        fixed = self._orders.get(client)
        if fixed is None:
            fixed = self._orders[client] = index[make_rng(self.seed, "order", client).permutation(len(index))]
        return fixed

    def batches(self, client: int, round_: int, steps: int) -> list[np.ndarray]:
        """The sample indices of the client's ``steps`` batches this round (:func:`batch_positions`)."""
        return batch_positions(self._round_order(client, round_), steps, self.options.batch_size,
                               self.options.last_batch)

    def private_batches(self, client: int, round_: int, steps: int) -> list[np.ndarray]:
        """A DP-SGD client's batches: Poisson samples of its data (``train.dp_sgd.batches: poisson``, drawn from
        (seed, "dp-sgd-batches", round, client)), or :meth:`batches` (``shuffled``)."""
        from fedaccel.engine.dp_sgd import poisson_batches

        if self.options.dp_sgd.batches != "poisson":
            return self.batches(client, round_, steps)
        rng = make_rng(self.seed, "dp-sgd-batches", round_, client)
        return poisson_batches(self.partition[client], steps, self.options.batch_size, rng)

    def batch_table(self, client: int, round_: int, steps: int) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`batches` as one (steps, b) table and the batch sizes where some is short (:func:`batch_table`)."""
        return batch_table(self._round_order(client, round_), steps, self.options.batch_size, self.options.last_batch)

    def _round_order(self, client: int, round_: int) -> np.ndarray | Callable[[int], np.ndarray]:
        """The client's order this round, or ``epoch -> order`` where each epoch draws its own."""
        if self.options.order != "reshuffle_epoch":
            return self.order(client, round_)
        return lambda epoch: self.order(client, round_, epoch)

    def augment_rng(self, client: int, round_: int, step: int) -> np.random.Generator:
        """The generator of the augmentation of one batch: (seed, round, client, step), in every runtime."""
        return make_rng(self.seed, "augment", round_, client, step)

    def augmenter(self, client: int, round_: int) -> Callable[[int, Tensor], Tensor] | None:
        """``(step, x rows) -> x rows as trained on``: the client's batches this round cropped and
        flipped (``train.augment``); None when augmentation is off."""
        augment = self.options.augment
        if augment is None:
            return None
        return lambda step, x: augment_batch(x, augment, self.augment_rng(client, round_, step))

    def batch_gradient(self, client: int | None = None, round_: int | None = None) -> BatchGradient:
        """The mini-batch gradient clients use on the current training data (built once per data); with
        ``train.dp_sgd``, client ``client``'s DP-SGD gradient in round ``round_`` (fedaccel.engine.dp_sgd)."""
        dp = self.options.dp_sgd
        if dp is not None and client is not None and round_ is not None:
            from fedaccel.engine.dp_sgd import DPSGDGradient, noise_seed, per_sample

            if self._per_sample is None:
                self._per_sample = per_sample(self.model.module)
            return DPSGDGradient(self.model, self._per_sample, self.x_train, self.y_train,  # type: ignore[return-value]
                                 self.loss_fn, dp, self.options.batch_size, noise_seed(self.seed, round_, client))
        if self._gradient is None:
            self._gradient = BatchGradient(
                self.model, self.x_train, self.y_train, self.loss_fn, closed_form=self.closed_form
            )
        return self._gradient

    def chain(self) -> ChainGradient | None:
        """The model's fused Linear/ReLU chain (:func:`fedaccel.models.chain_gradient`), built once (its views of
        the parameters stay cached between the clients of a round); None for other models."""
        if self._chain is None:
            from fedaccel.models import chain_gradient

            self._chain = (chain_gradient(self.model.module),)
        return self._chain[0]

    def client_batches(
        self, client: int, round_: int, steps: int
    ) -> list[np.ndarray] | list[tuple[Tensor, Tensor]]:
        """The client's batches this round for :func:`~fedaccel.engine.local.train_local`.

        When the client's sample order does not change (``train.order`` fixed or given) and the training
        data is at most ``layout_bytes``, every client's samples are laid out in their orders once, in one
        allocation (thousands of small long-lived blocks between a round's temporaries would fragment the
        heap: +200 MB at 1,000 2NN clients, benchmarks/scale.py), and each batch is a contiguous slice of
        the client's part (no gather per step: the same rows, so the same numbers); otherwise index
        arrays (:meth:`batches`), gathered step by step.
        """
        if self.options.dp_sgd is not None:  # DP-SGD gathers raw labels itself
            return self.private_batches(client, round_, steps)
        if self.x_train.nbytes > self.layout_bytes or self.options.order in REORDERED:  # nothing to reuse
            return self.batches(client, round_, steps)
        order = self.order(client, round_)
        if not self._layouts:
            self._lay_out_clients(round_)
        cached = self._layouts[client]
        if cached[0] is not order and not np.array_equal(cached[0], order):  # a new order: lay this client out
            cached = (order, *self.batch_gradient().gather(torch.from_numpy(order).to(self.device)))
            self._layouts[client] = cached
        _, xs, ls = cached
        n = len(order)
        if self.options.last_batch == "partial":  # each batch a slice within one epoch
            spans = batch_positions(np.arange(n), steps, self.options.batch_size, "partial")
            return [(xs[int(p[0]) : int(p[-1]) + 1], ls[int(p[0]) : int(p[-1]) + 1]) for p in spans]
        size = min(self.options.batch_size, n)
        batches = []
        for k in range(steps):  # batch k holds positions k*size ... (k+1)*size - 1 of the order, cyclically
            lo = k * size % n
            if lo + size <= n:
                batches.append((xs[lo : lo + size], ls[lo : lo + size]))
            else:
                wrap = torch.cat([torch.arange(lo, n), torch.arange(0, lo + size - n)]).to(self.device)
                batches.append((xs.index_select(0, wrap), ls.index_select(0, wrap)))
        return batches

    def _lay_out_clients(self, round_: int) -> None:
        """Every client's samples in its order: one gather into one tensor, a view of it per client."""
        orders = [self.order(i, round_) for i in range(self.n_clients)]
        xs, ls = self.batch_gradient().gather(torch.from_numpy(np.concatenate(orders)).to(self.device))
        at = 0
        for i, order in enumerate(orders):
            self._layouts[i] = (order, xs[at : at + len(order)], ls[at : at + len(order)])
            at += len(order)

    @torch.no_grad()
    def _evaluate(self, x: Tensor, y: Tensor) -> tuple[float, float]:
        module = self.model.module
        module.eval()
        total_loss, correct = 0.0, 0
        for lo in range(0, len(y), self.eval_batch_size):
            xb, yb = x[lo : lo + self.eval_batch_size], y[lo : lo + self.eval_batch_size]
            out = module(xb)
            total_loss += float(self.loss_fn(out, yb)) * len(yb)
            correct += int(self.correct_fn(out, yb))
        return correct / len(y), total_loss / len(y)

    def evaluate(self, theta: Tensor, *, train: bool = True) -> dict[str, float]:
        """Test accuracy and loss of ``theta``, and its loss on (a fixed sample of) the training set."""
        self.model.load(theta)
        acc, loss = self._evaluate(self.x_test, self.y_test)
        result = {"test_acc": acc, "test_loss": loss}
        if train:
            result["train_acc"], result["train_loss"] = self._evaluate(*self._train_eval)
        return result

    def set_training_data(self, x: Tensor, y: Tensor) -> None:
        """Replace what clients train on (e.g. attacked copies); evaluation keeps the clean data."""
        self.x_train, self.y_train = x.to(self.device), y.to(self.device)
        self._gradient = None
        self._layouts.clear()

    def access(self, client: int) -> ClientData:
        return ClientData(self, client)


class ClientData:
    """Client-side access for planning stages: sampling and per-sample gradients."""

    def __init__(self, federation: Federation, client: int) -> None:
        self.federation = federation
        self.client = client

    def sample(self, n: int, rng: np.random.Generator) -> tuple[Tensor, Tensor]:
        """Up to ``n`` of the client's samples, without replacement."""
        index = self.federation.partition[self.client]
        chosen = rng.choice(index, size=min(n, len(index)), replace=False)
        chosen_t = torch.from_numpy(chosen).to(self.federation.device)
        return self.federation.x_train.index_select(0, chosen_t), self.federation.y_train.index_select(0, chosen_t)

    def gradient_moments(self, theta: Tensor, x: Tensor, y: Tensor, groups: int = 1) -> tuple[Tensor, Tensor] | None:
        """(mean, mean of squares) of the per-sample gradients at ``theta`` over each of ``groups`` equal runs of the
        samples, (groups, d), in closed form, when the model allows it: the 2NN and softmax by their fused chain
        (:meth:`fedaccel.models.chain.ChainGradient.moments`), other stacks of linear layers through hooks
        (:mod:`fedaccel.engine.linear_moments`, one group); None otherwise."""
        from fedaccel.engine.linear_moments import linear_gradient_moments

        model = self.federation.model
        chain = self.federation.chain()
        if chain is not None:
            return chain.moments(theta, x, y, groups)
        if groups != 1:
            return None
        model.load(theta)
        model.module.eval()
        return linear_gradient_moments(model.module, x, y)

    def per_sample_grads(self, theta: Tensor, x: Tensor, y: Tensor) -> Tensor:
        """Gradient of the loss of each sample at ``theta``: shape (n, d), via torch.func.vmap."""
        from torch.func import functional_call, grad, vmap

        from fedaccel.models import Classifier, functional_loss

        fed = self.federation
        module = fed.model.module
        names = [name for name, p in module.named_parameters() if p.requires_grad]
        shapes = [p.shape for _, p in module.named_parameters() if p.requires_grad]
        sizes = [s.numel() for s in shapes]

        def loss_one(flat: Tensor, xi: Tensor, yi: Tensor) -> Tensor:
            params = {n: t.view(s) for n, t, s in zip(names, flat.split(sizes), shapes)}
            if isinstance(module, Classifier):  # its loss may read parameters (the SVM's L2 term)
                return functional_loss(module, params, xi.unsqueeze(0), yi.unsqueeze(0))
            out = functional_call(module, params, (xi.unsqueeze(0),))
            return fed.loss_fn(out, yi.unsqueeze(0))

        module.eval()
        return vmap(grad(loss_one), in_dims=(None, 0, 0))(theta.detach(), x, y)
