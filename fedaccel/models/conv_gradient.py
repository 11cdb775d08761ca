"""The BHerd CNN's exact cross-entropy gradient by hand, on a CPU, one-channel images: each layer where it is fastest.

A plain loop spends most of a BHerd CNN step (one channel, 28 x 28, batch 50) on two things that are not
the arithmetic: the first convolution, whose single input channel leaves the convolution library at a few
GFLOP/s, and max-pooling in PyTorch's NCHW layout, ~10x slower than in channels-last. This gradient:

- runs the first convolution as one matrix product, ``patches (B*H*W, C*25) @ W1^T``, whose (B*H*W, 32)
  result *is* the channels-last layout; its weight gradient is the product back, ``dZ1^T @ patches``;
- pools channels-last, with PyTorch's own pooling kernels (the same windows, the same pick among ties);
- applies each ReLU after its pool, on a quarter of the values: max and ReLU commute, and ReLU's backward
  (the gradient where the output is > 0) is unchanged by the swap;
- leaves the second convolution to the library (batched, 32 channels: it runs at its best there), and
  the fully connected head to the fused Linear/ReLU chain (:mod:`fedaccel.models.chain`).

Every gradient is written into its slice of the flat gradient (:class:`~fedaccel.engine.flat.FlatModel`
order). Equal to autograd's through the module to float rounding (tests/test_lean_step.py, float64); in float32
a pool window whose two largest values lie within rounding of each other may send its gradient to the other
one than autograd's float32 step does (either is as near the exact gradient: ``benchmarks/channels_last.py``).
``benchmarks/engine_overhead.py --model cnn`` measures it against a plain loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedaccel.models.base import Classifier
from fedaccel.models.chain import ChainGradient, chain_layers
from fedaccel.models.cnn import BHerdCNN

KERNEL, PAD = 5, 2  # the BHerd CNN's 5 x 5 'same' convolutions
POOL = ([2, 2], [2, 2], [0, 0], [1, 1], True)  # kernel, stride, padding, dilation, ceil_mode (TF's 'SAME')
CHANNELS_LAST = torch.channels_last
# Used for one-channel images only: there a step took 0.73-0.92x autograd's; on 3 x 32 x 32 images, whose first
# convolution the library runs well channels-last, 1.02-1.16x (one thread, batch 50; benchmarks/channels_last.py).
MAX_CHANNELS = 1


@dataclass(frozen=True)
class ConvSlot:
    """A convolution's place in the flat vector: ``out x inp x 5 x 5`` weights at ``at``, the bias after."""

    at: int
    out: int
    inp: int

    @property
    def bias_at(self) -> int:
        return self.at + self.out * self.inp * KERNEL * KERNEL

    @property
    def end(self) -> int:
        return self.bias_at + self.out


class BHerdCNNGradient:
    """``kernel(theta, x, labels, grad)``: the batch gradient of a :class:`BHerdCNN` (no local response
    normalisation) at ``theta`` (d,) into ``grad`` (d,), for ``x`` (B, ...) and labels from :meth:`prepare`."""

    def __init__(self, shape: tuple[int, int, int], conv1: ConvSlot, conv2: ConvSlot, head: ChainGradient) -> None:
        self.shape, self.conv1, self.conv2, self.head = shape, conv1, conv2, head

    def prepare(self, y: Tensor) -> Tensor:
        return self.head.prepare(y)

    def __call__(self, theta: Tensor, x: Tensor, t: Tensor, grad: Tensor) -> None:
        (c, h, w), c1, c2 = self.shape, self.conv1, self.conv2
        b = x.shape[0]
        w1 = theta[c1.at : c1.bias_at].view(c1.out, c * KERNEL * KERNEL)
        w2 = theta[c2.at : c2.bias_at].view(c2.out, c2.inp, KERNEL, KERNEL)
        cols = patches(x.reshape(b, c, h, w))
        z1 = torch.addmm(theta[c1.bias_at : c1.end], cols, w1.t()).view(b, h, w, c1.out).permute(0, 3, 1, 2)
        p1, at1 = torch.ops.aten.max_pool2d_with_indices(z1, *POOL)
        a1 = p1.clamp_(min=0).contiguous()  # NCHW: the second convolution's faster layout
        z2 = F.conv2d(a1, w2, theta[c2.bias_at : c2.end], padding=PAD).contiguous(memory_format=CHANNELS_LAST)
        p2, at2 = torch.ops.aten.max_pool2d_with_indices(z2, *POOL)
        a2 = p2.clamp_(min=0)
        g = self.head.input_gradient(theta, a2.reshape(b, -1), t, grad)  # Flatten's order: a copy to NCHW
        g = torch.ops.aten.threshold_backward(g.view(a2.shape), a2, 0.0).contiguous(memory_format=CHANNELS_LAST)
        g = torch.ops.aten.max_pool2d_with_indices_backward(g, z2, *POOL, at2)
        g, gw2, gb2 = torch.ops.aten.convolution_backward(
            g, a1, w2, [c2.out], [1, 1], [PAD, PAD], [1, 1], False, [0, 0], 1, [True, True, True])
        grad[c2.at : c2.bias_at].copy_(gw2.reshape(-1))
        grad[c2.bias_at : c2.end].copy_(gb2)
        g = torch.ops.aten.threshold_backward(g, a1, 0.0).contiguous(memory_format=CHANNELS_LAST)
        g = torch.ops.aten.max_pool2d_with_indices_backward(g, z1, *POOL, at1)
        g = g.permute(0, 2, 3, 1).reshape(b * h * w, c1.out)  # channels-last: a view, no copy
        torch.mm(g.t(), cols, out=grad[c1.at : c1.bias_at].view(c1.out, -1))
        torch.sum(g, dim=0, out=grad[c1.bias_at : c1.end])


