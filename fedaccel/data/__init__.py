"""Datasets: in-memory tensors loaded from local files, never downloaded while loading.

``load_dataset(name)`` returns a :class:`Dataset` (train/test tensors plus metadata). Sources:
IDX folders (MNIST, Fashion-MNIST, EMNIST), CIFAR-10/100 pickles (folder or ``.tar.gz``),
scikit-learn's digits, FedProx's Synthetic(alpha, beta) generator, and the embedded default
Fashion-MNIST from Debian's ``dataset-fashion-mnist`` package.

Where files are looked for when no ``root`` is given, first match wins:

1. ``FEDACCEL_DATA_<NAME>`` (e.g. ``FEDACCEL_DATA_MNIST``, ``FEDACCEL_DATA_FASHION_MNIST``,
   ``FEDACCEL_DATA_CIFAR10``): the dataset's folder (or CIFAR ``.tar.gz``);
2. ``$FEDACCEL_DATA/<name>`` (e.g. ``$FEDACCEL_DATA/mnist``, ``$FEDACCEL_DATA/cifar10``), if it exists;
3. the per-user cache ``$XDG_CACHE_HOME/fedaccel/<name>`` (``~/.cache/fedaccel/mnist``), if it exists;
   for ``fashion-mnist``: the embedded copy (see :mod:`fedaccel.data.embedded`), which includes that cache.

``fedaccel data get NAME`` (:func:`get_dataset`, explicit, never at run time) downloads MNIST,
Fashion-MNIST, EMNIST or CIFAR-10/100 into the first of these folders that is configured (else the
cache), so that loading finds it afterwards (see :mod:`fedaccel.data.download`).

Every user mistake (missing/damaged file, unknown name or option) raises
:class:`fedaccel.errors.DataError` with a one-line message that says what to do.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedaccel.data.cifar import LAYOUTS as _CIFAR_LAYOUTS
from fedaccel.data.cifar import find_cifar_source, load_cifar
from fedaccel.data.download import SOURCES, cache_root, download_dataset
from fedaccel.data.embedded import fashion_mnist_dir, install_fashion_mnist
from fedaccel.data.idx import idx_stems, load_idx_folder, locate_idx_folder
from fedaccel.data.synthetic import generate_synthetic
import fedaccel.plugins as plugins
from fedaccel.errors import ConfigError, DataError, listed, shown

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetSpec",
    "available_datasets",
    "download_folder",
    "fashion_mnist_dir",
    "get_dataset",
    "install_fashion_mnist",
    "load_dataset",
    "resolve_root",
]


@dataclass(repr=False)
class Dataset:
    """A dataset held in memory as tensors.

    Images are ``N x C x H x W`` float32 in [0, 1]; vectors are ``N x D`` float32. Labels are int64
    in ``0..num_classes-1``. ``natural_partition`` gives per-client train indices when the source
    defines clients (Synthetic); splits use it instead of inventing one.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    input_shape: tuple[int, ...]
    natural_partition: list[np.ndarray] | None = field(default=None)

    def __post_init__(self) -> None:
        for part, x, y in (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)):
            if x.shape[0] != y.shape[0]:
                raise DataError(
                    f"dataset {self.name}: {x.shape[0]} {part} inputs but {y.shape[0]} labels; "
                    "pass matching tensors"
                )
            if tuple(x.shape[1:]) != tuple(self.input_shape):
                raise DataError(
                    f"dataset {self.name}: {part} inputs have shape {tuple(x.shape[1:])}, "
                    f"input_shape says {tuple(self.input_shape)}; make them agree"
                )

    @property
    def num_train(self) -> int:
        """Number of training samples."""
        return int(self.x_train.shape[0])

    @property
    def num_test(self) -> int:
        """Number of test samples."""
        return int(self.x_test.shape[0])

    def __repr__(self) -> str:
        parts = "" if self.natural_partition is None else f", clients={len(self.natural_partition)}"
        return (
            f"Dataset(name={self.name!r}, train={self.num_train}, test={self.num_test}, "
            f"num_classes={self.num_classes}, input_shape={self.input_shape}{parts})"
        )


Loader = Callable[..., Dataset]


@dataclass(frozen=True)
class DatasetSpec:
    """A known dataset: how to load it and what it accepts.

    ``kind`` is ``'files'`` (needs a folder/archive), ``'embedded'`` (files, with a built-in
    default), ``'built-in'`` (ships with a dependency) or ``'generated'``. ``options`` maps each
    accepted option to its default.
    """

    name: str
    description: str
    kind: str
    loader: Loader
    options: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- helpers


