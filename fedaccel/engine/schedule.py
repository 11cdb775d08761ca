"""The local learning rate per round: eta_t = eta_0 * (the schedule's factor at round t), t counted from 0.

``train.lr_schedule`` names one:

- ``{name: exponential, decay: gamma}``: eta_t = eta_0 gamma^t (``train.lr_decay: gamma`` is its shorthand, and
  the spelling a resolved config keeps);
- ``{name: step, milestones: [...], factor: f}``: eta_t = eta_0 f^(number of milestones m with t >= m), PyTorch's
  ``MultiStepLR`` stepped once a round. A milestone is a round (an integer >= 1: the first round with the lower
  rate is the one that starts after m rounds) or a fraction of R = ``train.rounds`` (a float in (0, 1): round
  int(m R)). JYWa/FedNova's schedule (``train_LocalSGD.py`` ``update_learning_rate``: eta_0/10 from round
  int(R/2), eta_0/100 from int(0.75 R)) is ``{name: step, milestones: [0.5, 0.75], factor: 0.1}``.

Example:
    >>> schedule = lr_schedule({"name": "step", "milestones": [0.5, 0.75], "factor": 0.1}, rounds=8)
    >>> schedule.milestones, [round(schedule.factor_at(t), 6) for t in (0, 3, 4, 5, 6, 7)]
    ((4, 6), [1.0, 1.0, 0.1, 0.1, 0.01, 0.01])
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fedaccel.errors import ConfigError, listed, shown

SCHEDULES = ("exponential", "step")
KEY = "train.lr_schedule"


@dataclass(frozen=True)
class LRSchedule:
    """A schedule with its milestones in rounds (fractions of R resolved by :func:`lr_schedule`)."""

    name: str = "exponential"
    decay: float = 1.0  # exponential: gamma
    milestones: tuple[int, ...] = ()  # step: the rounds from which eta is multiplied by factor once more
    factor: float = 0.1  # step

    def factor_at(self, round_: int) -> float:
        """eta_t / eta_0 at round ``round_`` (0-based)."""
        if self.name == "exponential":
            return self.decay**round_
        return self.factor ** sum(1 for m in self.milestones if round_ >= m)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{KEY}.{what} must be a number, got {shown(value)}")
    return float(value)


def _milestone(value: Any, rounds: int) -> int:
    """A milestone as a round: an integer >= 1 as it is, a fraction of R (a float in (0, 1)) as int(m R)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigError(f"{KEY}.milestones: a round must be >= 1, got {value}")
        return value
    if isinstance(value, float) and 0 < value < 1:
        if int(value * rounds) < 1:  # a milestone at round 0 would lower the rate of every round, silently
            raise ConfigError(f"{KEY}.milestones: {value:g} of train.rounds = {rounds} rounds to round 0, which "
                              f"would lower the rate of every round; give a round (an integer >= 1) or a fraction "
                              f"of at least 1/{rounds}")
        return int(value * rounds)
    raise ConfigError(f"{KEY}.milestones holds rounds (integers >= 1) or fractions of train.rounds (floats in "
                      f"(0, 1)), got {shown(value)}")


def lr_schedule(spec: Mapping[str, Any] | None, *, lr_decay: float = 1.0, rounds: int = 1) -> LRSchedule:
    """``train.lr_schedule`` (None: ``train.lr_decay``'s exponential decay) checked, its milestones in rounds
    of a run of ``rounds`` rounds; a one-line ConfigError for a bad value or for both keys set."""
    if spec is None:
        return _exponential(lr_decay, "train.lr_decay")
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{KEY} must be a mapping such as {{name: step, milestones: [0.5, 0.75]}}, got {shown(spec)}")
    if lr_decay != 1:
        raise ConfigError(f"train.lr_decay is the shorthand of {KEY}: {{name: exponential, decay: ...}}; set one")
    options = dict(spec)
    name = options.pop("name", None)
    known = {"exponential": ("decay",), "step": ("milestones", "factor")}
    if not isinstance(name, str) or name not in known:
        raise ConfigError(f"unknown {KEY} {shown(name)}; known: {listed(SCHEDULES, near=str(name))}")
    for key in options:
        if key not in known[name]:
            raise ConfigError(f"{KEY} {name} has no option {shown(key)}; known: {listed(known[name], near=str(key))}")
    if name == "exponential":
        return _exponential(_number(options.get("decay", 1.0), "decay"), f"{KEY}.decay")
    factor = _number(options.get("factor", 0.1), "factor")
    if not 0 < factor <= 1:
        raise ConfigError(f"{KEY}.factor must be in (0, 1], got {shown(factor)}")
    milestones = options.get("milestones")
    if not isinstance(milestones, list) or not milestones:
        raise ConfigError(f"{KEY} step needs milestones: a list of rounds or fractions of train.rounds, "
                          f"got {shown(milestones)}")
    return LRSchedule("step", milestones=tuple(_milestone(m, rounds) for m in milestones), factor=factor)


def _exponential(decay: float, key: str) -> LRSchedule:
    if not 0 < decay <= 1:
        raise ConfigError(f"{key} must be in (0, 1], got {shown(decay)}")
    return LRSchedule("exponential", decay=decay)


def fractional(milestones: Any) -> bool:
    """Whether ``train.lr_schedule.milestones`` places a milestone as a fraction of ``train.rounds`` (then a run
    continued for more rounds would have had other rates before its checkpoint)."""
    return isinstance(milestones, list) and any(isinstance(m, float) for m in milestones)
