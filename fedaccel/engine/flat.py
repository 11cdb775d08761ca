"""Model parameters as one flat vector.

Every FL computation in fedaccel (averaging, control variates, herding Gram matrices, GSNR
statistics) is vector arithmetic on one contiguous tensor. :class:`FlatModel` re-points a
module's parameters and their gradients at slices of two flat buffers, so a forward/backward
pass fills ``flat.grad`` directly and an in-place update of ``flat.theta`` is the optimiser step
- no copies between the module and the vector.

Example:
    >>> import torch
    >>> flat = FlatModel(torch.nn.Linear(3, 2))
    >>> flat.theta.shape
    torch.Size([8])
"""

from __future__ import annotations

import torch
from torch import nn


class FlatModel:
    """A module whose parameters are views of ``theta`` and gradients views of ``grad``."""

    def __init__(self, module: nn.Module) -> None:
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no trainable parameters")
        dtype, device = params[0].dtype, params[0].device  # the module's: nothing moves or changes type
        n = sum(p.numel() for p in params)
        self.module = module
        self.theta = torch.empty(n, dtype=dtype, device=device)
        self.grad = torch.zeros(n, dtype=dtype, device=device)
        offset = 0
        for p in params:
            k = p.numel()
            self.theta[offset : offset + k].copy_(p.detach().reshape(-1))
            p.data = self.theta[offset : offset + k].view_as(p)
            p.grad = self.grad[offset : offset + k].view_as(p)
            offset += k
        self._params = params

    @property
    def size(self) -> int:
        """Number of trainable parameters d."""
        return self.theta.numel()

    def load(self, vector: torch.Tensor) -> None:
        """Set the parameters to ``vector`` (copied)."""
        with torch.no_grad():
            self.theta.copy_(vector)

    def gradient(self, loss: torch.Tensor) -> torch.Tensor:
        """Back-propagate ``loss`` into the flat gradient buffer and return it (a view, reused)."""
        self.grad.zero_()
        loss.backward()
        return self.grad
