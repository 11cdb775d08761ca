"""The exact cross-entropy gradient of a Linear/ReLU chain, by hand: one fused forward and backward.

The built-in ``2nn`` (:class:`~fedaccel.models.mlp.MLP2NN`) and ``softmax``
(:class:`~fedaccel.models.linear.SoftmaxRegression`) are chains x -> Linear -> ReLU -> ... -> Linear ->
cross-entropy. Their batch gradient needs no autograd and no ``nn.Module`` dispatch: the forward keeps
each layer's input, the backward is two matrix products a layer, and every product is written straight
into its slice of the flat gradient (the :class:`~fedaccel.engine.flat.FlatModel` order: each layer's
weight, then its bias). It runs on ``m`` parameter vectors at once (the stacked runtime's clients) and
on one (the per-client engine, ``m = 1``).

    forward   a_0 = x;  z_l = a_{l-1} W_l^T + b_l;  a_l = relu(z_l) (not after the last layer)
    loss      (1/B) sum_i CE(z_L[i], y_i)          ->  g_L = (softmax(z_L) - onehot(y)) / B
    backward  dW_l = g_l^T a_{l-1};  db_l = sum_i g_l[i];  g_{l-1} = (g_l W_l) * [a_{l-1} > 0]

Equal to autograd's gradient to float rounding (tests/test_lean_step.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class Layer:
    """One Linear layer's place in the flat vector: weight at ``[at, at + out * inp)``, bias right after."""

    at: int
    out: int
    inp: int

    @property
    def bias_at(self) -> int:
        return self.at + self.out * self.inp

    @property
    def end(self) -> int:
        return self.bias_at + self.out


class LayerViews(NamedTuple):
    """One layer's views of a parameter vector (or of m of them) and of its gradient's."""

    w: Tensor  # (out, inp)
    w_t: Tensor  # its transpose
    bias: Tensor  # (out,)
    bias_row: Tensor  # (1, out)
    grad_w: Tensor
    grad_b: Tensor


def chain_layers(linears: list[nn.Linear], module: nn.Module, *, after: int = 0) -> list[Layer] | None:
    """``linears``'s places in ``module``'s flat vector, or None unless those layers (each with a bias,
    all trainable) are exactly the module's parameters, in order, after its first ``after`` ones."""
    every = list(module.parameters())
    before, params = every[:after], every[after:]
    expected = [p for layer in linears for p in (layer.weight, layer.bias)]
    if (any(layer.bias is None or type(layer) is not nn.Linear for layer in linears)
            or [id(p) for p in params] != [id(p) for p in expected] or not all(p.requires_grad for p in params)):
        return None
    layers, at = [], sum(p.numel() for p in before)
    for layer in linears:
        layers.append(Layer(at, layer.out_features, layer.in_features))
        at = layers[-1].end
    return layers


