"""Test-wide settings: fedaccel's own code warns of nothing.

``pyproject.toml`` turns a RuntimeWarning issued in fedaccel's modules into an error, but numpy's
floating-point warnings (``invalid value encountered in subtract``) are issued in numpy's own modules
(``np.std`` computes in ``numpy._core._methods``), which no module filter names. So numpy is told to
call :func:`numpy_error` instead of warning: it looks at the stack, and an error that fedaccel's code
caused fails the test (fix the cause, or say with ``np.errstate`` that the value is meant); one from
elsewhere warns as numpy would.
"""

from __future__ import annotations

import os
import sys
import warnings

# One OpenMP thread (torch's intra-op threads, numpy's BLAS) in the test processes and in every process they start,
# which inherit it: CLI runs, benchmark scripts, experiment workers, Flower's and Ray's processes. The suite runs a
# worker per core, so a second thread only ever waits for a busy core, spinning: with two, tests/test_lean_step.py
# took 39 s of CPU on an idle 2-core machine (26 s with one) and 350 s beside another suite (29 s). Set before
# numpy and torch load (they read it once); a run still sets its own (fedaccel.runs.loop.choose_threads), and a
# test that needs more threads asks for them (tests/test_fedgsnr.py). An explicit OMP_NUM_THREADS is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# pytest keeps its rewrite of each test module's asserts as bytecode (tests/__pycache__/*-pytest-*.pyc, ignored by
# git) unless bytecode is not written: where PYTHONDONTWRITEBYTECODE is set (as `make bytecode` says, an editable
# install's habit) every worker rewrote every test module at every run, 6-9 s of CPU each on 2 cores. Here only,
# for this process's imports (the test modules come after this file); what the tests start is left as it is.
sys.dont_write_bytecode = False

import numpy as np  # noqa: E402
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
