"""``fedaccel data get``: downloads from a local HTTP server on 127.0.0.1 serving archives made here.

The published checksum table is replaced by one computed from these archives; nothing reaches the
internet (the published mirrors are replaced by a closed local port in every test).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import re
import socket
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from fedaccel.data import available_datasets, get_dataset, load_dataset
from fedaccel.data import download
from fedaccel.data.download import RemoteFile, Source
from fedaccel.data.idx import write_idx
from fedaccel.errors import DataError

IDX_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


@dataclass
class Served:
    """What the test server holds and what it saw."""

    files: dict[str, bytes] = field(default_factory=dict)  # URL path -> content
    cut: dict[str, int] = field(default_factory=dict)  # URL path -> responses still to cut halfway
    ignore_range: bool = False
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)


def _handler(served: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            wanted = self.headers.get("Range")
            served.requests.append((self.path, wanted))
            data = served.files.get(self.path)
            if data is None:
                self.send_error(404)
                return
            start = 0
            match = re.fullmatch(r"bytes=(\d+)-", wanted or "")
            if match and not served.ignore_range:
                start = int(match.group(1))
                if start >= len(data):
                    self.send_error(416)
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if served.cut.get(self.path, 0) > 0:
                served.cut[self.path] -= 1
                body = body[: len(body) // 2]  # then the connection closes: HTTP/1.0, one response each
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[str, Served]]:
    """A threaded HTTP server on 127.0.0.1 (an ephemeral port): its base URL and its state."""
    served = Served()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", served
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def closed_port() -> str:
    """A base URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No developer configuration; the cache is this test's own folder."""
    for key in list(os.environ):
        if key.startswith("FEDACCEL_DATA"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "fedaccel"


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def mnist_files(n_train: int = 30, n_test: int = 9) -> tuple[dict[str, bytes], dict[str, np.ndarray]]:
    """Four gzipped IDX files (MNIST names) and the arrays they hold."""
    rng = np.random.default_rng(7)
    arrays = {
        IDX_STEMS[0]: rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        IDX_STEMS[1]: rng.integers(0, 10, n_train).astype(np.uint8),
        IDX_STEMS[2]: rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        IDX_STEMS[3]: rng.integers(0, 10, n_test).astype(np.uint8),
    }
    files = {}
    for stem, array in arrays.items():
        buffer = io.BytesIO()
        with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as f:
            f.write(write_idx_bytes(array))
        files[stem + ".gz"] = buffer.getvalue()
    return files, arrays


def write_idx_bytes(array: np.ndarray) -> bytes:
    """The raw IDX bytes of ``array`` (through fedaccel's writer, raw variant)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return write_idx(Path(tmp) / "x", array).read_bytes()


def cifar10_archive(n: int = 4) -> tuple[bytes, np.ndarray]:
    """A CIFAR-10-layout ``.tar.gz`` (pickled batches under cifar-10-batches-py/) and its test images."""
    rng = np.random.default_rng(3)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batches[name] = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         b"labels": [int(v) for v in rng.integers(0, 10, n)]}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, batch in batches.items():
            payload = pickle.dumps(batch, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue(), batches["test_batch"][b"data"]


def serve(served: Served, name: str, files: dict[str, bytes]) -> None:
    """Put ``files`` where a local mirror keeps them: ``/<dataset>/<file>``."""
    for fname, data in files.items():
        served.files[f"/{name}/{fname}"] = data


def use_source(monkeypatch: pytest.MonkeyPatch, name: str, files: dict[str, bytes], mirror: str, **kw: str) -> None:
    """Replace ``name``'s published files, checksums and mirrors by this test's."""
    remote = tuple(RemoteFile(fname, md5(data)) for fname, data in files.items())
    monkeypatch.setitem(download.SOURCES, name, Source(remote, (mirror,), **kw))


CIFAR_PATH = "/cifar10/cifar-10-python.tar.gz"


def serve_cifar(served: Served, url: str, monkeypatch: pytest.MonkeyPatch, n: int = 4) -> tuple[bytes, np.ndarray]:
    """A CIFAR-10 archive of ``n`` images a batch, served and named as the only mirror of cifar10."""
    archive, test_images = cifar10_archive(n)
    serve(served, "cifar10", {"cifar-10-python.tar.gz": archive})
    use_source(monkeypatch, "cifar10", {"cifar-10-python.tar.gz": archive}, url + "cifar10/", unpack="tar")
    return archive, test_images


def serve_mnist_with_part(
    served: Served, url: str, cache: Path, monkeypatch: pytest.MonkeyPatch, part: Callable[[bytes], bytes],
) -> tuple[dict[str, bytes], dict[str, np.ndarray], Path, str]:
    """MNIST served as the only mirror, with ``part(first file's bytes)`` left in the cache as its ``.part``."""
    files, arrays = mnist_files()
    serve(served, "mnist", files)
    use_source(monkeypatch, "mnist", files, url + "mnist/")
    folder = cache / "mnist"
    folder.mkdir(parents=True)
    first = IDX_STEMS[0] + ".gz"
    (folder / (first + ".part")).write_bytes(part(files[first]))
    return files, arrays, folder, first


# --------------------------------------------------------------------------- tests


def test_good_download_unpacks_and_the_loader_finds_it(
    server: tuple[str, Served], closed_port: str, _own_cache: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, served = server
    files, arrays = mnist_files()
    serve(served, "mnist", files)
    use_source(monkeypatch, "mnist", files, closed_port)  # the published mirror is unreachable...
    monkeypatch.setenv(download.MIRROR_ENV, url)  # ...and the local mirror comes first
    assert dict((n, s) for n, s, _ in available_datasets())["mnist"] == "missing"

    folder, downloaded = get_dataset("mnist", progress=False)

    assert downloaded and folder == _own_cache / "mnist"
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)  # kept gzipped, no .part left
    for fname, data in files.items():
        assert (folder / fname).read_bytes() == data
    ds = load_dataset("mnist")  # no env var, no root: found in the cache
    np.testing.assert_array_equal(ds.y_train.numpy(), arrays[IDX_STEMS[1]])
    np.testing.assert_allclose(ds.x_test[:, 0].numpy(), arrays[IDX_STEMS[2]] / 255.0, rtol=1e-6)
    assert dict((n, (s, w)) for n, s, w in available_datasets())["mnist"] == ("available", str(folder))
    assert {path for path, _ in served.requests} == {f"/mnist/{f}" for f in files}

    served.requests.clear()
    assert get_dataset("mnist", progress=False) == (folder, False)  # present: nothing fetched
    assert served.requests == []


def test_cifar_archive_is_unpacked_then_removed(
    server: tuple[str, Served], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, served = server
    archive, test_images = serve_cifar(served, url, monkeypatch)
    monkeypatch.setenv("FEDACCEL_DATA", str(tmp_path / "data"))  # the configured folder wins over the cache

    folder, _ = get_dataset("cifar10", progress=False)

    assert folder == tmp_path / "data" / "cifar10"
    assert [p.name for p in folder.iterdir()] == ["cifar-10-batches-py"]  # archive and staging gone
    ds = load_dataset("cifar10")
    assert ds.num_train == 20 and ds.num_test == 4
    np.testing.assert_allclose(ds.x_test.numpy(), test_images.reshape(-1, 3, 32, 32) / 255.0, rtol=1e-6)


def test_wrong_checksum_fails_in_one_line_and_nothing_is_unpacked(
    server: tuple[str, Served], _own_cache: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, served = server
    archive, _ = cifar10_archive()
    serve(served, "cifar10", {"cifar-10-python.tar.gz": archive})
    wrong = {"cifar-10-python.tar.gz": archive + b"x"}  # the table promises other bytes
    use_source(monkeypatch, "cifar10", wrong, url + "cifar10/", unpack="tar")

    with pytest.raises(DataError) as info:
        get_dataset("cifar10", progress=False)

    message = str(info.value)
    assert "\n" not in message and "checksum" in message and md5(archive) in message
    assert "removed" in message and "nothing unpacked" in message
    assert not (_own_cache / "cifar10").exists()  # no archive, no .part, no batches, no empty folder
    with pytest.raises(DataError, match="fedaccel data get cifar10"):
        load_dataset("cifar10")


def test_cut_connection_resumes_with_a_range_request(
    server: tuple[str, Served], _own_cache: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, served = server
    archive, _ = serve_cifar(served, url, monkeypatch, n=40)
    path = CIFAR_PATH
    served.cut[path] = 1  # the first response stops halfway

    get_dataset("cifar10", progress=False)

    half = len(archive) // 2
    assert served.requests == [(path, None), (path, f"bytes={half}-")]
    assert load_dataset("cifar10").num_train == 200


def test_interrupted_download_resumes_on_the_next_get(
    server: tuple[str, Served], closed_port: str, _own_cache: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A .part left by an earlier get (killed, or every mirror gone) is continued, not restarted."""
    url, served = server
    files, arrays, folder, first = serve_mnist_with_part(served, url, _own_cache, monkeypatch, lambda f: f[:100])

    get_dataset("mnist", progress=False)

    assert (f"/mnist/{first}", "bytes=100-") in served.requests
    assert (folder / first).read_bytes() == files[first]
    np.testing.assert_array_equal(load_dataset("mnist").y_test.numpy(), arrays[IDX_STEMS[3]])


def test_server_that_ignores_range_still_gives_the_right_file(
    server: tuple[str, Served], _own_cache: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, served = server
    archive, _ = serve_cifar(served, url, monkeypatch, n=40)
    path = CIFAR_PATH
    served.cut[path], served.ignore_range = 1, True  # cut, then a 200 with the whole file again

    get_dataset("cifar10", progress=False)

    assert served.requests == [(path, None), (path, f"bytes={len(archive) // 2}-")]
    assert load_dataset("cifar10").num_train == 200  # not half a file twice


def test_stale_part_with_other_bytes_is_downloaded_again_from_zero(
    server: tuple[str, Served], _own_cache: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, served = server
    files, _, folder, first = serve_mnist_with_part(served, url, _own_cache, monkeypatch,
                                                     lambda f: b"\xff" * 50)  # not the start of this file

    get_dataset("mnist", progress=False)

    assert [r for p, r in served.requests if p == f"/mnist/{first}"] == ["bytes=50-", None]
    assert (folder / first).read_bytes() == files[first]


def test_offline_fails_in_one_line_naming_folder_and_files(
    closed_port: str, _own_cache: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    files, _ = mnist_files(n_train=2, n_test=2)
    use_source(monkeypatch, "mnist", files, closed_port)

    with pytest.raises(DataError) as info:
        get_dataset("mnist", progress=False)

    message = str(info.value)
    assert "\n" not in message and "connection refused" in message
    assert str(_own_cache / "mnist") in message
    assert all(fname in message for fname in files)  # what to put there by hand
    assert not (_own_cache / "mnist").exists()  # no empty folder for `fedaccel data` to list


def test_unsafe_tar_members_are_refused(tmp_path: Path) -> None:
    for member, kind in (("../evil", tarfile.REGTYPE), ("/abs/evil", tarfile.REGTYPE),
                         ("cifar-10-batches-py/link", tarfile.SYMTYPE)):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            info = tarfile.TarInfo(member)
            info.type, info.linkname = kind, "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            tar.addfile(info, io.BytesIO(b""))
        folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        archive = folder / "a.tar.gz"
        archive.write_bytes(buffer.getvalue())
        with pytest.raises(DataError, match="refusing to unpack"):
            download._unpack(Source((), (), unpack="tar"), archive, folder)
        assert [p.name for p in folder.iterdir()] == ["a.tar.gz"]  # nothing written, staging removed
    assert not (tmp_path / "evil").exists()


def test_emnist_zip_members_land_flat_where_the_loader_reads_them(
    server: tuple[str, Served], _own_cache: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, served = server
    rng = np.random.default_rng(5)
    letters = {"train-images": rng.integers(0, 256, (6, 28, 28), dtype=np.uint8),
               "train-labels": rng.integers(1, 27, 6).astype(np.uint8),
               "test-images": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
               "test-labels": rng.integers(1, 27, 3).astype(np.uint8)}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for key, array in letters.items():
            part, kind = key.split("-")
            zf.writestr(f"gzip/emnist-letters-{part}-{kind}-idx{3 if kind == 'images' else 1}-ubyte.gz",
                        gzip.compress(write_idx_bytes(array)))
        zf.writestr("gzip/../../outside.gz", b"not wanted")
    archive = buffer.getvalue()
    serve(served, "emnist", {"gzip.zip": archive})
    use_source(monkeypatch, "emnist", {"gzip.zip": archive}, url + "emnist/", unpack="zip",
               members=download.SOURCES["emnist"].members)

    folder, _ = get_dataset("emnist", progress=False)

    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"emnist-letters-{k.split('-')[0]}-{k.split('-')[1]}-idx{3 if 'images' in k else 1}-ubyte.gz" for k in letters
    )
    ds = load_dataset("emnist", emnist_split="letters")
    np.testing.assert_array_equal(ds.y_train.numpy(), letters["train-labels"] - 1)


def test_local_mirror_layout_and_published_mirrors_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The env var adds ``<mirror>/<dataset>/`` before the published mirrors, which stay in order."""
    source = download.SOURCES["mnist"]
    monkeypatch.setenv(download.MIRROR_ENV, "http://a:1, file:///srv/data/")
    bases = download.mirror_urls("mnist", source)
    assert bases[:2] == ["http://a:1/mnist/", "file:///srv/data/mnist/"]
    assert bases[2:] == list(source.mirrors)
    assert source.mirrors[0].startswith("https://ossci-datasets.s3.amazonaws.com/")


def test_a_mirror_given_as_a_folder_path_is_read_as_its_file_url(
    closed_port: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """``FEDACCEL_DATA_MIRROR=/shared/datasets`` (a path, no ``file://``) was urllib's "unknown url type"
    traceback; it is the folder's ``file://`` URL, relative paths too."""
    files, arrays = mnist_files()
    (tmp_path / "shared" / "mnist").mkdir(parents=True)
    for fname, data in files.items():
        (tmp_path / "shared" / "mnist" / fname).write_bytes(data)
    use_source(monkeypatch, "mnist", files, closed_port)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(download.MIRROR_ENV, "shared")
    assert download.mirror_urls("mnist", download.SOURCES["mnist"])[0] == (tmp_path / "shared").as_uri() + "/mnist/"
    get_dataset("mnist", tmp_path / "got")
    assert sorted(p.name for p in (tmp_path / "got").iterdir()) == sorted(files)


def test_progress_on_stderr_only_when_asked(
    server: tuple[str, Served], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    url, served = server
    files, _ = mnist_files()
    serve(served, "mnist", files)
    use_source(monkeypatch, "mnist", files, url + "mnist/")
    get_dataset("mnist", tmp_path / "bar", progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("100%") == len(files)
    assert f"mnist: {IDX_STEMS[0]}.gz" in captured.err
    get_dataset("mnist", tmp_path / "default")  # stderr is not a terminal here: silent
    assert capsys.readouterr().err == ""


def test_cli_data_get_through_a_local_mirror(
    server: tuple[str, Served], closed_port: str, _own_cache: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fedaccel.cli import main

    url, served = server
    files, _ = mnist_files()
    serve(served, "mnist", files)
    use_source(monkeypatch, "mnist", files, closed_port)
    monkeypatch.setenv(download.MIRROR_ENV, url)
    assert main(["data", "get", "mnist", "--quiet"]) == 0
    assert capsys.readouterr().out == f"mnist: downloaded into {_own_cache / 'mnist'}\n"
    assert main(["data", "get", "mnist"]) == 0
    assert capsys.readouterr().out == f"mnist: already in {_own_cache / 'mnist'}\n"
    assert main(["data"]) == 0
    listing = capsys.readouterr().out
    assert re.search(rf"mnist\s+available\s+{re.escape(str(_own_cache / 'mnist'))}", listing)
    assert re.search(r"cifar10\s+missing\s+`fedaccel data get cifar10` fetches it", listing)
    assert main(["data", "get", "digits"]) == 2
    assert capsys.readouterr().err.startswith("error: digits ships with scikit-learn: nothing to download")


@pytest.mark.slow
def test_cli_data_get_offline_is_one_line(closed_port: str, tmp_path: Path) -> None:
    """The command itself, in a subprocess: one ``error:`` line naming the folder; exit status 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDACCEL_DATA")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    code = ("import sys; from fedaccel.data import download as d; from fedaccel.cli import main; "
            f"d.SOURCES['mnist'] = d.Source(d.SOURCES['mnist'].files, ({closed_port!r},)); "
            "sys.exit(main(['data', 'get', 'mnist', '--quiet']))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: mnist: cannot download")
    assert str(tmp_path / "cache" / "fedaccel" / "mnist") in lines[0]
