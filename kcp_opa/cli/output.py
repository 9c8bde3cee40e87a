"""What every command shares: exit codes, the --format and --max-bytes options, one-line errors."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kcp_opa.core.errors import ActionRejectedError, SourceUnreadableError
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


def as_json(fmt: str | None) -> bool:
    return fmt == "json" or (fmt is None and not sys.stdout.isatty())


def fail(message: str, code: int) -> None:
    click.echo(f"kcp-opa: error: {message}", err=True)
    sys.exit(code)


def read_text(path: str, what: str) -> str:
    """Read a file, or stdin for '-'; size is checked by the caller's parser."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ActionRejectedError("", f"{what} {path} is not UTF-8 text") from None
    except OSError as exc:
        raise SourceUnreadableError(path, f"cannot read {what}: {exc.strerror or exc}") from None
