"""User-facing errors: one line that names the problem and what to do.

Anything raised as :class:`UserError` is printed by the CLI as a single line without a
traceback (``--debug`` shows it). Everything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A mistake in the user's input (config, data files, arguments)."""


class ConfigError(UserError):
    """An unknown config key or an invalid value."""


class DataError(UserError):
    """A missing, truncated or corrupted dataset file."""


# what torch.save's C++ writer says when a write fails (it does not pass on the errno)
WRITE_FAILED = ("No space left", "iostream error", "file write failed", "unexpected pos")


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that failed for want of space (ENOSPC, a quota, torch's writer)."""
    import errno

    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(exc, RuntimeError) and any(text in str(exc) for text in WRITE_FAILED)


def too_large(exc: BaseException) -> bool:
    """Whether ``exc`` is a write past the process's file-size limit (``ulimit -f``: EFBIG)."""
    import errno

    return isinstance(exc, OSError) and exc.errno == errno.EFBIG


SHOWN = 200  # characters of a user's value an error message prints at most
LISTED = 10  # names a "known: ..." list prints at most


def shown(value: object, limit: int = SHOWN) -> str:
    """``repr(value)`` in at most ``limit`` characters, without building the whole repr of a huge
    or deeply nested value (a YAML bomb is billions of characters long as text)."""
    import reprlib

    class Cut(reprlib.Repr):
        def repr_int(self, x: int, level: int) -> str:
            if x.bit_length() > 4000:  # past Python's 4300-digit limit for str()
                return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
            return super().repr_int(x, level)

    cut = Cut()
    cut.maxlevel = 3
    cut.maxstring = cut.maxother = cut.maxlong = limit
    cut.maxlist = cut.maxtuple = cut.maxdict = cut.maxset = cut.maxfrozenset = cut.maxdeque = cut.maxarray = 12
    text = cut.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def listed(names: object, limit: int = LISTED, near: object = None, width: int | None = 60) -> str:
    """``a, b, c`` for at most ``limit`` names, then ``and N more``, each cut to ``width`` characters (None: whole);
    with ``near`` (an unknown name), the up to five known names closest to it come first."""
    names = [str(n) if width is None or len(str(n)) <= width else str(n)[:width - 3] + "..."
             for n in names]  # type: ignore[attr-defined]
    if near is not None and len(names) > limit:
        close = nearest_names(near, names, cutoff=0.5)
        names = close + [n for n in names if n not in close]
    if not names:
        return "none"
    head = ", ".join(names[:limit])
    return head if len(names) <= limit else f"{head} and {len(names) - limit} more"


def spelled(value: object, limit: int = 60) -> str:
    """``value`` as YAML writes it inline, as a user wrote it (``{name: scaffold, preset: feddc-code}``),
    cut to ``limit`` characters."""
    import yaml

    try:
        text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...").strip()
    except yaml.YAMLError:  # a value YAML cannot write (an object of ours): as Python shows it
        text = shown(value, limit)
    text = " ".join(text.split()) if "\n" in text or "\r" in text else text  # an error is one line, whatever the value
    return text if len(text) <= limit else text[: limit - 3] + "..."


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_png_output(path: object, force: bool = False) -> None:
    """Refuse to write a PNG over an existing file that is not a PNG (a file fedaccel did not
    write: ``-o notes.txt``), unless ``force``; a PNG is redrawn in place."""
    from pathlib import Path

    path = Path(str(path))
    if path.is_symlink():  # fedaccel.disk.write_atomic would refuse it too: refused here before any work
        raise UserError(f"{path} is a symbolic link; fedaccel writes nothing through a link: give another file name")
    if force or not path.exists():
        return
    if path.is_dir():
        raise UserError(f"{path} is a folder; give a file name for the PNG")
    if not path.is_file():  # a FIFO or a device at -o: refused, never opened (a FIFO's open would wait)
        raise UserError(f"{path} is not a plain file; give a file name for the PNG")
    with open(path, "rb") as f:
        if f.read(len(PNG_SIGNATURE)) == PNG_SIGNATURE:
            return
    raise UserError(f"{path} exists and is not a PNG: it is left as it is; give another file name or add --force")


def nearest_names(name: object, names: object, limit: int = 5, cutoff: float = 0.0) -> list[str]:
    """The up to ``limit`` of ``names`` most like ``name`` (difflib's ratio, at least ``cutoff``), most
    alike first."""
    import difflib

    return difflib.get_close_matches(str(name)[:SHOWN], [str(n) for n in names], n=limit, cutoff=cutoff)  # type: ignore[attr-defined]
