"""IDX files (the MNIST family's format), read and written without per-sample Python loops.

An IDX file is a 4-byte magic number ``0x00 0x00 <type> <ndim>``, then ``ndim`` big-endian
uint32 dimensions, then the values in C order. We check all three (magic, dims, exact byte
length) because a half-downloaded or mislabelled file otherwise turns into silently wrong data.
Files may be gzip-compressed (``.gz``) or raw.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import threading
import zlib
from collections import OrderedDict
from pathlib import Path

import numpy as np

from fedaccel.disk import open_regular, write_atomic
from fedaccel.errors import DataError

__all__ = [
    "IMAGES_MAGIC",
    "LABELS_MAGIC",
    "find_idx_file",
    "read_bytes",
    "read_idx",
    "write_idx",
]

IMAGES_MAGIC = 0x00000803
"""Unsigned bytes, 3 dimensions (count, rows, cols)."""
LABELS_MAGIC = 0x00000801
"""Unsigned bytes, 1 dimension (count)."""

# IDX type code -> big-endian numpy dtype.
_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODES: dict[str, int] = {"u1": 0x08, "i1": 0x09, "i2": 0x0B, "i4": 0x0C, "f4": 0x0D, "f8": 0x0E}


MAX_IDX_BYTES = 1 << 30  # bytes of one IDX file, gunzipped (EMNIST byclass's training images: 547 MB)
CACHE_BYTES = 256 << 20  # gunzipped files kept in memory, by the hash of their compressed bytes: a process that
# loads one dataset again (the stacked seeds of a grid, a test suite) skips the gunzip (Fashion-MNIST: 0.3 s of 0.5)
_GUNZIPPED: OrderedDict[bytes, bytes] = OrderedDict()
_GUNZIPPED_LOCK = threading.Lock()


def read_bytes(path: Path) -> bytes:
    """Whole content of ``path`` (a plain file), gunzipped when the name ends in ``.gz``; damage -> DataError. At
    most :data:`MAX_IDX_BYTES` are read and decompressed: a gzip bomb is one line, not all of memory. A gzip file
    whose bytes this process gunzipped before comes from memory (:data:`CACHE_BYTES`; by content, not by name)."""
    gz = " once gunzipped" * (path.suffix == ".gz")
    too_long = f"{path}: more than {MAX_IDX_BYTES:,} bytes{{}}, more than any IDX dataset file; delete it and copy it again"
    try:
        with open_regular(path, follow=True) as raw:
            stored = raw.read(MAX_IDX_BYTES + 1)
        if len(stored) > MAX_IDX_BYTES:
            raise DataError(too_long.format(""))
        if not gz:
            return stored
        key = hashlib.blake2b(stored, digest_size=32).digest()
        with _GUNZIPPED_LOCK:
            data = _GUNZIPPED.get(key)
        if data is None:
            data = gzip.GzipFile(fileobj=io.BytesIO(stored)).read(MAX_IDX_BYTES + 1)
            if len(data) > MAX_IDX_BYTES:
                raise DataError(too_long.format(gz))
            _keep(key, data)
        return data
    except FileNotFoundError:
        raise DataError(f"{path}: file not found; put the dataset file there") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise DataError(
            f"{path}: corrupt or truncated gzip file ({e}); delete it and copy it again"
        ) from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e}); check the file") from None


def _keep(key: bytes, data: bytes) -> None:
    """Remember ``data`` (immutable: every reader gets its own arrays from it), the oldest forgotten past the cap."""
    if len(data) > CACHE_BYTES:
        return
    with _GUNZIPPED_LOCK:
        _GUNZIPPED[key] = data
        _GUNZIPPED.move_to_end(key)
        while sum(map(len, _GUNZIPPED.values())) > CACHE_BYTES:
            _GUNZIPPED.popitem(last=False)


def read_idx(path: str | Path, *, magic: int | None = None) -> np.ndarray:
    """Parse the IDX file at ``path`` (``.gz`` or raw) into an array of its shape and type.

    ``magic`` (e.g. :data:`IMAGES_MAGIC`) is the magic number the caller expects; a file with
    another one is rejected, so swapped image/label files are caught here.
    """
    path = Path(path)
    data = read_bytes(path)
    redo = "delete it and copy it again"
    if len(data) < 4:
        raise DataError(f"{path}: truncated IDX file ({len(data)} bytes, no header); {redo}")
    found = int.from_bytes(data[:4], "big")
    code, ndim = data[2], data[3]
    if magic is not None and found != magic:
        raise DataError(
            f"{path}: wrong magic number 0x{found:08X} (expected 0x{magic:08X}); "
            f"not the IDX file this name promises, {redo}"
        )
    if data[0] != 0 or data[1] != 0 or code not in _DTYPES or ndim == 0:
        raise DataError(f"{path}: not an IDX file (magic number 0x{found:08X}); {redo}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path}: truncated IDX file (header cut short); {redo}")
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = _DTYPES[code]
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "too long"
        raise DataError(
            f"{path}: {what} IDX file ({len(data)} bytes, expected {expected} for shape "
            f"{shape}); {redo}"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    # Native byte order, writable (frombuffer views are read-only; torch warns on them).
    return arr.astype(dtype.newbyteorder("="), copy=True)


def write_idx(path: str | Path, array: np.ndarray) -> Path:
    """Write ``array`` as an IDX file (gzip-compressed when ``path`` ends in ``.gz``).

    For tests and for users converting their own data into the MNIST layout.
    """
    path = Path(path)
    array = np.asarray(array)
    key = f"{array.dtype.kind}{array.dtype.itemsize}"
    if key not in _CODES or array.ndim == 0 or array.ndim > 255:
        raise ValueError(f"cannot write dtype {array.dtype} / ndim {array.ndim} as IDX")
    dtype = _DTYPES[_CODES[key]]
    header = bytes([0, 0, _CODES[key], array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    payload = header + np.ascontiguousarray(array, dtype=dtype).tobytes()
    write_atomic(path, gzip.compress(payload, compresslevel=1, mtime=0) if path.suffix == ".gz" else payload)
    return path


def find_idx_file(folder: Path, stems: list[str] | tuple[str, ...], what: str) -> Path:
    """First existing file among ``stem`` / ``stem.gz`` for each stem in ``folder``.

    The raw file wins over ``.gz`` when both exist (it is faster to read). ``what`` names the
    dataset in the error message.
    """
    for stem in stems:
        for name in (stem, stem + ".gz"):
            candidate = folder / name
            if candidate.is_file():
                return candidate
    raise DataError(
        f"{folder / stems[0]}(.gz): file not found; copy the {what} IDX files "
        f"({stems[0]} and the other three) into {folder}"
    )


# Sub-folders where other tools put the same files (torchvision's ``<Name>/raw``, EMNIST's ``gzip``).
_SUBDIRS = ("", "raw", "gzip", "MNIST/raw", "FashionMNIST/raw", "EMNIST/raw")


def idx_stems(prefix: str = "") -> dict[str, tuple[str, ...]]:
    """File-name stems of the four files: MNIST's names, or EMNIST's with ``prefix='emnist-balanced-'``."""
    if prefix:
        return {
            f"{part}-{kind}": (f"{prefix}{part}-{kind}-idx{3 if kind == 'images' else 1}-ubyte",)
            for part in ("train", "test")
            for kind in ("images", "labels")
        }
    stems: dict[str, tuple[str, ...]] = {}
    for part, tag in (("train", "train"), ("test", "t10k")):
        for kind, n in (("images", 3), ("labels", 1)):
            # Canonical name, then the dotted spelling some mirrors use.
            stems[f"{part}-{kind}"] = (f"{tag}-{kind}-idx{n}-ubyte", f"{tag}-{kind}.idx{n}-ubyte")
    return stems


def locate_idx_folder(root: Path, stems: dict[str, tuple[str, ...]]) -> Path | None:
    """The folder under ``root`` (itself or a known sub-folder) holding the training images, or None."""
    for sub in _SUBDIRS:
        folder = root / sub if sub else root
        for stem in stems["train-images"]:
            if (folder / stem).is_file() or (folder / (stem + ".gz")).is_file():
                return folder
    return None


def load_idx_folder(
    root: Path, what: str, *, prefix: str = "", env_hint: str = ""
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read the four IDX files of an MNIST-like dataset: ``(x_train, y_train, x_test, y_test)``.

    Images come back as uint8 ``N x H x W``, labels as int64. Image and label counts must agree.
    """
    if not root.is_dir():
        hint = f" (or set {env_hint})" if env_hint else ""
        raise DataError(
            f"{root}: dataset folder does not exist; pass the folder that holds the {what} "
            f"IDX files{hint}"
        )
    stems = idx_stems(prefix)
    folder = locate_idx_folder(root, stems) or root
    out: list[np.ndarray] = []
    for part in ("train", "test"):
        img_path = find_idx_file(folder, stems[f"{part}-images"], what)
        lab_path = find_idx_file(folder, stems[f"{part}-labels"], what)
        images = read_idx(img_path, magic=IMAGES_MAGIC)
        labels = read_idx(lab_path, magic=LABELS_MAGIC)
        if images.shape[0] != labels.shape[0]:
            raise DataError(
                f"{img_path}: {images.shape[0]} images but {lab_path.name} has "
                f"{labels.shape[0]} labels; the two files do not belong together, copy both again"
            )
        out += [images, labels.astype(np.int64)]
    return out[0], out[1], out[2], out[3]
