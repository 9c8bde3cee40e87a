"""rego-cpp writes its parse and compile errors straight to file descriptor 1, past Python.

`kcp-opa eval` prints JSON on stdout, so that text would corrupt it and show users the engine's
internals ("Pass index_strings_locals failed"). The command captures fd 1 while regopy runs and
reports the first error as one line. CLI only: redirecting a file descriptor is process-wide.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import IO

#: Lines rego-cpp prints that say nothing to a user.
_NOISE = ("Errors:", "--", "wellformed_error", "No plans in policy bundle")


@contextlib.contextmanager
def native_stdout_captured() -> Iterator[Callable[[], str]]:
    """Capture what native code writes to fd 1 inside the block; call the yielded function for it."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        captured: list[str] = []
        try:
            yield lambda: captured[0] if captured else _read(sink)
        finally:
            captured.append(_read(sink))
            os.dup2(saved, 1)
            os.close(saved)


def _read(sink: IO[bytes]) -> str:
    sink.seek(0)
    return sink.read().decode("utf-8", errors="replace")


def first_native_error(text: str) -> str:
    """'Invalid arithmetic operator at column 8 of `x := 1 +`' from rego-cpp's report, or ''."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        message = line.strip()
        if not message or message.startswith(_NOISE) or set(message) <= set("~-^ "):
            continue
        snippet, column = _snippet(lines[index + 1 :])
        where = f" at column {column} of `{snippet}`" if snippet and column else ""
        return f"{message}{where}"
    return ""


def _snippet(rest: list[str]) -> tuple[str, int]:
    """The source line after the '--' marker and the column its '~' underline starts at."""
    for line, underline in itertools.pairwise(rest):
        if line.strip() and underline.strip() and set(underline.strip()) <= {"~", "^"}:
            indent = len(line) - len(line.lstrip())
            return line.strip(), len(underline) - len(underline.lstrip()) - indent + 1
    return "", 0