def _images(x: np.ndarray) -> torch.Tensor:
    """uint8 ``N x H x W`` or ``N x C x H x W`` -> float32 ``N x C x H x W`` in [0, 1]."""
    if x.ndim == 3:
        x = x[:, None]
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.float32).div_(255.0)


def _labels(y: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))


def _check_labels(name: str, where: Path | str, num_classes: int, *ys: np.ndarray) -> None:
    for y in ys:
        if y.size and (y.min() < 0 or y.max() >= num_classes):
            raise DataError(
                f"{where}: labels outside 0..{num_classes - 1}; these are not {name} files, "
                "copy the right ones"
            )


def _env_name(name: str) -> str:
    return "FEDACCEL_DATA_" + name.upper().replace("-", "_")


def _need_root(name: str) -> DataError:
    return DataError(
        f"{name}: no data folder given; run `fedaccel data get {name}`, or give --set data.root=<folder> "
        "(load_dataset(..., root=<folder>) in Python), "
        f"or set {_env_name(name)}=<folder> or FEDACCEL_DATA=<folder containing {name}/>"
    )


# --------------------------------------------------------------------------- loaders


def _load_mnist_like(name: str, root: Path | None, seed: int) -> Dataset:
    if root is None:
        if name != "fashion-mnist":
            raise _need_root(name)
        root = fashion_mnist_dir()
    x_tr, y_tr, x_te, y_te = load_idx_folder(root, name, env_hint=_env_name(name))
    _check_labels(name, root, 10, y_tr, y_te)
    return Dataset(
        name, _images(x_tr), _labels(y_tr), _images(x_te), _labels(y_te), 10,
        (1, *x_tr.shape[1:]),
    )


def _load_fashion_mnist(root: Path | None, seed: int) -> Dataset:
    return _load_mnist_like("fashion-mnist", root, seed)


def _load_mnist(root: Path | None, seed: int) -> Dataset:
    return _load_mnist_like("mnist", root, seed)


# EMNIST split -> number of classes. 'letters' labels are 1..26 on disk; we shift them to 0..25.
_EMNIST_CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 26, "digits": 10, "mnist": 10}


def _load_emnist(root: Path | None, seed: int, emnist_split: str = "balanced") -> Dataset:
    if emnist_split not in _EMNIST_CLASSES:
        raise DataError(
            f"emnist: unknown emnist_split {shown(emnist_split)}; use one of {listed(_EMNIST_CLASSES, near=emnist_split)}"
        )
    if root is None:
        raise _need_root("emnist")
    x_tr, y_tr, x_te, y_te = load_idx_folder(
        root, f"EMNIST {emnist_split}", prefix=f"emnist-{emnist_split}-", env_hint="FEDACCEL_DATA_EMNIST"
    )
    if emnist_split == "letters":
        y_tr, y_te = y_tr - 1, y_te - 1
    num_classes = _EMNIST_CLASSES[emnist_split]
    _check_labels("EMNIST " + emnist_split, root, num_classes, y_tr, y_te)
    # EMNIST stores each image transposed relative to MNIST; flip it upright.
    x_tr, x_te = x_tr.transpose(0, 2, 1), x_te.transpose(0, 2, 1)
    return Dataset(
        "emnist", _images(x_tr), _labels(y_tr), _images(x_te), _labels(y_te), num_classes,
        (1, *x_tr.shape[1:]),
    )


def _cifar_loader(name: str) -> Loader:
    def load(root: Path | None, seed: int, label_mode: str = "fine") -> Dataset:
        if root is None:
            raise _need_root(name)
        x_tr, y_tr, x_te, y_te, k = load_cifar(root, name, label_mode)
        return Dataset(name, _images(x_tr), _labels(y_tr), _images(x_te), _labels(y_te), k, (3, 32, 32))

    load.__doc__ = f"Load {name} from a folder or its .tar.gz."
    return load


@functools.cache
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as (images in [0, 1], labels), read once per process (its CSV parse: 70 ms,
    every digits run); read-only, so what a caller gets is always a copy (fancy indexing). The CSV is read
    from scikit-learn's folder without importing scikit-learn (2 s on 2 cores, in every process a digits run
    starts: Flower's ClientApps, SuperNodes, grid workers)."""
    with gzip.open(_digits_csv(), "rt") as csv:
        table = np.loadtxt(csv, delimiter=",", dtype=np.float32)
    x = table[:, :-1].reshape(-1, 1, 8, 8) / 16.0
    y = table[:, -1].astype(np.int64)
    x.flags.writeable = y.flags.writeable = False
    return x, y


