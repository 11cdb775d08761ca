"""Fetching the papers' datasets: the one place fedaccel reaches the network, and only when asked.

``fedaccel data get NAME`` (:func:`fedaccel.data.get_dataset`) calls :func:`download_dataset`, which
for each of the dataset's published files tries its mirrors in order, streams the file into
``<file>.part`` beside its final place, resumes a cut transfer with an HTTP ``Range`` request
(again at once while each attempt makes progress, or on the next ``get``), checks the MD5 that
torchvision publishes for it, and only then renames it into place (fsynced) and unpacks it. A
download never grows past the file's published size (or the length the server announced): a mirror
that streams without end is cut there and refused in one line, before it fills the disk.

* MNIST, Fashion-MNIST: the four ``*-idx?-ubyte.gz`` files, kept gzipped (the loaders read ``.gz``);
* CIFAR-10/100: the ``.tar.gz`` unpacked (regular files and folders only: a member with an absolute
  path, a ``..``, a link or a device is refused), then removed;
* EMNIST: the ``emnist-*-idx?-ubyte.gz`` files taken out of NIST's ``gzip.zip``, then the zip removed.

A wrong checksum removes the download and fails in one line; nothing is unpacked. When no mirror
answers (offline, DNS failure, every mirror down) the error is one line saying which files to put
into which folder by hand.

**A local mirror.** ``FEDACCEL_DATA_MIRROR`` names base URLs (``http(s)://`` or ``file://``, or a
folder's path, comma-separated) tried before the published ones; a file is looked for at
``<mirror>/<dataset>/<file name>``, e.g. ``http://10.0.0.5:8000/mnist/train-images-idx3-ubyte.gz``.
An offline cluster serves one folder of the published files (``python -m http.server``) or shares
it (``file:///shared/datasets/``); tests point it at a server on 127.0.0.1. The checksums still
apply.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
import socket
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from fedaccel.disk import fsync_folder, open_no_link, refuse_link, write_atomic
from fedaccel.errors import DataError

__all__ = ["MIRROR_ENV", "RemoteFile", "SOURCES", "Source", "cache_root", "download_dataset", "mirror_urls"]

MIRROR_ENV = "FEDACCEL_DATA_MIRROR"
CHUNK = 1 << 20  # bytes read and written at a time
TIMEOUT_S = 30.0  # a connection that says nothing for this long counts as failed
MAX_RESUMES = 100  # cut transfers resumed at once, as long as each one brought bytes
UNKNOWN_SIZE_LIMIT = 4 << 30  # bytes a file of no published size may reach when the server announces no length
_USER_AGENT = "fedaccel-data-get (urllib)"


@dataclass(frozen=True)
class RemoteFile:
    """One published file: its name on the mirrors, its published MD5 and size in bytes (None:
    unknown, then the server's announced length or :data:`UNKNOWN_SIZE_LIMIT` bounds it)."""

    name: str
    md5: str
    size: int | None = None


@dataclass(frozen=True)
class Source:
    """Where a dataset's files are published and what to do with them once checked.

    ``mirrors`` are base URLs tried in order (a file's URL is the base + its name). ``unpack`` is
    ``'keep'`` (the files are what the loader reads), ``'tar'`` (unpack the archive, then remove it)
    or ``'zip'`` (take the members whose base name matches ``members`` out of the zip, then remove
    it). ``by_hand`` says what to copy into the folder ``{folder}`` when nothing can be downloaded.
    """

    files: tuple[RemoteFile, ...]
    mirrors: tuple[str, ...]
    unpack: str = "keep"
    members: str = ""
    by_hand: str = ""


def _idx_files(*files: tuple[str, str, int]) -> tuple[RemoteFile, ...]:
    return tuple(RemoteFile(name, md5, size) for name, md5, size in files)


# URLs and MD5s as torchvision publishes them (torchvision/datasets/mnist.py, cifar.py); sizes as served.
SOURCES: dict[str, Source] = {
    "mnist": Source(
        _idx_files(
            ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9912422),
            ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432", 28881),
            ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3", 1648877),
            ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c", 4542),
        ),
        # yann.lecun.com, the original, often refuses or asks for a login: torchvision's S3 copy first.
        ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"),
    ),
    "fashion-mnist": Source(
        _idx_files(
            ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d", 26421880),
            ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe", 29515),
            ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79", 4422102),
            ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310", 5148),
        ),
        ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
    ),
    "emnist": Source(
        (RemoteFile("gzip.zip", "58c8d27c78d21e728a6bc7b3cc06412e", 561753746),),
        ("https://biometrics.nist.gov/cs_links/EMNIST/", "https://www.itl.nist.gov/iaui/vip/cs_links/EMNIST/"),
        unpack="zip",
        members=r"emnist-[a-z]+-(train|test)-(images-idx3|labels-idx1)-ubyte\.gz",
        by_hand="the emnist-*-idx?-ubyte.gz files of gzip.zip (from {url}) into {folder}",
    ),
    "cifar10": Source(
        (RemoteFile("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a", 170498071),),
        ("https://www.cs.toronto.edu/~kriz/",),
        unpack="tar",
        by_hand="cifar-10-python.tar.gz (from {url}) or its unpacked cifar-10-batches-py/ into {folder}",
    ),
    "cifar100": Source(
        (RemoteFile("cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85", 169001437),),
        ("https://www.cs.toronto.edu/~kriz/",),
        unpack="tar",
        by_hand="cifar-100-python.tar.gz (from {url}) or its unpacked cifar-100-python/ into {folder}",
    ),
}


