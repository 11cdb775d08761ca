"""Writing files safely: the one place fedaccel creates, replaces or appends to a file.

Every file fedaccel creates or replaces (metrics, summaries, tables, experiment copies,
checkpoints, figures, keys, downloads) goes through :func:`write_atomic`: a temporary file beside
it, created exclusively and without following a link, fsynced, then renamed over it. A kill or a
full disk leaves the old file or the new one, never half of one.

**No write follows a link.** A folder may come from someone else (a colleague's run folder, an
unpacked archive) holding symbolic links planted where fedaccel writes: ``RUN/.metrics.jsonl.tmp ->
~/notes.txt``. A link at the file's name, at its temporary name or at the name the old file is kept
under is refused in one line (:class:`LinkRefused`), and nothing is written; appends
(:func:`open_no_link`) refuse a link and anything else that is not a plain file. Files are created
with their final permissions (a private key 0600 from its first byte), never chmod-ed afterwards.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from fedaccel.errors import UserError


class LinkRefused(UserError):
    """A symbolic link (or another non-file) where fedaccel was to write a file."""


class NotAFile(UserError):
    """A FIFO, a device, a socket, a folder (or a link, where links are not followed) where fedaccel reads a file."""


def open_regular(path: Path, *, follow: bool = False) -> IO[bytes]:
    """``path`` open for reading, as a plain file only: a FIFO, a device, a socket or a folder (and a symbolic
    link, unless ``follow``: a user's own config may be one, a run folder's files never are) is refused in one
    line (:class:`NotAFile`) without blocking: the open does not wait for a FIFO's writer (``O_NONBLOCK``), and
    nothing is read before ``fstat`` says it is a plain file. An archive can carry a FIFO (``tar`` keeps them),
    which would hang every reader that opens it plainly."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise NotAFile(f"{path} is a symbolic link; fedaccel reads the files of a folder it did not write only as "
                           "plain files: nothing was read (replace the link by the file)") from None
        try:  # a socket cannot be opened (ENXIO): say what it is
            kind = _kind(os.stat(path, follow_symlinks=follow).st_mode)
        except OSError:
            raise exc from None
        if kind:
            raise _not_a_file(path, kind) from None
        raise
    kind = _kind(os.fstat(fd).st_mode)
    if kind:
        os.close(fd)
        raise _not_a_file(path, kind)
    os.set_blocking(fd, True)  # O_NONBLOCK only kept a FIFO from hanging the open
    return os.fdopen(fd, "rb")


def _not_a_file(path: Path, kind: str) -> NotAFile:
    return NotAFile(f"{path} is {kind}, not a plain file: nothing was read (give a file, or remove it)")


def read_regular(path: Path, *, follow: bool = False, limit: int | None = None) -> bytes:
    """The bytes of the plain file ``path`` (:func:`open_regular`); with ``limit``, a file longer than that is
    one line, found before it is read."""
    with open_regular(path, follow=follow) as file:
        size = os.fstat(file.fileno()).st_size
        if limit is not None and size > limit:
            raise UserError(f"{path} is {size:,} bytes, more than the {limit:,} fedaccel reads from such a file")
        return file.read() if limit is None else file.read(limit + 1)


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words, if it is not a plain file ('' if it is)."""
    for test, words in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "" if stat.S_ISREG(mode) else "not a plain file"


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the system allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    """Where :func:`write_atomic` writes ``path`` before renaming it: ``.NAME.tmp`` beside it."""
    return path.with_name(f".{path.name}.tmp")


def refuse_link(path: Path, what: str = "") -> None:
    """One line (:class:`LinkRefused`) if ``path`` is a symbolic link, or exists and is not a plain file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise LinkRefused(f"{path} is a symbolic link{what}; fedaccel writes nothing through a link: nothing was "
                          "written (remove the link, or use a folder of your own)")
    if not stat.S_ISREG(mode):
        raise LinkRefused(f"{path} is not a plain file{what}; nothing was written (remove it, or use another folder)")


