"""Named methods as recipes: each is ``compose(...)`` of parts, nothing more.

``build_algorithm("fedavg")`` returns the composed :class:`~fedaccel.algorithms.base.Algorithm`;
hyperparameters are the recipe's keyword arguments and are checked here, so a config with an
unknown or invalid one fails at load.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedaccel.algorithms.base import Algorithm, compose
from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.errors import ConfigError


@dataclass(frozen=True)
class Recipe:
    """A named method: how to build it, and whether it trains on all data at one client."""

    build: Callable[..., Algorithm]
    summary: str
    centralized: bool = False


def fedavg(*, server_lr: float = 1.0) -> Algorithm:
    """FedAvg (McMahan et al., 2017): local SGD, data-weighted mean of the client models."""
    return compose("fedavg", mean_aggregate(server_lr=server_lr))


def centralized() -> Algorithm:
    """Centralized SGD: one client holding all training data; one round = E epochs."""
    return compose("centralized", mean_aggregate())


RECIPES: dict[str, Recipe] = {
    "fedavg": Recipe(fedavg, "FedAvg: local SGD, weighted model average"),
    "centralized": Recipe(centralized, "centralized SGD on all data (reference curve)", centralized=True),
}


def hyperparameters(name: str) -> dict[str, Any]:
    """The recipe's hyperparameters and their defaults."""
    recipe = get_recipe(name)
    return {
        k: p.default
        for k, p in inspect.signature(recipe.build).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ConfigError(f"unknown algorithm {name!r}; known: {', '.join(sorted(RECIPES))}")
    return RECIPES[name]


def build_algorithm(name: str, **params: Any) -> Algorithm:
    """Build a named method; unknown or invalid hyperparameters raise ConfigError."""
    known = hyperparameters(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        listed = ", ".join(sorted(known)) or "none"
        raise ConfigError(f"algorithm {name!r} has no hyperparameter {unknown[0]!r}; known: {listed}")
    return get_recipe(name).build(**params)
