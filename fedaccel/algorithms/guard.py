"""A plugin's own stages, checked where they hand a value back to fedaccel.

A method from an installed package (:mod:`fedaccel.plugins`) that returns the wrong thing from a stage (an
upload of another shape, a ``client_end`` without its extras) would fail later inside fedaccel's code, with
torch's words and a line of fedaccel's, naming neither the part nor the stage. :func:`guarded` wraps the stages
a plugin wrote itself (the parts it reuses from fedaccel keep theirs, and their fast paths) so that such a
value stops the run in one line: the algorithm, the part, the stage, what came back and what is wanted. It
checks kinds, shapes, dtypes and devices only: nothing waits for the device, and the values themselves are the
divergence check's and, on Flower, the server gate's.

Example (a plugin's part whose ``upload`` drops all but the first coordinate):
    >>> mine = guarded(compose("mine", Part(name="half", upload=lambda ctx, d, ss: d[:1]), mean_aggregate()),
    ...                "algorithm 'mine' of mine-pkg 0.1")                     # doctest: +SKIP
    >>> mine.parts[0].upload(ctx, torch.zeros(3), None)                        # doctest: +SKIP
    Traceback (most recent call last):
    fedaccel.algorithms.guard.StageFault: algorithm 'mine' of mine-pkg 0.1: part 'half''s upload returned a \
torch.float32 tensor of shape (1,); it must return a tensor like the update it was given: torch.float32, shape \
(3,), on cpu
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from torch import Tensor

from fedaccel.algorithms.base import Algorithm, ClientUpdate
from fedaccel.errors import UserError

__all__ = ["StageFault", "guarded"]


class StageFault(UserError):
    """A plugin's stage returned a value fedaccel cannot use (one line)."""


def _like(value: Any, reference: Tensor) -> bool:
    return (isinstance(value, Tensor) and value.shape == reference.shape and value.dtype == reference.dtype
            and value.device == reference.device)


def _tensor_like(reference: Tensor, what: str) -> str:
    return f"a tensor like {what}: {reference.dtype}, shape {tuple(reference.shape)}, on {reference.device}"


def _said(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}" + (
            f" on {value.device}" if value.device.type != "cpu" else "")
    if isinstance(value, tuple):
        held = [why for item in value if (why := _unstorable(item)) is not None]
        items = ", ".join(_said(item) if isinstance(item, Tensor) or item is None else f"a {type(item).__name__}"
                          for item in value[:3]) + (", ..." if len(value) > 3 else "")
        return f"a tuple of {len(value)} ({items})" + (
            f" whose state a checkpoint cannot hold ({held[0]})" if held else "")
    why = _unstorable(value)
    return "None" if value is None else f"a {type(value).__name__}" + (
        f" a checkpoint cannot hold ({why})" if why and isinstance(value, (dict, list)) else "")


def _pair(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2


def _extras(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in value.items())


def _unstorable(state: Any) -> str | None:
    """Why a checkpoint, a Flower node and the wire cannot hold ``state`` (:func:`~fedaccel.algorithms.states.to_plain`:
    ``cannot store a function``), or None where they can."""
    from fedaccel.algorithms.states import to_plain

    try:
        to_plain(state)
    except TypeError as exc:
        return str(exc)
    return None


def _storable(state: Any) -> bool:
    return _unstorable(state) is None


_STATE = ("a state a checkpoint can hold: tensors, numbers, strings, None, lists, tuples, dicts with string keys "
          "or dataclasses (not a function, nor another object)")

#: stage -> (whether its value is fit, given the call's arguments; what it must return, given them)
CHECKS: dict[str, tuple[Callable[[Any, tuple[Any, ...]], bool], Callable[[tuple[Any, ...]], str]]] = {
    "init_server": (lambda out, args: _storable(out), lambda args: _STATE),
    "init_client": (lambda out, args: _storable(out), lambda args: _STATE),
    "local_term": (lambda out, args: out is None or callable(out),
                   lambda args: "None or a function term(theta, grad) that adds to grad in place"),
    "start": (lambda out, args: _like(out, args[2]), lambda args: _tensor_like(args[2], "the start point given")),
    "upload": (lambda out, args: _like(out, args[1]), lambda args: _tensor_like(args[1], "the update it was given")),
    "aggregate": (lambda out, args: _like(out, args[1]), lambda args: _tensor_like(args[1], "the model w")),
    "server_end": (lambda out, args: _pair(out) and _like(out[0], args[1]) and _storable(out[1]),
                   lambda args: f"(w_next, state), w_next {_tensor_like(args[1], 'the model w')}, the state "
                                f"{_STATE}"),
    "client_end": (lambda out, args: _pair(out) and _extras(out[1]) and _storable(out[0]),
                   lambda args: f"(client state, extras), extras a dict of names to tensors, the state {_STATE}"),
    "server_adjust": (lambda out, args: isinstance(out, (list, tuple)) and all(isinstance(u, ClientUpdate) for u in out),
                      lambda args: "a list of ClientUpdate"),
}


def _own(function: Callable[..., Any]) -> bool:
    """Whether ``function`` was written outside fedaccel (a plugin's), not one of fedaccel's parts reused."""
    module = getattr(function, "__module__", None) or ""
    return not (module == "fedaccel" or module.startswith("fedaccel."))


def _checked(function: Callable[..., Any], stage: str, part: str, where: str) -> Callable[..., Any]:
    fits, wanted = CHECKS[stage]

    def stage_checked(*args: Any) -> Any:
        out = function(*args)
        if not fits(out, args):
            raise StageFault(f"{where}: part {part!r}'s {stage} returned {_said(out)}; it must return "
                             f"{wanted(args)}")
        return out

    return stage_checked


def guarded(algorithm: Algorithm, where: str) -> Algorithm:
    """``algorithm`` with each stage of :data:`CHECKS` that was written outside fedaccel checked on return;
    ``where`` names the algorithm in the line (``algorithm 'mine' of mine-pkg 0.1``)."""
    parts = []
    for part in algorithm.parts:
        changes = {stage: _checked(function, stage, part.name, where) for stage in CHECKS
                   if (function := getattr(part, stage)) is not None and _own(function)}
        parts.append(dataclasses.replace(part, **changes) if changes else part)
    return dataclasses.replace(algorithm, parts=tuple(parts))

