"""What crosses the wire between the fedaccel ServerApp and ClientApp: explicit, no pickle.

A value (a part's state, a client's upload, the round's model) is packed into one Flower
``ConfigRecord`` (``<prefix>packed``): a JSON skeleton (``json``) in which tensors are
``{"$t": key, "dtype": ..., "shape": [...]}`` with their raw bytes under ``key``, and
fedaccel's frozen state dataclasses are ``{"$dc": "module:Class", ...fields}``. Tensors of
``INLINE_LIMIT`` bytes or more go to an ``ArrayRecord`` (``<prefix>arrays``, ``{"$a": key}``)
instead, which Flower streams in chunks. One record per value keeps a message to a few
objects, and every object is a request to the SuperLink. Unpacking rebuilds only tensors of
plain dtypes, plain containers and dataclasses defined in ``fedaccel.algorithms``
(:mod:`fedaccel.algorithms.states`, which checkpoints use too): a message from a broken or
hostile peer cannot run code, and a skeleton nested deeper than ``MAX_DEPTH`` is refused before
it is parsed. :mod:`fedaccel.flower.gate` checks what a client's reply holds.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from torch import Tensor

from fedaccel.algorithms.states import from_plain, to_plain
from fedaccel.nesting import could_nest_deeper, nesting_depth

PACKED, ARRAYS = "packed", "arrays"
INLINE_LIMIT = 1 << 20  # bytes: larger tensors travel as Flower Arrays (chunked)
MAX_DEPTH = 64  # nesting of a JSON skeleton (states and uploads nest a few levels)
_DTYPES = {"float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"}


class BadMessage(ValueError):
    """A message that does not decode to what the protocol expects; never aggregated."""


def packed_in(records: RecordDict, prefix: str = "") -> bool:
    """Whether ``records`` hold a value :func:`pack` put there under ``prefix``."""
    return prefix + PACKED in records


def pack(value: Any, into: RecordDict | None = None, prefix: str = "") -> RecordDict:
    """``value`` (tensors, None, numbers, strings, lists, tuples, dicts, state dataclasses) as records."""
    records = into if into is not None else RecordDict()
    inline: dict[str, bytes] = {}
    arrays: dict[str, Array] = {}

    def encode(tensor: Tensor) -> dict[str, Any]:
        data = tensor.detach().cpu().contiguous().numpy()
        key = str(len(inline) + len(arrays))
        if data.nbytes >= INLINE_LIMIT:
            arrays[key] = Array(data)
            return {"$a": key}
        inline[key] = data.tobytes()
        return {"$t": key, "dtype": str(data.dtype), "shape": list(data.shape)}

    skeleton = to_plain(value, encode)
    records[prefix + PACKED] = ConfigRecord({"json": json.dumps(skeleton), **inline})
    if arrays:
        records[prefix + ARRAYS] = ArrayRecord(arrays)
    elif prefix + ARRAYS in records:
        del records[prefix + ARRAYS]
    return records


def _tensor(node: dict[str, Any], packed: ConfigRecord) -> Tensor:
    dtype, shape = str(node.get("dtype")), node.get("shape")
    if dtype not in _DTYPES or not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise BadMessage(f"tensor {node['$t']!r}: dtype {dtype!r}, shape {shape!r}")
    data = packed.get(str(node["$t"]))
    if not isinstance(data, bytes) or len(data) != math.prod(shape) * np.dtype(dtype).itemsize:
        raise BadMessage(f"tensor {node['$t']!r} missing or of the wrong size")
    return torch.from_numpy(np.frombuffer(data, dtype=dtype).reshape(shape).copy())


def unpack(records: RecordDict, prefix: str = "") -> Any:
    """The value :func:`pack` put into ``records`` (raises :class:`BadMessage` if it cannot)."""
    try:
        packed = records[prefix + PACKED]
        text = str(packed["json"])
        if could_nest_deeper(text, MAX_DEPTH) and (depth := nesting_depth(text)) > MAX_DEPTH:
            raise BadMessage(f"{prefix}records nested {depth} deep, at most {MAX_DEPTH}")
        skeleton = json.loads(text)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadMessage(f"missing or unreadable {prefix}records: {exc}") from exc

    def tensor(node: dict[str, Any]) -> Tensor | None:
        if "$t" in node:
            return _tensor(node, packed)
        if "$a" in node:
            try:
                return torch.from_numpy(np.array(records[prefix + ARRAYS][node["$a"]].numpy(), copy=True))
            except (KeyError, TypeError) as exc:
                raise BadMessage(f"tensor {node['$a']!r} missing") from exc
        return None

    return from_plain(skeleton, tensor, BadMessage)