class ChainGradient:
    """The batch gradient of a Linear/ReLU chain under cross-entropy (see the module docstring).

    ``kernel(theta, x, labels, grad)`` for one vector ((d,), (B, ...), (B, 1) from :meth:`prepare`, (d,)),
    :meth:`stacked` for ``m`` vectors ((m, d), (m, B, ...), (m, B)) returning (m, d).
    """

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = layers
        self.size = layers[-1].end
        self._views: tuple[tuple[int, int], list[LayerViews]] | None = None  # the last (theta, grad)'s
        self._constants: dict[tuple, Tensor] = {}  # _filled's

    def prepare(self, y: Tensor) -> Tensor:
        return y.reshape(-1, 1).long()  # (N, 1): scatter positions, once per training set

    def __call__(self, theta: Tensor, x: Tensor, t: Tensor, grad: Tensor) -> None:
        self._fill(self._cached_views(theta, grad), x.reshape(x.shape[0], -1), t)

    def step(self, theta: Tensor, x: Tensor, t: Tensor, lr: float) -> None:
        """One SGD step in place, ``theta -= lr * gradient``, with no gradient vector: each layer's
        weight moves by one ``addmm_`` and its bias by one ``addmv_`` with ones (its sum over the batch),
        the step size and the mean's 1/B inside the product, once the backward has taken the gradient
        below it through the layer's old weight."""
        views = self._cached_views(theta, theta)  # (the gradient slices, aliases of theta here, go unused)
        x = x.reshape(x.shape[0], -1)
        ones, alpha = self._filled(x.shape[:1], 1.0, x), -lr / x.shape[0]
        for k, a_in, g in self._deltas(views, x, t, mean=False):  # the summed loss's: 1/B is in alpha
            g_t, layer = g.t(), views[k]
            layer.w.addmm_(g_t, a_in, alpha=alpha)
            layer.bias.addmv_(g_t, ones, alpha=alpha)

    def _filled(self, shape: torch.Size, value: float, like: Tensor) -> Tensor:
        """A constant tensor of ``shape`` (read, never written), made once per shape, dtype and device."""
        key = (tuple(shape), value, like.dtype, like.device)
        found = self._constants.get(key)
        if found is None:
            found = self._constants[key] = like.new_full(shape, value)
        return found

    def _cached_views(self, theta: Tensor, grad: Tensor) -> list[LayerViews]:
        # a client's steps update theta in place, so its views stay valid; the cached views keep their storage
        # alive, so an equal address is the same storage. Read once: another thread's entry is never used.
        key, cached = (theta.data_ptr(), grad.data_ptr()), self._views
        if cached is None or cached[0] != key:
            cached = self._views = key, self._layer_views(theta, grad)
        return cached[1]

    def stacked(self, theta: Tensor, x: Tensor, y: Tensor) -> Tensor:
        m, b = y.shape
        grad = theta.new_empty(m, self.size)
        self._fill(self._layer_views(theta, grad), x.reshape(m, b, -1), y.reshape(m, b, 1).long())
        return grad

    def _layer_views(self, theta: Tensor, grad: Tensor) -> list[LayerViews]:
        """Each layer's :class:`LayerViews` of ``theta`` and ``grad`` (views, no copies)."""
        lead = theta.shape[:-1]
        views = []
        for L in self.layers:
            w, bias = theta[..., L.at : L.bias_at].view(*lead, L.out, L.inp), theta[..., L.bias_at : L.end]
            views.append(LayerViews(w, w.transpose(-1, -2), bias, bias.unsqueeze(-2),
                                    grad[..., L.at : L.bias_at].view(*lead, L.out, L.inp), grad[..., L.bias_at : L.end]))
        return views

    def moments(self, theta: Tensor, x: Tensor, y: Tensor, groups: int = 1) -> tuple[Tensor, Tensor]:
        """(mean_i g_i, mean_i g_i^2) of the per-sample gradients g_i of the cross-entropy at ``theta`` (d,) over each
        of ``groups`` equal runs of the samples (clients' draws, concatenated), (groups, d) and float64: a sample's
        weight gradient is the outer product delta_i a_i^T, so the sums are delta^T a and (delta^2)^T (a^2), its bias
        gradient delta_i (FedGSNR's planning statistics, :mod:`fedaccel.engine.linear_moments`). One forward and
        backward for all the groups; the 1/n of the means is the products' scale (no pass of its own)."""
        views = self._cached_views(theta, theta)  # (no gradient is written: its slices go unused)
        n = x.shape[0] // groups
        if n * groups != x.shape[0]:
            raise ValueError(f"{x.shape[0]} samples do not split into {groups} equal groups")
        first, second = (theta.new_empty(groups, self.size, dtype=torch.float64) for _ in range(2))
        for k, a, delta in self._deltas(views, x.reshape(x.shape[0], -1), y.reshape(-1, 1).long(), mean=False):
            # copies, also when already float64 (a is x itself at the first layer): squared in place below
            L = self.layers[k]
            a, delta = (t.to(torch.float64, copy=True).view(groups, n, -1) for t in (a, delta))
            first_w, second_w = (moment[:, L.at : L.bias_at].view(groups, L.out, L.inp) for moment in (first, second))
            first_w.baddbmm_(delta.transpose(1, 2), a, beta=0, alpha=1.0 / n)  # beta=0: the empty block is not read
            torch.mean(delta, dim=1, out=first[:, L.bias_at : L.end])
            delta.square_()
            second_w.baddbmm_(delta.transpose(1, 2), a.square_(), beta=0, alpha=1.0 / n)
            torch.mean(delta, dim=1, out=second[:, L.bias_at : L.end])
        return first, second

    def input_gradient(self, theta: Tensor, x: Tensor, t: Tensor, grad: Tensor) -> Tensor:
        """As a call on one vector ((B, D) inputs), and returns the mean loss's gradient at the chain's input
        (B, D): the chain as the head of a deeper network (:mod:`fedaccel.models.conv_gradient`)."""
        views = self._layer_views(theta, grad)
        return torch.mm(self._fill(views, x, t), views[0].w)

    def _fill(self, views: list[LayerViews], x: Tensor, t: Tensor) -> Tensor:
        """Inputs (B, D) or (m, B, D), labels (B, 1) or (m, B, 1), :meth:`_layer_views` of one or m vectors:
        the gradients of the mean loss into their slices; returns the gradient at the first layer's output."""
        mm = torch.bmm if x.dim() == 3 else torch.mm
        for k, a_in, g in self._deltas(views, x, t, mean=True):
            mm(g.transpose(-1, -2), a_in, out=views[k].grad_w)
            torch.sum(g, dim=-2, out=views[k].grad_b)
        return g

    def _deltas(self, views: list[LayerViews], x: Tensor, t: Tensor, *, mean: bool
                ) -> Iterator[tuple[int, Tensor, Tensor]]:
        """The forward, then per layer from the last: (its index, its input a, the loss's gradient at its
        output), for the mean of the per-sample cross-entropies over the batch (``mean``) or their sum. The
        gradient below a layer is taken before the layer is yielded (:meth:`step` then moves its weights). One
        vector takes the 2-D products (``mm``: no batch dimension to dispatch), m vectors the batched ones;
        the same arithmetic."""
        mm, addmm = (torch.bmm, torch.baddbmm) if x.dim() == 3 else (torch.mm, torch.addmm)
        inputs, a = [], x
        for k, layer in enumerate(views):
            inputs.append(a)
            a = addmm(layer.bias_row, a, layer.w_t)
            if k < len(views) - 1:
                a.clamp_(min=0)
        g = a.softmax(dim=-1)
        g.scatter_add_(-1, t, self._filled(t.shape, -1.0, g))
        if mean:
            g.div_(float(x.shape[-2]))  # a Python float: no integer scalar converted every step
        for k in range(len(views) - 1, -1, -1):
            # relu's backward, as autograd takes it: g where the layer's output was > 0, else 0
            below = torch.ops.aten.threshold_backward(mm(g, views[k].w), inputs[k], 0.0) if k else g
            yield k, inputs[k], g
            g = below
