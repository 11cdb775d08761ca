"""Tests for fedaccel.data: real embedded Fashion-MNIST, IDX/CIFAR files made here, damage cases."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.data import DATASETS, Dataset, available_datasets, load_dataset
from fedaccel.data import embedded
from fedaccel.data.idx import read_idx, write_idx
from fedaccel.errors import DataError, UserError

IDX_NAMES = {
    "train-images": "train-images-idx3-ubyte",
    "train-labels": "train-labels-idx1-ubyte",
    "test-images": "t10k-images-idx3-ubyte",
    "test-labels": "t10k-labels-idx1-ubyte",
}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests must not see the developer's own data configuration."""
    for key in list(os.environ):
        if key.startswith("FEDACCEL_DATA"):
            monkeypatch.delenv(key)


def make_idx_folder(
    folder: Path, *, gz: bool = True, n_train: int = 20, n_test: int = 8, shape: tuple[int, int] = (5, 4),
    prefix: str = "", classes: int = 10, label_offset: int = 0, seed: int = 0,
) -> dict[str, np.ndarray]:
    """Write four small IDX files (MNIST names, or EMNIST names with ``prefix``)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images": rng.integers(0, 256, (n_train, *shape), dtype=np.uint8),
        "train-labels": (rng.integers(0, classes, n_train) + label_offset).astype(np.uint8),
        "test-images": rng.integers(0, 256, (n_test, *shape), dtype=np.uint8),
        "test-labels": (rng.integers(0, classes, n_test) + label_offset).astype(np.uint8),
    }
    for key, arr in arrays.items():
        if prefix:
            part, kind = key.split("-")
            stem = f"{prefix}{part}-{kind}-idx{3 if kind == 'images' else 1}-ubyte"
        else:
            stem = IDX_NAMES[key]
        write_idx(folder / (stem + (".gz" if gz else "")), arr)
    return arrays


# ----------------------------------------------------------------- embedded Fashion-MNIST


@pytest.fixture(scope="module")
def fmnist() -> Dataset:
    return load_dataset("fashion-mnist")


def test_embedded_fashion_mnist(fmnist: Dataset) -> None:
    assert fmnist.x_train.shape == (60000, 1, 28, 28)
    assert fmnist.x_test.shape == (10000, 1, 28, 28)
    assert fmnist.x_train.dtype == torch.float32 and fmnist.y_train.dtype == torch.int64
    assert fmnist.num_classes == 10 and fmnist.input_shape == (1, 28, 28)
    assert 0.0 <= float(fmnist.x_train.min()) and float(fmnist.x_train.max()) <= 1.0
    assert float(fmnist.x_train.max()) == 1.0
    assert torch.bincount(fmnist.y_train).tolist() == [6000] * 10
    assert fmnist.natural_partition is None
    assert "60000" in repr(fmnist)


def test_default_name_is_fashion_mnist_and_subset() -> None:
    ds = load_dataset(subset=500, test_subset=100, seed=3)
    assert ds.name == "fashion-mnist" and ds.num_train == 500 and ds.num_test == 100
    again = load_dataset("fmnist", subset=500, test_subset=100, seed=3)
    assert torch.equal(ds.y_train, again.y_train) and torch.equal(ds.x_test, again.x_test)
    other = load_dataset(subset=500, seed=4)
    assert not torch.equal(ds.y_train, other.y_train)


def test_embedded_lookup_and_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDACCEL_FASHION_MNIST_DIR", str(tmp_path / "nosys"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DataError, match="fedaccel data --install"):
        embedded.fashion_mnist_dir()
    with pytest.raises(DataError, match="fedaccel data --install"):
        load_dataset("fashion-mnist")
    assert dict((n, s) for n, s, _ in available_datasets())["fashion-mnist"] == "missing"
    cache = tmp_path / "cache" / "fedaccel" / "fashion-mnist"
    make_idx_folder(cache, shape=(28, 28))
    assert embedded.fashion_mnist_dir() == cache
    assert load_dataset("fashion-mnist").num_train == 20
    row = [r for r in available_datasets() if r[0] == "fashion-mnist"][0]
    assert row == ("fashion-mnist", "built-in", str(cache))


def test_install_without_root_unpacks_deb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The non-root path: apt-get download + dpkg -x, faked here, then copy into the cache."""
    monkeypatch.setenv("FEDACCEL_FASHION_MNIST_DIR", str(tmp_path / "nosys"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        if cmd[:2] == ["apt-get", "download"]:
            (Path(cwd) / "dataset-fashion-mnist_1.0-1_all.deb").write_bytes(b"deb")  # type: ignore[arg-type]
        elif cmd[:2] == ["dpkg", "-x"]:
            make_idx_folder(Path(cmd[3]) / "usr/share/datasets/fashion-mnist", shape=(28, 28))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(embedded.subprocess, "run", fake_run)
    target = embedded.install_fashion_mnist()
    assert target == tmp_path / "cache" / "fedaccel" / "fashion-mnist"
    assert [c[:2] for c in calls] == [["apt-get", "download"], ["dpkg", "-x"]]
    assert sorted(p.name for p in target.iterdir()) == sorted(n + ".gz" for n in embedded.FILES)
    assert load_dataset("fashion-mnist").num_test == 8


def test_install_failure_is_data_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDACCEL_FASHION_MNIST_DIR", str(tmp_path / "nosys"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(
        embedded.subprocess, "run",
        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 100, "", "E: Unable to locate package"),
    )
    with pytest.raises(DataError, match="Unable to locate package"):
        embedded.install_fashion_mnist()