def _digits_csv() -> Path:
    """scikit-learn's ``datasets/data/digits.csv.gz``, where scikit-learn is installed."""
    spec = importlib.util.find_spec("sklearn")  # a top-level package: found, not imported
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        file = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if file.is_file():
            return file
    raise DataError("digits: scikit-learn's digits.csv.gz was not found; install scikit-learn (pip install -e .)")


def _load_digits(root: Path | None, seed: int, test_frac: float = 0.2) -> Dataset:
    if not 0.0 < test_frac < 1.0:
        raise DataError(f"digits: test_frac must be in (0, 1) (got {test_frac})")
    x, y = _digits_arrays()
    order = np.random.default_rng((seed, 0xD161)).permutation(len(y))
    n_test = int(round(test_frac * len(y)))
    te, tr = np.sort(order[:n_test]), np.sort(order[n_test:])
    return Dataset(
        "digits", torch.from_numpy(x[tr]), _labels(y[tr]), torch.from_numpy(x[te]), _labels(y[te]),
        10, (1, 8, 8),
    )


def _load_synthetic(root: Path | None, seed: int, **options: Any) -> Dataset:
    x_tr, y_tr, x_te, y_te, partition = generate_synthetic(seed=seed, **options)
    classes = int(options.get("classes", 10))
    return Dataset(
        "synthetic", torch.from_numpy(x_tr), _labels(y_tr), torch.from_numpy(x_te), _labels(y_te),
        classes, (x_tr.shape[1],), natural_partition=partition,
    )


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("fashion-mnist", "Fashion-MNIST, 28x28 grey, 10 classes (default; embedded)",
                    "embedded", _load_fashion_mnist),
        DatasetSpec("mnist", "MNIST digits, 28x28 grey, 10 classes (IDX files)", "files", _load_mnist),
        DatasetSpec("emnist", "EMNIST, 28x28 grey (IDX files; option emnist_split)", "files",
                    _load_emnist, {"emnist_split": "balanced"}),
        DatasetSpec("cifar10", "CIFAR-10, 32x32 colour, 10 classes (python pickles)", "files",
                    _cifar_loader("cifar10"), {"label_mode": "fine"}),
        DatasetSpec("cifar100", "CIFAR-100, 32x32 colour, 100 (or 20 coarse) classes", "files",
                    _cifar_loader("cifar100"), {"label_mode": "fine"}),
        DatasetSpec("digits", "scikit-learn digits, 8x8 grey, 10 classes", "built-in", _load_digits,
                    {"test_frac": 0.2}),
        DatasetSpec("synthetic", "FedProx Synthetic(alpha, beta), 60-dim vectors, natural clients",
                    "generated", _load_synthetic,
                    {"alpha": 1.0, "beta": 1.0, "clients": 30, "dim": 60, "classes": 10,
                     "samples": None, "train_frac": 0.8}),
    )
}

_ALIASES = {
    "fmnist": "fashion-mnist",
    "fashionmnist": "fashion-mnist",
    "cifar-10": "cifar10",
    "cifar-100": "cifar100",
}


def _canonical(name: str) -> str:
    key = name.strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in DATASETS:
        raise DataError(f"unknown dataset {shown(name)}; known: {listed(dataset_names(), near=name)}")
    return key


def dataset_names() -> list[str]:
    """The names ``data.dataset`` takes: the built-ins, then the installed plugins'."""
    return [*DATASETS, *(n for n in plugins.names("dataset") if n not in DATASETS)]


def dataset_plugin(name: str) -> plugins.Plugin | None:
    """The installed plugin that provides dataset ``name`` (None: a built-in, or unknown); a clash is one line."""
    key = name.strip().lower().replace("_", "-")
    return plugins.find("dataset", name, builtin=_ALIASES.get(key, key) in DATASETS)


def _plugin_dataset(plugin: plugins.Plugin, root: Path | None, seed: int) -> Dataset:
    """What the plugin's loader gives for (root, seed), checked to be a Dataset; its errors are one line."""
    where = f"dataset {shown(plugin.name)} of {plugin.origin}"
    loader = plugins.load(plugin)
    try:
        dataset = loader(root, seed)
    except (DataError, ConfigError):
        raise
    except Exception as exc:  # noqa: BLE001 - the plugin's own code: one line, the traceback on --debug
        raise DataError(f"{where} failed to load: {plugins.one_line(exc)}") from exc
    if not isinstance(dataset, Dataset):
        raise DataError(f"{where}: {plugin.value} returned {shown(type(dataset).__name__)}, not a fedaccel.data.Dataset")
    return dataset


