"""Reading a named file without ever blocking on it: only regular files are read.

A FIFO opened for reading blocks until a writer comes (forever, on a bad day); a character
device such as ``/dev/zero`` never ends. The file is opened non-blocking and checked with
``fstat`` on the open descriptor (no window between the check and the read), so anything but
a regular file is refused with one line before a byte is read.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_regular(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit`` + 1 of them, when given).

    Raises :class:`OSError` for anything else, its ``strerror`` naming what the path is.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise OSError(errno.EINVAL, f"is {kind}, not a regular file" if kind[0] == "a" else kind)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(-1 if limit is None else limit + 1)
    finally:
        os.close(fd)


def read_regular_text(path: str | Path) -> str:
    """:func:`read_regular` decoded as UTF-8 (``UnicodeDecodeError`` for anything else)."""
    return read_regular(path).decode("utf-8")


def replace_atomically(path: Path, content: bytes, check: Callable[[Path], None] | None = None) -> None:
    """Write ``content`` to a temporary file beside ``path``, fsync it, ``check`` it there, then
    rename: all or nothing, so a file that fails the check (or a write cut short) never replaces
    what ``path`` holds. Raises the ``OSError`` of a failed write (callers word it), and whatever
    ``check`` raises, the temporary file removed either way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    written = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        if check is not None:
            check(written)
        written.replace(path)
    except BaseException:
        written.unlink(missing_ok=True)
        raise
