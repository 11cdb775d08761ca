"""CIFAR-10 / CIFAR-100 in the python-pickle layout: a folder, or the ``.tar.gz`` read in place.

Accepted sources (``root``):

* a folder holding the batch files (``data_batch_1..5``, ``test_batch`` / ``train``, ``test``);
* a folder holding ``cifar-10-batches-py/`` (``cifar-100-python/``) or ``cifar-10-python.tar.gz``
  (``cifar-100-python.tar.gz``);
* the path of the ``.tar.gz`` itself, read member by member with :mod:`tarfile` (nothing is
  extracted to disk).

The batches are pickles. We unpickle them with a restricted unpickler that only builds plain
containers and numpy arrays, so a tampered file cannot run code.
"""

from __future__ import annotations

import io
import pickle
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedaccel.errors import DataError, listed, shown

__all__ = ["CifarLayout", "LAYOUTS", "find_cifar_source", "load_cifar"]


class CifarLayout:
    """File names and label key of one CIFAR variant."""

    def __init__(
        self,
        folder: str,
        archive: str,
        train: tuple[str, ...],
        test: str,
        label_keys: dict[str, tuple[str, int]],
    ) -> None:
        self.folder = folder
        self.archive = archive
        self.train = train
        self.test = test
        self.label_keys = label_keys  # label_mode -> (pickle key, number of classes)

    @property
    def files(self) -> tuple[str, ...]:
        """Every batch file this variant needs."""
        return (*self.train, self.test)


LAYOUTS: dict[str, CifarLayout] = {
    "cifar10": CifarLayout(
        "cifar-10-batches-py",
        "cifar-10-python.tar.gz",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        "test_batch",
        {"fine": ("labels", 10)},
    ),
    "cifar100": CifarLayout(
        "cifar-100-python",
        "cifar-100-python.tar.gz",
        ("train",),
        "test",
        {"fine": ("fine_labels", 100), "coarse": ("coarse_labels", 20)},
    ),
}

_NUMPY_NAMES = {"_reconstruct", "_frombuffer", "ndarray", "dtype", "scalar"}
_NUMPY_MODULES = {
    "numpy",
    "numpy.core.multiarray",
    "numpy._core.multiarray",
    "numpy.core.numeric",
    "numpy._core.numeric",
}