def resolve_root(name: str, roots: dict[str, str] | None = None) -> tuple[Path | None, str]:
    """Where ``name``'s files are configured: ``(path or None, how it was found)``.

    Order: ``roots[name]``, ``FEDACCEL_DATA_<NAME>``, ``$FEDACCEL_DATA/<name>`` (only if it exists),
    the cache ``$XDG_CACHE_HOME/fedaccel/<name>`` (only if it exists; not for fashion-mnist, whose
    embedded lookup covers it). ``None`` means "not configured" (fashion-mnist then uses the embedded copy).
    """
    name = _canonical(name)
    if roots:
        for key, value in roots.items():
            if value and _canonical(key) == name:
                return Path(value).expanduser(), "roots"
    env = _env_name(name)
    if os.environ.get(env):
        return Path(os.environ[env]).expanduser(), env
    base = os.environ.get("FEDACCEL_DATA")
    if base:
        candidate = Path(base).expanduser() / name
        if candidate.exists():
            return candidate, "FEDACCEL_DATA"
    cached = cache_root() / name
    if DATASETS[name].kind == "files" and cached.exists():
        return cached, "the cache"
    return None, ""


def download_folder(name: str) -> Path:
    """Where ``fedaccel data get`` puts ``name``: ``FEDACCEL_DATA_<NAME>``, else ``$FEDACCEL_DATA/<name>``,
    else the cache ``$XDG_CACHE_HOME/fedaccel/<name>``: the places loading looks, in its order."""
    name = _canonical(name)
    env = _env_name(name)
    if os.environ.get(env):
        folder = Path(os.environ[env]).expanduser()
        if folder.is_file():
            raise DataError(f"{env} names a file ({folder}); point it at a folder, or unset it, to download {name}")
        return folder
    base = os.environ.get("FEDACCEL_DATA")
    return Path(base).expanduser() / name if base else cache_root() / name


def get_dataset(
    name: str, folder: str | os.PathLike[str] | None = None, *, force: bool = False,
    mirrors: list[str] | None = None, progress: bool | None = None,
) -> tuple[Path, bool]:
    """Download ``name`` (mnist, fashion-mnist, emnist, cifar10, cifar100) unless it is already there.

    ``folder`` defaults to :func:`download_folder`. Returns ``(folder, downloaded)``; ``downloaded`` is
    False when the files were already present (``force`` downloads again). ``mirrors`` replaces the
    published base URLs (``FEDACCEL_DATA_MIRROR``'s come first either way); ``progress``: a bar on
    stderr (default: when it is a terminal). See :mod:`fedaccel.data.download`.
    """
    key = _canonical(name)
    if key not in SOURCES:
        what = {"built-in": "ships with scikit-learn", "generated": "is generated"}.get(DATASETS[key].kind, "")
        raise DataError(f"{key} {what}: nothing to download; `fedaccel data get` fetches {listed(SOURCES)}")
    if folder is None and not force:
        found = _found(key)
        if found is not None:
            return found, False
    target = Path(folder).expanduser() if folder is not None else download_folder(key)
    if not force and _probe(key, target):
        return target, False
    download_dataset(key, target, mirrors=mirrors, progress=progress)
    if not _probe(key, target):
        raise DataError(f"{key}: downloaded into {target} but the files the loader needs are not there; report this")
    return target, True


def _subset_indices(n: int, keep: int, rng: np.random.Generator, what: str) -> np.ndarray | None:
    if keep <= 0:
        raise DataError(f"{what} must be a positive number of samples (got {keep})")
    if keep >= n:
        return None
    # A seeded random subset, kept in the original order.
    return np.sort(rng.permutation(n)[:keep])


