"""Systems heterogeneity: how much local work each selected client does in a round, and what the
server does with a straggler's partial work.

``train.local_work`` (a :class:`LocalWork`) draws each client's local epochs per round, seeded from
(seed, round, client), so every runtime gets the same numbers:

- ``fixed``: the configured work, tau_i = floor(E |D_i| / B) or ``train.local_steps`` (the default);
- ``uniform``: every selected client draws an integer number of epochs uniformly in
  [min_epochs, max_epochs] (FedNova's heterogeneous local work, JYWa/FedNova ``uniform_random``);
- ``stragglers``: ``fraction`` of the selected clients (the rest: round(m (1 - fraction)), halves up)
  are stragglers and draw an integer number of epochs uniformly in [min_epochs, max_epochs], by default
  [1, ceil(E) - 1]; the others run the configured work (FedProx's systems heterogeneity, litian96/FedProx
  ``drop_percent``).

Epochs become steps as E does (floor(e |D_i| / B), at least 1, or e ceil(|D_i| / B) with
``train.last_batch: partial``: :meth:`~fedaccel.engine.local.LocalOptions.epoch_steps`); with
``train.local_steps`` (tau for every client) e epochs are floor(e tau / E) steps. Steps a planner chose
(FedGSNR) are scaled by e / E.

``train.partial_work`` says what the server does with a straggler's update: ``drop`` (not aggregated:
the straggler trains as a client that does not upload), ``keep``, or ``auto``, the recipe's reference:
drop for ``fedavg`` (FedProx's FedAvg baseline), keep for every other recipe.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fedaccel.algorithms.base import Participation, RoundInfo
from fedaccel.errors import ConfigError, listed, shown

LOCAL_WORK = ("fixed", "uniform", "stragglers")
PARTIAL_WORK = ("auto", "drop", "keep")
DROPS_STRAGGLERS = frozenset({"fedavg"})  # partial_work: auto drops stragglers for these recipes


@dataclass(frozen=True)
class LocalWork:
    """The local-work model (``train.local_work``) and the rule for partial work (``train.partial_work``)."""

    name: str = "fixed"
    min_epochs: int = 1
    max_epochs: int | None = None  # uniform: required; stragglers: default ceil(E) - 1
    fraction: float = 0.5  # stragglers: the fraction of the selected clients that straggle
    partial: str = "auto"

    def check(self, local_epochs: float) -> None:
        """A one-line ConfigError for values that make no sense (``local_epochs``: E)."""
        key = "train.local_work"
        if self.name not in LOCAL_WORK:
            raise ConfigError(f"unknown {key} {shown(self.name)}; known: {listed(LOCAL_WORK, near=self.name)}")
        if self.partial not in PARTIAL_WORK:
            raise ConfigError(f"train.partial_work must be one of {', '.join(PARTIAL_WORK)}, got {shown(self.partial)}")
        if self.name == "fixed":
            return
        if self.name == "uniform" and self.max_epochs is None:
            raise ConfigError(f"{key} uniform needs max_epochs (epochs are drawn in [min_epochs, max_epochs])")
        if self.name == "stragglers" and not 0 <= self.fraction <= 1:
            raise ConfigError(f"{key} stragglers: fraction must be in [0, 1], got {shown(self.fraction)}")
        low, high = self.epoch_range(local_epochs)
        if not 1 <= low <= high:
            why = " (stragglers run fewer than E epochs: raise train.local_epochs or set max_epochs)" \
                if self.name == "stragglers" and self.max_epochs is None else ""
            raise ConfigError(f"{key} {self.name}: epochs must satisfy 1 <= min_epochs <= max_epochs, "
                              f"got [{low}, {high}]{why}")

    def epoch_range(self, local_epochs: float) -> tuple[int, int]:
        """[min_epochs, max_epochs] of a draw (stragglers' default maximum: ceil(E) - 1)."""
        high = self.max_epochs if self.max_epochs is not None else math.ceil(local_epochs - 1e-9) - 1
        return self.min_epochs, high

    def drops(self, recipe: str) -> bool:
        """Whether stragglers' updates are left out of the aggregate for the recipe named ``recipe``."""
        return self.partial == "drop" or (self.partial == "auto" and recipe in DROPS_STRAGGLERS)


def local_work(spec: Mapping[str, Any] | None, partial: str = "auto") -> LocalWork:
    """``train.local_work`` (``{name: ..., **options}``) and ``train.partial_work`` as a :class:`LocalWork`."""
    options = dict(spec or {"name": "fixed"})
    name = options.pop("name", "fixed")
    known = {"fixed": (), "uniform": ("min_epochs", "max_epochs"),
             "stragglers": ("fraction", "min_epochs", "max_epochs")}
    if name in known:
        for key, value in options.items():
            if key not in known[name]:
                raise ConfigError(f"train.local_work {name} has no option {shown(key)}; known: "
                                  f"{listed(known[name], near=key) if known[name] else 'none'}")
            integer = key != "fraction"
            if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
                raise ConfigError(f"train.local_work.{key} must be {'an integer' if integer else 'a number'}, "
                                  f"got {shown(value)}")
    return LocalWork(name=str(name), partial=partial, **options)


def resolved_work(spec: Mapping[str, Any] | None, partial: str, local_epochs: float,
                  recipe: str) -> tuple[dict[str, Any], str]:
    """``train.local_work`` and ``train.partial_work`` (checked: :meth:`LocalWork.check`) as a run uses them,
    for its ``config.yaml``: the model's options with their defaults (a straggler's maximum: ceil(E) - 1),
    and ``auto`` as ``drop`` or ``keep`` for ``recipe``. Fixed work is left as it is (partial work does not apply)."""
    work = local_work(spec, partial)
    if work.name == "fixed":
        return dict(spec or {"name": "fixed"}), partial
    options: dict[str, Any] = {"name": work.name, "min_epochs": work.min_epochs,
                               "max_epochs": work.epoch_range(local_epochs)[1]}
    if work.name == "stragglers":
        options["fraction"] = work.fraction
    return options, "drop" if work.drops(recipe) else "keep"


@dataclass(frozen=True)
class ClientWork:
    """One client's draw this round: its local epochs, and whether it is a straggler."""

    epochs: int
    straggler: bool = False


def draw_work(work: LocalWork, info: RoundInfo, clients: Sequence[int], local_epochs: float) -> dict[int, ClientWork]:
    """The round's draws for the selected ``clients`` (those not in the result run the configured work)."""
    if work.name == "fixed" or not clients:
        return {}
    low, high = work.epoch_range(local_epochs)

    def epochs(client: int) -> int:
        return int(info.rng("local-work", client).integers(low, high + 1))

    if work.name == "uniform":
        return {i: ClientWork(epochs(i)) for i in clients}
    m = len(clients)
    active = math.floor(m * (1 - work.fraction) + 0.5 + 1e-9)
    chosen = info.rng("stragglers").choice(sorted(clients), size=m - active, replace=False)
    return {int(i): ClientWork(epochs(int(i)), straggler=True) for i in sorted(chosen)}


class WorkOptions(Protocol):
    """What :func:`client_steps` reads of the local options (:class:`fedaccel.engine.local.LocalOptions`)."""

    local_epochs: float
    local_steps: int | str | None  # a number here: Federation resolves "shared" (LocalOptions.for_clients)
    batch_size: int

    def steps(self, n_samples: int) -> int: ...

    def epoch_steps(self, epochs: float, n_samples: int) -> int: ...


def client_steps(options: WorkOptions, n_samples: int, planned: int | None, work: ClientWork | None) -> int:
    """tau_i this round: the planner's steps (``planned``) or the configured work, for ``work.epochs``
    epochs in place of E when the client drew its work."""
    if work is None:
        return options.steps(n_samples) if planned is None else int(planned)
    share = work.epochs / options.local_epochs
    if planned is not None:
        return 0 if planned == 0 else max(1, math.floor(share * planned + 1e-9))
    if options.local_steps is not None:
        return max(1, math.floor(share * int(options.local_steps) + 1e-9))
    return options.epoch_steps(work.epochs, n_samples)


def drop_stragglers(
    work: LocalWork, recipe: str, who: Participation, draws: Mapping[int, ClientWork]
) -> tuple[Participation, list[int]]:
    """``who`` without the stragglers' uploads when ``work`` drops them for ``recipe``, and those dropped:
    a dropped straggler still trains, as a client that does not upload."""
    if not work.drops(recipe):
        return who, []
    dropped = [i for i, d in draws.items() if d.straggler and i in who.upload]
    return Participation(train=who.train, upload=tuple(i for i in who.upload if i not in dropped)), dropped


def work_diagnostics(draws: Mapping[int, ClientWork], dropped: Sequence[int]) -> dict[str, Any]:
    """The round's diagnostics: each drawn client's epochs, the stragglers, and those dropped."""
    if not draws:
        return {}
    diag: dict[str, Any] = {"local_epochs": {str(i): w.epochs for i, w in draws.items()}}
    stragglers = [i for i, w in draws.items() if w.straggler]
    if stragglers:
        diag["stragglers"] = stragglers
    if dropped:
        diag["dropped"] = list(dropped)
    return diag