# ----------------------------------------------------------------- IDX


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.float32, np.float64])
def test_idx_round_trip(tmp_path: Path, suffix: str, dtype: type) -> None:
    arr = (np.arange(2 * 3 * 5) - 7).reshape(2, 3, 5).astype(dtype) if dtype != np.uint8 else \
        np.arange(30, dtype=np.uint8).reshape(2, 3, 5)
    path = write_idx(tmp_path / f"a-idx3-ubyte{suffix}", arr)
    back = read_idx(path)
    assert back.dtype == np.dtype(dtype) and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)
    assert back.flags.writeable


@settings(max_examples=30, deadline=None)
@given(first=st.binary(min_size=6, max_size=6), second=st.binary(min_size=6, max_size=6))
def test_a_gzip_file_read_again_is_its_content_now(tmp_path_factory: pytest.TempPathFactory, first: bytes,
                                                    second: bytes) -> None:
    """Gunzipped files are kept in memory by their content: a file rewritten in place (same name, inode, size and,
    within the clock's tick, time) reads as what it holds now, and arrays read twice are not shared."""
    path = tmp_path_factory.mktemp("idx") / "a-idx1-ubyte.gz"
    write_idx(path, np.frombuffer(first, dtype=np.uint8))
    kept = read_idx(path)
    assert kept.tobytes() == first
    kept[:] = 0  # a reader's array is its own
    assert read_idx(path).tobytes() == first
    other = write_idx(path.with_name("b-idx1-ubyte.gz"), np.frombuffer(second, dtype=np.uint8)).read_bytes()
    with open(path, "r+b") as handle:  # in place: the inode stays
        handle.write(other)
        handle.truncate()
    assert read_idx(path).tobytes() == second


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_folder_loads(tmp_path: Path, gz: bool) -> None:
    arrays = make_idx_folder(tmp_path / "mnist", gz=gz)
    ds = load_dataset("mnist", tmp_path / "mnist")
    assert ds.x_train.shape == (20, 1, 5, 4) and ds.x_test.shape == (8, 1, 5, 4)
    assert ds.input_shape == (1, 5, 4) and ds.num_classes == 10
    np.testing.assert_allclose(ds.x_train[:, 0].numpy(), arrays["train-images"] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(ds.y_test.numpy(), arrays["test-labels"])


def test_mnist_torchvision_layout_and_raw_preferred(tmp_path: Path) -> None:
    raw = make_idx_folder(tmp_path / "MNIST" / "raw", gz=False, seed=1)
    make_idx_folder(tmp_path / "MNIST" / "raw", gz=True, seed=2)  # both exist: raw wins
    ds = load_dataset("mnist", tmp_path)
    np.testing.assert_array_equal(ds.y_train.numpy(), raw["train-labels"])


def test_truncated_idx(tmp_path: Path) -> None:
    make_idx_folder(tmp_path, gz=False)
    f = tmp_path / "train-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:-7])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte: truncated") as e:
        load_dataset("mnist", tmp_path)
    assert "\n" not in str(e.value)


