"""Writing and reading fedaccel's files safely.

Every file fedaccel rewrites goes through :func:`~fedaccel.disk.write_atomic` (a temporary file
beside it, created without following a link, fsynced, then renamed over it): a kill or a full disk
leaves the old file or the new one, never half of one, and a planted link is refused. Every
``.pt`` file is read by :func:`load_plain` (``torch.load(weights_only=True)``): a file that would
need code to load is refused in one line, never run.
"""

from __future__ import annotations

import pickle
import pickletools
import zipfile
from pathlib import Path
from typing import Any

from fedaccel.disk import open_regular, write_atomic
from fedaccel.errors import UserError

__all__ = ["UnsafeFile", "load_plain", "save_plain", "write_atomic"]  # write_atomic: fedaccel.disk's, here too


class UnsafeFile(UserError):
    """A file that would run code if loaded (a planted pickle, or one of an earlier fedaccel)."""


def save_plain(path: Path, value: Any, *, previous: Path | None = None) -> None:
    """``torch.save`` of plain data (tensors, containers, numbers, strings), atomically."""
    import torch  # here, not at the top: config files are read (and written) without torch

    write_atomic(path, lambda file: torch.save(value, file), previous=previous)


def load_plain(file: Path) -> Any:
    """``torch.load(file, weights_only=True)`` on the CPU. A whole pickle that asks for anything but
    tensors and plain data is refused with :class:`UnsafeFile` (one line naming it): nothing in it
    runs. A damaged file raises what ``torch.load`` raises."""
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch's note on a plain pickle's protocol, before the refusal below
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            with open_regular(file) as opened:  # a FIFO or a link in a received folder: one line, never waited on
                return torch.load(opened, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        if "weights only load failed" not in str(exc).lower():
            raise
        wanted = pickle_globals(file)
        if wanted is None:  # not a whole pickle: damaged, not hostile (torch's advice, weights_only=False, is unsafe)
            raise pickle.UnpicklingError("not a tensor file torch can read: damaged, or not fedaccel's") from None
        raise UnsafeFile(unsafe_reason(file, wanted)) from None


def pickle_globals(file: Path) -> list[str] | None:
    """The ``module.name``s the pickle in ``file`` (a plain pickle, or torch's zip) would import,
    read without running it; None if it is not a whole pickle."""
    try:
        data = file.read_bytes()
        if zipfile.is_zipfile(file):
            with zipfile.ZipFile(file) as archive:
                name = next(n for n in archive.namelist() if n.endswith("data.pkl"))
                data = archive.read(name)
        found, strings = [], []
        for op, arg, _ in pickletools.genops(data):  # parses opcodes only; raises on damage
            if op.name == "GLOBAL":
                found.append(str(arg).replace(" ", "."))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append(".".join(strings[-2:]))
            elif isinstance(arg, str):
                strings.append(arg)
        return found
    except Exception:
        return None


def unsafe_reason(file: Path, wanted: list[str]) -> str:
    """One line: why ``file`` is refused, naming what it would import."""
    ours = [name for name in wanted if name.startswith("fedaccel.")]
    if ours:
        return (f"{file} is refused: loading it would run code ({ours[0]}); it was written by an earlier fedaccel, "
                "which pickled its classes: delete it (and the run's other checkpoints) to start the run again")
    foreign = [name for name in wanted if not name.startswith(("torch.", "collections."))]
    what = f"it asks for {foreign[0]}" if foreign else "it holds more than tensors and plain data"
    return (f"{file} is refused: loading it would run code ({what}); fedaccel never writes such a file, "
            "so it did not come from fedaccel: delete it")
