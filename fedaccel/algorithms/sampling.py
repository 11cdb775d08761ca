"""Client selection: which clients take part in a round (seeded per round, or a fixed schedule).

Every part that selects clients (the default sampling, FedUMF's authorisation) does it with
:func:`sample_clients`, so a participation schedule (``train.participation``: round t uses entry
(t - 1) mod its length) replaces the selection of every recipe alike.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedaccel.algorithms.base import Part, Participation, RoundInfo
from fedaccel.errors import ConfigError, shown


SAMPLINGS = ("fixed", "bernoulli")  # train.sampling


def sample_clients(info: RoundInfo, fraction: float) -> tuple[int, ...]:
    """The round's selected clients: the schedule's entry (``info.scheduled``) if there is one, else
    max(1, round(fraction * N)) clients drawn without replacement from (seed, round), or with
    ``info.sampling == "bernoulli"`` each client independently with probability ``fraction`` (so the
    number varies from round to round and may be 0).

    Halves round up (C N = 2.5 gives 3), not to even as Python's ``round`` would.
    """
    if info.scheduled is not None:
        return info.scheduled
    n = info.n_clients
    if info.sampling == "bernoulli":
        joins = info.rng("sampling").random(n) < fraction
        return tuple(int(i) for i in np.flatnonzero(joins))
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


def scheduled_clients(schedule: Sequence[Sequence[int]] | None, round_: int) -> tuple[int, ...] | None:
    """The entry of ``schedule`` for 0-based round ``round_`` (cycling), sorted; None without a schedule."""
    if not schedule:
        return None
    return tuple(sorted(schedule[round_ % len(schedule)]))


def check_schedule(schedule: Any, n_clients: int, key: str = "train.participation") -> list[list[int]]:
    """A participation schedule as lists of client ids, or a one-line ConfigError naming what is wrong."""
    def is_list(value: Any) -> bool:
        return isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes)) and len(value) > 0

    if not is_list(schedule):
        raise ConfigError(f"{key} must be a non-empty list of client lists, e.g. [[0, 1], [2, 3]]; got {shown(schedule)}")
    checked = []
    for t, entry in enumerate(schedule):
        if not is_list(entry):
            raise ConfigError(f"{key}[{t}] must be a non-empty list of client ids, got {shown(entry)}")
        for client in entry:
            if isinstance(client, bool) or not isinstance(client, numbers.Integral) or not 0 <= client < n_clients:
                raise ConfigError(f"{key}[{t}] names client {shown(client)}; client ids are integers in [0, {n_clients})")
        if len(set(entry)) != len(entry):
            raise ConfigError(f"{key}[{t}] names a client twice: {shown(list(entry))}")
        checked.append([int(c) for c in entry])
    return checked