def test_truncated_header(tmp_path: Path) -> None:
    f = tmp_path / "x-idx1-ubyte"
    f.write_bytes(b"\x00\x00")
    with pytest.raises(DataError, match="truncated"):
        read_idx(f)


def test_wrong_magic(tmp_path: Path) -> None:
    make_idx_folder(tmp_path, gz=True)
    # Labels where the images should be.
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes((tmp_path / "t10k-labels-idx1-ubyte.gz").read_bytes())
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte.gz: wrong magic number 0x00000801"):
        load_dataset("mnist", tmp_path)
    (tmp_path / "junk").write_bytes(b"\x12\x34\x56\x78" + bytes(20))
    with pytest.raises(DataError, match="not an IDX file"):
        read_idx(tmp_path / "junk")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped"])
def test_corrupt_gzip(tmp_path: Path, damage: str) -> None:
    make_idx_folder(tmp_path, gz=True, n_train=200)
    f = tmp_path / "train-labels-idx1-ubyte.gz"
    data = bytearray(f.read_bytes())
    if damage == "garbage":
        data = bytearray(b"\x1f\x8b\x08\x00" + b"not really gzip" * 5)
    elif damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[-6] ^= 0xFF  # breaks the CRC / length trailer
    f.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte.gz: corrupt or truncated gzip"):
        load_dataset("mnist", tmp_path)


def test_not_gzip_at_all(tmp_path: Path) -> None:
    f = tmp_path / "train-labels-idx1-ubyte.gz"
    f.write_bytes(b"plain text, no gzip header here")
    with pytest.raises(DataError, match="gzip"):
        read_idx(f)


def test_count_mismatch(tmp_path: Path) -> None:
    make_idx_folder(tmp_path, gz=False)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(19, np.uint8))
    with pytest.raises(DataError, match="20 images but train-labels-idx1-ubyte has 19 labels"):
        load_dataset("mnist", tmp_path)


def test_missing_folder_and_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nowhere: dataset folder does not exist"):
        load_dataset("mnist", tmp_path / "nowhere")
    make_idx_folder(tmp_path, gz=True)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte\(.gz\): file not found"):
        load_dataset("mnist", tmp_path)
    with pytest.raises(DataError, match="FEDACCEL_DATA_MNIST"):
        load_dataset("mnist")


def test_labels_out_of_range(tmp_path: Path) -> None:
    make_idx_folder(tmp_path, classes=12)
    with pytest.raises(DataError, match="labels outside 0..9"):
        load_dataset("mnist", tmp_path, seed=0)


def test_env_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_idx_folder(tmp_path / "base" / "mnist")
    monkeypatch.setenv("FEDACCEL_DATA", str(tmp_path / "base"))
    assert load_dataset("mnist").num_train == 20
    rows = {n: (s, w) for n, s, w in available_datasets()}
    assert rows["mnist"] == ("available", str(tmp_path / "base" / "mnist"))
    assert rows["cifar10"][0] == "missing"
    assert rows["digits"][0] == "built-in" and rows["synthetic"][0] == "generated"
    make_idx_folder(tmp_path / "other", n_train=7)
    monkeypatch.setenv("FEDACCEL_DATA_MNIST", str(tmp_path / "other"))  # more specific wins
    assert load_dataset("mnist").num_train == 7
    rows = {n: (s, w) for n, s, w in available_datasets({"mnist": str(tmp_path / "empty")})}
    assert rows["mnist"][0] == "missing" and "empty" in rows["mnist"][1]
    assert set(rows) == set(DATASETS)


