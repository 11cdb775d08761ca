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
from typing import Any

import numpy as np
import torch

from fedaccel.algorithms.base import Algorithm

DIGITS = 12  # hex digits of the fingerprint kept in the run's config
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
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        put(repr((type(value).__name__, value)).encode())
        return
    if depth > MAX_DEPTH or id(value) in seen:
        put(f"<{type(value).__qualname__}>".encode())  # a cycle, or too deep: its type alone
        return
    seen.add(id(value))
    deeper = functools.partial(_feed, digest, depth=depth + 1, seen=seen)
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous()
        put(f"tensor{data.dtype}{tuple(data.shape)}".encode())
        put(data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    elif isinstance(value, np.ndarray):
        put(f"array{value.dtype}{value.shape}".encode())
        put(np.ascontiguousarray(value).tobytes() if value.dtype != object else repr(value.tolist()).encode())
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
        for cell in value.__closure__ or ():
            try:
                deeper(cell.cell_contents)
            except ValueError:  # a cell not yet filled
                put(b"<empty cell>")
        known = value.__globals__  # a script's `MU = 5.0` that the term reads: a setting too
        for name in sorted(_global_names(value.__code__)):
            if name in known:
                deeper(name)
                deeper(known[name])
    elif isinstance(value, types.CodeType):
        put(value.co_code)
        deeper(value.co_consts)
        deeper(value.co_names)
    elif isinstance(value, types.MethodType):
        deeper(value.__func__)
        deeper(value.__self__)
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
