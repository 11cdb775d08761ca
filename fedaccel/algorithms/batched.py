"""What the batched (K clients at once) estimators share: how many clients' rows to work on together, and
the relative error of an estimate."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

# Bytes one block of rows may touch per pass on the CPU (about one core's L2 cache). Passes over K clients'
# (K, d) rows out of cache ran slower than one client after another in cache: at K = 20, d = 100k, 4.9x for
# GraB's step and 2.3x for BHerd's finish (benchmarks/batched_estimators.py).
CPU_BLOCK_BYTES = 1 << 20
# Per client, in chunk_bytes: the small tensors (masks, counters, per-row scalars) and allocator rounding
# (CUDA's caching allocator rounds every block up to 512 bytes).
SMALL_BYTES = 4096


def check_steps(what: str, steps: Sequence[int]) -> list[int]:
    """The clients' step counts of a batched estimator, every one at least 1 (the runtime leaves
    out clients with tau_i = 0)."""
    if any(tau < 1 for tau in steps):
        raise ValueError(f"batched {what} needs every client to take at least one step, got steps {list(steps)}")
    return list(steps)


def relative(gap: float, base: float) -> float | None:
    """An estimator's relative error gap / base; 0/0 is 0.0 and x/0 is None (JSON has no inf).

    Example:
        >>> relative(1.0, 4.0), relative(0.0, 0.0), relative(1.0, 0.0)
        (0.25, 0.0, None)
    """
    if base > 0.0:
        return gap / base
    return 0.0 if gap == 0.0 else None


def row_blocks(rows: int, row_bytes: int, device: torch.device | str, budget: int | None = None) -> list[slice]:
    """Slices covering ``rows`` rows: one slice on an accelerator; on the CPU as many rows per slice as keep
    ``row_bytes`` each within ``budget`` (default :data:`CPU_BLOCK_BYTES`; at least one row).

    Example:
        >>> row_blocks(5, 400_000, "cpu", budget=1_000_000)
        [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    budget = CPU_BLOCK_BYTES if budget is None else budget
    size = rows if torch.device(device).type != "cpu" else max(1, budget // max(1, row_bytes))
    return [slice(lo, min(lo + size, rows)) for lo in range(0, rows, max(1, size))]


def copy_active_rows(out: Tensor, rows: Tensor, active: Tensor, zero: Tensor) -> Tensor:
    """``out[k] = rows[k]`` where ``active[k]``, else 0, whatever ``rows[k]`` holds; returns ``out``.

    On the CPU a plain copy when every row is active (``torch.where`` with a broadcast mask ran 5x slower than a
    copy there); elsewhere always ``torch.where``, which needs no host synchronisation.
    """
    if out.device.type == "cpu" and bool(active.all()):
        return out.copy_(rows)
    return torch.where(active[:, None], rows, zero, out=out)


class Workspace:
    """One reusable flat buffer for a batched estimator's large tensors, kept between rounds.

    On the CPU a fresh (K, T, d) store is a new memory mapping every round (beyond glibc's 32 MiB mmap
    ceiling), whose page faults cost as much as the herding itself (96 MB at K = 20, tau = 12, d = 100k:
    ~0.1 s here). An estimator takes the buffer for its life and gives it back in ``finish``; while it is
    taken, another estimator gets fresh memory. Holds at most one buffer (the largest given back).
    """

    def __init__(self) -> None:
        self._buffer: Tensor | None = None

    def take(self, numel: int, dtype: torch.dtype, device: torch.device | str) -> Tensor:
        """A flat uninitialised tensor of at least ``numel`` elements: the kept buffer where it fits, else fresh."""
        buffer = self._buffer
        if buffer is not None and buffer.dtype == dtype and buffer.device == torch.device(device):
            if buffer.numel() >= numel:
                self._buffer = None
                return buffer
        return torch.empty(numel, dtype=dtype, device=device)

    def give(self, flat: Tensor) -> None:
        """Keep ``flat`` (from :meth:`take`) for the next estimator, unless a larger buffer is kept."""
        if self._buffer is None or flat.numel() >= self._buffer.numel():
            self._buffer = flat
