"""Data attacks on chosen clients: label flipping and noise inputs (FedGSNR paper 003, Fig. 6 and 10).

A malicious client's training data is replaced before it trains (and before it computes FedGSNR
statistics): either its labels are shifted, ``l -> (l + shift) mod C`` (the paper's label flipping,
after Hitaj et al. 2017), or its inputs are replaced by independent U(-1, 1) noise of the same shape
(labels kept). The functions here are pure: they return attacked copies and leave the inputs alone.
Randomness comes only from the ``numpy.random.Generator`` passed in.

Example:
    >>> import numpy as np, torch
    >>> x, y = torch.zeros(4, 2), torch.tensor([0, 1, 2, 9])
    >>> _, y2 = apply_attack("label-flip", x, y, np.array([1, 3]), 10, np.random.default_rng(0))
    >>> y2.tolist()
    [0, 2, 2, 0]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from fedaccel.errors import ConfigError, listed, shown

ATTACKS = ("label-flip", "noise")


def apply_attack(
    kind: str,
    x: Tensor,
    y: Tensor,
    index: np.ndarray,
    num_classes: int,
    rng: np.random.Generator,
    shift: int = 1,
) -> tuple[Tensor, Tensor]:
    """``(x, y)`` with the rows in ``index`` (one client's samples) attacked.

    ``kind="label-flip"``: ``y[index] = (y[index] + shift) mod num_classes`` (``shift`` must not be a
    multiple of C, else nothing changes). ``kind="noise"``: ``x[index]`` drawn from U(-1, 1) with
    ``rng`` (float inputs only). Rows outside ``index`` are unchanged. The tensor that changes is a
    copy; the other one is returned as it is (not copied: a dataset's inputs can be large).
    """
    _check(kind, x, num_classes, shift)
    if kind == "label-flip":
        y = y.clone()
    else:
        x = x.clone()
    _attack_in_place(kind, x, y, index, num_classes, rng, shift)
    return x, y


def attack_clients(
    kind: str,
    x: Tensor,
    y: Tensor,
    partition: Sequence[np.ndarray],
    clients: Sequence[int],
    num_classes: int,
    rng: np.random.Generator,
    shift: int = 1,
) -> tuple[Tensor, Tensor]:
    """:func:`apply_attack` for every client in ``clients`` (in that order, drawing from one ``rng``)."""
    for c in clients:
        if not 0 <= c < len(partition):
            raise ConfigError(f"attacked client {c} does not exist (there are {len(partition)} clients)")
    if not clients:
        return x, y
    index = np.concatenate([np.asarray(partition[c], dtype=np.int64) for c in clients])
    return apply_attack(kind, x, y, index, num_classes, rng, shift)


def _check(kind: str, x: Tensor, num_classes: int, shift: int) -> None:
    if kind not in ATTACKS:
        raise ConfigError(f"unknown attack {shown(kind)}; choose one of: {listed(ATTACKS, near=kind)}")
    if kind == "label-flip":
        if num_classes < 2:
            raise ConfigError(f"label flipping needs num_classes >= 2, got {num_classes}")
        if shift % num_classes == 0:
            raise ConfigError(
                f"attack shift {shift} is a multiple of the {num_classes} classes: no label changes"
            )
    elif not torch.is_floating_point(x):
        raise ConfigError(f"the noise attack needs float inputs, got {x.dtype}")


def _attack_in_place(
    kind: str, x: Tensor, y: Tensor, index: np.ndarray, num_classes: int, rng: np.random.Generator, shift: int
) -> None:
    idx = torch.as_tensor(np.asarray(index, dtype=np.int64))
    if kind == "label-flip":
        y[idx] = torch.remainder(y[idx] + shift, num_classes)
    else:
        noise = rng.uniform(-1.0, 1.0, size=(len(idx), *x.shape[1:]))
        x[idx] = torch.from_numpy(noise).to(device=x.device, dtype=x.dtype)