def refuse_planted_links(folder: Path, names: Iterable[str]) -> None:
    """One line if any of ``names`` in ``folder``, or its temporary name, is a link (or not a plain
    file): a folder from someone else is refused before anything in it is read or written."""
    for name in names:
        refuse_link(folder / name)
        refuse_link(temp_name(folder / name))


def write_atomic(path: Path, data: str | bytes | Callable[[IO[bytes]], None], *, previous: Path | None = None,
                 mode: int = 0o666) -> None:
    """Replace ``path`` by ``data`` (text as UTF-8, bytes, or a function writing to the open file)
    through ``.NAME.tmp`` in the same folder, created exclusively without following a link,
    fsynced and renamed: whatever stops the write leaves ``path`` as it was. ``previous``: where
    the file being replaced is kept. ``mode``: the new file's permissions (less the umask), set at
    creation. A link at any of these names is refused (:class:`LinkRefused`) before anything is written."""
    path = Path(path)
    refuse_link(path)
    if previous is not None:
        refuse_link(previous)
    tmp = temp_name(path)
    file = _create(tmp, mode)
    try:
        with file:
            if callable(data):
                data(file)
            else:
                file.write(data.encode("utf-8") if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        if previous is not None and path.exists():
            os.replace(path, previous)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc.filename, str) and Path(exc.filename) in (tmp, path):
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc  # name the file, not the open object
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, RuntimeError) and getattr(exc, "filename", None) is None:
            exc.filename = str(path)  # torch's writer names no file: the full-disk line names this one, and its disk
        raise
    fsync_folder(path.parent)


def _create(tmp: Path, mode: int) -> IO[bytes]:
    """``tmp``, new and open for writing: a plain file left there by a write that was killed is
    removed first; a link or anything else there is refused."""
    for _ in range(2):
        try:
            return open(tmp, "xb", opener=lambda name, flags: os.open(name, flags | os.O_NOFOLLOW, mode))
        except FileExistsError:
            refuse_link(tmp, ", where fedaccel puts the temporary copy of the file it writes")
            tmp.unlink(missing_ok=True)  # a plain file: what a killed write left
    raise LinkRefused(f"{tmp} keeps coming back while fedaccel writes beside it; nothing was written")


def save_png(figure: Any, path: Path, **savefig: Any) -> Path:
    """A matplotlib ``figure`` drawn into a PNG at ``path`` through :func:`write_atomic` (``savefig``
    writes in place: drawn to the temporary file, a planted link or a killed draw harms nothing)."""
    write_atomic(path, lambda file: figure.savefig(file, format="png", **savefig))
    return path


@contextmanager
def appending(path: Path, mode: str = "a", **kwargs: Any) -> Iterator[IO[Any]]:
    """:func:`open_no_link` as a ``with`` block whose errors name ``path``: a full disk's write fails, then closing
    the file fails again flushing what is left (an error that names no file, and would replace the first): that
    second error is dropped, the first goes on; an error only at closing is given ``path`` as its file name (the
    full-disk line names the file and the free space of its own disk, not the working folder's)."""
    file = open_no_link(path, mode, **kwargs)
    try:
        yield file
    except BaseException:
        with suppress(OSError):
            file.close()
        raise
    try:
        file.close()
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        raise


def open_no_link(path: Path, mode: str = "a", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` to append to (or start) a file that is fedaccel's own: a symbolic link,
    or anything but a plain file, at ``path`` is refused in one line (:class:`LinkRefused`)."""
    path = Path(path)
    refuse_link(path)
    try:
        file = open(path, mode, opener=lambda name, flags: os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666),
                    **kwargs)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link that appeared since the check
            refuse_link(path)
        raise
    if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
        file.close()
        raise LinkRefused(f"{path} is not a plain file; nothing was written (remove it, or use another folder)")
    os.set_blocking(file.fileno(), True)  # O_NONBLOCK only kept a planted FIFO from hanging the open
    return file
