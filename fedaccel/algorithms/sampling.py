"""Client sampling: which clients take part in a round (seeded, per round)."""

from __future__ import annotations

import math

import numpy as np

from fedaccel.algorithms.base import Part, Participation, RoundInfo
from fedaccel.errors import ConfigError


def sample_clients(info: RoundInfo, fraction: float) -> tuple[int, ...]:
    """max(1, round(fraction * N)) clients drawn without replacement from (seed, round).

    Halves round up (C N = 2.5 gives 3), not to even as Python's ``round`` would.
    """
    n = info.n_clients
    m = max(1, math.floor(fraction * n + 0.5 + 1e-9))
    if m >= n:
        return tuple(range(n))
    chosen = info.rng("sampling").choice(n, size=m, replace=False)
    return tuple(int(i) for i in np.sort(chosen))


def uniform_sampling(*, fraction: float = 1.0) -> Part:
    """Sampled clients both train and upload (FedAvg-style partial participation)."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"client fraction must be in (0, 1], got {fraction}")

    def participation(info: RoundInfo) -> Participation:
        chosen = sample_clients(info, fraction)
        return Participation(train=chosen, upload=chosen)

    return Part(name="sampling", participation=participation)
