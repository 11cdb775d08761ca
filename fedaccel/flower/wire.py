"""What crosses the wire between the fedaccel ServerApp and ClientApp: explicit, no pickle.

A value (a part's state, a client's upload) is packed into a Flower ``RecordDict`` of two
records: ``arrays`` (an ``ArrayRecord`` of every tensor, by position) and ``tree`` (a
``ConfigRecord`` holding a JSON skeleton in which tensors are ``{"$t": key}`` and fedaccel's
frozen state dataclasses are ``{"$dc": "module:Class", ...fields}``). Unpacking rebuilds only
tensors, plain containers and dataclasses defined in ``fedaccel.algorithms``: a message from a
broken or hostile peer cannot run code. :func:`check_update` is the server's gate for uploads.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from torch import Tensor

TREE, ARRAYS = "tree", "arrays"
_SAFE_MODULES = "fedaccel.algorithms."


class BadMessage(ValueError):
    """A message that does not decode to what the protocol expects; never aggregated."""


def pack(value: Any, into: RecordDict | None = None, prefix: str = "") -> RecordDict:
    """``value`` (tensors, None, numbers, strings, lists, tuples, dicts, state dataclasses) as records."""
    records = into if into is not None else RecordDict()
    arrays: dict[str, Array] = {}

    def encode(node: Any) -> Any:
        if isinstance(node, Tensor):
            key = str(len(arrays))
            arrays[key] = Array(node.detach().cpu().contiguous().numpy())
            return {"$t": key}
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
                raise TypeError(f"cannot send a dict with keys {list(node)[:3]}")
            return {k: encode(v) for k, v in node.items()}
        if isinstance(node, (np.integer, np.floating)):
            return node.item()
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        raise TypeError(f"cannot send a {type(node).__name__}")

    skeleton = encode(value)
    records[prefix + ARRAYS] = ArrayRecord(arrays)
    records[prefix + TREE] = ConfigRecord({"json": json.dumps(skeleton)})
    return records


def unpack(records: RecordDict, prefix: str = "") -> Any:
    """The value :func:`pack` put into ``records`` (raises :class:`BadMessage` if it cannot)."""
    try:
        arrays = records[prefix + ARRAYS]
        skeleton = json.loads(str(records[prefix + TREE]["json"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise BadMessage(f"missing or unreadable {prefix}records: {exc}") from exc

    def decode(node: Any) -> Any:
        if isinstance(node, list):
            return [decode(v) for v in node]
        if not isinstance(node, dict):
            return node
        if "$t" in node:
            try:
                return torch.from_numpy(np.array(arrays[node["$t"]].numpy(), copy=True))
            except KeyError as exc:
                raise BadMessage(f"tensor {node['$t']!r} missing") from exc
        if "$tuple" in node:
            return tuple(decode(v) for v in node["$tuple"])
        if "$dc" in node:
            module, _, name = str(node["$dc"]).partition(":")
            if not module.startswith(_SAFE_MODULES):
                raise BadMessage(f"refusing to build {node['$dc']!r}")
            kind = getattr(importlib.import_module(module), name, None)
            if kind is None or not dataclasses.is_dataclass(kind):
                raise BadMessage(f"no state class {node['$dc']!r}")
            return kind(**{k: decode(v) for k, v in node.items() if k != "$dc"})
        return {k: decode(v) for k, v in node.items()}

    return decode(skeleton)


def check_update(delta: Any, extras: Any, dim: int) -> str | None:
    """Why an upload must not be aggregated (wrong shape, non-finite values), or None if it may."""
    if not isinstance(delta, Tensor) or delta.dtype != torch.float32 or tuple(delta.shape) != (dim,):
        shape = tuple(delta.shape) if isinstance(delta, Tensor) else type(delta).__name__
        return f"update of shape {shape}, expected ({dim},) float32"
    if not isinstance(extras, dict) or not all(isinstance(v, Tensor) for v in extras.values()):
        return "extras are not a dict of tensors"
    for name, tensor in {"update": delta, **extras}.items():
        if not bool(torch.isfinite(tensor).all()):
            return f"non-finite values in {name}"
    return None

