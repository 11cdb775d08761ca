"""Data augmentation for image batches: zero-padded random crop and horizontal flip.

The CIFAR recipe of the reference codes (gaoliang13/FedDC, alpemreacar/FedDyn): pad each image
with ``crop_padding`` zeros on every side, cut a random H x W window out of it, and mirror it
left-right with probability 1/2. ``train.augment: {crop_padding: 4, flip: true}``; off by default.

A batch's randomness is drawn from a NumPy generator in a fixed order (:meth:`Augment.draw`: the
(row, column) offsets of every image, then the flip decisions), and the transform of the drawn
values (:func:`crop_flip`) is one vectorised gather over the (B, C, H, W) batch. The engine gives
each batch the generator of (seed, round, client, step), so every runtime draws the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedaccel.errors import ConfigError, listed, shown

__all__ = ["Augment", "augment_batch", "crop_flip", "parse_augment"]


@dataclass(frozen=True)
class Augment:
    """Random crop of a zero-padded image (``crop_padding`` pixels a side; 0 = no crop) and
    horizontal flip with probability 1/2 (``flip``)."""

    crop_padding: int = 0
    flip: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.crop_padding, bool) or not isinstance(self.crop_padding, int) or self.crop_padding < 0:
            raise ConfigError(f"train.augment.crop_padding must be an integer >= 0, got {shown(self.crop_padding)}")
        if not isinstance(self.flip, bool):
            raise ConfigError(f"train.augment.flip must be true or false, got {shown(self.flip)}")

    def draw(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The random values of ``n`` images: offsets (n, 2) in [0, 2 * crop_padding] (row, column;
        drawn only when cropping) and flips (n,) bool (drawn only when flipping), in that order."""
        span = 2 * self.crop_padding
        offsets = rng.integers(0, span + 1, size=(n, 2)) if span else np.full((n, 2), 0, dtype=np.int64)
        flips = rng.random(n) < 0.5 if self.flip else np.zeros(n, dtype=bool)
        return offsets, flips


def parse_augment(value: Any) -> Augment | None:
    """``train.augment`` as written in a config: null (off) or a mapping of :class:`Augment`'s keys."""
    if value is None:
        return None
    if isinstance(value, Augment):
        return value
    if not isinstance(value, dict):
        raise ConfigError("train.augment must be null or a mapping like {crop_padding: 4, flip: true}, "
                          f"got {shown(value)}")
    known = ("crop_padding", "flip")
    for key in value:
        if key not in known:
            raise ConfigError(f"train.augment has no option {shown(key)}; known: {listed(known, near=str(key))}")
    return Augment(**value)


def check_images(input_shape: tuple[int, ...]) -> None:
    """Augmentation crops and flips images: the inputs must be (C, H, W)."""
    if len(input_shape) != 3:
        raise ConfigError(f"train.augment crops and flips images, but the inputs have shape {tuple(input_shape)} "
                          "(not channels x height x width); set train.augment: null for this dataset")


def crop_flip(x: Tensor, offsets: np.ndarray, flips: np.ndarray, padding: int) -> Tensor:
    """Image b of ``x`` (B, C, H, W) cut at ``offsets[b]`` out of its zero-padded copy and mirrored
    left-right where ``flips[b]``: a new (B, C, H, W) tensor (``x`` is untouched).

    One ``gather`` of the padded images' flat pixels (about 3x faster on a CPU than advanced
    indexing with a permute, or a slice per image)."""
    b, c, h, w = x.shape
    padded = F.pad(x, (padding, padding, padding, padding)) if padding else x
    offset = torch.from_numpy(np.ascontiguousarray(offsets, dtype=np.int64)).to(x.device)
    rows = offset[:, :1] + torch.arange(h, device=x.device)  # (B, H)
    columns = torch.arange(w, device=x.device).expand(b, w)
    flip = torch.from_numpy(np.ascontiguousarray(flips, dtype=bool)).to(x.device)
    columns = torch.where(flip[:, None], columns.flip(1), columns) + offset[:, 1:]  # (B, W)
    pixels = rows[:, :, None] * padded.shape[3] + columns[:, None, :]  # (B, H, W) into the padded image
    index = pixels.view(b, 1, h * w).expand(b, c, h * w)
    return padded.reshape(b, c, -1).gather(2, index).view(b, c, h, w)


def augment_batch(x: Tensor, augment: Augment, rng: np.random.Generator) -> Tensor:
    """``x`` (B, C, H, W) cropped and flipped with values drawn from ``rng``."""
    return crop_flip(x, *augment.draw(rng, x.shape[0]), augment.crop_padding)