def cache_root() -> Path:
    """The per-user data cache: ``$XDG_CACHE_HOME/fedaccel`` (default ``~/.cache/fedaccel``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fedaccel"


def mirror_urls(name: str, source: Source, mirrors: Sequence[str] | None = None, *, local: bool = True) -> list[str]:
    """Base URLs to try for dataset ``name``, in order: ``FEDACCEL_DATA_MIRROR``'s (as
    ``<mirror>/<name>/``; not with ``local=False``), then ``mirrors`` if given, else the published ones."""
    env = os.environ.get(MIRROR_ENV, "") if local else ""
    local_mirrors = [as_url(m.strip()) for m in env.split(",") if m.strip()]
    bases = [m.rstrip("/") + f"/{name}/" for m in local_mirrors]
    return bases + [m if m.endswith("/") else m + "/" for m in (source.mirrors if mirrors is None else mirrors)]


def as_url(mirror: str) -> str:
    """A mirror as a URL: a folder's path (no ``scheme://``) as its ``file://`` URL, a URL as it is."""
    return mirror if "://" in mirror else Path(mirror).expanduser().resolve().as_uri()


# --------------------------------------------------------------------------- one file


class _Unreachable(Exception):
    """This URL gave nothing usable (refused, unknown host, HTTP error, cut with no progress)."""