class _SafeUnpickler(pickle.Unpickler):
    """Unpickler that resolves only numpy's array-rebuilding helpers (and ``_codecs.encode``)."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "_codecs" and name == "encode":
            import codecs

            return codecs.encode
        if module in _NUMPY_MODULES and name in _NUMPY_NAMES:
            if module.startswith("numpy.core") and np.lib.NumpyVersion(np.__version__) >= "2.0.0":
                module = "numpy._core" + module[len("numpy.core") :]  # avoid the deprecated alias
            mod = __import__(module, fromlist=[name])
            return getattr(mod, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _unpickle(data: bytes, where: str) -> dict[Any, Any]:
    try:
        obj = _SafeUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as e:  # any unpickling failure means a damaged or foreign file
        raise DataError(f"{where}: not a readable CIFAR batch ({e}); copy the file again") from None
    if not isinstance(obj, dict):
        raise DataError(f"{where}: not a CIFAR batch (no dict inside); copy the file again")
    return obj


def _get(batch: dict[Any, Any], key: str, where: str) -> Any:
    for k in (key.encode(), key):
        if k in batch:
            return batch[k]
    raise DataError(f"{where}: CIFAR batch has no '{key}' entry; copy the file again")


def _parse_batch(data: bytes, where: str, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """One batch file -> (uint8 images N x 3 x 32 x 32, int64 labels)."""
    batch = _unpickle(data, where)
    images = np.asarray(_get(batch, "data", where))
    labels = np.asarray(_get(batch, label_key, where), dtype=np.int64)
    if images.dtype != np.uint8 or images.ndim != 2 or images.shape[1] != 3 * 32 * 32:
        raise DataError(
            f"{where}: CIFAR 'data' has shape {images.shape} / {images.dtype}, expected N x 3072 "
            "uint8; copy the file again"
        )
    if labels.shape != (images.shape[0],):
        raise DataError(
            f"{where}: {images.shape[0]} images but {labels.size} labels; copy the file again"
        )
    return images.reshape(-1, 3, 32, 32), labels


def find_cifar_source(root: Path, name: str) -> Path:
    """Resolve ``root`` to a folder holding the batch files or to the ``.tar.gz``; else DataError."""
    layout = LAYOUTS[name]
    if root.is_file():
        return root
    if not root.is_dir():
        raise DataError(
            f"{root}: does not exist; pass the {layout.archive} file or the folder holding "
            f"{layout.folder}/"
        )
    for candidate in (root, root / layout.folder):
        if candidate.is_dir() and any((candidate / f).is_file() for f in layout.files):
            return candidate
    if (root / layout.archive).is_file():
        return root / layout.archive
    raise DataError(
        f"{root}: no CIFAR files found (looked for {layout.files[0]}, {layout.folder}/ and "
        f"{layout.archive}); copy the {name} python version there"
    )


def _folder_reader(folder: Path) -> Callable[[str], tuple[bytes, str]]:
    def read(fname: str) -> tuple[bytes, str]:
        path = folder / fname
        if not path.is_file():
            raise DataError(f"{path}: CIFAR batch file missing; copy the complete dataset folder")
        try:
            return path.read_bytes(), str(path)
        except OSError as e:
            raise DataError(f"{path}: cannot read ({e.strerror or e}); check the file") from None

    return read


MAX_MEMBER_BYTES = 256 << 20  # bytes of one batch file read from an archive (CIFAR-100's train: 154 MB)


def _read_archive(archive: Path, wanted: tuple[str, ...]) -> dict[str, bytes]:
    """Contents of the members of ``archive`` whose base names are in ``wanted``."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                base = member.name.rsplit("/", 1)[-1]
                if member.isfile() and base in wanted and base not in found:
                    if member.size > MAX_MEMBER_BYTES:  # read into memory: a crafted size is refused before
                        raise DataError(f"{archive}: member {base} is {member.size:,} bytes, more than any CIFAR "
                                        f"batch ({MAX_MEMBER_BYTES:,}); it is not the dataset, copy it again")
                    f = tar.extractfile(member)
                    assert f is not None  # regular files always have a payload
                    found[base] = f.read()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        reason = str(e).splitlines()[0].rstrip(":")  # tarfile lists every method it tried, one line each
        raise DataError(
            f"{archive}: not a readable tar archive ({reason}): point data.root at the CIFAR archive (or its folder); "
            "where it is that archive, it is damaged: copy it again"
        ) from None
    missing = [f for f in wanted if f not in found]
    if missing:
        raise DataError(
            f"{archive}: archive lacks {', '.join(missing)}; it is incomplete, copy it again"
        )
    return found


def load_cifar(
    root: Path, name: str = "cifar10", label_mode: str = "fine"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Read CIFAR-10/100 from ``root``: ``(x_train, y_train, x_test, y_test, num_classes)``.

    Images are uint8 ``N x 3 x 32 x 32``. ``label_mode`` is ``'fine'`` (100 classes) or
    ``'coarse'`` (20 super-classes) for CIFAR-100; CIFAR-10 has only ``'fine'``.
    """
    layout = LAYOUTS[name]
    if label_mode not in layout.label_keys:
        raise DataError(
            f"{name}: unknown label_mode {shown(label_mode)}; use one of {listed(sorted(layout.label_keys))}"
        )
    label_key, num_classes = layout.label_keys[label_mode]
    source = find_cifar_source(root, name)
    if source.is_file():
        contents = _read_archive(source, layout.files)
        read: Callable[[str], tuple[bytes, str]] = lambda f: (contents[f], f"{source}:{f}")
    else:
        read = _folder_reader(source)
        missing = [f for f in layout.files if not (source / f).is_file()]
        if missing:
            raise DataError(
                f"{source / missing[0]}: CIFAR batch file missing ({', '.join(missing)} absent); "
                "copy the complete dataset folder"
            )
    train = [_parse_batch(*read(f), label_key) for f in layout.train]
    x_test, y_test = _parse_batch(*read(layout.test), label_key)
    x_train = np.concatenate([x for x, _ in train]) if len(train) > 1 else train[0][0]
    y_train = np.concatenate([y for _, y in train]) if len(train) > 1 else train[0][1]
    for labels, part in ((y_train, "train"), (y_test, "test")):
        if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
            raise DataError(
                f"{source}: {part} labels outside 0..{num_classes - 1}; these are not {name} "
                "files, copy the right ones"
            )
    return x_train, y_train, x_test, y_test, num_classes
