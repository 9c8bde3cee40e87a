"""What every command shares: exit codes, one-line errors, JSON or text output (the shared options
are in ``kcp_opa.cli.options``)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable

import click
from rich.console import Console

from kcp_opa.cli.options import Decorator
from kcp_opa.core.errors import ActionRejectedError, CodedError, KcpOpaError, SourceUnreadableError
from kcp_opa.core.files import read_regular_text

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_NOT_ALLOWED = 4
#: The store's or the ledger's database cannot be reached: a fault to retry, never a decision.
EXIT_UNAVAILABLE = 5


def as_json(fmt: str | None) -> bool:
    return fmt == "json" or (fmt is None and not sys.stdout.isatty())


def console() -> Console:
    """rich output for text formats. Piped text is never wrapped: a log, grep or CI job gets one
    finding per line and every hash whole (tables take $COLUMNS, else 200 columns)."""
    if sys.stdout.isatty():
        return Console()
    return Console(soft_wrap=True, width=int(os.environ.get("COLUMNS", "0") or 0) or 200)


def status(message: str) -> contextlib.AbstractContextManager[object]:
    """A spinner on stderr while long work runs, only when a person watches a terminal."""
    err = Console(stderr=True)
    return err.status(message) if err.is_terminal else contextlib.nullcontext()


def fail(message: str, code: int) -> None:
    click.echo(f"kcp-opa: error: {message}", err=True)
    sys.exit(code)


def read_text(path: str, what: str) -> str:
    """Read a file, or stdin for '-'; size is checked by the caller's parser."""
    if path == "-":
        return sys.stdin.read()
    try:
        return read_regular_text(path)  # a FIFO or device is refused, never waited on
    except UnicodeDecodeError:
        raise ActionRejectedError("", f"{what} {path} is not UTF-8 text") from None
    except OSError as exc:
        raise SourceUnreadableError(path, f"cannot read {what}: {exc.strerror or exc}") from None


def refusal_line(message: str, code: str) -> None:
    """A refusal as one JSON line on stderr, as the KYA reference script writes it."""
    click.echo(json.dumps({"ok": False, "error": message, "code": code}), err=True)


def json_errors(exit_code: Callable[[CodedError], int] = lambda exc: EXIT_USAGE) -> Decorator:
    """A command whose refusals are one JSON line on stderr: a coded refusal exits ``exit_code(exc)``,
    any other deliberate failure is ``invalid_input`` and exit 2."""

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def wrapper(*args: object, **kwargs: object) -> None:
            try:
                fn(*args, **kwargs)
            except CodedError as exc:
                refusal_line(str(exc), exc.code)
                sys.exit(exit_code(exc))
            except KcpOpaError as exc:
                refusal_line(str(exc), "invalid_input")
                sys.exit(EXIT_USAGE)

        return wrapper

    return decorate
