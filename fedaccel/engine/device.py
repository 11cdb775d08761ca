"""Where a run computes: ``run.device`` resolved to a ``torch.device``, and states moved between devices.

``cpu`` (default), ``cuda``, ``cuda:N``, ``mps`` or ``auto`` (the first of cuda, mps, cpu that is
there). A device that is named but not present is one :class:`~fedaccel.errors.ConfigError` line
when the run starts. Checkpoints hold CPU tensors (:func:`to_device` with ``"cpu"``), so a run
started on a GPU resumes on a machine without one.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch

from fedaccel.errors import ConfigError, shown

DEVICES = ("cpu", "cuda", "cuda:N", "mps", "auto")
_SPELLING = re.compile(r"cpu|cuda(:\d+)?|mps|auto")


def check_device_name(name: str) -> None:
    """Raise ConfigError unless ``name`` is spelled as one of :data:`DEVICES` (not whether it is here)."""
    if not isinstance(name, str) or not _SPELLING.fullmatch(name):
        raise ConfigError(f"run.device must be one of {', '.join(DEVICES)}, got {shown(name)}")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(name: str | torch.device) -> torch.device:
    """The ``torch.device`` for ``name``; ConfigError (one line) if it is not on this machine."""
    if isinstance(name, torch.device):
        name = str(name)
    check_device_name(name)
    if name == "auto":
        if torch.cuda.is_available():
            return resolve_device("cuda")
        return resolve_device("mps") if _mps_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"run.device {name}: no CUDA GPU on this machine "
                              f"(torch {torch.__version__}); use run.device=cpu or auto")
        if (device.index or 0) >= count:
            raise ConfigError(f"run.device {name}: this machine has {count} CUDA GPU(s), "
                              f"cuda:0 to cuda:{count - 1}")
        if device.index is None:  # the index tensors report: "cuda" == t.device would be False
            device = torch.device("cuda", torch.cuda.current_device())
    if device.type == "mps":
        if not _mps_available():
            raise ConfigError(f"run.device {name}: Apple MPS is not available here; use run.device=cpu or auto")
        device = torch.device("mps", device.index or 0)
    return device


def to_device(value: Any, device: torch.device | str) -> Any:
    """``value`` with every tensor inside moved to ``device``: tensors, tuples, lists, dicts and
    dataclasses (the parts' states) are rebuilt, anything else is returned as it is."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple):
        items = [to_device(v, device) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: to_device(getattr(value, f.name), device) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value
