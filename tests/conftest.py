"""Test-wide settings: fedaccel's own code warns of nothing.

``pyproject.toml`` turns a RuntimeWarning issued in fedaccel's modules into an error, but numpy's
floating-point warnings (``invalid value encountered in subtract``) are issued in numpy's own modules
(``np.std`` computes in ``numpy._core._methods``), which no module filter names. So numpy is told to
call :func:`numpy_error` instead of warning: it looks at the stack, and an error that fedaccel's code
caused fails the test (fix the cause, or say with ``np.errstate`` that the value is meant); one from
elsewhere warns as numpy would.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest


def caused_by_fedaccel() -> bool:
    """Whether a module of fedaccel is on the calling stack."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if name == "fedaccel" or name.startswith("fedaccel."):
            return True
        frame = frame.f_back
    return False


def numpy_error(kind: str, flag: int) -> None:
    """numpy's floating-point error ``kind`` (e.g. ``invalid value``): an error from fedaccel's code, else a warning."""
    if caused_by_fedaccel():
        raise FloatingPointError(f"numpy: {kind} encountered in fedaccel's code (a RuntimeWarning in use; "
                                 "tests/conftest.py)")
    warnings.warn(f"{kind} encountered", RuntimeWarning, stacklevel=2)


def pytest_configure(config) -> None:
    np.seterrcall(numpy_error)
    np.seterr(divide="call", over="call", invalid="call")


@pytest.fixture
def tmpfs(tmp_path):  # type: ignore[no-untyped-def]
    """``tmpfs(size)``: a fresh folder with a tmpfs of ``size`` mounted on it (root only: skipped elsewhere),
    unmounted after the test. For what only a real small or read-only file system shows."""
    import os
    import subprocess

    mounted = []

    def mount(size: str):  # type: ignore[no-untyped-def]
        folder = tmp_path / f"tmpfs{len(mounted)}"
        folder.mkdir()
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                                               capture_output=True).returncode != 0:
            pytest.skip("mounting a file system needs root")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], check=False)