def patches(x: Tensor) -> Tensor:
    """The 5 x 5 'same' patches of images (B, C, H, W) as rows (B*H*W, C*25), in a weight's (C, kh, kw) order."""
    b, c, h, w = x.shape
    padded = F.pad(x, (PAD, PAD, PAD, PAD))
    sb, sc, sh, sw = padded.stride()
    return padded.as_strided((b, h, w, c, KERNEL, KERNEL), (sb, sh, sw, sc, sh, sw)).reshape(b * h * w, -1)


def bherd_cnn_gradient(module: nn.Module, *, max_channels: int = MAX_CHANNELS) -> BHerdCNNGradient | None:
    """The hand-written gradient of a :class:`BHerdCNN` as built (its forward and loss, no LRN, every
    parameter trainable) on a CPU, for images of at most ``max_channels`` channels; None for anything else
    (autograd then: a GPU's convolution library is measured against nothing here)."""
    cls = type(module)
    if not (isinstance(module, BHerdCNN) and cls.forward is BHerdCNN.forward and cls.loss is Classifier.loss):
        return None
    if module.input_shape[0] > max_channels:
        return None
    features, head = list(module.features), list(module.classifier)
    kinds = [type(layer) for layer in (*features, *head)]
    if kinds != [nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.Identity, nn.Conv2d, nn.ReLU, nn.Identity, nn.MaxPool2d,
                 nn.Flatten, nn.Linear, nn.ReLU, nn.Linear]:
        return None
    convs, pools = (features[0], features[4]), (features[2], features[7])
    if not all(_is_same_conv(conv) for conv in convs) or not all(_is_pool(pool) for pool in pools):
        return None
    if (head[0].start_dim, head[0].end_dim) != (1, -1) or convs[0].weight.device.type != "cpu":
        return None
    params, convs_params = list(module.parameters()), [p for conv in convs for p in (conv.weight, conv.bias)]
    if [id(p) for p in params[:4]] != [id(p) for p in convs_params] or not all(p.requires_grad for p in convs_params):
        return None
    slot1 = ConvSlot(0, convs[0].out_channels, convs[0].in_channels)
    slot2 = ConvSlot(slot1.end, convs[1].out_channels, convs[1].in_channels)
    layers = chain_layers([head[1], head[3]], module, after=4)
    if layers is None:
        return None
    return BHerdCNNGradient(module.input_shape, slot1, slot2, ChainGradient(layers))


def _is_same_conv(conv: nn.Conv2d) -> bool:
    return (conv.kernel_size, conv.stride, conv.padding, conv.dilation, conv.groups, conv.padding_mode) == (
        (KERNEL, KERNEL), (1, 1), (PAD, PAD), (1, 1), 1, "zeros") and conv.bias is not None


def _is_pool(pool: nn.MaxPool2d) -> bool:
    def pair(v: int | tuple[int, ...]) -> tuple[int, ...]:
        return tuple(v) if isinstance(v, tuple) else (v, v)

    return (pair(pool.kernel_size), pair(pool.stride), pair(pool.padding), pair(pool.dilation), pool.ceil_mode,
            pool.return_indices) == ((2, 2), (2, 2), (0, 0), (1, 1), True, False)
