"""Claims of each paper as checks over runs; see :mod:`fedaccel.reproduce`.

Helpers here pick runs by config values and compare rounds-to-target or accuracies, so a
paper's module is a list of one-line :class:`~fedaccel.reproduce.Claim` objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedaccel.reproduce import Claim
from fedaccel.results import Run, rounds_to_target, series


def value_at(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def pick(runs: list[Run], where: Mapping[str, Any]) -> list[Run]:
    """Runs whose config has every ``dotted.key: value`` of ``where`` (all seeds)."""
    return [r for r in runs if all(value_at(r.config, k) == v for k, v in where.items())]


def describe(where: Mapping[str, Any]) -> str:
    return ", ".join(f"{v}" for v in where.values())


def _rounds(runs: list[Run], target: float) -> float | None:
    return rounds_to_target(runs, target) if runs else None


def reaches_sooner(text: str, experiment: str, a: Mapping[str, Any], b: Mapping[str, Any], target: float) -> Claim:
    """Claim: runs ``a`` reach ``target`` test accuracy in fewer rounds than runs ``b``."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        ra, rb = _rounds(pick(runs, a), target), _rounds(pick(runs, b), target)
        numbers = f"rounds to {target:g}: {describe(a)} {_fmt(ra)}, {describe(b)} {_fmt(rb)}"
        if ra is None and rb is None:
            return None, numbers + " (neither reached it)"
        if rb is None:
            return True, numbers
        if ra is None:
            return False, numbers
        return ra < rb, numbers + (f" (speed-up {rb / ra:.2f}×)" if ra else "")

    return Claim(text, experiment, check)


def higher_final(text: str, experiment: str, a: Mapping[str, Any], b: Mapping[str, Any],
                 metric: str = "test_acc", lower_is_better: bool = False, margin: float = 0.0) -> Claim:
    """Claim: runs ``a`` end with a ``metric`` (mean over seeds) better than runs ``b`` by more than ``margin``."""

    def check(runs: list[Run]) -> tuple[bool | None, str]:
        fa, fb = _final(pick(runs, a), metric), _final(pick(runs, b), metric)
        if fa is None or fb is None:
            return None, "runs missing"
        better = fa < fb - margin if lower_is_better else fa > fb + margin
        by = f" (needs a margin over {margin:g})" if margin else ""
        return better, f"final {metric}: {describe(a)} {fa:.4f}, {describe(b)} {fb:.4f}{by}"

    return Claim(text, experiment, check)


def _final(runs: list[Run], metric: str) -> float | None:
    if not runs:
        return None
    _, mean, _ = series(runs, metric)
    return float(mean[-1]) if len(mean) else None


def _fmt(rounds: float | None) -> str:
    return "never" if rounds is None else f"{rounds:g}"


def mean_diag(runs: list[Run], key: str) -> float | None:
    """Mean over runs and rounds of a per-round scalar diagnostic in metrics (e.g. entropy)."""
    values = [row["diag"][key] for r in runs for row in r.metrics if key in row.get("diag", {})]
    return float(np.mean(values)) if values else None
