"""Part states as plain data and back: what a checkpoint, a Flower node's saved states and a
message on the wire hold instead of pickled objects.

:func:`to_plain` turns a state (tensors, None, numbers, strings, lists, tuples, dicts with
string keys, fedaccel's state dataclasses) into containers of plain values: a dataclass becomes
``{"$dc": "module:Class", **fields}``, a tuple ``{"$tuple": [...]}`` and each tensor whatever
``tensor`` makes of it (by default the tensor itself, which ``torch.load(weights_only=True)``
reads). :func:`from_plain` rebuilds only plain containers, tensors and dataclasses defined in
``fedaccel.algorithms`` or in the package of a plugin this process has loaded (imported already, because the
run names the plugin: :mod:`fedaccel.plugins`): a file or message from a broken or hostile source cannot run
code.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
from torch import Tensor

from fedaccel.plugins import loaded_module

SAFE_MODULES = "fedaccel.algorithms."  # the only place state classes are rebuilt from


def to_plain(value: Any, tensor: Callable[[Tensor], Any] = lambda t: t) -> Any:
    """``value`` as plain containers (see the module's docstring); ``tensor`` encodes each tensor."""

    def encode(node: Any) -> Any:
        if isinstance(node, Tensor):
            return tensor(node)
        if dataclasses.is_dataclass(node) and not isinstance(node, type):
            kind = type(node)
            fields = {f.name: encode(getattr(node, f.name)) for f in dataclasses.fields(node)}
            return {"$dc": f"{kind.__module__}:{kind.__qualname__}", **fields}
        if isinstance(node, tuple):
            return {"$tuple": [encode(v) for v in node]}
        if isinstance(node, list):
            return [encode(v) for v in node]
        if isinstance(node, dict):
            if not all(isinstance(k, str) and not k.startswith("$") for k in node):
                raise TypeError(f"cannot store a dict with keys {list(node)[:3]}")
            return {k: encode(v) for k, v in node.items()}
        if isinstance(node, (np.integer, np.floating)):
            return node.item()
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        raise TypeError(f"cannot store a {type(node).__name__}")

    return encode(value)


def from_plain(
    value: Any, tensor: Callable[[dict[str, Any]], Tensor | None] = lambda node: None,
    error: type[Exception] = ValueError,
) -> Any:
    """The state [to_plain][fedaccel.algorithms.states.to_plain] made ``value`` from. ``tensor(node)`` decodes a dict that encodes
    a tensor (None: it does not); anything that is not a state raises ``error``."""

    def decode(node: Any) -> Any:
        if isinstance(node, list):
            return [decode(v) for v in node]
        if not isinstance(node, dict):
            return node
        decoded = tensor(node)
        if decoded is not None:
            return decoded
        if "$tuple" in node:
            if not isinstance(node["$tuple"], list):
                raise error("a tuple that is not a list")
            return tuple(decode(v) for v in node["$tuple"])
        if "$dc" in node:
            return state_class(str(node["$dc"]), error)(**{k: decode(v) for k, v in node.items() if k != "$dc"})
        return {k: decode(v) for k, v in node.items()}

    return decode(value)


def state_class(name: str, error: type[Exception] = ValueError) -> Callable[..., Any]:
    """The dataclass ``"module:Class"`` names, if it is defined in ``fedaccel.algorithms`` or a loaded plugin's
    package; its constructor refuses fields it does not have with ``error``."""
    module, _, qualname = name.partition(":")
    if not (module.startswith(SAFE_MODULES) or loaded_module(module)):
        raise error(f"refusing to build {name!r}")
    try:
        kind = getattr(importlib.import_module(module), qualname, None)
    except ImportError:
        kind = None
    if kind is None or not isinstance(kind, type) or not dataclasses.is_dataclass(kind):
        raise error(f"no state class {name!r}")

    def build(**fields: Any) -> Any:
        try:
            return kind(**fields)
        except TypeError as exc:
            raise error(f"{name}: {exc}") from exc

    return build
