"""The embedded default dataset: Fashion-MNIST from Debian's package ``dataset-fashion-mnist``.

Loading never downloads (clusters are often offline). The files come from the Debian package,
installed system-wide (``/usr/share/datasets/fashion-mnist``) or, without root, unpacked from the
``.deb`` into the per-user cache ``$XDG_CACHE_HOME/fedaccel/fashion-mnist``. Installing is an
explicit step (``fedaccel data --install`` / ``make install``) that calls :func:`install_fashion_mnist`.

Environment: ``FEDACCEL_FASHION_MNIST_DIR`` overrides the system path (tests use it).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from fedaccel.data.download import cache_root
from fedaccel.disk import write_atomic
from fedaccel.errors import DataError

__all__ = [
    "FILES",
    "PACKAGE",
    "SYSTEM_DIR",
    "cache_dir",
    "fashion_mnist_dir",
    "install_fashion_mnist",
    "system_dir",
]

PACKAGE = "dataset-fashion-mnist"
SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_HINT = "run `fedaccel data --install` (or `make install`)"


def system_dir() -> Path:
    """Where the Debian package puts the files (``FEDACCEL_FASHION_MNIST_DIR`` overrides it)."""
    return Path(os.environ.get("FEDACCEL_FASHION_MNIST_DIR") or SYSTEM_DIR)


def cache_dir() -> Path:
    """The per-user copy: ``$XDG_CACHE_HOME/fedaccel/fashion-mnist`` (default ``~/.cache/...``)."""
    return cache_root() / "fashion-mnist"


def _complete(folder: Path) -> bool:
    """True when ``folder`` holds all four IDX files (each ``.gz`` or raw)."""
    return all((folder / f).is_file() or (folder / (f + ".gz")).is_file() for f in FILES)


def fashion_mnist_dir() -> Path:
    """The folder holding the embedded Fashion-MNIST: system path, else user cache, else DataError."""
    for folder in (system_dir(), cache_dir()):
        if _complete(folder):
            return folder
    raise DataError(
        f"Fashion-MNIST not found in {system_dir()} or {cache_dir()}; {_HINT}"
    )


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise DataError(
            f"`{cmd[0]}` not found (not a Debian/Ubuntu system?); copy the four Fashion-MNIST IDX "
            f"files into {cache_dir()} or set FEDACCEL_DATA_FASHION_MNIST to their folder"
        ) from None


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {proc.returncode}"


def install_fashion_mnist(*, force: bool = False) -> Path:
    """Make the embedded Fashion-MNIST available and return its folder.

    As root: ``apt-get install -y dataset-fashion-mnist`` (retried after ``apt-get update`` if it
    fails). Otherwise: ``apt-get download`` the ``.deb`` into a temporary folder, unpack it with
    ``dpkg -x`` and copy the four files into :func:`cache_dir`. Needs access to a Debian mirror;
    does nothing when the files are already there (unless ``force``).
    """
    if not force:
        try:
            return fashion_mnist_dir()
        except DataError:
            pass
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd = ["apt-get", "install", "-y", "--no-install-recommends", PACKAGE]
        proc = _run(cmd)
        if proc.returncode != 0:
            _run(["apt-get", "update"])
            proc = _run(cmd)
        if proc.returncode != 0:
            raise DataError(f"apt-get install {PACKAGE} failed: {_last_line(proc)}")
        if _complete(SYSTEM_DIR):
            return SYSTEM_DIR
        raise DataError(f"apt-get installed {PACKAGE} but {SYSTEM_DIR} lacks the IDX files")

    target = cache_dir()
    with tempfile.TemporaryDirectory(prefix="fedaccel-fmnist-") as tmp:
        work = Path(tmp)
        proc = _run(["apt-get", "download", PACKAGE], cwd=work)
        debs = sorted(work.glob(f"{PACKAGE}_*.deb"))
        if proc.returncode != 0 or not debs:
            raise DataError(
                f"apt-get download {PACKAGE} failed ({_last_line(proc)}); ask an admin to run "
                f"`apt-get update`, or install as root"
            )
        unpacked = work / "root"
        proc = _run(["dpkg", "-x", str(debs[-1]), str(unpacked)])
        source = unpacked / SYSTEM_DIR.relative_to("/")
        if proc.returncode != 0:
            raise DataError(f"dpkg -x {debs[-1].name} failed: {_last_line(proc)}")
        if not _complete(source):
            raise DataError(f"{debs[-1].name} does not contain the IDX files in {SYSTEM_DIR}")
        target.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            for src in (source / (name + ".gz"), source / name):
                if src.is_file():
                    write_atomic(target / src.name, src.read_bytes())  # never a half file, nor through a link
                    break
    return target
