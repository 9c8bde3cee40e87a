"""What every command shares: exit codes, the --format and --max-bytes options, one-line errors."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console

from kcp_opa.core.errors import ActionRejectedError, SourceUnreadableError
from kcp_opa.core.files import read_regular_text
from kcp_opa.decide.gate import decision_time
from kcp_opa.declare.yamlsource import DEFAULT_MAX_BYTES

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_NOT_ALLOWED = 4


FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Output format. Default: text on a terminal, json when piped.",
)
MAX_BYTES = click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    help="Refuse YAML files larger than this.",
)


def _rfc3339(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--now is a usage matter: a time that does not parse is exit 2 before anything runs."""
    if value is not None:
        try:
            decision_time(value)
        except ActionRejectedError as exc:
            raise click.BadParameter(str(exc).removeprefix("action: ")) from None
    return value


def now_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The --now flag every time-dependent command shares, checked at parse time."""
    return click.option("--now", metavar="RFC3339", callback=_rfc3339, help=help_text)


def as_json(fmt: str | None) -> bool:
    return fmt == "json" or (fmt is None and not sys.stdout.isatty())


def console() -> Console:
    """rich output for text formats. Piped text is never wrapped: a log, grep or CI job gets one
    finding per line and every hash whole (tables take $COLUMNS, else 200 columns)."""
    if sys.stdout.isatty():
        return Console()
    return Console(soft_wrap=True, width=int(os.environ.get("COLUMNS", "0") or 0) or 200)


def status(message: str) -> contextlib.AbstractContextManager[Any]:
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