def _reason(exc: BaseException) -> str:
    """A few words for a failed request: 'connection refused', 'HTTP 404', 'name not resolved'."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    inner = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(inner, socket.gaierror):
        return "name not resolved"
    if isinstance(inner, ConnectionRefusedError):
        return "connection refused"
    if isinstance(inner, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(inner, OSError) and inner.strerror:
        return inner.strerror.lower()
    return str(inner) or type(inner).__name__


class _Progress:
    """``\\r<label>  42%  4.1/9.9 MB`` on stderr, at most ten times a second; silent when disabled."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label, self.enabled, self.last, self.shown = label, enabled, 0.0, False

    def update(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.1 and done != total):
            return
        self.last, self.shown = now, True
        size = f"{done / 1e6:.1f}/{total / 1e6:.1f} MB" if total else f"{done / 1e6:.1f} MB"
        percent = f"{100 * done // total:3d}%  " if total else ""
        sys.stderr.write(f"\r{self.label}  {percent}{size}   ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


class _TooLong(Exception):
    """The server sent more bytes than the file may have."""


def _copy(response: IO[bytes], out: IO[bytes], start: int, total: int | None, limit: int,
          progress: _Progress) -> tuple[int, BaseException | None]:
    """Append ``response``'s body to ``out``: the bytes copied, and the network error that cut the
    transfer (None when the server ended it). Raises :class:`_TooLong` (nothing past ``limit``
    written) when the body would take the file past ``limit`` bytes. Errors writing ``out`` (a full
    disk) propagate."""
    copied, error = 0, None
    while True:
        try:
            block = response.read(min(CHUNK, limit - start - copied + 1))  # one byte past the limit tells
        except (OSError, http.client.HTTPException) as exc:
            error = exc
            break
        if not block:
            break
        if start + copied + len(block) > limit:
            raise _TooLong(limit)
        out.write(block)
        copied += len(block)
        progress.update(start + copied, total)
    out.flush()
    os.fsync(out.fileno())
    return copied, error


def _transfer(url: str, part: Path, progress: _Progress, timeout: float, size: int | None = None) -> None:
    """Bring ``part`` to the whole file at ``url``, resuming from what ``part`` already holds; never
    past ``size`` bytes (the published size; None: the announced length, or :data:`UNKNOWN_SIZE_LIMIT`).

    A server that answers ``206`` continues the file; one that ignores ``Range`` (``200``) sends it
    whole and ``part`` is rewritten. A transfer cut short is resumed at once while each attempt
    brings bytes; a ``416`` (nothing past the end) leaves ``part`` as it is for the checksum to
    judge. Raises :class:`_Unreachable` when an attempt brings nothing, :class:`_TooLong` when the
    server announces or sends more than the file may have.
    """
    for _ in range(MAX_RESUMES):
        have = _size(part)
        if size is not None and have > size:
            part.unlink()  # more than the whole file: not a start worth resuming
            have = 0
        headers = {"User-Agent": _USER_AGENT, **({"Range": f"bytes={have}-"} if have else {})}
        try:
            response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:
                return  # part already reaches the end; the checksum says whether it is right
            raise _Unreachable(_reason(exc)) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise _Unreachable(_reason(exc)) from None
        with response:
            status = response.status or 200  # file:// answers without a status
            length = response.headers.get("Content-Length")
            resumed = status == 206 and (response.headers.get("Content-Range") or "").startswith(f"bytes {have}-")
            if status == 206 and not resumed:
                part.unlink(missing_ok=True)  # not the range asked for: start again from zero
                continue
            start = have if resumed else 0
            total = start + int(length) if length and length.isdigit() else None
            if size is not None and total is not None and total > size:
                raise _TooLong(size)  # announced: refused before a byte is written
            limit = size if size is not None else total if total is not None else UNKNOWN_SIZE_LIMIT
            try:
                with open_no_link(part, "ab" if resumed else "wb") as out:
                    copied, error = _copy(response, out, start, total, limit, progress)
            except OSError as exc:  # writing (reads are caught in _copy): name the file, for the disk-full line
                if exc.filename is None:
                    raise OSError(exc.errno, exc.strerror, str(part)) from exc
                raise
        if error is None and (total is None or start + copied >= total):
            return
        if copied == 0:
            raise _Unreachable(_reason(error) if error else "the server closed the connection early")
    raise _Unreachable(f"cut {MAX_RESUMES} times in a row")


def _finish(part: Path, dest: Path) -> None:
    """Rename the checked ``part`` to ``dest`` and make the rename durable."""
    refuse_link(dest)
    os.replace(part, dest)
    fsync_folder(dest.parent)


def fetch_file(
    name: str, file: RemoteFile, bases: Sequence[str], folder: Path, *, progress: bool, hint: str,
    timeout: float = TIMEOUT_S,
) -> Path:
    """``folder/file.name``, downloaded from the first base URL that serves it and MD5-checked.

    A file already there with the right checksum is kept. A wrong checksum on a download that
    resumed an earlier ``.part`` is retried once from zero; otherwise the download is removed and
    a one-line :class:`DataError` raised. ``hint`` ends the one-line error when no base answers.
    """
    dest, part = folder / file.name, folder / (file.name + ".part")
    if dest.is_file():
        if _md5(dest) == file.md5:
            return dest
        dest.unlink()
    failures: list[str] = []
    for base in bases:
        url = base + file.name
        for _attempt in range(2):
            resumed = part.is_file() and _size(part) > 0
            bar = _Progress(f"{name}: {file.name}", progress)
            try:
                _transfer(url, part, bar, timeout, file.size)
            except _Unreachable as exc:
                failures.append(f"{base}: {exc}")
                break
            except _TooLong as too_long:
                part.unlink(missing_ok=True)
                raise DataError(
                    f"{name}: {url} sends more than the {too_long.args[0]:,} bytes {file.name} has; the download was "
                    f"stopped there and removed, nothing unpacked (a broken or hostile mirror): try again later, or {hint}"
                ) from None
            finally:
                bar.close()
            got = _md5(part)
            if got == file.md5:
                _finish(part, dest)
                return dest
            part.unlink()
            if not resumed:
                raise DataError(
                    f"{name}: {url} does not match its published checksum (md5 {got}, expected {file.md5}); "
                    f"the download was removed and nothing unpacked: try again later, or {hint}"
                )
    raise DataError(f"{name}: cannot download {file.name} ({'; '.join(failures)}); offline? {hint}")


# --------------------------------------------------------------------------- unpacking


def _member_path(name: str, archive: Path) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name or not path.parts:
        raise DataError(f"{archive}: member {name!r} points outside the folder; refusing to unpack it")
    return path


def _write_stream(source: IO[bytes], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda out: shutil.copyfileobj(source, out, CHUNK))


def _unpack_tar(archive: Path, into: Path) -> None:
    """Regular files and folders of ``archive`` into ``into``; anything else is refused."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                path = into / _member_path(member.name, archive)
                if member.isdir():
                    path.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    stream = tar.extractfile(member)
                    assert stream is not None  # regular files have a payload
                    _write_stream(stream, path)
                else:
                    raise DataError(
                        f"{archive}: member {member.name!r} is a link or a special file; refusing to unpack it"
                    )
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise DataError(f"{archive}: corrupt archive ({exc}); delete it and run `fedaccel data get` again") from None


def _unpack_zip(archive: Path, into: Path, members: str) -> None:
    """The members of ``archive`` whose base name matches ``members``, flat into ``into``."""
    wanted = re.compile(members)
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                base = PurePosixPath(info.filename).name  # only the base name: nothing lands elsewhere
                if not info.is_dir() and wanted.fullmatch(base):
                    with zf.open(info) as stream:
                        _write_stream(stream, into / base)
    except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise DataError(f"{archive}: corrupt archive ({exc}); delete it and run `fedaccel data get` again") from None


def _unpack(source: Source, archive: Path, folder: Path) -> None:
    """Unpack ``archive`` into a temporary folder inside ``folder``, move what it holds into place
    (replacing an older copy), then remove the archive."""
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=folder))
    try:
        if source.unpack == "tar":
            _unpack_tar(archive, staging)
        else:
            _unpack_zip(archive, staging, source.members)
        for entry in sorted(staging.iterdir()):
            target = folder / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(entry, target)
        fsync_folder(folder)
        archive.unlink()
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def download_dataset(
    name: str, folder: Path, *, source: Source | None = None, mirrors: Sequence[str] | None = None,
    progress: bool | None = None, timeout: float = TIMEOUT_S,
) -> Path:
    """Download, check and unpack dataset ``name`` (a key of :data:`SOURCES`) into ``folder``.

    ``source`` replaces the published table entry (tests, private datasets); ``mirrors`` replaces
    its base URLs (``FEDACCEL_DATA_MIRROR``'s still come first). ``progress``: a bar on stderr
    (default: when stderr is a terminal). Returns ``folder``.
    """
    source = source or SOURCES[name]
    bases = mirror_urls(name, source, mirrors)
    if not bases:
        raise DataError(f"{name}: no mirror to download from; set {MIRROR_ENV}=<URL> or pass mirrors")
    published = (mirror_urls(name, source, mirrors, local=False) or bases)[0]
    if progress is None:
        progress = sys.stderr.isatty()
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        _download_into(name, source, bases, published, folder, progress=progress, timeout=timeout)
    except BaseException:
        if created:  # leave no empty folder for `fedaccel data` to list (a .part keeps it, to resume)
            try:
                folder.rmdir()
            except OSError:
                pass
        raise
    return folder


def _download_into(
    name: str, source: Source, bases: list[str], published: str, folder: Path, *, progress: bool, timeout: float,
) -> None:
    if source.by_hand:
        hint = "put " + source.by_hand.format(url=published + source.files[0].name, folder=folder)
    else:
        names = ", ".join(f.name for f in source.files)
        hint = f"put {names} (from {published}) into {folder}"
    for file in source.files:
        path = fetch_file(name, file, bases, folder, progress=progress, hint=hint, timeout=timeout)
        if source.unpack != "keep":
            _unpack(source, path, folder)