def test_emnist(tmp_path: Path) -> None:
    arrays = make_idx_folder(tmp_path, prefix="emnist-letters-", classes=26, label_offset=1)
    ds = load_dataset("emnist", tmp_path, emnist_split="letters")
    assert ds.num_classes == 26 and ds.input_shape == (1, 4, 5)  # transposed upright
    np.testing.assert_array_equal(ds.y_train.numpy(), arrays["train-labels"] - 1)
    np.testing.assert_allclose(
        ds.x_train[0, 0].numpy(), arrays["train-images"][0].T / 255.0, rtol=1e-6
    )
    with pytest.raises(DataError, match=r"emnist-balanced-train-images-idx3-ubyte\(.gz\): file not found"):
        load_dataset("emnist", tmp_path)
    with pytest.raises(DataError, match="unknown emnist_split"):
        load_dataset("emnist", tmp_path, emnist_split="nope")


# ----------------------------------------------------------------- CIFAR


def _batch(n: int, rng: np.random.Generator, label_key: bytes, classes: int) -> bytes:
    d = {
        b"batch_label": b"test batch",
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        label_key: [int(v) for v in rng.integers(0, classes, n)],
    }
    if label_key == b"fine_labels":
        d[b"coarse_labels"] = [int(v) for v in rng.integers(0, 20, n)]
    return pickle.dumps(d, protocol=2)


def cifar_files(name: str = "cifar10", n: int = 10) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    if name == "cifar10":
        files = {f"data_batch_{i}": _batch(n, rng, b"labels", 10) for i in range(1, 6)}
        files["test_batch"] = _batch(n, rng, b"labels", 10)
        files["batches.meta"] = pickle.dumps({b"label_names": [b"airplane"] * 10}, protocol=2)
    else:
        files = {"train": _batch(5 * n, rng, b"fine_labels", 100),
                 "test": _batch(n, rng, b"fine_labels", 100),
                 "meta": pickle.dumps({b"fine_label_names": []}, protocol=2)}
    return files


