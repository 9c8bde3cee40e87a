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
