"""What ``fedaccel.train`` records of a method given as a Python object (a composed
:class:`~fedaccel.algorithms.base.Algorithm`), whose settings live in its parts' closures, not in a config:
a fingerprint of its name and its parts as they would compute, so that runs of one setting share it and runs of
two settings (``myprox(mu=5.0)`` and ``myprox(mu=0.0)``, FedAvg with a term added and FedAvg) do not.

Fed in: each part's stage functions as code (bytecode, constants, names), their defaults, the values their
closures hold and the globals they read (a script's ``MU = 5.0``; modules and classes by name); numbers, strings, containers, tensors and arrays (their bytes), ``functools.partial`` objects,
dataclasses and other objects' attributes, recursively. Nothing is called. Addresses never enter, so the same
setting gives the same fingerprint in another process (a resume) on the same Python and torch.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fedaccel.algorithms.base import Algorithm

DIGITS = 12  # hex digits of the fingerprint kept in the run's config
SCALARS = (type(None), bool, int, float, complex, str, bytes)  # fed as their repr
CHUNK_BYTES = 64 << 20  # data hashed a chunk at a time (from a GPU, or not contiguous): no second copy of it
MAX_DEPTH = 24  # levels of values followed (a deeper value is fed as its type)


def fingerprint(algorithm: Algorithm) -> str:
    """``DIGITS`` hex digits of the SHA-256 of ``algorithm``'s name and parts (module docstring)."""
    return fingerprint_of(algorithm.name, algorithm.parts)


def fingerprint_of(*values: Any) -> str:
    """``DIGITS`` hex digits of the SHA-256 of ``values`` fed as the module docstring says (``train``'s own data
    and partition too: their bytes)."""
    digest = hashlib.sha256()
    _feed(digest, values, 0, set())
    return digest.hexdigest()[:DIGITS]


def _feed(digest: Any, value: Any, depth: int, seen: set[int]) -> None:
    put = digest.update
    if isinstance(value, SCALARS):
        put(repr((type(value).__name__, value)).encode())
        return
    if depth > MAX_DEPTH or id(value) in seen:
        put(f"<{type(value).__qualname__}>".encode())  # a cycle, or too deep: its type alone
        return
    seen.add(id(value))
    deeper = functools.partial(_feed, digest, depth=depth + 1, seen=seen)
    if isinstance(value, torch.Tensor):
        put(f"tensor{value.dtype}{tuple(value.shape)}".encode())
        _feed_tensor(put, value.detach())
    elif isinstance(value, np.ndarray):
        put(f"array{value.dtype}{value.shape}".encode())
        if value.dtype == object:
            put(repr(value.tolist()).encode())
        else:  # its buffer, a chunk of rows at a time: never a second copy of the data
            rows = value.reshape(1, -1) if value.ndim == 0 else value
            _feed_chunks(put, rows, rows[0].nbytes if len(rows) else 1,
                         lambda piece: np.ascontiguousarray(piece).view(np.uint8).reshape(-1))
    elif isinstance(value, (tuple, list)):
        put(f"{type(value).__name__}{len(value)}".encode())
        for item in value:
            deeper(item)
    elif isinstance(value, (set, frozenset)):
        put(f"set{len(value)}".encode())
        for item in sorted(value, key=repr):
            deeper(item)
    elif isinstance(value, dict):
        put(f"dict{len(value)}".encode())
        for key in sorted(value, key=repr):
            deeper(key)
            deeper(value[key])
    elif isinstance(value, functools.partial):
        put(b"partial")
        for item in (value.func, value.args, value.keywords):
            deeper(item)
    elif isinstance(value, types.FunctionType):
        put(f"function {value.__qualname__}".encode())
        deeper(value.__code__)
        deeper(value.__defaults__)
        deeper(value.__kwdefaults__)
        names = _global_names(value.__code__)
        read = functools.partial(_feed_read, digest, names=names, depth=depth + 1, seen=seen)
        for cell in value.__closure__ or ():
            try:
                read(cell.cell_contents)
            except ValueError:  # a cell not yet filled
                put(b"<empty cell>")
        known = value.__globals__  # a script's `MU = 5.0` that the term reads: a setting too
        for name in sorted(names):
            if name in known:
                deeper(name)
                read(known[name])
    elif isinstance(value, types.CodeType):
        put(value.co_code)
        deeper(value.co_consts)
        deeper(value.co_names)
    elif isinstance(value, types.MethodType):
        deeper(value.__func__)
        code = getattr(value.__func__, "__code__", None)
        _feed_read(digest, value.__self__, _global_names(code) if code else set(), depth + 1, seen)
    elif isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType)):
        put(f"{type(value).__name__} {getattr(value, '__module__', '')}.{getattr(value, '__qualname__', value.__name__)}"
            .encode())
    elif dataclasses.is_dataclass(value):
        put(f"dataclass {type(value).__qualname__}".encode())
        for f in dataclasses.fields(value):
            deeper(f.name)
            deeper(getattr(value, f.name))
    else:  # another object: its type and its attributes
        put(f"object {type(value).__module__}.{type(value).__qualname__}".encode())
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            deeper(attributes)


def _global_names(code: types.CodeType) -> set[str]:
    """The names ``code`` and the functions defined in it may look up as globals (attribute names too: a global
    of that name is fed all the same, which changes nothing between two runs of one setting)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


#: What a function reads is fed whole when it is of these kinds; another object only by the attributes its code
#: names (``args.mu``, not ``args.seed``; a logger's caches never): a setting, not the state of the script.
WHOLE = (*SCALARS, torch.Tensor, np.ndarray, tuple, list, dict, set, frozenset, functools.partial, types.FunctionType,
         types.MethodType, types.CodeType, types.ModuleType, type, types.BuiltinFunctionType)


def _feed_read(digest: Any, value: Any, names: set[str], depth: int, seen: set[int]) -> None:
    """A value a function reads (a closure's cell, a global): whole where :data:`WHOLE` or a dataclass; else its
    type and the plain attributes of its ``__dict__`` whose names the function's code holds (nothing is called:
    no property, no ``__getattr__``)."""
    if isinstance(value, WHOLE) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        _feed(digest, value, depth, seen)
        return
    digest.update(f"read {type(value).__module__}.{type(value).__qualname__}".encode())
    attributes = getattr(value, "__dict__", None)
    if not isinstance(attributes, dict):
        return
    for name in sorted(names & set(attributes)):
        if isinstance(attributes[name], (*SCALARS, torch.Tensor, np.ndarray)):
            _feed(digest, name, depth, seen)
            _feed(digest, attributes[name], depth, seen)


def _feed_tensor(put: Callable[[Any], Any], data: torch.Tensor) -> None:
    """The bytes of ``data`` in order, a chunk of rows at a time (from a GPU, or of a view that is not contiguous):
    no second copy of the whole."""
    rows = data.reshape(1, -1) if data.dim() == 0 else data
    if not rows.numel():
        return
    _feed_chunks(put, rows, rows[0].numel() * rows.element_size(),  # .contiguous(): a view where it is one
                 lambda piece: piece.contiguous().cpu().reshape(-1).view(torch.uint8).numpy())


def _feed_chunks(put: Callable[[Any], Any], rows: Any, row_bytes: int, as_bytes: Callable[[Any], Any]) -> None:
    """``rows`` (a tensor or an array) fed ``as_bytes`` a chunk of :data:`CHUNK_BYTES` at a time, in order."""
    step = max(1, CHUNK_BYTES // max(1, row_bytes))
    for start in range(0, len(rows), step):
        put(as_bytes(rows[start:start + step]))