def write_tarball(path: Path, folder: str, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for fname, data in files.items():
            info = tarfile.TarInfo(f"{folder}/{fname}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_cifar10_folder_and_tarball(tmp_path: Path) -> None:
    files = cifar_files()
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for fname, data in files.items():
        (folder / fname).write_bytes(data)
    tgz = write_tarball(tmp_path / "cifar-10-python.tar.gz", "cifar-10-batches-py", files)
    expected = pickle.loads(files["data_batch_2"])[b"data"].reshape(-1, 3, 32, 32) / 255.0
    for root in (folder, tmp_path, tgz):
        ds = load_dataset("cifar10", root)
        assert ds.x_train.shape == (50, 3, 32, 32) and ds.x_test.shape == (10, 3, 32, 32)
        assert ds.num_classes == 10 and ds.input_shape == (3, 32, 32)
        np.testing.assert_allclose(ds.x_train[10:20].numpy(), expected, rtol=1e-6)
    only_tar = tmp_path / "only"
    only_tar.mkdir()
    tgz.rename(only_tar / tgz.name)
    assert load_dataset("cifar-10", only_tar, subset=12).num_train == 12


def test_cifar100_coarse_and_fine(tmp_path: Path) -> None:
    tgz = write_tarball(tmp_path / "c100.tar.gz", "cifar-100-python", cifar_files("cifar100"))
    fine = load_dataset("cifar100", tgz)
    coarse = load_dataset("cifar100", tgz, label_mode="coarse")
    assert fine.num_classes == 100 and coarse.num_classes == 20 and fine.num_train == 50
    assert int(coarse.y_train.max()) < 20


def test_cifar_missing_batch(tmp_path: Path) -> None:
    files = cifar_files()
    del files["data_batch_3"]
    folder = tmp_path / "folder"
    folder.mkdir()
    for fname, data in files.items():
        (folder / fname).write_bytes(data)
    with pytest.raises(DataError, match=r"data_batch_3: CIFAR batch file missing"):
        load_dataset("cifar10", folder)
    tgz = write_tarball(tmp_path / "cifar-10-python.tar.gz", "cifar-10-batches-py", files)
    with pytest.raises(DataError, match=r"cifar-10-python.tar.gz: archive lacks data_batch_3"):
        load_dataset("cifar10", tgz)
    with pytest.raises(DataError, match=r"nothing-here: does not exist"):
        load_dataset("cifar10", tmp_path / "nothing-here")
    (tmp_path / "e2").mkdir()
    with pytest.raises(DataError, match=r"no CIFAR files found"):
        load_dataset("cifar10", tmp_path / "e2")


def test_cifar_damage(tmp_path: Path) -> None:
    files = cifar_files()
    tgz = write_tarball(tmp_path / "cifar-10-python.tar.gz", "cifar-10-batches-py", files)
    raw = tgz.read_bytes()
    tgz.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match="not a readable tar archive .*: point data.root at the CIFAR archive"):
        load_dataset("cifar10", tgz)
    folder = tmp_path / "f"
    folder.mkdir()
    for fname, data in files.items():
        (folder / fname).write_bytes(data)
    (folder / "test_batch").write_bytes(files["test_batch"][:100])
    with pytest.raises(DataError, match="test_batch: not a readable CIFAR batch"):
        load_dataset("cifar10", folder)


def test_cifar_pickle_cannot_run_code(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    files = cifar_files()
    files["test_batch"] = pickle.dumps({b"data": Evil()}, protocol=2)
    folder = tmp_path / "f"
    folder.mkdir()
    for fname, data in files.items():
        (folder / fname).write_bytes(data)
    with pytest.raises(DataError, match="refusing to load"):
        load_dataset("cifar10", folder)
    assert not (tmp_path / "pwned").exists()


# ----------------------------------------------------------------- digits, synthetic, misc


def test_digits() -> None:
    ds = load_dataset("digits", seed=1)
    assert ds.input_shape == (1, 8, 8) and ds.num_classes == 10
    assert ds.num_train + ds.num_test == 1797 and abs(ds.num_test - 359) <= 1
    assert float(ds.x_train.max()) == 1.0 and float(ds.x_train.min()) == 0.0
    again = load_dataset("digits", seed=1)
    assert torch.equal(ds.x_test, again.x_test)
    assert not torch.equal(ds.y_test, load_dataset("digits", seed=2).y_test)


def test_digits_read_once_are_handed_out_as_copies() -> None:
    """The parsed digits are kept for the process: a run that changes its tensors in place changes no later load."""
    first = load_dataset("digits", seed=1)
    kept = first.x_train.clone(), first.y_train.clone()
    first.x_train.mul_(-1.0)
    first.y_train.fill_(0)
    again = load_dataset("digits", seed=1)
    assert torch.equal(again.x_train, kept[0]) and torch.equal(again.y_train, kept[1])


def test_digits_are_scikit_learns_read_without_importing_it() -> None:
    """The CSV read from scikit-learn's folder gives load_digits' images / 16 and labels, in its order; a fresh
    process that builds a digits run's setup imports neither scikit-learn nor sympy (3 s of every process's start
    on 2 cores: each Flower ClientApp and SuperNode, each grid worker)."""
    import sys

    from sklearn.datasets import load_digits

    from fedaccel.data import _digits_arrays

    x, y = _digits_arrays()
    reference = load_digits()
    assert np.array_equal(x, np.asarray(reference.images, dtype=np.float32)[:, None] / 16.0)
    assert np.array_equal(y, reference.target) and y.dtype == np.int64
    probe = ("import sys; from fedaccel.runs.config import load_config; from fedaccel.runs.setup import build_setup; "
             "build_setup(load_config(None, ['data.dataset=digits', 'model=cnn', 'data.clients=2'])); "
             "print(sorted({'sklearn', 'sympy'} & {m.split('.')[0] for m in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]


def test_synthetic_deterministic_with_natural_partition() -> None:
    a = load_dataset("synthetic", seed=5, alpha=0.5, beta=0.5, clients=12)
    b = load_dataset("synthetic", seed=5, alpha=0.5, beta=0.5, clients=12)
    c = load_dataset("synthetic", seed=6, alpha=0.5, beta=0.5, clients=12)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert a.x_train.shape[0] != c.x_train.shape[0] or not torch.equal(a.x_train, c.x_train)
    assert a.input_shape == (60,) and a.x_train.dtype == torch.float32 and a.num_classes == 10
    assert a.natural_partition is not None and len(a.natural_partition) == 12
    allidx = np.concatenate(a.natural_partition)
    assert np.array_equal(np.sort(allidx), np.arange(a.num_train))  # each index exactly once
    assert all(len(p) >= 40 for p in a.natural_partition)  # at least 50 samples, 80% train
    assert int(a.y_train.max()) < 10


def test_synthetic_fixed_size_and_subset() -> None:
    ds = load_dataset("synthetic", samples=100, clients=5, dim=20, classes=4)
    assert ds.num_train == 400 and ds.num_test == 100 and ds.input_shape == (20,)
    assert [len(p) for p in ds.natural_partition or []] == [80] * 5
    sub = load_dataset("synthetic", samples=100, clients=5, dim=20, classes=4, subset=150)
    assert sub.num_train == 150 and sub.natural_partition is not None
    allidx = np.concatenate(sub.natural_partition)
    assert np.array_equal(np.sort(allidx), np.arange(150))
    # Remapped indices still point at the same samples as before.
    idx = np.sort(np.random.default_rng(0).permutation(400)[:150])
    assert torch.equal(sub.x_train, ds.x_train[torch.from_numpy(idx)])


def test_subset_on_files(tmp_path: Path) -> None:
    make_idx_folder(tmp_path, n_train=50, n_test=30)
    full = load_dataset("mnist", tmp_path)
    sub = load_dataset("mnist", tmp_path, subset=10, seed=2, test_subset=5)
    assert sub.num_train == 10 and sub.num_test == 5
    assert load_dataset("mnist", tmp_path, subset=1000).num_train == 50
    with pytest.raises(DataError, match="subset"):
        load_dataset("mnist", tmp_path, subset=0)
    assert torch.equal(full.x_test, load_dataset("mnist", tmp_path, subset=10).x_test)


def test_unknown_name_and_option() -> None:
    with pytest.raises(DataError, match=r"unknown dataset 'imagenet'; known: fashion-mnist, mnist"):
        load_dataset("imagenet")
    with pytest.raises(DataError, match=r"unknown option\(s\) colour"):
        load_dataset("digits", colour=True)
    assert issubclass(DataError, UserError)


def test_dataset_validation() -> None:
    x = torch.zeros(4, 3)
    with pytest.raises(DataError, match="4 train inputs but 3 labels"):
        Dataset("own", x, torch.zeros(3, dtype=torch.int64), x, torch.zeros(4, dtype=torch.int64), 2, (3,))
    ds = Dataset("own", x, torch.zeros(4, dtype=torch.int64), x, torch.zeros(4, dtype=torch.int64), 2, (3,))
    assert ds.num_train == 4


def test_a_gzip_bomb_as_an_idx_file_is_one_line_in_bounded_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47, item 4: an IDX file is gunzipped at most MAX_IDX_BYTES far (lowered to 1 MB here: 64 MB of
    zeros, 64 kB gzipped, would otherwise all be taken)."""
    import gzip
    import tracemalloc

    from fedaccel.data import idx

    monkeypatch.setattr(idx, "MAX_IDX_BYTES", 1 << 20)
    f = tmp_path / "train-images-idx3-ubyte.gz"
    f.write_bytes(gzip.compress(b"\0" * (64 << 20), compresslevel=1))
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="more than 1,048,576 bytes once gunzipped") as refused:
            read_idx(f)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20 and "\n" not in str(refused.value)


def test_a_cifar_archive_member_larger_than_any_batch_is_refused_before_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedaccel.data import cifar

    monkeypatch.setattr(cifar, "MAX_MEMBER_BYTES", 1 << 20)
    files = {**cifar_files(), "data_batch_1": b"\0" * (2 << 20)}
    tgz = write_tarball(tmp_path / "cifar-10-python.tar.gz", "cifar-10-batches-py", files)
    with pytest.raises(DataError, match="data_batch_1 is 2,097,152 bytes, more than any CIFAR batch"):
        load_dataset("cifar10", tgz)
