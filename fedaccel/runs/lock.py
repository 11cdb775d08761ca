"""One writer per run folder.

``lock_run_dir(path)`` takes an exclusive ``flock`` on ``path/.lock`` and writes the holder's PID
into it; a second writer (another process, or this one through another open) gets a one-line
:class:`~fedaccel.errors.UserError` naming that PID. The kernel drops the lock when the holder
closes the file or dies, ``kill -9`` included, so a lock is never stale and nothing has to clean
up. The file itself stays: deleting it would let a late opener lock a file nobody else sees.

Example:
    >>> with lock_run_dir("runs/r1"):      # doctest: +SKIP
    ...     write_the_run()
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from fedaccel.disk import refuse_link
from fedaccel.errors import UserError

LOCK_FILE = ".lock"


class RunLock:
    """A held lock on a run folder; freed by :meth:`release`, by leaving its ``with`` block, or
    when the object goes away (a local of the function that writes the folder, say)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # no PID left behind for the next holder's rivals to read
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def lock_run_dir(path: str | Path) -> RunLock:
    """Create ``path`` if needed and hold its lock; raises :class:`UserError` if another writer does."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    refuse_link(path / LOCK_FILE)  # the PID is written into it: never into a file a planted link names
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # not inherited by started programs
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _wait_while_the_holder_exits(fd)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise UserError(f"{path} is being written by process {holder}; wait for it to end (or stop it), "
                        "then run again") from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunLock(path, fd)


def _wait_while_the_holder_exits(fd: int, seconds: float = 10.0) -> None:
    """Take the lock once a holder that was killed has exited (its first thread already a zombie,
    another still finishing, e.g. an fsync); raises BlockingIOError if the holder lives on."""
    deadline = time.monotonic() + seconds
    while True:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if not (text.isdigit() and _exiting(int(text))) or time.monotonic() > deadline:
            raise BlockingIOError
        time.sleep(0.1)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue


def _exiting(pid: int) -> bool:
    """Whether ``pid``'s first thread has exited while the process still holds its files (Linux)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _holder(fd: int, attempts: int = 20) -> str:
    """The PID the holder wrote; it writes it just after locking, so wait a moment for it."""
    for _ in range(attempts):
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if text.isdigit() and _alive(int(text)):
            return text
        time.sleep(0.05)
    return "(unknown)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder(path: str | Path) -> str | None:
    """The PID of the live process writing the run folder ``path`` (holding its lock), else None.

    Read without taking the lock where it can be helped, so that a reader never makes a starting
    writer fail: only a PID that names a live process is checked by trying the lock (a PID left
    by a killed writer may since belong to another process)."""
    try:
        fd = os.open(Path(path) / LOCK_FILE, os.O_RDWR)
    except OSError:
        return None
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if not (text.isdigit() and _alive(int(text))):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return text
        return None  # closing drops the lock just taken
    finally:
        os.close(fd)