def load_dataset(
    name: str = "fashion-mnist",
    root: str | os.PathLike[str] | None = None,
    *,
    seed: int = 0,
    subset: int | None = None,
    test_subset: int | None = None,
    **options: Any,
) -> Dataset:
    """Load dataset ``name`` from ``root`` (or the configured/embedded location) into memory.

    ``subset`` keeps at most that many training samples (a random subset drawn with
    ``np.random.default_rng(seed)``, in original order; ``natural_partition`` is remapped);
    ``test_subset`` does the same for the test set. ``options`` are per-dataset (see
    ``DATASETS[name].options``), e.g. ``emnist_split='letters'`` or ``alpha=0.5`` for synthetic.
    """
    plugin = dataset_plugin(name)
    if plugin is not None:  # an installed package's loader: it finds its own files (root: data.root, if given)
        if options:
            raise DataError(f"dataset {shown(name)} of {plugin.origin} takes no options, got {listed(sorted(options))}")
        ds = _plugin_dataset(plugin, Path(root).expanduser() if root is not None else None, seed)
    else:
        key = _canonical(name)
        spec = DATASETS[key]
        unknown = sorted(set(options) - set(spec.options))
        if unknown:
            raise DataError(f"{key}: unknown option(s) {listed(unknown)}; allowed: {listed(spec.options, near=unknown[0])}")
        path = Path(root).expanduser() if root is not None else resolve_root(key)[0]
        ds = spec.loader(path, seed, **options)

    if subset is not None:
        idx = _subset_indices(ds.num_train, int(subset), np.random.default_rng(seed), "subset")
        if idx is not None:
            partition = None
            if ds.natural_partition is not None:
                # Old train index -> position in the subset; drop clients' samples not kept.
                partition = [np.searchsorted(idx, p[np.isin(p, idx)]) for p in ds.natural_partition]
            t = torch.from_numpy(idx)
            ds.x_train, ds.y_train, ds.natural_partition = ds.x_train[t], ds.y_train[t], partition
    if test_subset is not None:
        idx = _subset_indices(
            ds.num_test, int(test_subset), np.random.default_rng((seed, 1)), "test_subset"
        )
        if idx is not None:
            t = torch.from_numpy(idx)
            ds.x_test, ds.y_test = ds.x_test[t], ds.y_test[t]
    return ds


def _probe(name: str, path: Path) -> bool:
    """Cheap check (file names only, nothing parsed) that ``path`` holds ``name``'s files."""
    try:
        if name in ("mnist", "fashion-mnist"):
            return path.is_dir() and locate_idx_folder(path, idx_stems()) is not None
        if name == "emnist":
            return path.is_dir() and any(
                locate_idx_folder(path, idx_stems(f"emnist-{s}-")) for s in _EMNIST_CLASSES
            )
        if name in _CIFAR_LAYOUTS:
            source = find_cifar_source(path, name)
            return source.is_file() or all(
                (source / f).is_file() for f in _CIFAR_LAYOUTS[name].files
            )
    except (DataError, OSError):
        return False
    return False


def _found(name: str) -> Path | None:
    """The folder loading would read ``name`` from, if its files are there."""
    path, _ = resolve_root(name)
    if path is not None:
        return path if _probe(name, path) else None
    if DATASETS[name].kind == "embedded":
        try:
            return fashion_mnist_dir()
        except DataError:
            return None
    return None


def available_datasets(roots: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
    """``(name, status, where)`` for every known dataset, for ``fedaccel data``.

    status is ``'available'`` (files found), ``'missing'`` (``where`` says what to run or set:
    ``fedaccel data get NAME`` for the downloadable ones),
    ``'built-in'`` (embedded Fashion-MNIST, scikit-learn digits) or ``'generated'`` (synthetic); an installed
    package's is ``'plugin'`` (``'refused'``: its name is declared twice). Only file names are checked; damaged
    files are reported when loaded.
    """
    rows: list[tuple[str, str, str]] = []
    for name, spec in DATASETS.items():
        if spec.kind == "built-in":
            rows.append((name, "built-in", "scikit-learn"))
            continue
        if spec.kind == "generated":
            rows.append((name, "generated", "seeded generator, no files"))
            continue
        path, how = resolve_root(name, roots)
        if path is not None:
            if _probe(name, path):
                rows.append((name, "available", str(path)))
            else:
                get = f"; `fedaccel data get {name}` fetches them" if name in SOURCES else ""
                rows.append((name, "missing", f"{path} (from {how}) lacks the files{get}"))
            continue
        if spec.kind == "embedded":
            try:
                rows.append((name, "built-in", str(fashion_mnist_dir())))
            except DataError:
                rows.append((name, "missing", f"run `fedaccel data --install` or `fedaccel data get {name}`"))
            continue
        rows.append((name, "missing", f"`fedaccel data get {name}` fetches it (or set {_env_name(name)}=<folder>)"))
    for name, found in sorted(plugins.declared("dataset").items()):  # not imported: its loader finds its files
        clash = len(found) > 1 or name in DATASETS
        rows += [(name, "refused" if clash else "plugin", f"{p.value} from {p.origin}") for p in found]
    return rows
